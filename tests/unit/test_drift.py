"""Drift detector: strata, every exclusion rule, persistence/hysteresis, levels, speculative split."""

from __future__ import annotations

import dataclasses
import math
import random
import re

import pytest
from kit.snapshots import read_data

from specmon.analysis.drift import (
    BaselineStats,
    DriftMonitor,
    DriftParams,
    SampleFilter,
    Stratum,
    baseline_from_records,
    rr_bucket,
    stratum_of,
)
from specmon.parse.sglang import BatchRecord, EventRecord, parse_line

P = DriftParams()


def dec(thr: float, rr: int = 1, tokens: int = 1200, queue: int = 0, accept: float | None = None,
        graph: bool | None = True, ts: str | None = None) -> BatchRecord:
    return BatchRecord("decode", timestamp=ts, running_req=rr, tokens=tokens, gen_throughput=thr,
                       queue_req=queue, accept_len=accept, cuda_graph=graph)


def noisy(n: int, level: float, sigma: float = 0.01, seed: int = 0, rho: float = 0.0,
          accept: float | None = None) -> list[BatchRecord]:
    rng = random.Random(seed)
    e = 0.0
    out = []
    for _ in range(n):
        e = rho * e + rng.gauss(0, sigma * math.sqrt(1 - rho * rho))
        out.append(dec(level * math.exp(e), accept=accept))
    return out


def feed(m: DriftMonitor, recs: list[BatchRecord], t0: float = 0.0) -> list[str | None]:
    levels = []
    for i, r in enumerate(recs):
        m.observe(r, t0 + 1.35 * i, i + 1)
        a = m.alert
        levels.append(None if a is None or a.cleared else a.level)
    return levels


def base_of(recs: list[BatchRecord]) -> BaselineStats:
    return baseline_from_records([(r, 1.35 * i) for i, r in enumerate(recs)], P)


# --- strata ----------------------------------------------------------------------------------

def test_rr_buckets_exact_to_8_then_powers_of_two():
    assert [rr_bucket(x) for x in (1, 2, 8, 9, 16, 17, 80)] == [1, 2, 8, 16, 16, 32, 128]


def test_stratum_separates_context_spec_and_graph():
    a = stratum_of(dec(80, tokens=1000), P)
    b = stratum_of(dec(80, tokens=300_000), P)
    c = stratum_of(dec(80, tokens=1000, accept=3.0), P)
    d = stratum_of(dec(80, tokens=1000, graph=False), P)
    assert len({a, b, c, d}) == 4
    assert a == stratum_of(dec(50, tokens=800), P)  # same bucket (256..1023 tokens)
    assert Stratum.from_key(a.key) == a
    assert stratum_of(dec(80, rr=0), P) is None


def test_live_stratum_without_baseline_is_counted_not_compared():
    base = base_of(noisy(60, 88.8))
    m = DriftMonitor(base, P)
    feed(m, [dec(40.0, graph=False) for _ in range(40)])  # no-graph lines: another stratum
    assert m.clean == 0
    assert m.excluded["no_baseline_stratum"] == 40 - P.warmup_lines
    assert m.verdict() == "insufficient"


# --- exclusion rules, one by one ---------------------------------------------------------------

def _filter() -> SampleFilter:
    f = SampleFilter(P)
    for i in range(10):  # past warm-up with a steady history
        assert (f.decode(dec(88.0), 1.35 * i) is None) == (i < P.warmup_lines)
    return f


def test_warmup_lines_excluded_after_restart():
    f = _filter()
    f.restart()
    assert [f.decode(dec(88.0), 20.0 + i) for i in range(P.warmup_lines)] == [None] * P.warmup_lines
    assert f.decode(dec(88.0), 30.0) is not None
    assert f.excluded["warmup"] == 2 * P.warmup_lines


def test_queue_excluded():
    f = _filter()
    assert f.decode(dec(88.0, queue=2), 20.0) is None
    assert f.excluded["queue"] == 1


def test_prefill_since_last_decode_excluded_once():
    f = _filter()
    f.prefill()
    assert f.decode(dec(88.0), 20.0) is None
    assert f.decode(dec(88.0), 21.35) is not None
    assert f.excluded["prefill"] == 1


