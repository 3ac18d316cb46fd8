"""The summary fast path (specmon/parse/fastscan.py) against the general parser, field by field:
on every real log in tests/data and on generated logs of the real formats (issue 25)."""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kit.paths import ROOT, TESTS

import specmon.parse.fastscan as fastscan
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


# --- mutated real lines (issue 25: the fast path is exact by construction) --------------------

def _real_batch_lines() -> list[str]:
    """Every batch line of the real-format samples (tests/data), and the first lines of each
    long real log: the shapes the mutations start from."""
    out: list[str] = []
    for rel in ("sglang-samples.jsonl", "sglang-logs/real-sample.jsonl",
                "advisor/spec-fields.jsonl"):
        for x in (TESTS / "data" / rel).read_text().splitlines():
            line = json.loads(x).get("line", "") if x.strip() else ""
            if "batch" in line:
                out.append(line)
    for path in LONGLOGS:
        out += gzip.decompress(path.read_bytes()).decode().splitlines()[:12]
    return out


REAL = _real_batch_lines()
# Pieces a line may gain (after any ", "): spellings that normalise to the three keys the summary
# reads, duplicates, glued `k=v` parts, fragments, empty pieces, odd separators.
PIECES = [
    "x=y", "foo", "#running-req: 3", "accept len: 2.50", "gen throughput (token/s): 9.50",
    "Gen Throughput: 5", "gen_throughput: 5", "GEN THROUGHPUT (token/s): 5", "#running req: 3",
    "running-req: 4", "#Running-Req: 4", "accept-len: 1.5", "ACCEPT LEN: 2", "Accept len: 2",
    ".gen throughput: 5", ",gen throughput: 5", "# gen throughput: 5", "gen throughput(x): 5",
    "ge#n throughput: 5", " gen throughput: 5", "\tgen throughput: 5", "#accept len: 2",
    "gen throughput (token/s)  : 5", "full=3, swa=2", "est uncap acc len: 3.1 [2.0, 4.0]",
    "cuda graph: True", "5%", "x: y: z", "block accept len: 3.0", "", " ", "\t", "a=b: 5",
    "accept rate: 0.5", "#retracted-req: 1", "x: 1,2", "gen=throughput: 5", "running=req: 7",
    "cap len: nan", "9: 9", "_gen throughput: 5", "-accept len: 4", "accept len (x): 4",
]
# Values a field may be given instead of its own: shapes the general parser reads otherwise.
VALUES = ["nan", "inf", "-inf", "-5", "1e5", "1" * 25, "1.2.3", "", "5,x", "5 ", " 5", "\t5",
          "True", "False", "0x10", "007", "5%", "a=b", "1_000", "\u0663", "5.", ".5", "+5",
          "1e999", "999999999999", "3.0", "full=2, swa=1", "2 [1, 3]", "5\t", "0", "00"]
# Text a line may carry before its marker (rank tags, markers, keys the general parser skips).
PREFIXES = ["accept len: 2 ", "gen throughput (token/s): 7 ", "Prefill batch, ", "Decode batchy ",
            "Decode batch, #running-req: 1, ", "batch ", "#running-req: 9, ", "[x] "]
_KEYED = re.compile(r"(?:^|, )([^,:]*): ([^,]*)")


def _mutate(line: str, ops: list[tuple[int, int, int]]) -> str:
    """Applies each (kind, a, b): the choices index into the lists above, modulo their length."""
    for kind, a, b in ops:
        cuts = [m.end() for m in re.finditer(", ", line)] or [len(line)]
        at = cuts[a % len(cuts)]
        if kind == 0:  # a piece after some ", "
            line = f"{line[:at]}{PIECES[b % len(PIECES)]}, {line[at:]}"
        elif kind == 1:  # a piece at the end, with or without the trailing separator
            line = f"{line.rstrip(', ')}, {PIECES[b % len(PIECES)]}" + ", " * (a % 2)
        elif kind == 2:  # another value for some field
            fields = list(_KEYED.finditer(line))
            if fields:
                m = fields[a % len(fields)]
                line = line[:m.start(2)] + VALUES[b % len(VALUES)] + line[m.end(2):]
        elif kind == 3:  # one odd character anywhere (NUL, CR, tab, separators, key letters)
            pos = a % (len(line) + 1)
            line = line[:pos] + ",: =#%\t\r\x00.-aAgGrR(\u00e9\x0c"[b % 20] + line[pos:]
        elif kind == 4:  # text before the marker, or a second batch line on the same line
            mark = max(line.find("Decode batch"), line.find("Prefill batch"), 0)
            if b % 3:
                line = line[:mark] + PREFIXES[a % len(PREFIXES)] + line[mark:]
            else:
                line = line + " " + REAL[a % len(REAL)]
        elif kind == 5:  # a trailing separator the general parser strips
            line = line + [", ", ",", " ,", ", , ", " ", "\t", ",,"][b % 7]
        elif kind == 6:  # a piece dropped or repeated
            pieces = line.split(", ")
            i = a % len(pieces)
            pieces[i:i + 1] = [] if b % 2 else [pieces[i], pieces[i]]
            line = ", ".join(pieces)
        else:  # a key's case or separator changed
            fields = list(_KEYED.finditer(line))
            if fields:
                m = fields[a % len(fields)]
                key = [m.group(1).upper(), m.group(1).replace(" ", "_"),
                       m.group(1).replace("-", " "), m.group(1).title()][b % 4]
                line = line[:m.start(1)] + key + line[m.end(1):]
    return line


