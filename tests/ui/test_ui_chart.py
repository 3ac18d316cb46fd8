"""The chart's model (issue 23): y range from the data with the recorded baseline in range, a
level shift at a restart kept in range, t_cycle outliers (an interval with a prefill inside)
clipped and said, the window shaded only when it does not cover everything shown."""

from __future__ import annotations

import random

from kit.ui import DEMO_NOW, demo_fleet

from specmon.ui.chart import ChartModel, Series, ThroughputChart, chart_model, y_scale


def test_y_scale_keeps_both_levels_of_a_restart_and_the_references():
    lo, hi = y_scale([[88.0 + 0.1 * (i % 9) for i in range(120)], [62.9] * 60], [94.2])
    assert lo < 62.9 and hi > 94.2 and lo > 0  # from the data, not from 0
    assert hi - lo < 1.5 * (94.2 - 62.9)


def test_y_scale_clips_prefill_outliers_of_t_cycle():
    rnd = random.Random(1)
    vals = [rnd.uniform(11.0, 26.0) for _ in range(200)] + [188.0, 176.0, 190.0, 150.0]
    lo, hi = y_scale([vals], [])
    assert 26.0 <= hi < 150.0 and lo <= 11.0


def test_chart_model_of_the_drift_demo():
    fleet = demo_fleet(drift=True)
    s = fleet.host("demo").session
    servers = [s.server("baseline"), s.server("speculative")]
    recorded = {}
    for (_, name), w in fleet.watches.items():
        best = w.baseline.stats.best()
        recorded[name] = (best.median_thr, best.median_accept)
    m = chart_model(servers, "tok/s", DEMO_NOW, 60.0, 600.0, recorded)
    lo, hi = m.y_range
    assert lo < 62.0 and hi > recorded["speculative"][0] and lo > 30.0
    assert m.clipped == 0 and not m.notes
    assert len(m.boundaries) == 1  # the baseline's restart
    assert ThroughputChart._shaded(m) is not None  # the 60 s window is a part of the 390 s shown
    t = chart_model(servers, "t_cycle", DEMO_NOW, 60.0, 600.0, recorded)
    assert t.y_range[0] > 0.0


def test_no_shading_when_the_window_covers_every_point():
    s = Series("b", "baseline", (100.0, 110.0, 120.0), (88.0, 89.0, 88.5))
    m = ChartModel("tok/s", (s,), (), (), (90.0, 120.0), (100.0, 120.0))
    assert ThroughputChart._shaded(m) is None
    m2 = ChartModel("tok/s", (s,), (), (), (105.0, 120.0), (100.0, 120.0))
    assert ThroughputChart._shaded(m2) == (105.0, 120.0)


def test_a_vllm_dp_server_is_charted_at_the_panels_server_level_figures():
    """Data-parallel vLLM (Engine 000/001 lines, real formats): the chart plots the per-interval
    sums the panel's median is made of (Run.decode), never each engine's own value."""
    from kit.vllm_logs import vllm_log

    from specmon.session.runs import read_runs
    from specmon.session.window import current_stats

    lines = vllm_log("0.11.0", engines=2, intervals=30, running=8)
    s = read_runs(lines, "spec")
    s.role = "speculative"
    run = s.run
    m = chart_model([s], "tok/s", 0.0, 60.0, 600.0, {})
    (series,) = m.series
    assert series.ys == tuple(p.rec.gen_throughput for p in run.decode)
    engine_lines = [p.rec.gen_throughput for g in run.groups.values() for p in g.points]
    assert len(engine_lines) == 60 and max(engine_lines) < 320.0
    assert min(series.ys[1:]) > 2 * 250.0  # sums of two engines (each 250-320 tok/s)
    st = current_stats(s, window_s=60)
    assert st is not None and st.running_req == 16
    assert min(series.ys[-6:]) <= st.median <= max(series.ys[-6:])  # the window's own points


def test_an_sglang_dp_attention_server_is_charted_at_its_summed_figures(data_dir):
    """SGLang DP attention (a real DP-4 log): the chart's points are the groups' sums."""
    import gzip

    from specmon.parse.sglang import parse_line
    from specmon.session.state import ServerState

    s = ServerState("dp4", role="baseline")
    with gzip.open(data_dir / "sglang-longlogs" / "ascend-qwen3coder-480b-dp4.log.gz", "rt",
                   encoding="utf-8") as fh:
        for ln in fh:
            s.apply(ln.rstrip("\n"), parse_line(ln.rstrip("\n")), 1.0)
    run = s.run
    m = chart_model([s], "tok/s", 0.0, 60.0, 600.0, {})
    (series,) = m.series
    end = run.decode[-1].t
    assert series.ys == tuple(p.rec.gen_throughput for p in run.decode if p.t >= end - 600.0)
    assert sorted(series.ys)[len(series.ys) // 2] > 4 * 380  # four groups of ~414 tok/s each