def test_batch_size_change_excluded():
    f = _filter()
    assert f.decode(dec(150.0, rr=2), 20.0) is None
    assert f.decode(dec(150.0, rr=2), 21.0) is not None  # same batch again: clean
    assert f.excluded["batch_change"] == 1


def test_idle_gap_by_interval_and_by_artefact_throughput():
    f = _filter()
    assert f.decode(dec(86.0), 12.15 + 30.0) is None  # 30 s since the previous line
    assert f.decode(dec(20.0), 43.5) is None  # a deflated line (< 0.5 x recent median)
    assert f.excluded["idle_gap"] == 2


def test_idle_gap_rule_adapts_to_a_sustained_drop():
    """A real 60 % slowdown must not be thrown away as idle gaps forever."""
    f = _filter()
    kept = [f.decode(dec(35.0), 20.0 + 3.4 * i) for i in range(30)]
    assert sum(k is not None for k in kept) >= 15


def test_unusable_and_other_rank_lines_excluded():
    f = _filter()
    assert f.decode(dec(0.0), 20.0) is None
    other = dec(88.0)
    other.dp_rank = 3
    assert f.decode(other, 21.0) is None
    assert f.excluded["unusable"] == 1 and f.excluded["other_rank"] == 1


# --- the detector ------------------------------------------------------------------------------

def test_stationary_series_raises_nothing():
    base = base_of(noisy(60, 88.8, 0.02, seed=1, rho=0.3))
    m = DriftMonitor(base, P)
    levels = feed(m, noisy(1000, 88.8, 0.02, seed=2, rho=0.3))
    assert not any(lv in ("warning", "critical") for lv in levels)
    assert m.verdict() in ("ok", "improved")


def test_step_of_7_4_percent_is_a_warning_with_the_issue_text():
    base = base_of(noisy(60, 88.8, seed=3))
    m = DriftMonitor(base, P, label="baseline")
    levels = feed(m, noisy(30, 88.8, seed=4) + noisy(40, 82.2, seed=5))
    first = next(i for i, lv in enumerate(levels) if lv)
    assert 30 <= first <= 30 + 20  # not before the step, within 20 lines after it
    assert levels[first] == "warning"
    a = m.alert
    assert a is not None and a.kind == "throughput"
    assert re.fullmatch(r"baseline \d+\.\d tok/s vs recorded \d+\.\d \(-\d+\.\d%, 95% CI "
                        r"-\d+\.\d\.\.-\d+\.\d, n=\d+ vs 55, bs=1\)", a.text), a.text
    e = a.estimate
    assert e is not None and e.ci_pct[0] < e.delta_pct < e.ci_pct[1]
    assert -9.0 < e.delta_pct < -6.0
    assert m.first_alert_line == first + 1  # the line that raised it (1-based here)
    assert a.started_at is not None and a.started_at >= 1.35 * 27  # onset near the step, not the window start


def test_alert_clears_only_after_hysteresis():
    base = base_of(noisy(60, 88.8, seed=6))
    m = DriftMonitor(base, P)
    feed(m, noisy(40, 82.2, seed=7))
    assert m.alert is not None and not m.alert.cleared
    levels = feed(m, noisy(40, 88.8, seed=8), t0=100)
    back = levels.index(None)
    assert back >= P.clear_after  # the window must turn and then stay calm for clear_after evals
    # the flag says it (every front end prefixes "cleared: "; the text is the last evidence)
    assert m.alert is not None and m.alert.cleared and m.alert.text.startswith("baseline ")
    assert "cleared" not in m.alert.text
    assert m.verdict() == "drift"  # the run did drift


def test_large_drop_goes_critical_by_fast_path():
    base = base_of(noisy(60, 88.8, seed=9))
    m = DriftMonitor(base, P)
    levels = feed(m, noisy(20, 88.8, seed=10) + noisy(20, 62.9, seed=11))
    first = next(i for i, lv in enumerate(levels) if lv)
    assert levels[first] == "critical"
    assert first - 20 <= P.fast_n  # the fast path: five raw lines at <= 85 %
    assert "-29" in m.alert.text or "-28" in m.alert.text or "-30" in m.alert.text


def test_improvement_is_info_and_verdict_improved():
    base = base_of(noisy(60, 88.8, seed=12))
    m = DriftMonitor(base, P)
    levels = feed(m, noisy(40, 96.0, seed=13))
    assert "info" in levels and "warning" not in levels
    assert m.verdict() == "improved"
    assert "+8" in m.alert.text or "+7" in m.alert.text


