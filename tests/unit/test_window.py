"""Condition-matched statistics and the speedup: like with like, honest N/A, right numbers."""

from __future__ import annotations

from datetime import datetime

import pytest

from specmon.parse.sglang import parse_line
from specmon.session.state import ServerState
from specmon.session.window import (
    current_stats,
    recomputed_accept_rate,
    speedup,
)

LINE = ("[{ts} TP0] Decode batch, #running-req: {rr}, #token: 900, token usage: 0.04, "
        "{acc}cuda graph: True, gen throughput (token/s): {gt:.2f}, #queue-req: 0")


T0 = datetime(2026, 2, 26, 19, 0, 0).timestamp()  # log times are naive local times


def stamp(t: float) -> str:
    return datetime.fromtimestamp(T0 + t).strftime("%Y-%m-%d %H:%M:%S")


def feed(state: ServerState, values, rr=1, t0=1000.0, dt=1.0, accept=None, received=None):
    """Lines printed at log times t0, t0+dt, ... (seconds after T0), received at `received`."""
    for i, gt in enumerate(values):
        acc = f"accept len: {accept:.2f}, accept rate: 0.70, " if accept is not None else ""
        text = LINE.format(rr=rr, gt=gt, acc=acc, ts=stamp(t0 + i * dt))
        state.apply(text, parse_line(text), received if received is not None else 5e9 + t0 + i * dt)


def test_current_stats_uses_only_current_batch_size_and_window():
    s = ServerState("b", role="baseline")
    feed(s, [50.0] * 5, rr=4, t0=1000)
    feed(s, [10.0, 90.0, 88.0, 89.0, 87.0], rr=1, t0=1005)
    st = current_stats(s, window_s=3.5)  # the run's last log second is 1009: keeps 90, 88, 89, 87
    assert st.running_req == 1 and st.n == 4
    assert st.median == pytest.approx(88.5)
    assert st.p10 == pytest.approx(87.3) and st.p90 == pytest.approx(89.7)


def test_speedup_matches_batch_size_and_reports_derived_times():
    base = ServerState("b", role="baseline")
    spec = ServerState("s", role="speculative")
    spec.args["speculative_num_draft_tokens"] = 3
    feed(base, [88.0, 89.0, 90.0, 88.5, 89.5], rr=1)
    feed(base, [400.0] * 5, rr=8, t0=1005)  # a different batch size: must not be compared
    feed(spec, [93.0, 94.0, 95.0, 94.5, 93.5], rr=1, accept=2.4)
    sp = speedup(base, spec, now=1010.0, window_s=60)
    assert sp.running_req == 1
    assert sp.ratio == pytest.approx(94.0 / 89.0)
    assert sp.low < sp.ratio < sp.high
    assert sp.base_ms_per_token == pytest.approx(1000 / 89.0)
    assert sp.verify_cycle_ms == pytest.approx(2.4 * 1000 / 94.0)
    assert sp.break_even_accept_len == pytest.approx(2.4 * 89.0 / 94.0)


def test_speedup_is_none_without_common_batch_size():
    base = ServerState("b", role="baseline")
    spec = ServerState("s", role="speculative")
    feed(base, [88.0] * 5, rr=1)
    feed(spec, [300.0] * 5, rr=4, accept=2.0)
    assert speedup(base, spec, now=1010.0) is None


def test_speedup_needs_three_samples_each():
    base = ServerState("b", role="baseline")
    spec = ServerState("s", role="speculative")
    feed(base, [88.0, 89.0], rr=1)
    feed(spec, [94.0] * 5, rr=1, accept=2.0)
    assert speedup(base, spec, now=1010.0) is None


def test_recomputed_accept_rate():
    assert recomputed_accept_rate(2.4, 3) == pytest.approx(0.7)
    assert recomputed_accept_rate(1.0, 4) == 0.0
    assert recomputed_accept_rate(2.4, None) is None
    assert recomputed_accept_rate(None, 3) is None
    assert recomputed_accept_rate(2.4, 10 ** 400) is None  # a damaged snapshot's count