mutation = st.tuples(st.integers(0, 7), st.integers(0, 10_000), st.integers(0, 10_000))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, len(REAL) - 1), st.lists(mutation, max_size=3)),
                min_size=1, max_size=6))
def test_fast_summary_equals_general_on_mutated_real_lines(
        spec: list[tuple[int, list[tuple[int, int, int]]]]) -> None:
    """Real lines, some mutated, in one buffer: whatever the fast path reads (or declines) gives
    the summary the general parser gives, field by field."""
    lines = [_mutate(REAL[i], ops) for i, ops in spec]
    buf = ("\n".join(lines) + "\n").encode()
    assert_same(summarise_buffer(buf), summarise_general(buf))


@pytest.mark.parametrize("ops", [
    [(1, 0, PIECES.index("x=y"))],  # the glued piece of issue 25's report
    [(1, 0, PIECES.index("Gen Throughput: 5"))],
    [(1, 0, PIECES.index("gen_throughput: 5"))],
    [(1, 0, PIECES.index("#running req: 3"))],
    [(0, 1, PIECES.index("x=y"))],  # glued onto #running-req
    [(2, 0, VALUES.index("nan"))], [(2, 0, VALUES.index("1" * 25))],
    [(4, 0, 1)], [(4, 1, 0)],  # text before the marker; two batch lines on one line
])
def test_each_mutation_kind_keeps_the_summary_exact(ops: list[tuple[int, int, int]]) -> None:
    """Examples of the property above that the old fast path got wrong or that must stay
    covered (a failing example of the property test belongs here)."""
    for line in REAL:
        buf = ("\n".join([REAL[0], _mutate(line, ops), REAL[-1]]) + "\n").encode()
        assert_same(summarise_buffer(buf), summarise_general(buf))


def test_issue_25_glued_piece_is_not_read_as_the_value() -> None:
    line = (b"[2025-06-01 12:00:00 TP0] Decode batch, #running-req: 8, #token: 12345, "
            b"token usage: 0.05, gen throughput (token/s): 612.34, x=y\n")
    general = summarise_general(line * 3)
    assert general.throughput == {(False, 8, None): 3}  # the general parser reads no value
    assert_same(summarise_buffer(line * 3), general)


def test_the_fast_path_reads_every_real_line_unmutated() -> None:
    """The mutations above test something: unmutated, every real line is read by the scan."""
    buf = ("\n".join(REAL) + "\n").encode()
    assert scan_buffer(buf) is not None
    assert_same(summarise_buffer(buf), summarise_general(buf))


@pytest.mark.parametrize("value", ["nan", "1.2.3", "-1", "True", "1e3", "03.50"])
def test_an_accept_len_read_as_no_value_makes_no_speculative_line(value: str) -> None:
    """The scan reads such a line itself (per distinct line), as the general parser does: an
    unreadable or invalid accept len is no accept len; the line counts as a baseline one."""
    spec = [x for x in REAL if "accept len: " in x and "block" not in x][0]
    odd = re.sub(r"accept len: [^,]*", f"accept len: {value}", spec, count=1)
    buf = ("\n".join([spec, odd, REAL[0], odd]) + "\n").encode()
    assert scan_buffer(buf) is not None
    assert_same(summarise_buffer(buf), summarise_general(buf))


_NO_POSSESSIVE = re.compile(
    fastscan._BATCH.pattern.replace(b"*+", b"*").replace(b")?+", b")?"), re.M)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(REAL) - 1), st.lists(mutation, max_size=3)),
                min_size=1, max_size=6))
def test_the_possessive_repeats_change_no_match(
        spec: list[tuple[int, list[tuple[int, int, int]]]]) -> None:
    """Python 3.10 reads the batch pattern without its possessive repeats (3.11+ syntax): it
    must find the same matches, so the summary is the same on every Python."""
    assert (b"*+" in fastscan._BATCH.pattern) == (sys.version_info >= (3, 11))
    assert b"*+" not in _NO_POSSESSIVE.pattern and b")?+" not in _NO_POSSESSIVE.pattern
    buf = ("\n".join(_mutate(REAL[i], ops) for i, ops in spec) + "\n").encode()
    assert fastscan._BATCH.findall(buf) == _NO_POSSESSIVE.findall(buf)
