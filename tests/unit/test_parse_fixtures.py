"""The parser against real lines: users' pasted logs and the format reference's samples."""

from __future__ import annotations

import json
import re

import pytest

from specmon.parse.sglang import BatchRecord, normalise_key, parse_line

# The fixture names two fields differently from the normalisation rule.
FIXTURE_ALIASES = {"prealloc_usage": "pre_allocated_usage"}


def load_real(data_dir):
    with open(data_dir / "sglang-logs/real-sample.jsonl", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def test_real_sample_batch_lines_parse_to_expected(data_dir):
    items = [i for i in load_real(data_dir) if i["kind"] in ("decode", "prefill")]
    assert len(items) >= 30
    for item in items:
        rec = parse_line(item["line"])
        assert isinstance(rec, BatchRecord), item["line"]
        assert rec.kind == item["kind"]
        got = rec.to_json()
        for key, want in item["expect"].items():
            assert got.get(FIXTURE_ALIASES.get(key, key)) == want, (key, item["line"])


def test_real_sample_other_lines_are_not_batches(data_dir):
    others = [i for i in load_real(data_dir) if i["kind"] not in ("decode", "prefill")]
    assert others
    for item in others:
        rec = parse_line(item["line"])
        assert not isinstance(rec, BatchRecord), item["line"]


def test_real_sample_lines_parse_from_bytes_too(data_dir):
    for item in load_real(data_dir):
        if item["kind"] in ("decode", "prefill"):
            a = parse_line(item["line"]).to_json()
            b = parse_line(item["line"].encode() + b"\r\n").to_json()
            assert a == b


# --- reference sample lines, one per line format (tests/data/sglang-samples.jsonl) ---------

def reference_samples(data_dir):
    with (data_dir / "sglang-samples.jsonl").open(encoding="utf-8") as fh:
        return [json.loads(x) for x in fh]


def test_reference_samples_are_all_there(data_dir):
    assert [d["n"] for d in reference_samples(data_dir)] == list(range(1, 30))


@pytest.mark.parametrize("idx", range(29))
def test_reference_sample(data_dir, idx):
    sample = reference_samples(data_dir)[idx]
    line = sample["line"]
    rec = parse_line(line)
    assert isinstance(rec, BatchRecord)
    assert rec.kind == sample["kind"]
    assert (rec.timestamp or rec.time_of_day) == sample["ts"]
    for tag in ("DP", "TP", "EP", "PP", "ATTN_CP", "MOE_DP"):
        assert getattr(rec, f"{tag.lower()}_rank") == sample["tags"].get(tag), tag
    assert rec.iteration == sample["iter"]
    assert rec.mixed_running_req == sample["mixed_running_req"]
    assert line.endswith(", ") == sample["ends_with_comma_space"]
    got = rec.to_json()
    for key, want in sample["fields"].items():
        norm = normalise_key(key)
        if isinstance(want, dict):  # 0.4.9 SWA: full pool is canonical
            canon = {"token": "tokens", "token_usage": "token_usage"}[norm]
            assert got[canon] == pytest.approx(want["full"])
            assert got[f"swa_{norm}"] == pytest.approx(want["swa"])
            continue
        if f"{key}: " in line and re.search(re.escape(key) + r": [\d.]+%", line):
            norm = f"{norm}_pct"
        if norm.endswith("_graph"):
            assert got["cuda_graph"] is want
            assert got["graph_kind"] == norm[: -len("_graph")]
            continue
        canon = {"token": "tokens", "full_token": "tokens", "full_token_usage": "token_usage"}.get(
            norm, norm)
        assert got.get(canon) == want, (key, line)
