"""control.gpus.pids_of: one real agent sample (H200 capture) -> {gpu: pids}, or why not."""

from __future__ import annotations

import json
from typing import Any

from kit.paths import TESTS

from specmon.control.gpus import pids_of
from specmon.parse.gpu_sample import GpuSample

DATA = TESTS / "data" / "gpu_agent_h200.jsonl"


def _first_sample() -> dict[str, Any]:
    for line in DATA.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("type") == "sample":
            return rec
    raise AssertionError("no sample in the capture")


def test_pids_of_real_sample() -> None:
    rec = _first_sample()
    batch = [GpuSample.from_agent_json(g, ts=rec["ts"]) for g in rec["gpus"]]
    assert pids_of(batch) == ({0: [419]}, None)


def test_sample_without_index_is_unknown_not_free() -> None:
    # An agent record without `index` (a newer/foreign agent): its processes belong to no GPU
    # we can name, so the answer is "cannot tell", never a map where that GPU looks free.
    rec = _first_sample()
    g = {k: v for k, v in rec["gpus"][0].items() if k != "index"}
    out, why = pids_of([GpuSample.from_agent_json(g, ts=rec["ts"])])
    assert out is None
    assert why is not None and "index" in why


def test_unreadable_processes_is_unknown() -> None:
    rec = _first_sample()
    g = {**rec["gpus"][0], "processes": None}
    out, why = pids_of([GpuSample.from_agent_json(g, ts=rec["ts"])])
    assert out is None and why == "GPU 0: compute processes not readable"
