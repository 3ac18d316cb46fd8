"""`record` told to stop writes every line it had already received (issue 22: the lines waiting
between the agent and the writer were dropped at SIGTERM or --duration)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncGenerator
from pathlib import Path

import pytest

from specmon.commands import record
from specmon.commands.hostargs import HostPlan
from specmon.commands.record import RecordOut, record_fleet
from specmon.hosts.local import LocalHost
from specmon.sources import tail
from specmon.sources.tail import LogLine, TailEvent, TailSpec

LINE = ("[2025-06-01 12:00:00 TP0] Decode batch, #running-req: 8, #token: 12345, token usage: "
        "0.05, cuda graph: True, gen throughput (token/s): 61.3, #queue-req: 0, n=%07d\n")


@pytest.mark.parametrize(("drain_s", "drop"), [(60.0, False), (0.0, False), (60.0, True)])
async def test_stop_writes_every_line_already_received(tmp_path: Path, monkeypatch, capsys,
                                                       drain_s: float, drop: bool) -> None:
    """With time enough, every line received is written; with none (a deadline that ran out),
    what is written is still a prefix of the log, whole and in order; and received lines that
    never reach the writer (`drop`: the messages handed over after the stop are lost on the
    way, as when the deadline cancels the pump with them queued) are counted and said."""
    n = 60_000
    log = tmp_path / "big.log"
    log.write_text("".join(LINE % i for i in range(n)))
    received: list[int] = []  # offsets of the lines the tail handed to the feed
    stop = asyncio.Event()
    batches = tail.LogTailer.batches

    dropped: list[int] = []

    async def counting(self: tail.LogTailer) -> AsyncGenerator[list[TailEvent], None]:
        async for evs in batches(self):
            if drop and stop.is_set():
                dropped.extend(ev.offset for ev in evs if isinstance(ev, LogLine))
                continue
            received.extend(ev.offset for ev in evs if isinstance(ev, LogLine))
            yield evs

    monkeypatch.setattr(tail.LogTailer, "batches", counting)
    # what is checked is that nothing handed over is dropped, not how fast: on a slow or busy
    # machine the default deadline (0.7 s) could cut the drain short
    monkeypatch.setattr(record, "DRAIN_S", drain_s)

    class StopAt(RecordOut):
        def write(self, row: str) -> None:
            super().write(row)
            if self.rows + len(self.buf) >= 5_000:
                stop.set()  # as SIGTERM does, while the log is still being caught up on

    out_path = tmp_path / "rec.jsonl"
    fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        count = await record_fleet([HostPlan(LocalHost(), [TailSpec("s", str(log))])],
                                   StopAt(fd, str(out_path)), listen=None, history_lines=None,
                                   stop=stop)
    finally:
        os.close(fd)
    rows = [json.loads(x) for x in out_path.read_text().splitlines()]
    assert 5_000 <= len(rows) < n  # stopped part-way (the test means something)
    assert count == len(rows)
    step = len(LINE % 0)
    assert received == [i * step for i in range(len(received))]
    said = capsys.readouterr().err
    if drop:
        assert dropped and [r["offset"] for r in rows] == received
        assert f"stopped with {len(dropped)} received line(s) not written" in said
    elif drain_s:
        # every line received was written, once, in order; none was dropped at the stop
        assert [r["offset"] for r in rows] == received
        assert "not written" not in said
    else:
        # no time to write: a whole, in-order prefix of what was received, and what was not
        # written (if anything) is said, with its count
        assert [r["offset"] for r in rows] == received[:len(rows)]
        lost = len(received) - len(rows)
        assert (f"stopped with {lost} received line(s) not written" in said) == (lost > 0)


def _record(log: Path, out: Path, seconds: float) -> list[dict]:
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "specmon", "record", "local", "--log",
                          f"s={log}", "--whole-file", "--out", str(out), "--duration",
                          str(seconds)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return [json.loads(x) for x in out.read_text().splitlines() if '"gpus"' not in x]


def test_a_last_line_without_its_newline_is_recorded_as_parse_reads_it(tmp_path: Path) -> None:
    """A file whose last line has no newline: `parse` reads it, `record` dropped it (10 lines
    against 9 rows). At the stop, a quiet unterminated last line is the file's end."""
    from specmon.analysis.logfile import LogLines

    log = tmp_path / "s.log"
    log.write_bytes(b"".join(LINE.encode() % i for i in range(9)) + b"the last, unterminated")
    with LogLines(str(log)) as lines:
        offline = list(lines)
    rows = _record(log, tmp_path / "r.jsonl", 2)
    assert [r["line"] for r in rows] == [ln.decode().rstrip("\n") for ln in offline]
    assert len(offline) == 10
    assert rows[-1]["offset"] == log.stat().st_size - len("the last, unterminated")


def test_a_line_still_being_written_at_the_stop_is_not_cut(tmp_path: Path) -> None:
    """One that grew within the last half second may be a writer's line cut mid-write (a
    decode line cut inside its number reads as another number): it is left out, as before."""
    import threading

    log = tmp_path / "s.log"
    log.write_bytes(b"".join(LINE.encode() % i for i in range(3)) + b"[2025-06-01 12:00:01] Dec")
    done = threading.Event()

    def writer() -> None:  # a byte every 50 ms, through the stop and beyond
        with open(log, "ab", buffering=0) as f:
            while not done.wait(0.05):
                f.write(b"e")

    th = threading.Thread(target=writer)
    th.start()
    try:
        rows = _record(log, tmp_path / "r.jsonl", 2)
    finally:
        done.set()
        th.join()
    assert len(rows) == 3 and not any(r["line"].startswith("[2025-06-01 12:00:01]") for r in rows)


async def test_an_error_in_the_alert_rules_is_said_and_the_rows_still_flow(
        tmp_path: Path, monkeypatch, capsys) -> None:
    """The 1 Hz tick also flushes the rows: a ZeroDivisionError in an alert rule (vLLM's
    drained interval read as bs 0) ended it unseen, alerts stopped without a word and the
    rows waited in memory until the end (lost to a kill)."""
    from specmon.session.fleet import FleetSession

    def broken(self: FleetSession, now: float | None = None) -> None:
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr(FleetSession, "tick", broken)
    log = tmp_path / "s.log"
    log.write_text("".join(LINE % i for i in range(50)))
    stop = asyncio.Event()
    out_path = tmp_path / "rec.jsonl"
    flushed: list[int] = []

    class Watching(RecordOut):
        def flush(self) -> None:
            super().flush()
            flushed.append(self.rows)
            if self.rows >= 50 and len(flushed) > 3:
                stop.set()  # the rows reached the file while the recording ran

    fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        count = await record_fleet([HostPlan(LocalHost(), [TailSpec("s", str(log))])],
                                   Watching(fd, str(out_path)), listen=None, history_lines=None,
                                   stop=stop, duration=60)
    finally:
        os.close(fd)
    assert count == 50 and stop.is_set()
    said = capsys.readouterr().err
    assert said.count("internal error in the alert rules (ZeroDivisionError") == 1, said
