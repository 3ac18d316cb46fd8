"""Work per line of the summary path, counted (not timed), against a budget (issue 25).

A wall-time check flakes on a shared machine; these counts do not: they depend only on the
bytes of the log. Three counts, per line of a log of the real formats:

* regex match attempts: every compiled pattern of fastscan.py and logfile.py is wrapped; a call
  counts the start positions the regex engine (sre) tries. With a literal prefix, sre jumps
  from one occurrence of it to the next, so that is one attempt per occurrence; without one
  (a lookbehind, a class or an anchor first) it tries every byte of the range;
* bytes scanned, as passes over the buffer: the ranges of the regex calls plus those of the
  buffer's own count/find/rfind/`in` (the log is a bytes subclass that adds them up);
* Python lines executed in specmon code (sys.settrace): per-line Python shows up here.

Issue 25's regression was `(?<!block )accept len` (a lookbehind first): the batch pattern with
such a lookbehind in front costs ~160 attempts per line and fails the first budget;
test_the_budget_catches_a_lookbehind_first shows that. The general parser (a scan that
declines) runs ~250 Python lines per log line.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from kit.paths import ROOT

import specmon.analysis.logfile as logfile
import specmon.parse.fastscan as fastscan
from specmon.analysis.logfile import summarise_general

sys.path.insert(0, str(ROOT / "bench"))
from loggen import generate_lines  # noqa: E402

MAX_ATTEMPTS_PER_LINE = 3.0  # now 1.07: "batch", one per distinct value
MAX_PASSES = 11.0  # now 10.0: the run cut's CR and server_args= searches, NUL and CR checks,
# line count, 3 vLLM marker searches, batch, decode marker count
MAX_PY_LINES_PER_LINE = 0.1  # now 0.01: per chunk (the time span's two lines), not per line
# The shape that made `specmon parse` 2.4x slower (main before issue 25).
LOOKBEHIND_FIRST = rb"(?<!block )accept len: ([\d.]+)(?=,|[ \t\r]*$)"


def literal_prefix(pattern: re.Pattern[bytes]) -> bytes:
    """The literal prefix sre searches for (re._compiler, the compiler's own helper)."""
    from re import _compiler, _parser  # type: ignore[attr-defined]

    parsed = _parser.parse(pattern.pattern, pattern.flags)
    prefix, _skip, _all = _compiler._get_literal_prefix(parsed, pattern.flags)
    return bytes(prefix)


class Meter:
    """What one summary costs: regex attempts, bytes scanned, Python lines run."""

    def __init__(self) -> None:
        self.attempts = 0
        self.scanned = 0
        self.py_lines = 0
        self.calls: list[tuple[str, int, int]] = []  # (pattern, range, attempts)

    def regex(self, pattern: re.Pattern[bytes], buf: bytes, pos: int, endpos: int) -> None:
        prefix = literal_prefix(pattern)
        region = bytes.__len__(buf) if endpos is None else min(endpos, bytes.__len__(buf))
        n = region - pos
        tries = bytes.count(buf, prefix, pos, region) if prefix else n
        self.attempts += tries
        self.scanned += n
        self.calls.append((pattern.pattern.decode()[:40], n, tries))


class CountingPattern:
    """A compiled pattern that reports each call to the meter, then does the real work."""

    def __init__(self, pattern: re.Pattern[bytes], meter: Meter) -> None:
        self._p, self._m = pattern, meter
        self.pattern, self.flags = pattern.pattern, pattern.flags

    def _wrap(self, name: str) -> Callable[..., Any]:
        def call(buf: bytes, pos: int = 0, endpos: int = sys.maxsize) -> Any:
            self._m.regex(self._p, buf, pos, endpos)
            return getattr(self._p, name)(buf, pos, endpos)
        return call

    def __getattr__(self, name: str) -> Any:
        if name in ("findall", "finditer", "search", "match", "fullmatch"):
            return self._wrap(name)
        raise AttributeError(f"{name}: not metered; add it to CountingPattern")


def tracked(meter: Meter) -> type[bytes]:
    class Tracked(bytes):
        """The log buffer: its scans add their ranges to the meter."""

        def _range(self, start: int | None, end: int | None) -> int:
            s, e, _ = slice(start, end).indices(len(self))
            return max(0, e - s)

        def count(self, sub: Any, start: Any = None, end: Any = None) -> int:  # type: ignore[override]
            meter.scanned += self._range(start, end)
            return bytes.count(self, sub, start, end)

        def find(self, sub: Any, start: Any = None, end: Any = None) -> int:  # type: ignore[override]
            hit = bytes.find(self, sub, start, end)
            s, e, _ = slice(start, end).indices(len(self))
            meter.scanned += (hit + len(sub) if hit >= 0 else e) - s
            return hit

        def rfind(self, sub: Any, start: Any = None, end: Any = None) -> int:  # type: ignore[override]
            hit = bytes.rfind(self, sub, start, end)
            s, e, _ = slice(start, end).indices(len(self))
            meter.scanned += e - (hit if hit >= 0 else s)
            return hit

        def __contains__(self, sub: Any) -> bool:
            meter.scanned += len(self)
            return bytes.__contains__(self, sub)

    return Tracked


def metered(monkeypatch: pytest.MonkeyPatch, meter: Meter) -> None:
    """Wrap every compiled pattern of the summary path's modules (new ones too)."""
    for module in (fastscan, logfile):
        for name, value in list(vars(module).items()):
            if isinstance(value, re.Pattern):
                monkeypatch.setattr(module, name, CountingPattern(value, meter))
            elif isinstance(value, tuple | list) and any(isinstance(v, re.Pattern) for v in value):
                monkeypatch.setattr(module, name, type(value)(
                    CountingPattern(v, meter) if isinstance(v, re.Pattern) else v for v in value))


def run_metered(buf: bytes, meter: Meter) -> Any:
    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        if "specmon" not in frame.f_code.co_filename:
            return None
        if event == "line":
            meter.py_lines += 1
        return tracer

    cutter = logfile._Cutter("log")  # `specmon parse`'s step per chunk: its run cut, then the scan
    sys.settrace(tracer)
    try:
        cutter.chunk(tracked(meter)(buf), len(buf))
    finally:
        sys.settrace(None)
    assert not cutter.cuts  # (no server_args line: one piece, all of it metered)
    return cutter.open


def real_format_log(data_dir: Path) -> bytes:
    """Generated lines of the real formats, and the real sample lines (tests/data) among them."""
    rows = [json.loads(x) for x in (data_dir / "sglang-samples.jsonl").read_text().splitlines()
            if x.strip()]
    real = [r["line"] for r in rows if "batch" in r.get("line", "")]
    gen = generate_lines(30_000, seed=2)
    return ("\n".join(gen[:15_000] + real * 20 + gen[15_000:]) + "\n").encode()


def per_line(meter: Meter, buf: bytes) -> tuple[float, float, float]:
    lines = buf.count(b"\n")
    return meter.attempts / lines, meter.scanned / len(buf), meter.py_lines / lines


def test_summary_work_per_line_is_within_budget(data_dir: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    buf = real_format_log(data_dir)
    meter = Meter()
    metered(monkeypatch, meter)
    summary = run_metered(buf, meter)
    monkeypatch.undo()
    assert summary.comparable() == summarise_general(buf).comparable()
    attempts, passes, py = per_line(meter, buf)
    detail = f"regex calls (pattern, bytes, attempts): {meter.calls}"
    assert attempts <= MAX_ATTEMPTS_PER_LINE, f"{attempts:.2f} regex attempts per line; {detail}"
    assert passes <= MAX_PASSES, f"{passes:.2f} passes over the buffer; {detail}"
    assert py <= MAX_PY_LINES_PER_LINE, f"{py:.3f} Python lines per log line"
    assert attempts > 0.5 and passes >= 2  # the meter saw the scan (the check can fail)


def test_the_budget_catches_a_lookbehind_first(data_dir: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The same scan with a lookbehind first (the shape of issue 25's accept len pattern) is
    over budget, by far."""
    buf = real_format_log(data_dir)
    monkeypatch.setattr(fastscan, "_BATCH", re.compile(rb"(?<!block )" + fastscan._BATCH.pattern,
                                                       re.M))
    meter = Meter()
    metered(monkeypatch, meter)
    run_metered(buf, meter)
    attempts, _, _ = per_line(meter, buf)
    assert attempts > 20 * MAX_ATTEMPTS_PER_LINE


def test_the_budget_catches_per_line_python(data_dir: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A scan that gives up (every line through parse_line) is over the Python budget."""
    buf = real_format_log(data_dir)[:400_000]
    buf = buf[: buf.rfind(b"\n") + 1]
    monkeypatch.setattr(logfile, "scan_buffer", lambda b, end=None: None)
    meter = Meter()
    run_metered(buf, meter)
    assert per_line(meter, buf)[2] > 20 * MAX_PY_LINES_PER_LINE


def test_literal_prefix_reads_what_sre_searches_for() -> None:
    assert literal_prefix(re.compile(rb"batch(?:(?<=Decode batch))")) == b"batch"
    assert literal_prefix(re.compile(LOOKBEHIND_FIRST)) == b""
    assert literal_prefix(re.compile(rb"[ab]c")) == b""
