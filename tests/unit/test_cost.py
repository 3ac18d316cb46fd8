"""Cost that must not grow with history: counted in elements processed, never in wall time."""

from __future__ import annotations

import statistics
import sys

import pytest
from kit.paths import ROOT

import specmon.analysis.drift as drift
from specmon.analysis.drift import DriftMonitor, DriftParams, baseline_from_records
from specmon.parse.sglang import BatchRecord
from specmon.session.state import RECENT_POINTS, TIER_POINTS, DecodePoint, ServerState

sys.path.insert(0, str(ROOT / "bench"))
from drift_cost import recs as spec_recs  # noqa: E402  (the benchmark's own records)

P = DriftParams()


def elements_per_live_record(monkeypatch, n_base: int) -> int:
    """Elements the detector's statistics read while 300 live records go through it."""
    base = baseline_from_records([(r, 1.0 * i) for i, r in enumerate(spec_recs(n_base, 37.0, 1))], P)
    m = DriftMonitor(base, P)
    seen = [0]
    for name in ("median", "_mad_sigma", "lag1"):
        orig = getattr(drift, name)

        def counting(xs, *a, _orig=orig, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
            xs = list(xs)
            seen[0] += len(xs)
            return _orig(xs, *a, **k)

        monkeypatch.setattr(drift, name, counting)
    for i, r in enumerate(spec_recs(300, 37.0 * 0.8, 2)):  # a drop: alerts and estimates run too
        m.observe(r, 1e6 + i, i)
    monkeypatch.undo()
    assert m.alert is not None  # the expensive path (alert + estimate) was exercised
    return seen[0]


def test_speculative_drift_cost_per_record_does_not_grow_with_the_baseline(monkeypatch):
    small = elements_per_live_record(monkeypatch, 76)
    large = elements_per_live_record(monkeypatch, 15_611)
    assert large == small  # O(1) in the baseline's size: its statistics were computed once


def test_baseline_statistics_are_computed_once():
    base = baseline_from_records([(r, 1.0 * i) for i, r in enumerate(spec_recs(200, 37.0, 3))], P)
    b = base.best()
    want = statistics.median(b.accept)
    b.accept.append(99.0)  # if anything recomputed from the samples, this would show
    b.thr.append(1e6)
    assert b.median_accept == pytest.approx(want)
    assert b.median_thr == pytest.approx(statistics.median(b.thr[:-1]))


def test_a_long_run_keeps_its_whole_length_in_bounded_memory():
    """72 h at 2 lines/s: full resolution for the recent window, 10 s / 1 min / 10 min medians
    (with n) for the whole run, every container bounded."""
    s = ServerState("b", role="baseline")
    run = s.run
    n = 72 * 3600 * 2
    for i in range(n):
        t = 0.5 * i
        rec = BatchRecord("decode", running_req=1, gen_throughput=88.0 if t < 3600 else 80.0)
        run.add_decode(DecodePoint(t, rec, t))
    assert len(run.decode) == RECENT_POINTS and run.decode_total == n
    ten_min = run.history(600.0)
    assert len(ten_min) == 72 * 6 and all(p.n == 1200 for p in ten_min[:-1])
    # the first hour's median is still there, though its points left the full-resolution ring
    assert [p.median for p in ten_min[:6]] == [88.0] * 6 and ten_min[6].median == 80.0
    # closed buckets are bounded; the open one is added when read
    assert len(run.history(60.0)) == TIER_POINTS + 1 and len(run.history(10.0)) == TIER_POINTS + 1
    assert len(s.decode) <= s.decode.maxlen
