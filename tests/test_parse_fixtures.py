"""The parser against real lines: users' pasted logs and the format reference's samples."""

from __future__ import annotations

import json
import re

import pytest

from specmon.parse.sglang import BatchRecord, normalise_key, parse_line

# The fixture names two fields differently from the normalisation rule.
FIXTURE_ALIASES = {"prealloc_usage": "pre_allocated_usage"}


def load_real(shared):
    with open(shared / "fixtures/sglang-logs/real-sample.jsonl", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def test_real_sample_batch_lines_parse_to_expected(shared):
    items = [i for i in load_real(shared) if i["kind"] in ("decode", "prefill")]
    assert len(items) >= 30
    for item in items:
        rec = parse_line(item["line"])
        assert isinstance(rec, BatchRecord), item["line"]
        assert rec.kind == item["kind"]
        got = rec.to_json()
        for key, want in item["expect"].items():
            assert got.get(FIXTURE_ALIASES.get(key, key)) == want, (key, item["line"])


def test_real_sample_other_lines_are_not_batches(shared):
    others = [i for i in load_real(shared) if i["kind"] not in ("decode", "prefill")]
    assert others
    for item in others:
        rec = parse_line(item["line"])
        assert not isinstance(rec, BatchRecord), item["line"]


def test_real_sample_lines_parse_from_bytes_too(shared):
    for item in load_real(shared):
        if item["kind"] in ("decode", "prefill"):
            a = parse_line(item["line"]).to_json()
            b = parse_line(item["line"].encode() + b"\r\n").to_json()
            assert a == b


# --- sglang-observables.md section 11 -------------------------------------------------------

def section11_samples(shared):
    text = (shared / "sglang-observables.md").read_text(encoding="utf-8")
    sec = text[text.index("## 11. Sample lines"):]
    blocks = re.findall(r"```text\n[ ]*(.*?)\n[ ]*```\s*\n\s*Extract: (.*?)\n", sec, re.S)
    return blocks


def _extract_fields(extract: str) -> dict[str, object]:
    fields_part = extract.split("fields:", 1)[1]
    out: dict[str, object] = {}
    for key, val in re.findall(r"`([^`]+)`=(\"[^\"]*\"|[^,]+?)(?=, `|\.$|$)", fields_part.strip()):
        val = val.strip().rstrip(".")
        if val.startswith('"'):
            out[key] = val.strip('"')
        elif val in ("true", "false"):
            out[key] = val == "true"
        else:
            out[key] = float(val) if "." in val else int(val)
    return out


def test_section11_has_all_samples(shared):
    assert len(section11_samples(shared)) == 29


@pytest.mark.parametrize("idx", range(29))
def test_section11_sample(shared, idx):
    line, extract = section11_samples(shared)[idx]
    rec = parse_line(line)
    assert isinstance(rec, BatchRecord)
    kind = re.search(r"kind=`(\w+)`", extract).group(1).lower()
    assert rec.kind == kind
    ts = re.search(r"ts=`([^`]+)`", extract).group(1)
    assert (rec.timestamp or rec.time_of_day) == ts
    tags = dict(re.findall(r"`(\w+)=(\d+)`", extract.split(";")[1]))
    for tag in ("DP", "TP", "EP", "PP", "ATTN_CP", "MOE_DP"):
        want = int(tags[tag]) if tag in tags else None
        assert getattr(rec, f"{tag.lower()}_rank") == want, tag
    it = re.search(r"iter=`(\d+)`", extract)
    assert rec.iteration == (int(it.group(1)) if it else None)
    mixed = re.search(r"mixed #running-req=`(\d+)`", extract)
    assert rec.mixed_running_req == (int(mixed.group(1)) if mixed else None)
    got = rec.to_json()
    for key, want in _extract_fields(extract).items():
        norm = normalise_key(key)
        if isinstance(want, str) and "full=" in want:  # 0.4.9 SWA: full pool is canonical
            parts = dict(p.split("=") for p in want.split(", "))
            canon = {"token": "tokens", "token_usage": "token_usage"}[norm]
            assert got[canon] == pytest.approx(float(parts["full"]))
            assert got[f"swa_{norm}"] == pytest.approx(float(parts["swa"]))
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
