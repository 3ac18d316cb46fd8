"""The boundary between data sources and whoever displays them (the TUI or a headless recorder).

A feed (demo, connect, replay) pushes batches into a `FeedSink`; the sink implementation decides
how they reach the session (the TUI posts Textual messages). Nothing here imports Textual.
"""

from __future__ import annotations

from typing import Any, Protocol

from specmon.parse.sglang import Record

LineItem = tuple[str, "Record | None", float]


class FeedSink(Protocol):
    def declare_server(self, server: str, role: str | None, path: str | None) -> None: ...

    def lines(self, server: str, items: list[LineItem]) -> None: ...

    def gpus(self, samples: list[Any], error: str | None = None) -> None: ...

    def server_exited(self, server: str, code: int | None) -> None: ...

    def notice(self, server: str, text: str) -> None: ...

    def connection(self, text: str) -> None: ...

    def server_pids(self, server: str, pids: list[int]) -> None: ...

    def request_baseline(self, server: str) -> None: ...


class Feed(Protocol):
    async def run(self, sink: FeedSink) -> None:
        """Produce until cancelled; must clean up everything it started when cancelled."""
        ...
