"""Helpers for tail tests: collect a LogTailer's events in the background, poll conditions."""

from __future__ import annotations

import asyncio
import contextlib

from kit.wait import until
from specmon.sources.tail import LogLine, LogTailer, TailEvent, TailNotice


class Collector:
    def __init__(self, tailer: LogTailer) -> None:
        self.tailer = tailer
        self.events: list[TailEvent] = []
        self.error: BaseException | None = None
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        try:
            async for ev in self.tailer.events():
                self.events.append(ev)
        except Exception as exc:  # surfaced by the test through .error
            self.error = exc

    @property
    def lines(self) -> list[LogLine]:
        return [e for e in self.events if isinstance(e, LogLine)]

    def texts(self, server: str | None = None) -> list[str]:
        return [e.text for e in self.lines if server is None or e.server == server]

    def notices(self, kind: str) -> list[TailNotice]:
        return [e for e in self.events if isinstance(e, TailNotice) and e.kind == kind]

    async def wait_lines(self, n: int, timeout: float = 20.0) -> list[LogLine]:
        await until(lambda: len(self.lines) >= n or self.error, timeout, f"{n} lines")
        if self.error:
            raise self.error
        return self.lines

    async def close(self) -> None:
        self.tailer.stop()
        with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(self.task, 10)