def test_noisy_baseline_widens_the_threshold():
    """At 4 % noise a 3.5 % step must not be called from a short window (3 SE guard)."""
    base = base_of(noisy(40, 88.8, 0.04, seed=14))
    m = DriftMonitor(base, P)
    levels = feed(m, noisy(13, 85.7, 0.04, seed=15))
    assert not any(levels)


def test_restart_event_resets_the_live_window():
    base = base_of(noisy(60, 88.8, seed=16))
    m = DriftMonitor(base, P)
    feed(m, noisy(40, 88.8, seed=17))
    m.observe(EventRecord("server_args", data={"tp_size": 8}), 100.0)
    assert all(not d.live for d in m.detectors.values())
    feed(m, [dec(88.8)] * 3, t0=101)
    assert m.excluded["warmup"] == 2 * P.warmup_lines - 2


def test_fixed_baseline_value_and_running_req_filter():
    stats = BaselineStats.fixed_value(88.8, 1.0, 1, P)
    m = DriftMonitor(stats, P, running_req=1)
    recs = noisy(40, 82.2, seed=18)
    recs[20:20] = [dec(150.0, rr=2)] * 3
    feed(m, recs)
    assert m.verdict() == "drift"
    assert m.excluded["other_batch_size"] == 2  # the first rr=2 line is a batch change
    assert m.alert.estimate.n_base is None
    assert " vs " not in m.alert.text.split("n=")[1]  # a given value has no n


# --- speculative: normalise by accept length --------------------------------------------------

def spec_series(n: int, t_cycle_ms: float, accept_mean: float, seed: int) -> list[BatchRecord]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        acc = max(1.0, rng.gauss(accept_mean, 0.9))  # swings like the real agentic run
        cyc = t_cycle_ms * math.exp(rng.gauss(0, 0.01))
        out.append(dec(1000.0 * acc / cyc, accept=acc))
    return out


def test_speculative_accept_swings_do_not_alarm():
    base = base_of(spec_series(80, 33.8, 3.0, 19))
    m = DriftMonitor(base, P, label="speculative")
    levels = feed(m, spec_series(300, 33.8, 3.0, 20))
    assert not any(levels)


def test_speculative_slower_system_is_a_cycle_alert():
    base = base_of(spec_series(80, 33.8, 3.0, 21))
    m = DriftMonitor(base, P, label="speculative")
    feed(m, spec_series(60, 36.5, 3.0, 22))
    a = m.alert
    assert a is not None and a.kind == "cycle" and a.level == "warning"
    assert a.text.startswith("speculative t_cycle 36.")
    # the percentage is the cycle rate's, and says so (t_cycle rose, the rate fell)
    assert " ms vs recorded 33." in a.text and "(cycle rate -" in a.text
    assert "the system got slower (clocks, NCCL, kernels), not acceptance" in m.spec_split()


def test_a_cycle_alert_with_acceptance_down_too_does_not_say_not_acceptance():
    base = base_of(spec_series(80, 33.8, 3.0, 21))
    m = DriftMonitor(base, P, label="speculative")
    feed(m, spec_series(200, 37.5, 2.2, 25))
    a = m.alert
    assert a is not None and a.kind == "cycle"
    assert any(d.level is not None for d in m.acceptance.values())
    split = m.spec_split()
    assert "the system got slower" in split and "and acceptance changed too" in split
    assert "not acceptance" not in split


def test_speculative_acceptance_drop_is_named_as_acceptance():
    base = base_of(spec_series(80, 33.8, 3.0, 23))
    m = DriftMonitor(base, P, label="speculative")
    feed(m, spec_series(150, 33.8, 2.2, 24))
    a = m.alert
    assert a is not None and a.kind == "acceptance" and a.level == "warning"  # never critical
    assert "acceptance changed" in m.spec_split()
    assert all(d.level is None for d in m.detectors.values())  # t_cycle flat: no system alert


# --- calibration on the real long logs ---------------------------------------------------------

def _log_records(data_dir, name):
    raw = read_data(data_dir / "sglang-longlogs" / f"{name}.gz")
    return [r for r in (parse_line(x) for x in raw.splitlines()) if r is not None]


