"""The known-shape read of decode lines (parse/sglang.py `_KNOWN_DECODE`) stores exactly what the
general key loop stores, on every real line we hold and on mutated ones; and a line counts as
read whole (no free text, so `record` may skip redaction) only when every byte of it is known."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specmon.parse.sglang import BatchRecord, parse_known

DATA = Path(__file__).resolve().parents[1] / "data"


def _real_lines() -> list[str]:
    lines: list[str] = []
    for row in (DATA / "sglang-samples.jsonl").read_text().splitlines():
        lines.append(json.loads(row)["line"])
    for row in (DATA / "sglang-logs" / "real-sample.jsonl").read_text().splitlines():
        obj = json.loads(row)
        if isinstance(obj.get("line"), str):
            lines.append(obj["line"])
    for path in sorted((DATA / "sglang-longlogs").glob("*.log.gz")):
        with gzip.open(path, "rt", encoding="utf-8", errors="replace") as fh:
            lines.extend(line for line in fh if "batch" in line)
    return lines


REAL = _real_lines()


def _same(line: str) -> tuple[object, bool]:
    """Both paths on one line: equal records, the same JSON key order; the fast result."""
    fast, whole = parse_known(line)
    slow, slow_whole = parse_known(line, known=False)
    assert fast == slow, line
    if fast is not None:
        assert list(fast.to_json().items()) == list(slow.to_json().items()), line
        # every field stored (the generated __init__): to_json's general branch, not the
        # template of the fields a parsed record set
        full = dataclasses.replace(fast)
        assert list(full.to_json().items()) == list(fast.to_json().items()), line
    assert not slow_whole  # the general path never claims a line whole
    return fast, whole


def test_real_lines_read_the_same_and_most_decode_lines_take_the_known_path() -> None:
    decode = whole = 0
    for line in REAL:
        rec, w = _same(line)
        if isinstance(rec, BatchRecord) and rec.kind == "decode":
            decode += 1
            whole += w
    assert decode > 1000  # the long logs are there
    # real logs are mostly of the known shapes: a pattern that never matches fails here
    assert whole / decode > 0.5, (whole, decode)


@pytest.mark.parametrize(("line", "want"), [
    ("[2025-06-01 12:00:00.250 DP1 TP3 EP2] Decode batch, #running-req: 08, #token: 12345, "
     "token usage: 0.05, accept len: 2.71, accept rate: 0.68, cuda graph: True, "
     "gen throughput (token/s): 612.34, #queue-req: 0, ",
     {"kind": "decode", "timestamp": "2025-06-01 12:00:00.250", "dp_rank": 1, "tp_rank": 3,
      "ep_rank": 2, "running_req": 8, "tokens": 12345, "accept_len": 2.71,
      "gen_throughput": 612.34, "queue_req": 0, "cuda_graph": True, "graph_kind": "cuda"}),
    ("[2025-06-01 12:00:00 TP0] Prefill batch, #new-seq: 1, #new-token: 812, #cached-token: 0, "
     "token usage: 0.01, #running-req: 3, #queue-req: 0, #pending-token: 0, cuda graph: False, "
     "input throughput (token/s): 5210.55",
     {"kind": "prefill", "new_token": 812, "running_req": 3, "input_throughput": 5210.55,
      "cuda_graph": False}),
    # 0.3.0's clock-only prefix (tests/data/sglang-samples.jsonl, n 1)
    ("[14:02:11 TP0] Decode batch. #running-req: 8, #token: 5120, token usage: 0.02, "
     "gen throughput (token/s): 612.34, #queue-req: 0",
     {"kind": "decode", "timestamp": None, "time_of_day": "14:02:11", "tp_rank": 0,
      "dp_rank": None, "running_req": 8, "tokens": 5120, "gen_throughput": 612.34}),
])
def test_a_default_line_is_read_whole_with_every_field(line: str, want: dict[str, object]) -> None:
    rec, whole = _same(line)
    assert whole
    assert isinstance(rec, BatchRecord)
    assert {k: getattr(rec, k) for k in want} == want


def test_free_text_anywhere_means_not_whole() -> None:
    base = ("[2025-06-01 12:00:00 TP0] Decode batch, #running-req: 8, #token: 12345, token usage: "
            "0.05, cuda graph: False, gen throughput (token/s): 61.3, #queue-req: 0")
    assert _same(base)[1]
    for line in (
        "api_key=sk-abc " + base,  # text before the prefix
        base.replace("[2025", "token=hunter2 [2025"),
        base + ", note: sk-live-0123456789abcdef",  # an unknown field after the last one
        base.replace("TP0]", "TP0 user=bob]"),
        base.replace("cuda graph: False", "cuda graph: sk-live-0123456789abcdef"),
    ):
        assert not _same(line)[1], line


_NUM = st.one_of(
    st.from_regex(r"\A\d{1,20}\Z"),
    st.from_regex(r"\A\d{1,17}\.\d{0,17}\Z"),
    st.sampled_from(["nan", "inf", "-1", "1e400", "0.5%", "True", "", " 3", "٣", "1_0", "0x1f"]),
)
_PIECES = st.sampled_from([
    ", x=y", ", foo", ", #queue-req: 5", ", gen throughput (token/s): 7.0", ", Gen Throughput: 5",
    ", accept len: 9.9", ", #running req: 3", ",", " ", "\t", ", est uncap acc len: 1 [2, 3]",
    ", swa=3", ", cuda graph: False", ", fwd occupancy: 50%", ", largest-len: 4",
])


@settings(max_examples=400, deadline=None)
@given(
    rr=_NUM, tok=_NUM, usage=_NUM, acc=st.one_of(st.none(), _NUM), rate=st.one_of(st.none(), _NUM),
    graph=st.sampled_from([None, "cuda graph: True", "npu graph: False", "cuda graph: maybe"]),
    gt=_NUM, queue=_NUM, head=st.sampled_from([".", ",", " [12],", ";", ". "]),
    prefix=st.sampled_from(["", "[2025-06-01 12:00:00 TP0] ", "[2025-06-01 12:00:00.5 TP0] ",
                            "[2025-06-01 12:00:00 DP0 TP1 EP2 PP3] ", "[12:00:00 TP0] ",
                            "[2025-06-01 12:00:00 TP99999999999999999999] ", "x [2025-06-01 "
                            "12:00:00] "]),
    cut=st.integers(min_value=0, max_value=12), piece=_PIECES, tail=st.sampled_from(["", ",", ", ",
                                                                                     " ", ",  "]),
)
def test_mutated_decode_lines_read_the_same(rr: str, tok: str, usage: str, acc: str | None,
                                            rate: str | None, graph: str | None, gt: str,
                                            queue: str, head: str, prefix: str, cut: int,
                                            piece: str, tail: str) -> None:
    fields = [f"#running-req: {rr}", f"#token: {tok}", f"token usage: {usage}"]
    if acc is not None:
        fields.append(f"accept len: {acc}")
    if rate is not None:
        fields.append(f"accept rate: {rate}")
    if graph is not None:
        fields.append(graph)
    fields += [f"gen throughput (token/s): {gt}", f"#queue-req: {queue}"]
    _same(f"{prefix}Decode batch{head} {_insert(fields, cut, piece)}{tail}")


def _insert(fields: list[str], cut: int, piece: str) -> str:
    """The fields joined, with `piece` after the cut-th of them (0: none; past the end: last)."""
    body = ", ".join(fields)
    if not cut:
        return body
    at = min(cut, len(fields))
    rest = fields[at:]
    return ", ".join(fields[:at]) + piece + (", " + ", ".join(rest) if rest else "")


@settings(max_examples=300, deadline=None)
@given(
    nums=st.lists(_NUM, min_size=7, max_size=7), usage=_NUM,
    pending=st.one_of(st.none(), _NUM),
    graph=st.sampled_from([None, "cuda graph: False", "npu graph: True", "cuda graph: 1"]),
    thr=st.one_of(st.none(), _NUM), head=st.sampled_from([".", ",", " [3],", "(mixed #running-req: 2),"]),
    prefix=st.sampled_from(["", "[2025-06-01 12:00:00 TP0] ", "[2025-06-01 12:00:00 DP1 TP1 EP1] ",
                            "2025-06-01 12:00:00 INFO 77 [ TP0 scheduler.py:12] "]),
    cut=st.integers(min_value=0, max_value=12), piece=_PIECES, tail=st.sampled_from(["", ", ", ","]),
)
def test_mutated_prefill_lines_read_the_same(nums: list[str], usage: str, pending: str | None,
                                             graph: str | None, thr: str | None, head: str,
                                             prefix: str, cut: int, piece: str, tail: str) -> None:
    seqs, new, cached, rr, queue, _, _ = nums
    fields = [f"#new-seq: {seqs}", f"#new-token: {new}", f"#cached-token: {cached}",
              f"token usage: {usage}", f"#running-req: {rr}", f"#queue-req: {queue}"]
    if pending is not None:
        fields.append(f"#pending-token: {pending}")
    if graph is not None:
        fields.append(graph)
    if thr is not None:
        fields.append(f"input throughput (token/s): {thr}")
    _same(f"{prefix}Prefill batch{head} {_insert(fields, cut, piece)}{tail}")