def test_state_status_transitions_and_traceback():
    s = ServerState("x")
    for text in [
        "[2026-01-01 00:00:00] server_args=ServerArgs(model_path='m', tp_size=8, "
        "speculative_algorithm='EAGLE3', speculative_num_draft_tokens=3)",
        "[2026-01-01 00:00:01 TP0] Capture cuda graph bs [1, 2, 4]",
    ]:
        s.apply(text, parse_line(text), 1.0)
    assert s.status == "starting" and s.role == "speculative" and s.num_draft_tokens == 3
    assert s.startup.graph_capture == "capturing" and s.startup.graph_batch_sizes == [1, 2, 4]
    text = "[2026-01-01 00:00:09] The server is fired up and ready to roll!"
    s.apply(text, parse_line(text), 2.0)
    assert s.status == "ready"
    for text in ["Traceback (most recent call last):", '  File "x.py", line 1, in <module>',
                 "RuntimeError: CUDA out of memory"]:
        s.apply(text, parse_line(text), 3.0)
    s.process_exited(1)
    assert s.status == "crashed"
    assert s.traceback[0].startswith("Traceback") and s.traceback[-1].startswith("RuntimeError")


def test_clean_stop_is_stopped_not_crashed():
    s = ServerState("x")
    s.process_exited(-15)
    assert s.status == "stopped"


def test_one_speedup_function_gives_no_interval_from_one_sample_a_side():
    from specmon.session.window import interval_text, speedup_of, stats_for

    b, s = ServerState("b", role="baseline"), ServerState("s", role="speculative")
    feed(b, [80.0], rr=2)
    feed(s, [120.0, 118.0, 122.0], rr=2, accept=2.5)
    one = speedup_of(stats_for(b.runs[-1].decode, 2, 60.0), stats_for(s.runs[-1].decode, 2, 60.0))
    assert one.ratio == pytest.approx(1.5) and one.ci95 is None and one.verdict == "na"
    assert "baseline n 1" in one.ci_reason and "speculative" not in one.ci_reason
    assert interval_text(one).startswith("N/A (fewer than 2 samples")
    feed(b, [82.0], rr=2, t0=1001)  # two a side: an interval, around the ratio
    two = speedup_of(stats_for(b.runs[-1].decode, 2, 60.0), stats_for(s.runs[-1].decode, 2, 60.0))
    assert two.ci95 is not None and two.ci95[0] < two.ratio < two.ci95[1]


def _pair(base_vals, spec_vals, rr=8):
    from specmon.session.window import speedup_of, stats_for

    b, s = ServerState("b", role="baseline"), ServerState("s", role="speculative")
    feed(b, base_vals, rr=rr)
    feed(s, spec_vals, rr=rr, accept=2.9)
    return speedup_of(stats_for(b.runs[-1].decode, rr, 1e9), stats_for(s.runs[-1].decode, rr, 1e9))


def test_a_few_close_samples_do_not_make_a_narrow_interval():
    """Three spec values that happen to lie close (a robust CV of 0.16 %) against 40 baseline
    values with 3 % noise: 1.96 x their own spread gave 1.164-1.198. A side's spread from fewer
    than 10 samples is taken no smaller than the other side's, and the quantile is Student's t
    at Welch's degrees of freedom: the interval is as wide as three samples allow."""
    import random

    rng = random.Random(5)
    base = [170.0 * (1 + rng.gauss(0, 0.03)) for _ in range(40)]
    sp = _pair(base, [200.49, 200.71, 203.09])
    lo, hi = sp.ci95
    assert lo < sp.ratio < hi and hi / lo > 1.15  # was 1.164-1.198 (hi / lo 1.03)
    many = _pair(base, [200.0 * (1 + rng.gauss(0, 0.03)) for _ in range(40)])
    assert many.ci95[1] - many.ci95[0] < (hi - lo) / 3  # 40 a side: narrow, as it should be


