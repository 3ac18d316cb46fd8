"""The 0.5.1x-0.5.2x speculative/telemetry fields and the adaptive-steps events, on real formats."""

from __future__ import annotations

import json

import pytest

from specmon.analysis.logfile import summarise_buffer, summarise_general
from specmon.parse.fastscan import scan_buffer
from specmon.parse.sglang import BatchRecord, EventRecord, parse_line


def items(data_dir):
    with (data_dir / "advisor/spec-fields.jsonl").open(encoding="utf-8") as fh:
        return [json.loads(x) for x in fh if x.strip()]


def test_every_field_line_extracts_its_values(data_dir):
    seen: set[str] = set()
    for item in items(data_dir):
        rec = parse_line(item["line"])
        if "event" in item:
            assert isinstance(rec, EventRecord) and rec.kind == item["event"], item["line"]
            got = rec.data
        else:
            assert isinstance(rec, BatchRecord), item["line"]
            got = {k: getattr(rec, k) for k in item["expect"]}
            assert rec.to_json().get("est_uncap_acc_len") == rec.est_uncap_acc_len
        for key, want in item["expect"].items():
            assert got.get(key) == want, (key, item["line"])
            seen.add(key)
    assert {"cap_len", "block_accept_len", "est_uncap_acc_len", "est_uncap_acc_len_lo",
            "est_uncap_acc_len_hi", "fwd_occupancy_pct", "fwd_idle_occupancy_pct",
            "est_decode_tflops_s", "est_read_bw", "est_write_bw", "est_prefill_tflops_s",
            "replay_token", "old_steps", "new_steps", "ema_accept_len",
            "candidate_steps"} <= seen


def test_nan_occupancy_is_none_and_never_reaches_json(data_dir):
    line = next(i["line"] for i in items(data_dir) if "nan%" in i["line"])
    rec = parse_line(line)
    assert rec.fwd_occupancy_pct is None and rec.fwd_idle_occupancy_pct is None
    text = json.dumps(rec.to_json(), allow_nan=False)  # raises on NaN
    assert "nan" not in text.lower()
    assert rec.gen_throughput == 1799.1  # the rest of the line is intact


def test_uncap_bracket_half_does_not_become_a_field_or_eat_its_neighbours():
    rec = parse_line("[2026-10-30 10:00:05 TP0] Decode batch, #running-req: 2, #token: 90, "
                     "token usage: 0.00, accept len: 2.00, accept rate: 0.25, "
                     "est uncap acc len: 2.40 [2.20, 2.61], cuda graph: True, "
                     "gen throughput (token/s): 50.00, #queue-req: 0")
    assert (rec.est_uncap_acc_len, rec.est_uncap_acc_len_lo, rec.est_uncap_acc_len_hi) == (
        2.4, 2.2, 2.61)
    assert rec.cuda_graph is True and rec.gen_throughput == 50.0 and rec.extra == {}
    bad = parse_line("[2026-10-30 10:00:05 TP0] Decode batch, #running-req: 2, #token: 90, "
                     "token usage: 0.00, est uncap acc len: 2.40 [oops, 2.61], "
                     "gen throughput (token/s): 50.00, #queue-req: 0")
    assert bad.est_uncap_acc_len == 2.4 and bad.est_uncap_acc_len_lo is None  # unreadable part only
    assert bad.gen_throughput == 50.0


@pytest.mark.parametrize("text", [
    "[2026-10-30 10:05:00 TP0] Adaptive spec params updated: steps x -> 1",
    "Adaptive spec params updated",
])
def test_garbled_adaptive_lines_are_not_events(text):
    assert parse_line(text) is None


def test_fast_path_agrees_on_dspark_lines_and_keeps_block_accept_apart(data_dir):
    batch = [i["line"] for i in items(data_dir) if "event" not in i and "Decode" in i["line"]]
    buf = ("\n".join(batch * 50) + "\n").encode()
    fast = scan_buffer(buf)
    assert fast is not None  # `block accept len` no longer forces the slow path
    assert sorted(fast.accept) == [3.1, 3.12, 3.21]  # never block accept len 3.5
    assert summarise_buffer(buf).comparable() == summarise_general(buf).comparable()
