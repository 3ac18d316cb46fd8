"""Pumps shared by every live feed: log tails and GPU sources into a sink, batched.

Lines are parsed here, off the UI's handlers, and delivered in batches (once caught up, at most
every `flush_s`, so a server logging 1,000 lines per second costs the UI a few messages per
second; while behind, batch after batch of at most MAX_BATCH, so a backlog is not paced).
The queue between the tail and the batcher is bounded: catching up on a large log waits for
the session instead of buffering the whole file in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterator
from typing import Any

from specmon.parse.gpu_sample import GpuSample
from specmon.parse.sglang import Record, parse_known
from specmon.session.events import FeedSink, LineItem
from specmon.sources.tail import LogLine, LogTailer, TailEvent, TailNotice

NOTICE_TEXT = {
    "truncated": "log truncated: reading from the start again",
    "rotated": "log rotated: finished the old file, following the new one",
    "missing": "log file missing",
    "lost": "lines lost",
    "error": "tail error",
    "disconnected": "disconnected",
    "resumed": "resumed at the exact byte where it stopped",
}
MAX_BATCH = 2000  # lines per sink call
QUEUE_MESSAGES = 2  # agent messages held between the tail and the session, at most


# The collector's thresholds while feeds run. The live path allocates a few container objects
# per line and keeps ~10^5 of them (logs, windows, points); at the default (700, 10, 10) the
# full collections over all of them were ~20% of `record`'s CPU while catching up (1,660
# collections for 200k lines). Young cycles are still collected every LIVE_GC[0] allocations.
LIVE_GC = (50_000, 20, 100)


_live: list[tuple[int, ...]] = []  # the thresholds before the first open block, per open block


@contextlib.contextmanager
def live_gc() -> Iterator[None]:
    """LIVE_GC while any such block runs (they may overlap: feeds in one loop); the process's
    own thresholds are put back when the last one ends."""
    _live.append(_live[0] if _live else gc.get_threshold())
    gc.set_threshold(*LIVE_GC)
    try:
        yield
    finally:
        before = _live.pop()
        if not _live:
            gc.set_threshold(*before)


def notice_text(ev: TailNotice) -> str:
    """A notice in words: its message where it has one (the key=value dump beside it said the
    same twice), else its details."""
    msg = ev.detail.get("message")
    if isinstance(msg, str) and msg:
        return f"{NOTICE_TEXT[ev.kind]}: {msg}"
    detail = " ".join(f"{k}={v}" for k, v in ev.detail.items() if v is not None)
    return f"{NOTICE_TEXT[ev.kind]} {detail}".strip()


async def pump_tail(tailer: LogTailer, host: str, sink: FeedSink, flush_s: float = 0.1,
                    tap: Callable[[LogLine, Record | None, bool], None] | None = None,
                    on_history_end: Callable[[str], None] | None = None) -> None:
    """Tail events -> parsed, batched `sink.lines` calls; notices -> `sink.notice`; a missing
    file -> `sink.tail_missing` (the tail keeps waiting for it).

    `tap` sees every raw LogLine (path and byte offset included) as it arrives, with the record
    parsed from it here (each line is parsed once) and whether the line was read whole (no free
    text: `parse_known`): `specmon record` writes them out while the sink keeps the live state.
    `on_history_end(server)`: the server's history lines have all reached the sink.
    """
    # Bounded: when the sink falls behind, the reader waits, the tailer stops crediting the
    # agent, and the agent stops reading the file (memory stays flat while catching up). An
    # item is one agent message's events (`LogTailer.batches`: at most BATCH_BYTES of text).
    queue: asyncio.Queue[list[TailEvent] | None] = asyncio.Queue(QUEUE_MESSAGES)

    holding = False  # the reader has a message it could not put yet: we are behind

    async def reader() -> None:
        nonlocal holding
        try:
            batches = tailer.batches()
            try:
                async for evs in batches:
                    holding = True
                    await queue.put(evs)  # bounded: a slow consumer slows the tail, not memory
                    holding = False
            finally:
                # cancelled while waiting on the queue, the generator is closed here (its
                # cleanup stops the agent process), not at garbage collection after the loop
                await batches.aclose()
        except Exception:
            await queue.put(None)  # the end marker, then the error for pump_tail to raise
            raise
        await queue.put(None)

    def deliver(batch: dict[str, list[LineItem]]) -> None:
        for server, items in batch.items():
            sink.lines(host, server, items)

    task = asyncio.create_task(reader())
    try:
        evs: list[TailEvent] | None = []
        i = 0  # the next event of `evs` (a message is taken MAX_BATCH lines at a time)
        while evs is not None:
            if i >= len(evs):
                evs, i = await queue.get(), 0
            batch: dict[str, list[LineItem]] = {}
            n = 0
            while evs is not None:
                while i < len(evs) and n < MAX_BATCH:
                    ev = evs[i]
                    i += 1
                    if isinstance(ev, LogLine):
                        rec, whole = parse_known(ev.text)
                        if tap is not None:
                            tap(ev, rec, whole)
                        items = batch.get(ev.server)  # (setdefault made a list per line)
                        if items is None:
                            items = batch[ev.server] = []
                        items.append(LineItem(ev.text, rec, ev.received_at, ev.skipped))
                        n += 1
                    elif ev.kind == "history_end" and on_history_end is not None:
                        deliver(batch)  # the history first: then what was read of its run
                        batch = {}
                        on_history_end(ev.server)
                    elif ev.kind in NOTICE_TEXT:
                        deliver(batch)  # the lines before it go first
                        batch = {}
                        if ev.kind == "missing":
                            sink.tail_missing(host, ev.server, ev.path, "no such file")
                        elif ev.kind == "error":  # e.g. permission denied: the tail retries
                            sink.tail_missing(host, ev.server, ev.path,
                                              str(ev.detail.get("error") or "cannot read"))
                        sink.notice(host, ev.server, notice_text(ev))
                if i < len(evs) or queue.empty():
                    break  # a full batch, or all that has come
                evs, i = queue.get_nowait(), 0
            deliver(batch)
            if evs is not None:  # caught up: wait to batch; behind (a backlog): go on at once
                behind = i < len(evs) or not queue.empty() or holding
                await asyncio.sleep(0 if behind else flush_s)
        await asyncio.wait({task}, timeout=5.0)  # it has put the end marker: finishing
        exc = task.exception() if task.done() and not task.cancelled() else None
        if exc is not None:
            raise exc
    finally:
        tailer.stop()
        task.cancel()
        # the reader's cleanup stops the host agent: wait for it even when this task is
        # cancelled again meanwhile (else the agent outlives the event loop)
        while not task.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({task}, timeout=10.0)
                break
        if task.done() and not task.cancelled():
            task.exception()  # retrieved: reported above, or the end marker's error


async def pump_gpus(source: AsyncIterable[list[GpuSample]], host: str, sink: FeedSink,
                    retry_s: float = 10.0,
                    tap: Callable[[list[GpuSample]], None] | None = None) -> None:
    """GPU samples -> `sink.gpus`; a failing source is reported in one line and retried.

    `tap` sees every poll (`specmon record` writes them out)."""
    while True:
        try:
            async for samples in _aiter(source):
                if tap is not None:
                    tap(samples)
                sink.gpus(host, samples, None)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - any source failure is a status, not a crash
            sink.gpus(host, [], _one_line(exc))
        await asyncio.sleep(retry_s)


async def cancel_all(tasks: list[asyncio.Task[Any]]) -> None:
    """Cancel the feed's tasks and wait until each has run its cleanup."""
    for t in tasks:
        if not getattr(t, "cancelling", lambda: 0)():  # (a gather cancelled it already: a
            t.cancel()  # second cancel would cut its cleanup short)
    for t in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await t


def _aiter(source: AsyncIterable[list[GpuSample]]) -> AsyncIterator[list[GpuSample]]:
    return source.__aiter__()


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