def test_equal_samples_measure_no_spread_and_give_no_interval():
    """Three equal values a side is no zero spread: 'no spread measured', not 1.500-1.500."""
    sp = _pair([100.0] * 3, [150.0] * 3)
    assert sp.ratio == pytest.approx(1.5) and sp.ci95 is None
    assert sp.ci_reason == "95% interval N/A: no spread measured"
    # over half equal (rounded prints) but not all: a spread, from the mean deviation
    sp = _pair([100.0] * 6 + [98.0, 103.0, 101.0], [150.0] * 6 + [147.0, 152.0, 151.0])
    assert sp.ci95 is not None and sp.ci95[0] < 1.5 < sp.ci95[1]


@pytest.mark.parametrize("df, t", [(1, 12.706), (2, 4.303), (3, 3.182), (5, 2.571),
                                   (10, 2.228), (15, 2.131), (20, 2.086), (30, 2.042),
                                   (60, 2.000), (120, 1.980), (1e9, 1.960)])
def test_t_quantile_matches_the_table(df, t):
    from specmon.analysis.stats import t975

    assert t975(df) == pytest.approx(t, abs=0.002)
    assert t975(2.5) < t975(2) and t975(2.5) > t975(3)  # fractional (Welch) in between


def test_an_unboundable_spread_is_no_interval_not_an_overflow():
    """Mostly equal tiny values and one far off (a spread 20,000 times the median): no
    interval, said (the snapshot fuzz test overflowed math.exp on such a file)."""
    sp = _pair([0.01, 0.01, 500.0], [1.0, 1.1, 1.2])
    assert sp.ci95 is None and sp.ci_reason == ("95% interval N/A: the spread is too wide to "
                                                "bound the ratio")


def test_a_robust_cv_is_printed_from_five_samples():
    """Of 3 values the MAD is the smaller of two gaps: 'p10-p90 79.5-106.0 · CV 0.2%' on the
    panel. The CV is printed (panel, parse --runs JSON, report) from MIN_CV_N samples."""
    from specmon.session.runs import run_by_rr
    from specmon.session.window import MIN_CV_N, stats_for

    s = ServerState("b", role="baseline")
    feed(s, [79.5, 106.0, 106.2], rr=4)
    w = stats_for(s.runs[-1].decode, 4, 1e9)
    assert w.robust_cv is not None and w.robust_cv < 0.01 and w.shown_cv is None
    assert run_by_rr(s.runs[-1])[0]["robust_cv"] is None
    feed(s, [90.0, 95.0], rr=4, t0=1003)
    assert MIN_CV_N == 5 and stats_for(s.runs[-1].decode, 4, 1e9).shown_cv is not None


def test_no_break_even_accept_len_below_one():
    """A verify round faster than a baseline step (spec 200 tok/s at accept len 1.5 against a
    100 tok/s baseline: 0.75) is no accept length at all: N/A (the servers differ in more)."""
    sp = _pair([100.0, 101.0, 99.0] * 3, [200.0, 201.0, 199.0] * 3)  # accept 2.9 in _pair
    assert sp.break_even_accept_len == pytest.approx(2.9 * 100.0 / 200.0)
    from specmon.session.window import speedup_of, stats_for

    b, s = ServerState("b", role="baseline"), ServerState("s", role="speculative")
    feed(b, [100.0, 101.0, 99.0] * 3, rr=8)
    feed(s, [200.0, 201.0, 199.0] * 3, rr=8, accept=1.5)
    low = speedup_of(stats_for(b.runs[-1].decode, 8, 1e9), stats_for(s.runs[-1].decode, 8, 1e9))
    assert low.verify_cycle_ms is not None and low.break_even_accept_len is None
