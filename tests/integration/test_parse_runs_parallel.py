"""`specmon parse` of a plain log with several server runs cuts the file at its server_args lines
and summarises the pieces at once (forked workers on a large file): every run, its args, start
and summary are what the in-order read (`iter_runs`, one line at a time) gives; files that must
be read in order (CRs, gzip) are."""

from __future__ import annotations

import gzip
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kit.paths import ROOT

from specmon.analysis import logfile
from specmon.analysis.logfile import open_input, read_lines, run_segments
from specmon.analysis.logsummary import LogSummary
from specmon.cli import main
from specmon.commands import parse as parse_cmd
from specmon.commands.parse import RunPart, iter_runs, runs_of_segments

sys.path.insert(0, str(ROOT / "bench"))
from loggen import generate_lines  # noqa: E402

ARGS = ("[2026-02-26 19:16:{s:02d}] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', tp_size={tp}, "
        "port=30000)")
# the parser reads this as a server_args line too (both paths must agree on what starts a run)
QUOTED = "[2026-02-26 19:16:41] INFO: a request that quotes server_args=ServerArgs(tp_size=9) as text"
# a line with the mark that is no server_args record: cut there, no run starts
NO_RUN = ("[2026-02-26 19:16:41] Decode batch, #running-req: 1, #token: 9, token usage: 0.01, "
          "gen throughput (token/s): 5.5, #queue-req: 0, server_args=3")


def _view(parts: list[RunPart]) -> list[tuple[object, ...]]:
    return [(p.index, p.args, p.has_args, p.start, p.summary.comparable()) for p in parts]


def _in_order(path: Path) -> list[RunPart]:
    fh = open_input(str(path))
    try:
        return list(iter_runs(read_lines(fh, str(path))))
    finally:
        fh.close()


def _log(seed: int) -> list[str]:
    """Real-format lines with runs: start-up lines before the first server_args, two server_args
    lines in a row (one run), the mark in free text and in a batch line, runs of any length."""
    rnd = random.Random(seed)
    lines = generate_lines(6_000)
    out: list[str] = lines[:rnd.randrange(0, 50)]
    for i, line in enumerate(lines[len(out):]):
        if rnd.random() < 0.002:
            out.append(ARGS.format(s=i % 60, tp=rnd.choice((1, 2, 4))))
            if rnd.random() < 0.3:
                out.append(ARGS.format(s=i % 60, tp=8))  # before any batch line: the same run
        if rnd.random() < 0.002:
            out.append(rnd.choice((QUOTED, NO_RUN)))
        out.append(line)
    return out


@pytest.fixture
def workers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logfile, "PARALLEL_MIN", 1 << 16)  # workers on a small file
    monkeypatch.setattr(logfile, "_usable_cpus", lambda: 3)  # even on one CPU


@pytest.mark.parametrize("seed", range(6))
def test_runs_summarised_at_once_are_the_runs_read_in_order(tmp_path: Path, workers: None,
                                                            seed: int) -> None:
    lines = _log(seed)
    path = tmp_path / "runs.log"
    path.write_text("\n".join(lines) + ("\n" if seed % 2 else ""))  # odd: the last line ends
    segments = run_segments(str(path))
    assert segments is not None and len(segments) > 3  # the cut path is what is tested
    fast = list(runs_of_segments(segments))
    assert _view(fast) == _view(_in_order(path))
    assert len(fast) >= 3 and sum(p.summary.lines for p in fast) == len(lines)


