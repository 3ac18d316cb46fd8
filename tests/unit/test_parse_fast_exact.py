"""The summary fast path (specmon/parse/fastscan.py) against the general parser, field by field:
on every real log in tests/data and on generated logs of the real formats (issue 25)."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest
from kit.paths import ROOT, TESTS

from specmon.analysis.logfile import summarise, summarise_buffer, summarise_general
from specmon.analysis.logsummary import LogSummary
from specmon.parse.fastscan import scan_buffer

sys.path.insert(0, str(ROOT / "bench"))
from loggen import generate_lines  # noqa: E402

FIELDS = ("lines", "decode", "prefill", "throughput", "accept", "first_time", "last_time",
          "invalid")
LONGLOGS = sorted((TESTS / "data/sglang-longlogs").glob("*.log.gz"))


def assert_same(fast: LogSummary, general: LogSummary) -> None:
    """Every field the summary prints, one by one, so a failure names the field."""
    assert len(FIELDS) == len(general.comparable())
    for name, a, b in zip(FIELDS, fast.comparable(), general.comparable(), strict=True):
        assert a == b, f"{name}: fast {str(a)[:200]} != general {str(b)[:200]}"


@pytest.mark.parametrize("path", LONGLOGS, ids=lambda p: p.name)
def test_fast_summary_equals_general_on_each_real_long_log(path: Path) -> None:
    buf = gzip.decompress(path.read_bytes())
    buf = buf if buf.endswith(b"\n") else buf + b"\n"
    assert scan_buffer(buf) is not None, "the fast path declined a real log"
    fast, general = summarise_buffer(buf), summarise_general(buf)
    assert general.decode > 200  # the log holds what the comparison is about
    assert_same(fast, general)


def test_fast_summary_equals_general_on_the_real_sample_lines(data_dir: Path) -> None:
    rows = [json.loads(x) for x in (data_dir / "sglang-samples.jsonl").read_text().splitlines()
            if x.strip()]
    lines = [r["line"] for r in rows if "batch" in r.get("line", "")]
    buf = ("\n".join(lines * 3) + "\n").encode()
    fast, general = summarise_buffer(buf), summarise_general(buf)
    assert general.decode >= 20 and general.accept
    assert_same(fast, general)


@pytest.mark.parametrize("seed", [3, 17])
def test_fast_summary_equals_general_on_generated_logs(seed: int, tmp_path: Path) -> None:
    text = "\n".join(generate_lines(40_000, seed=seed)) + "\n"
    buf = text.encode()
    assert scan_buffer(buf) is not None
    general = summarise_general(buf)
    assert general.decode > 20_000 and len(general.groups()) == 2  # baseline and speculative
    assert_same(summarise_buffer(buf), general)
    p = tmp_path / "gen.log"
    p.write_bytes(buf)
    assert_same(summarise(str(p)), general)  # the file path: chunks, edge times, merges


def test_a_chunk_scanned_in_place_equals_its_copy() -> None:
    buf = ("\n".join(generate_lines(3_000, seed=5)) + "\n").encode()
    end = buf.index(b"\n", len(buf) // 2) + 1
    assert_same(summarise_buffer(buf + b"[x] Decode batch, half a line", end=end),
                summarise_general(buf[:end]))


@pytest.mark.parametrize("line", [
    # a second gen throughput after the first: the general parser keeps the last one
    "[2026-01-01 00:00:01] Decode batch, #running-req: 1, #token: 5, token usage: 0.00, "
    "gen throughput (token/s): 50.00, #queue-req: 0, gen throughput (token/s): 7.00",
    # a second #running-req or accept len at the end, a NUL inside a marker
    "[2026-01-01 00:00:01] Decode batch, #running-req: 1, #token: 5, token usage: 0.00, "
    "gen throughput (token/s): 50.00, #queue-req: 0, #running-req: 9",
    "[2026-01-01 00:00:01] Decode batch, #running-req: 1, #token: 5, token usage: 0.00, "
    "accept len: 2.00, gen throughput (token/s): 50.00, #queue-req: 0, accept len: 3.00",
    "[2026-01-01 00:00:01] Decode ba\x00tch, #running-req: 1, #token: 5, token usage: 0.00, "
    "gen throughput (token/s): 50.00",
    # a value that only looks separated: the general parser reads "50.00,x" as no number
    "[2026-01-01 00:00:01] Decode batch, #running-req: 1, #token: 5, token usage: 0.00, "
    "gen throughput (token/s): 50.00,x: 1",
    # a prefill marker before a decode one: the line is a decode line
    "[2026-01-01 00:00:01] Prefill batch, #new-seq: 1, then Decode batch, #running-req: 2, "
    "#token: 5, token usage: 0.00, gen throughput (token/s): 60.00",
])
def test_lines_the_fast_path_must_not_misread(line: str) -> None:
    good = [g for g in generate_lines(500, seed=9)]
    buf = ("\n".join(good[:250] + [line] + good[250:]) + "\n").encode()
    assert_same(summarise_buffer(buf), summarise_general(buf))


def test_a_line_past_max_line_is_cut_alike_on_every_path(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Files are read a chunk at a time and scanned in place; a line longer than MAX_LINE still
    reaches the summary cut (its gen throughput lost), as on the streaming path (stdin, .gz)."""
    import io

    import specmon.analysis.logfile as logfile

    lines = generate_lines(4_000, seed=4)
    giant = ("[2026-11-01 00:00:00] Decode batch, #running-req: 1, #token: 5, token usage: 0.00, "
             "x: " + "y" * (3 * logfile.MAX_LINE) + ", gen throughput (token/s): 50.00")
    data = ("\n".join(lines[:2_000] + [giant] + lines[2_000:]) + "\n").encode()
    p = tmp_path / "giant.log"
    p.write_bytes(data)
    streamed = logfile._summarise_stream(io.BufferedReader(io.BytesIO(data)), "-")  # type: ignore[arg-type]
    assert streamed.throughput[(False, 1, None)] == 1  # the cut line: no gen throughput
    assert_same(logfile.summarise(str(p)), streamed)
    monkeypatch.setattr(logfile, "CHUNK", 1 << 20)  # the long line straddles chunks
    assert_same(logfile.summarise(str(p)), streamed)
    monkeypatch.setattr(logfile, "PARALLEL_MIN", 1)
    monkeypatch.setattr(logfile, "_usable_cpus", lambda: 3)
    assert_same(logfile.summarise(str(p)), streamed)
