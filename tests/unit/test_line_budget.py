"""Work per line of the two paths that parse every line (`parse --json`, the live feed), counted
as Python lines run in specmon code (sys.settrace), against a budget (issue 25).

The summary path has its own budget (test_parse_budget.py); these two parse each line, so their
cost is Python per line, and the regressions that hurt them are a line shape that falls off the
one-match known path (the general key loop runs ~4x the Python lines) or per-line Python loops
in the session. A count depends only on the lines, so it cannot flake on a busy machine.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from test_parse_budget import real_format_log

import specmon.parse.sglang as sglang
from specmon.analysis.logfile import json_rows
from specmon.parse.sglang import BatchRecord, parse_known, parse_line
from specmon.session.events import LineItem
from specmon.session.fleet import FleetSession

# on `sample`; the general key loop for every line: 302 and 337
MAX_JSON_PY_LINES_PER_LINE = 125  # now 117 (98 before rows off the known path were redacted)
MAX_LIVE_PY_LINES_PER_LINE = 170  # now 133: parse_known, then the session's apply
BATCH = 512  # lines per `FleetSession.lines` call (the pump's MAX_BATCH order)


def sample(data_dir: Path) -> list[bytes]:
    """4,000 lines of the real formats, the real sample lines among them (a tracer makes
    Python ~10x slower: the whole 30k-line log would take a minute here)."""
    return real_format_log(data_dir).splitlines(keepends=True)[13_000:17_000]


def py_lines(fn: Callable[[], Any]) -> tuple[int, Any]:
    """(Python lines run in specmon code while fn runs, fn's result)."""
    n = 0

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal n
        if "specmon" not in frame.f_code.co_filename:
            return None
        if event == "line":
            n += 1
        return tracer

    sys.settrace(tracer)
    try:
        out = fn()
    finally:
        sys.settrace(None)
    return n, out


def json_per_line(path: Path) -> tuple[float, bytes]:
    """Python lines per log line of `parse --json` on FILE (a small file: read in order, in
    this process), and its rows."""
    lines = path.read_bytes().count(b"\n")
    n, rows = py_lines(lambda: b"".join(r for r, _, _ in json_rows(str(path), "all")))
    return n / lines, rows


def live_per_line(texts: list[str]) -> tuple[float, FleetSession]:
    """Python lines per log line from a received line to the session's state: the pump's
    `parse_known` and the one feed event that applies lines (`FleetSession.lines`)."""
    fleet = FleetSession(["h"], clock=lambda: 1e9)
    fleet.declare_server("h", "s", None, "/s.log")

    def feed() -> None:
        for i in range(0, len(texts), BATCH):
            items = [LineItem(x, parse_known(x)[0], 1e9 + i + j)
                     for j, x in enumerate(texts[i:i + BATCH])]
            fleet.lines("h", "s", items)

    n, _ = py_lines(feed)
    return n / len(texts), fleet


@pytest.fixture()
def log_file(data_dir: Path, tmp_path: Path) -> Path:
    path = tmp_path / "real-formats.log"
    path.write_bytes(b"".join(sample(data_dir)))
    return path


def test_json_work_per_line_is_within_budget(log_file: Path) -> None:
    per_line, rows = json_per_line(log_file)
    records = [r for r in map(parse_line, log_file.read_bytes().splitlines()) if r is not None]
    assert rows.count(b"\n") == len(records) > 2_000  # a row per record: the path ran whole
    assert per_line <= MAX_JSON_PY_LINES_PER_LINE, f"{per_line:.1f} Python lines per log line"
    assert per_line > 10  # the tracer saw the parse (the check can fail)


def test_the_json_budget_catches_lines_off_the_known_path(log_file: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Every line through the general key loop (a known shape that stopped matching)."""
    monkeypatch.setattr(sglang, "_known_line", lambda text: None)
    per_line, _ = json_per_line(log_file)
    assert per_line > 2 * MAX_JSON_PY_LINES_PER_LINE


def test_live_work_per_line_is_within_budget(data_dir: Path) -> None:
    texts = [x.decode().rstrip("\n") for x in sample(data_dir)]
    per_line, fleet = live_per_line(texts)
    decode = [r for r in map(parse_line, texts) if isinstance(r, BatchRecord) and r.kind == "decode"]
    assert fleet.server("h", "s").decode_total == len(decode) > 2_000  # every line applied
    assert per_line <= MAX_LIVE_PY_LINES_PER_LINE, f"{per_line:.1f} Python lines per log line"
    assert per_line > 20


def test_the_live_budget_catches_lines_off_the_known_path(data_dir: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sglang, "_known_line", lambda text: None)
    per_line, _ = live_per_line([x.decode().rstrip("\n") for x in sample(data_dir)])
    assert per_line > MAX_LIVE_PY_LINES_PER_LINE * 1.5
