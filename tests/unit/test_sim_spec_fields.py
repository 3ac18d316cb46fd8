"""Simulator round trip: each new decode field appears in exactly the versions that print it,
and the parser reads back what the simulator wrote."""

from __future__ import annotations

import pytest

from specmon.parse.sglang import parse_line
from specmon.sim import formats
from specmon.sim.engine import DecodeRecord, EngineConfig, render, simulate
from specmon.sim.perf import SpecConfig

DSPARK = SpecConfig(algorithm="DSPARK", num_steps=3, num_draft_tokens=4)


def rec(**kw) -> DecodeRecord:
    base = dict(t=1.78e9, running_req=4, num_tokens=4000, token_usage=0.01, gen_throughput=300.0,
                queue_req=0, cuda_graph=True, forward_ct=10, accept_len=2.5, fwd_busy_s=0.9,
                all_busy_s=0.95, interval_s=1.0, decode_tokens=300, decode_passes=40)
    base.update(kw)
    return DecodeRecord(**base)


@pytest.mark.parametrize("version", [v for v in formats.VERSIONS if formats.ge(v, "0.5.4")])
def test_fields_by_version(version):
    line = render(rec(), version, " TP0", spec=DSPARK, device_timer=True, mfu=True)
    r = parse_line(line)
    assert r.accept_len == 2.5 and r.gen_throughput == 300.0 and r.extra == {}, line
    dspark = formats.ge(version, "0.5.18")
    assert (r.cap_len, r.block_accept_len) == ((4.0, 2.5) if dspark else (None, None))
    assert (r.est_uncap_acc_len, r.est_uncap_acc_len_lo, r.est_uncap_acc_len_hi) == (
        (2.5, 2.38, 2.62) if dspark else (None, None, None))
    has_mfu = formats.ge(version, "0.5.10")
    assert (r.est_decode_tflops_s is not None) == has_mfu
    assert (r.est_read_bw is not None) == (r.est_write_bw is not None) == has_mfu
    assert r.fwd_occupancy_pct == (90.0 if formats.ge(version, "0.5.11") else None)
    assert r.fwd_idle_occupancy_pct == (95.0 if formats.ge(version, "0.5.23") else None)


def test_plain_eagle_has_no_dspark_fields_and_empty_interval_prints_nan():
    line = render(rec(interval_s=0.0), "0.5.23", " TP0", spec=SpecConfig(), device_timer=True)
    assert "fwd occupancy: nan%, fwd+idle occupancy: nan%" in line and "cap len" not in line
    r = parse_line(line)
    assert r.fwd_occupancy_pct is None and r.fwd_idle_occupancy_pct is None and r.cap_len is None


def test_fast_simulation_emits_and_parses_the_telemetry():
    cfg = EngineConfig(tp_size=8, spec=DSPARK, load_concurrency=2, seed=3)
    recs = [parse_line(sl.text) for sl in simulate(cfg, duration_s=30, device_timer=True,
                                                   mfu=True) if "Decode" in sl.text]
    assert len(recs) > 10
    for r in recs:
        assert 0 < r.fwd_occupancy_pct <= 100 and r.fwd_occupancy_pct <= r.fwd_idle_occupancy_pct
        assert r.cap_len == 4.0 and r.block_accept_len == r.accept_len
        assert r.est_decode_tflops_s > 0 and r.est_read_bw > 0


@pytest.mark.parametrize("alpha,new", [(0.93, 7), (0.15, 1)])
def test_adaptive_steps_change_mid_run_and_split_the_segments(alpha, new):
    from datetime import datetime

    from specmon.session.advice import segments
    from specmon.session.runs import read_runs

    spec = SpecConfig(num_steps=3, eagle_topk=1, num_draft_tokens=4, accept_prob=alpha)
    cfg = EngineConfig(tp_size=8, spec=spec, load_concurrency=2, seed=5, adaptive_steps=(1, 3, 7))
    args = formats.line("0.5.23", 1.78e9, formats.server_args_message("0.5.23", {
        "speculative_algorithm": "EAGLE3", "speculative_num_steps": 3,
        "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}))
    lines = [args] + [sl.text for sl in simulate(cfg, duration_s=60)]
    changes = [parse_line(x) for x in lines if "Adaptive spec params updated" in x]
    assert changes and changes[0].kind == "spec_params"
    assert (changes[0].data["old_steps"], changes[0].data["new_steps"]) == (3, new)
    segs = segments(read_runs(lines, "sim"))  # the session's run, split at the changes
    seg = next(s for s in segs if s.started_by == "adaptive")  # the first change is early:
    assert seg.run == "sim run 1.2" and seg.launch == "sim run 1"  # steps-3 lines may be none
    assert seg.steps == new and seg.draft_tokens == new + 1
    assert seg.start_t == datetime.fromisoformat(changes[0].timestamp).timestamp()
    assert len(segs) == len(changes) + (1 if segs[0].started_by == "server_args" else 0)
    # lines after the change carry the new settings' accept len and rate
    later = [r for r in seg.records if r.accept_len is not None][2:]
    assert later and all(r.accept_len <= new + 1 for r in later)
    if new == 7:
        assert max(r.accept_len for r in later) > 4.0  # beyond what 3 steps can accept


def test_adaptive_init_line_parses():
    r = parse_line(formats.line("0.5.23", 1.78e9, formats.adaptive_init_message(3, (7, 1, 3))))
    assert r.kind == "spec_adaptive_init" and r.data == {"steps": 3, "candidate_steps": [1, 3, 7]}
