"""Bounded end to end (issue 13): catching up on a large log never queues more than a fixed
bound between the file and a slow consumer. Checked on the queues themselves (the tailer's
in-flight line bytes, the feed pump's parsed-ahead events), not on wall time or RSS."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from specmon.feeds import common
from specmon.feeds.common import pump_tail
from specmon.hosts.local import LocalHost
from specmon.hostside.protocol import BATCH_BYTES, CREDIT_SLACK
from specmon.sources.tail import LogLine, LogTailer, TailEvent, TailNotice, TailSpec

LINE = b"[2026-01-01 00:00:00 TP0] Decode batch, #running-req: 1, #token: 100, gen throughput " \
    b"(token/s): 88.80, #queue-req: 0, line %08d\n"


def big_log(path: Path, n: int) -> int:
    with open(path, "wb") as f:
        for i in range(0, n, 1000):
            f.write(b"".join(LINE % j for j in range(i, min(n, i + 1000))))
    return path.stat().st_size


class CountingTailer(LogTailer):
    """Counts what the tailer has handed over, so the test sees what waits in the pump."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.yielded = 0

    async def batches(self) -> AsyncGenerator[list[TailEvent], None]:
        async for evs in super().batches():
            self.yielded += len(evs)
            yield evs


class SlowSink:
    def __init__(self, tailer: CountingTailer, want: int) -> None:
        self.tailer = tailer
        self.want = want
        self.got: list[str] = []
        self.max_ahead = 0  # events the tailer handed over that the sink has not had yet

    def notice(self, *a: Any) -> None: ...
    def tail_missing(self, *a: Any) -> None: ...

    def lines(self, host: str, server: str, items: list) -> None:
        self.max_ahead = max(self.max_ahead, self.tailer.yielded - len(self.got))
        self.got.extend(it.text for it in items)
        if len(self.got) >= self.want:
            self.tailer.stop()


async def test_catch_up_of_a_large_log_is_bounded(tmp_path):
    n = 60_000
    size = big_log(tmp_path / "big.log", n)
    window = 256 << 10
    assert size > 20 * window  # the file is far larger than what may be in flight
    tailer = CountingTailer(LocalHost(), [TailSpec("big", str(tmp_path / "big.log"))],
                            history_lines=None, window=window)
    sink = SlowSink(tailer, n)
    await pump_tail(tailer, "local", sink, flush_s=0.1)
    # every line, in order, once
    assert len(sink.got) == n
    assert sink.got[0].endswith("line 00000000") and sink.got[-1].endswith(f"line {n - 1:08d}")
    assert all(t.endswith(f"line {i:08d}") for i, t in enumerate(sink.got))
    # agent -> tailer: at most the window plus one small read's worth of lines in flight
    assert 0 < tailer.max_outstanding <= window + CREDIT_SLACK + len(LINE) + 16
    # tailer -> sink: at most the pump's queue, the message the reader holds and the one being
    # delivered (a message: at most BATCH_BYTES of text and one more line)
    per_message = BATCH_BYTES // len(LINE) + 2
    assert sink.max_ahead <= (common.QUEUE_MESSAGES + 2) * per_message


class BacklogTailer:
    """A tailer whose whole backlog is ready at once (as when the agent reads a large file)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.stopped = False

    async def batches(self) -> AsyncGenerator[list[TailEvent], None]:
        for start in range(0, self.n, 700):  # (messages of 700 lines: not batch-aligned)
            yield [LogLine("big", "/big.log", 1, i * len(LINE), (i + 1) * len(LINE), LINE % i,
                           (LINE % i).decode().rstrip("\n"), 1.0)
                   for i in range(start, min(self.n, start + 700))]

    def stop(self) -> None:
        self.stopped = True


async def test_a_backlog_is_delivered_without_waiting_between_batches():
    """The pump waits `flush_s` to gather a batch only when it has caught up: with lines waiting
    it goes on at once (it slept after every 2,000-line batch, which capped `record` at 20k
    lines/s whatever the machine could do). With an hour's flush_s, only a pump that never waits
    while behind delivers 10,000 waiting lines."""
    n = 10_000
    tailer = BacklogTailer(n)
    sink = SlowSink(tailer, n)  # type: ignore[arg-type]
    tailer.yielded = n  # type: ignore[attr-defined]
    await asyncio.wait_for(pump_tail(tailer, "local", sink, flush_s=3600), timeout=120)  # type: ignore[arg-type]
    assert len(sink.got) == n
    assert all(t.endswith(f"line {i:08d}") for i, t in enumerate(sink.got))


class _OneMessage:
    """A tailer handing over one message: lines, a notice, more lines (as a rotation or a
    vanished file reads in the middle of a message's events)."""

    def __init__(self, events: list[TailEvent]) -> None:
        self.events = events

    async def batches(self) -> AsyncGenerator[list[TailEvent], None]:
        yield self.events

    def stop(self) -> None: ...


class _OrderSink:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def lines(self, host: str, server: str, items: list) -> None:
        self.calls.extend(f"line {it.text[-8:]}" for it in items)

    def notice(self, host: str, server: str, text: str) -> None:
        self.calls.append(f"notice {text}")

    def tail_missing(self, host: str, server: str, path: str, reason: str) -> None:
        self.calls.append(f"missing {reason}")


async def test_a_notice_reaches_the_sink_after_the_lines_before_it():
    """The session sees a tail's events in their order: the lines read before a "missing"
    notice are applied before the log is marked missing (they were batched and delivered after
    the notice, so a vanished log's last lines came in after it was marked gone)."""
    lines = [LogLine("s", "/l", 1, i * len(LINE), (i + 1) * len(LINE), LINE % i,
                     (LINE % i).decode().rstrip("\n"), 1.0) for i in range(3)]
    gone = TailNotice("s", "/l", "missing")
    sink = _OrderSink()
    await asyncio.wait_for(pump_tail(_OneMessage([lines[0], lines[1], gone, lines[2]]),  # type: ignore[arg-type]
                                     "local", sink, flush_s=0.01), timeout=60)  # type: ignore[arg-type]
    assert sink.calls == ["line 00000000", "line 00000001", "missing no such file",
                          "notice log file missing", "line 00000002"]
