"""Pumps shared by every live feed: log tails and GPU sources into a sink, batched.

Lines are parsed here, off the UI's handlers, and delivered in batches (at most every
`flush_s`), so a server logging 1,000 lines per second costs the UI a few messages per second.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import Any

from specmon.feed import FeedSink, LineItem
from specmon.parse.sglang import parse_line
from specmon.sources.tail import LogLine, LogTailer, TailNotice

NOTICE_TEXT = {
    "truncated": "log truncated: reading from the start again",
    "rotated": "log rotated: finished the old file, following the new one",
    "missing": "log file missing",
    "lost": "lines lost",
    "error": "tail error",
    "disconnected": "disconnected",
    "resumed": "resumed at the exact byte where it stopped",
}
MAX_BATCH = 2000
QUEUE_MAX = 2 * MAX_BATCH  # tail events parsed ahead of the sink: bounded (backpressure)


async def pump_tail(tailer: LogTailer, sink: FeedSink, flush_s: float = 0.1,
                    tap: Callable[[LogLine], None] | None = None) -> None:
    """Tail events -> parsed, batched `sink.lines` calls; notices -> `sink.notice`.

    `tap` sees every raw LogLine (path and byte offset included) as it arrives: `specmon record`
    writes them out while the sink keeps the live state.
    """
    # Bounded: when the sink falls behind, the reader waits, the tailer stops crediting the
    # agent, and the agent stops reading the file (memory stays flat while catching up).
    queue: asyncio.Queue[LogLine | TailNotice | None] = asyncio.Queue(QUEUE_MAX)

    async def reader() -> None:
        try:
            async for ev in tailer.events():
                await queue.put(ev)
        except Exception:
            await queue.put(None)
            raise
        await queue.put(None)

    task = asyncio.create_task(reader())
    try:
        done = False
        while not done:
            ev = await queue.get()
            batch: dict[str, list[LineItem]] = {}
            n = 0
            while ev is not None:
                if isinstance(ev, LogLine):
                    if tap is not None:
                        tap(ev)
                    batch.setdefault(ev.server, []).append(
                        (ev.text, parse_line(ev.text), ev.received_at))
                    n += 1
                elif isinstance(ev, TailNotice) and ev.kind in NOTICE_TEXT:
                    detail = " ".join(f"{k}={v}" for k, v in ev.detail.items())
                    sink.notice(ev.server, f"{NOTICE_TEXT[ev.kind]} {detail}".strip())
                if n >= MAX_BATCH or queue.empty():
                    break
                ev = queue.get_nowait()
            if ev is None:
                done = True
            for server, items in batch.items():
                sink.lines(server, items)
            if not done:
                await asyncio.sleep(flush_s)
        await asyncio.wait({task}, timeout=5.0)  # the reader ends right after its None
        if task.done() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]
    finally:
        tailer.stop()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


async def pump_gpus(source: AsyncIterable[list[Any]], sink: FeedSink,
                    retry_s: float = 10.0) -> None:
    """GPU samples -> `sink.gpus`; a failing source is reported in one line and retried."""
    while True:
        try:
            async for samples in _aiter(source):
                sink.gpus(samples, None)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - any source failure is a status, not a crash
            sink.gpus([], _one_line(exc))
        await asyncio.sleep(retry_s)


async def cancel_all(tasks: list[asyncio.Task[Any]]) -> None:
    """Cancel the feed's tasks and wait until each has run its cleanup."""
    for t in tasks:
        t.cancel()
    for t in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await t


def _aiter(source: AsyncIterable[list[Any]]) -> AsyncIterator[list[Any]]:
    return source.__aiter__()


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
