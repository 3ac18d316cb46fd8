"""`parse --json` over forked workers writes, row for row, what one process reading in order
writes: same rows, same line numbers, same counts, the same error at the same line; and a piece
with a vLLM line (whose records depend on the lines before it) is read in order."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from kit.paths import ROOT

from specmon.analysis import logfile
from specmon.analysis.logfile import _json_in_order, _json_plan, json_rows
from specmon.parse.vllm import MixedEngines

sys.path.insert(0, str(ROOT / "bench"))
from loggen import generate_lines  # noqa: E402

VLLM = ("INFO 06-01 12:00:09 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
        "Avg generation throughput: 120.5 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV "
        "cache usage: 0.1%, Prefix cache hit rate: 0.0%")


@pytest.fixture
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logfile, "JSON_PIECE", 64 << 10)  # many pieces from a small file
    monkeypatch.setattr(logfile, "_usable_cpus", lambda: 3)  # workers even on one CPU


def _both(path: Path, kind: str = "all") -> tuple[str, str, int, int]:
    """(rows of the parallel path, rows of one process, records of each)."""
    par = list(json_rows(str(path), kind))
    one = list(_json_in_order(str(path), kind, 0, 1, None))
    return (b"".join(r for r, _, _ in par).decode(), b"".join(r for r, _, _ in one).decode(),
            sum(n for _, n, _ in par), sum(n for _, n, _ in one))


def test_workers_write_what_one_process_writes(tmp_path: Path, small_pieces: None) -> None:
    lines = generate_lines(12_000)
    lines[777] = lines[777].replace("gen throughput (token/s): ", "gen throughput (token/s): nan, x")
    lines.append("[2025-06-01 12:00:00 TP0] Decode batch, #running-req: 3, #token: 9, token usage: "
                 "0.01, cuda graph: True, gen throughput (token/s): 77.5, #queue-req: 0")
    path = tmp_path / "s.log"
    path.write_text("\n".join(lines))  # the last line without its newline: still a line
    plan = _json_plan(str(path))
    assert plan is not None and len(plan[1]) > 10  # the parallel path is what is tested
    for kind in ("all", "decode"):
        par, one, n_par, n_one = _both(path, kind)
        assert par == one and n_par == n_one > 5_000
    assert f'"line_no":{len(lines)},' in par  # the last line, without its newline


def test_a_vllm_line_mid_file_is_read_in_order_with_the_same_error(tmp_path: Path,
                                                                    small_pieces: None) -> None:
    lines = generate_lines(12_000)
    lines[9_000] = VLLM
    path = tmp_path / "mixed.log"
    path.write_text("\n".join(lines) + "\n")
    assert _json_plan(str(path)) is not None  # workers start; the piece with the line falls back
    with pytest.raises(MixedEngines) as one:
        list(_json_in_order(str(path), "all", 0, 1, None))
    rows: list[bytes] = []
    with pytest.raises(MixedEngines) as par:
        for r, _, _ in json_rows(str(path), "all"):
            rows.append(r)
    assert str(par.value) == str(one.value) and "line 9001" in str(par.value)
    # every row before the mixed line was written, once, in order
    nums = [int(x.split('"line_no":')[1].split(",")[0]) for x in b"".join(rows).decode().splitlines()]
    assert nums == sorted(set(nums)) and nums[-1] < 9_001 and nums[-1] > 8_000


def test_files_that_need_order_are_read_in_order(tmp_path: Path, small_pieces: None) -> None:
    lines = generate_lines(3_000)
    cr = tmp_path / "cr.log"
    cr.write_text("\r".join(lines))  # CR-only line ends: counted line by line
    assert _json_plan(str(cr)) is None
    par, one, n_par, _ = _both(cr)
    assert par == one and n_par > 1_000


def test_a_log_field_named_file_or_line_no_does_not_replace_the_rows(tmp_path: Path) -> None:
    import json

    path = tmp_path / "f.log"
    path.write_text("[2025-06-01 12:00:00 TP0] Decode batch, #running-req: 1, #token: 9, "
                    "token usage: 0.01, gen throughput (token/s): 5.5, file: /etc/x, line no: 9\n")
    rows = [json.loads(x) for r, _, _ in json_rows(str(path), "all") for x in r.splitlines()]
    assert [(r["file"], r["line_no"], r["gen_throughput"]) for r in rows] == [(str(path), 1, 5.5)]