@pytest.mark.parametrize("name", ["cli991-qwen25-3b-bs1.log", "rtxpro6000-agentic-spec-bs1.log",
                                  "ascend-qwen3-next-80b-tp4.log"])
def test_real_logs_quiet_unchanged_and_caught_when_slowed(data_dir, name):
    recs = _log_records(data_dir, name)
    cut = int(len(recs) * 0.4)
    base = baseline_from_records([(r, None) for r in recs[:cut]], P)
    m = DriftMonitor(base, P)
    for i, r in enumerate(recs[cut:]):
        m.observe(r, None, i)
    assert m.verdict() in ("ok", "improved"), m.alert
    slow = DriftMonitor(base, P)
    for i, r in enumerate(recs[cut:]):
        if isinstance(r, BatchRecord) and r.gen_throughput:
            r = dataclasses.replace(r, gen_throughput=r.gen_throughput * 0.9)
        slow.observe(r, None, i)
    assert slow.verdict() == "drift"


# --- the app-facing call ----------------------------------------------------------------------

def test_update_attaches_causes_to_the_observed_alert():
    base = base_of(noisy(60, 88.8, seed=25))
    calls = []

    def explain(alert, gpus, monitor):
        calls.append(alert.kind)
        return ["TP workers lack NCCL_PROTO=LL that the recorded run had"]

    m = DriftMonitor(base, P, explain=explain)
    t = 0.0
    got = None
    for i, r in enumerate(noisy(50, 82.2, seed=26)):
        t += 1.35
        if i == 30:
            m.observe(BatchRecord("prefill", running_req=1), t - 0.1)
        m.observe(r, t)
        got = m.update([], now=t)
    assert got is not None and got.level == "warning"
    assert got.causes == ("TP workers lack NCCL_PROTO=LL that the recorded run had",)
    assert m.excluded["prefill"] == 1
    assert m.update([], now=t + 1) is got  # nothing new: same alert, no re-explain
    assert len(calls) >= 1


def _spec_log(n: int, seed: int, start_s: int = 0) -> list[str]:
    """A stationary speculative server: accept len iid, cycle rate AR(1), a line per 0.64 s."""
    import random as _random

    rng = _random.Random(seed)
    out = ["[2026-05-01 10:00:00] server_args=ServerArgs(model_path='m', tp_size=8, "
           "speculative_algorithm='EAGLE3', speculative_num_draft_tokens=3)"]
    c = 0.0
    for i in range(n):
        a = rng.gauss(0, 0.08)
        c = 0.5 * c + rng.gauss(0, 0.01)
        acc = max(1.0, 2.4 * math.exp(a))
        thr = 38.0 * acc * math.exp(c)
        s = start_s + i * 0.64
        ts = f"2026-05-01 {10 + int(s // 3600):02d}:{int(s // 60 % 60):02d}:{int(s % 60):02d}"
        out.append(f"[{ts} TP0] Decode batch, #running-req: 1, #token: 1500, token usage: 0.01, "
                   f"accept len: {acc:.2f}, accept rate: 0.70, cuda graph: True, "
                   f"gen throughput (token/s): {thr:.2f}, #queue-req: 0")
    return out


def test_verdict_says_only_what_the_interval_supports():
    """A stationary 4,000-line speculative log against a baseline of the same process: "ok",
    and whatever verdict is given, its interval excludes zero and reaches the minimum effect."""
    from specmon.parse.sglang import parse_line

    lines = _spec_log(4300, seed=21)
    base = baseline_from_records(((parse_line(x), None) for x in lines[:301]), P)
    m = DriftMonitor(base, P)
    for i, x in enumerate(lines[301:], 1):
        m.observe(parse_line(x), None, i)
    est = m.summary_estimate()
    assert est is not None and est.metric == "t_cycle" and m.clean > 3000
    assert m.verdict() == "ok", (est, m.raised)
    for seed in range(22, 26):  # and never "improved"/"drift" on an interval holding zero
        m = DriftMonitor(base, P)
        for i, x in enumerate(_spec_log(1500, seed=seed)[1:], 1):
            m.observe(parse_line(x), None, i)
        est = m.summary_estimate()
        if m.verdict() in ("improved", "drift"):
            assert est is not None and est.supported(P.min_effect), est
        elif m.alert is not None and not m.alert.cleared:
            assert m.alert.estimate is None or m.alert.estimate.supported(P.min_effect)