def test_a_server_args_line_as_the_streaming_read_cuts_it(tmp_path: Path) -> None:
    """A line longer than MAX_LINE: a mark within its first MAX_LINE bytes starts a run, one
    past them is cut away (as the in-order read sees it); the first line's mark starts run 1."""
    long_args = ARGS.format(s=1, tp=2)[:-1] + ", note='" + "x" * logfile.MAX_LINE + "')"
    hidden = "[2026-02-26 19:16:02] " + "y" * logfile.MAX_LINE + " " + ARGS.format(s=2, tp=4)
    body = generate_lines(400)
    path = tmp_path / "long.log"
    path.write_text("\n".join([ARGS.format(s=0, tp=1), *body, long_args, *body, hidden, *body])
                    + "\n")
    segments = run_segments(str(path))
    assert segments is not None
    fast = list(runs_of_segments(segments))
    assert _view(fast) == _view(_in_order(path))
    assert [p.args.get("tp_size") for p in fast] == [1, 2]  # the cut mark starts no run


@pytest.mark.parametrize("kind", ["cr", "gzip", "heads"])
def test_files_that_need_order_are_read_in_order(tmp_path: Path, kind: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    text = "\n".join(_log(1)) + "\n"
    path = tmp_path / "x.log"
    if kind == "cr":
        path.write_text(text.replace("\n", "\r"))  # CR-only line ends
    elif kind == "gzip":
        path.write_bytes(gzip.compress(text.encode()))
    else:  # the marked lines are held while the pieces are read: bounded
        monkeypatch.setattr(logfile, "MAX_HEAD_BYTES", 200)
        path.write_text(text)
    assert run_segments(str(path)) is None
    assert len(_in_order(path)) >= 3  # (and the in-order read still finds the runs)


def test_marks_the_in_order_read_cuts_away_are_passed_over_line_by_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """30,000 marks past the first MAX_LINE bytes of one line: the first one is seen to be cut
    away and the rest of its line is skipped at once (a look back per mark read 30 GB); no run
    starts there, as in the in-order read."""
    looked: list[int] = []
    line_start = logfile._line_start

    def counted(fh: Any, pos: int, floor: int) -> int | None:
        looked.append(pos)
        return line_start(fh, pos, floor)

    monkeypatch.setattr(logfile, "_line_start", counted)
    junk = "[2026-02-26 19:16:02] " + "y" * logfile.MAX_LINE + " server_args=x," * 30_000
    body = generate_lines(300)
    path = tmp_path / "marks.log"
    path.write_text("\n".join([ARGS.format(s=0, tp=1), *body, junk, *body,
                               ARGS.format(s=3, tp=2), *body]) + "\n")
    segments = run_segments(str(path))
    assert segments is not None and len(segments) == 3  # (None), the first run, the second
    fast = list(runs_of_segments(segments))
    assert _view(fast) == _view(_in_order(path))
    assert [p.args.get("tp_size") for p in fast] == [1, 2]
    assert len(looked) == 3  # the two runs' lines and the first mark of the long line


def test_stopped_while_summarising_no_worker_outlives_it(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C (or SIGTERM, raised the same way by the CLI) while this process does its share:
    the forked workers, busy with theirs, are stopped and reaped before the error goes on."""
    parent = os.getpid()
    real = logfile._summarise_file

    def share(name: str, start: int, end: int) -> LogSummary:
        if os.getpid() == parent:
            raise KeyboardInterrupt
        time.sleep(60)  # a worker still busy
        return real(name, start, end)

    forked: list[int] = []
    fork = os.fork

    def noted() -> int:
        pid = fork()
        if pid:
            forked.append(pid)
        return pid

    path = tmp_path / "s.log"
    path.write_text("\n".join(generate_lines(3_000)) + "\n")
    monkeypatch.setattr(logfile, "_summarise_file", share)
    monkeypatch.setattr(os, "fork", noted)
    size = path.stat().st_size
    with pytest.raises(KeyboardInterrupt):
        logfile._summarise_ranges(str(path), [0, size // 3, size * 2 // 3, size], 3)
    assert len(forked) == 2  # (what is checked: workers were busy when it stopped)
    assert not [p for p in forked if Path(f"/proc/{p}").exists()]  # none running, no zombie


VLLM = ("INFO 06-01 12:00:09 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
        "Avg generation throughput: 120.5 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV "
        "cache usage: 0.1%, Prefix cache hit rate: 0.0%")


def test_an_error_in_a_later_run_comes_after_the_runs_before_it(
        tmp_path: Path, workers: None, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Run 2 mixes vLLM and SGLang stats lines: the first run's summary is printed, then the
    error, exactly as the in-order read prints them (the cut path found it first: it gives
    way to the in-order read)."""
    body = generate_lines(3_000)
    path = tmp_path / "mixed.log"
    path.write_text("\n".join([ARGS.format(s=0, tp=1), *body, ARGS.format(s=1, tp=2),
                               *body[:1_500], VLLM, *body[1_500:]]) + "\n")
    assert main(["parse", str(path)]) == 2
    cut = capsys.readouterr()
    monkeypatch.setattr(parse_cmd, "run_segments", lambda name: None)  # the in-order read
    assert main(["parse", str(path)]) == 2
    in_order = capsys.readouterr()
    assert (cut.out, cut.err) == (in_order.out, in_order.err)
    assert "lines read: 3,001" in cut.out and "mixes engines" in cut.err  # run 1, then why


@pytest.mark.parametrize("runs", [1, 4])
def test_a_plain_file_is_read_once_cut_as_it_is_summarised(
        tmp_path: Path, workers: None, runs: int, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No search of the whole file for its marks (and its CRs) before summarising it: the
    chunks already read are searched (a search first read a 1M-line log twice: ~0.1 s of its
    ~1 s parse, 0.2 s with runs, issue 25); what is printed is the in-order read's."""
    body = generate_lines(4_000)
    lines = [ARGS.format(s=0, tp=1)]
    for r in range(1, runs):
        lines += body[:1_000 * r] + [ARGS.format(s=r, tp=2 * r)]
    lines += body
    path = tmp_path / "runs.log"
    path.write_text("\n".join(lines) + "\n")
    searched: list[bytes] = []
    real = logfile.find_all

    def spy(fh: Any, needle: bytes, *a: Any, **k: Any) -> list[int]:
        searched.append(needle)
        return real(fh, needle, *a, **k)

    monkeypatch.setattr(logfile, "find_all", spy)
    monkeypatch.setattr(parse_cmd, "find_all", spy, raising=False)
    assert main(["parse", str(path)]) == 0
    cut = capsys.readouterr()
    assert searched == []
    monkeypatch.setattr(parse_cmd, "run_segments", lambda name: None)  # the in-order read
    assert main(["parse", str(path)]) == 0
    assert capsys.readouterr() == cut
    assert cut.out.count("==== run ") == (runs if runs > 1 else 0)


@pytest.mark.parametrize("end", ["\n", ""])
def test_a_server_args_line_at_the_end_of_the_file(tmp_path: Path, workers: None,
                                                    end: str) -> None:
    """The last line holds the mark, with or without its newline: a run of its own (with no
    lines yet), as the in-order read gives it."""
    body = generate_lines(3_000)
    path = tmp_path / "tail.log"
    path.write_text("\n".join([ARGS.format(s=0, tp=1), *body, ARGS.format(s=9, tp=4)]) + end)
    segments = run_segments(str(path))
    assert segments is not None and len(segments) == 3
    fast = list(runs_of_segments(segments))
    assert _view(fast) == _view(_in_order(path))
    assert [p.args.get("tp_size") for p in fast] == [1, 4]


@pytest.mark.parametrize("past", [-1, 0, 1])
def test_a_mark_that_ends_at_max_line_starts_a_run_as_in_order(tmp_path: Path, past: int) -> None:
    """A line longer than MAX_LINE whose mark ends exactly at its MAX_LINE-th byte: the in-order
    read keeps the whole mark (a run starts there); one byte further on it is cut away. The
    look back from the mark stopped one byte short of the newline before the line."""
    head = "[2026-02-26 19:16:02] "
    pad = logfile.MAX_LINE - len(head) - len("server_args=") + past
    long_args = head + "y" * pad + "server_args=ServerArgs(tp_size=4)" + "z" * 100
    body = generate_lines(400)
    path = tmp_path / "edge.log"
    path.write_text("\n".join([ARGS.format(s=0, tp=1), *body, long_args, *body]) + "\n")
    segments = run_segments(str(path))
    assert segments is not None
    fast = list(runs_of_segments(segments))
    assert _view(fast) == _view(_in_order(path))
    assert len(fast) == (2 if past <= 0 else 1)


@pytest.mark.parametrize("at", [0, 1000, 300_000])
def test_a_long_line_ending_in_the_next_block_is_cut_as_in_order(tmp_path: Path, at: int) -> None:
    """A batch line a little longer than MAX_LINE (READ) whose gen throughput lies past its
    MAX_LINE-th byte: it never stood open past MAX_LINE at a block's end, and was summarised
    whole (its throughput read) where the in-order read cuts it (no throughput)."""
    line = ("[2026-11-01 00:00:01] Decode batch, #running-req: 4, #token: 9, token usage: 0.01, "
            "note: " + "z" * logfile.MAX_LINE + ", gen throughput (token/s): 123.45, #queue-req: 0")
    text = "\n".join(generate_lines(4_000)) + "\n"
    cut = text.index("\n", at) + 1 if at else 0
    path = tmp_path / "long.log"
    path.write_text(ARGS.format(s=0, tp=1) + "\n" + text[:cut] + line + "\n" + text[cut:])
    segments = run_segments(str(path))
    assert segments is not None
    fast = list(runs_of_segments(segments))
    assert _view(fast) == _view(_in_order(path))
    assert fast[0].summary.throughput[(False, 4, None)] == 1  # (the cut line: unreadable)


def test_the_held_run_lines_stay_within_the_file_limit_over_all_workers(
        tmp_path: Path, workers: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each of the 3 workers may hold a third of MAX_HEAD_BYTES of server_args lines: the
    parent never holds more than the file's limit (each held it all: 3x), and past it the
    searched cut decides (the file is read in order)."""
    lines: list[str] = []
    for i, line in enumerate(generate_lines(6_000)):
        if i % 200 == 0:
            lines.append(ARGS.format(s=i % 60, tp=1))
        lines.append(line)
    path = tmp_path / "heads.log"
    path.write_text("\n".join(lines) + "\n")
    per_line = len(ARGS.format(s=0, tp=1)) + 1
    monkeypatch.setattr(logfile, "MAX_HEAD_BYTES", 20 * per_line)  # 30 lines, ~10 a worker
    held: list[int] = []
    real = logfile._summarise_ranges

    def ranges(*a: Any, **k: Any) -> list[Any]:
        parts = real(*a, **k)
        held.append(sum(len(h) for _, cuts in parts for h, _ in cuts))
        return parts

    monkeypatch.setattr(logfile, "_summarise_ranges", ranges)
    assert run_segments(str(path)) is None
    assert all(h <= logfile.MAX_HEAD_BYTES for h in held), held
    monkeypatch.setattr(logfile, "MAX_HEAD_BYTES", 64 * per_line)  # within: cut at once
    held.clear()
    segments = run_segments(str(path))
    assert segments is not None and len(segments) == 31 and held == [30 * per_line]


def test_each_piece_is_named_by_its_file(tmp_path: Path) -> None:
    """A piece's name is what a mixed-engines error between two pieces names (it said `log`)."""
    body = generate_lines(2_000)
    path = tmp_path / "named.log"
    path.write_text("\n".join([*body, ARGS.format(s=0, tp=1), *body]) + "\n")
    first, cuts = logfile._cut_file(str(path), 0, path.stat().st_size)
    assert len(cuts) == 1 and first.recognised and cuts[0][1].recognised
    assert {first.name, cuts[0][1].name} == {str(path)}
