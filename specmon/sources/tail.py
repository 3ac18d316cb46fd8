"""Resumable log tails over a Host, through the host agent.

Lines are framed on b"\\n" only (a partial last line waits for its end); each file's position
is (inode, byte offset after the last delivered line). After a reconnect a new agent resumes
every file at exactly that byte, so no line is lost or repeated; truncation (restart at 0) and
rotation (finish the old inode, then follow the new file) are reported as notices.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

from specmon.hosts.agent_client import AgentClient
from specmon.hosts.base import Host, HostError

DEFAULT_HISTORY_LINES = 2000


@dataclass(frozen=True)
class TailSpec:
    """A file to follow and the server name its lines belong to."""

    name: str
    path: str

    @classmethod
    def parse(cls, text: str) -> TailSpec:
        """`NAME=PATH` (or just PATH, named after the file); ValueError when malformed."""
        name, sep, path = text.partition("=")
        if not sep:
            name, path = "", text
        path = path.strip()
        if not path:
            raise ValueError(f"--log {text!r}: expected NAME=PATH")
        name = name.strip() or path.rstrip("/").rsplit("/", 1)[-1]
        return cls(name, path)


@dataclass
class FilePosition:
    inode: int
    offset: int


@dataclass(slots=True)  # not frozen: frozen dataclass __init__ is ~2x slower per line
class LogLine:
    server: str
    path: str
    inode: int
    offset: int  # where the line starts in the file with this inode
    end: int  # where the next line starts
    data: bytes  # the raw bytes (capped at max_line when `cut` is set), without b"\n"
    text: str  # decoded with errors="replace"; a cut line ends with a visible marker
    received_at: float  # time.time()
    history: bool = False  # read as history on first connect, not live
    cut: int | None = None  # original length when the line was cut
    noeol: bool = False  # a rotated file ended without a newline


@dataclass(frozen=True)
class TailNotice:
    """Something the user should know about a tail: truncated, rotated, missing, lost,
    history_end, disconnected, resumed, error."""

    server: str
    path: str
    kind: str
    detail: dict[str, Any] = field(default_factory=dict)
    received_at: float = field(default_factory=time.time)


TailEvent = LogLine | TailNotice


class LogTailer:
    """Follow several files on one host; survive reconnects with exact resume."""

    def __init__(
        self,
        host: Host,
        specs: list[TailSpec],
        *,
        history_lines: int | None = DEFAULT_HISTORY_LINES,
        poll_interval: float = 0.1,
        max_line: int = 1 << 20,
        max_agent_failures: int = 5,
        watch: bool = True,
    ) -> None:
        """history_lines: lines of history on first open; None reads the whole file.
        poll_interval: the agent's poll period; with `watch` (inotify, where the host has it)
        lines arrive as they are written and polling is only the fallback."""
        self.host = host
        self.specs = list(specs)
        self.history_lines = history_lines
        self.poll_interval = poll_interval
        self.max_line = max_line
        self.max_agent_failures = max_agent_failures
        self.watch = watch
        self.watch_modes: dict[str, str] = {}  # server name -> "inotify" | "poll" (agent's)
        self.positions: dict[str, FilePosition] = {}
        self._history_until: dict[str, tuple[int, int]] = {}
        self._client: AgentClient | None = None
        self._stopped = False
        self.sessions = 0  # agents started (1 + number of resumes)

    def stop(self) -> None:
        """End events() soon (from a signal handler or another task)."""
        self._stopped = True
        if self._client is not None and self._client.proc is not None:
            self._client.proc.close_stdin()
            self._client.proc.terminate()

    async def _start_agent(self) -> AgentClient:
        client = AgentClient(self.host)
        await client.start()
        await client.request("config", poll_interval=self.poll_interval, watch=self.watch)
        for tid, spec in enumerate(self.specs):
            pos = self.positions.get(spec.name)
            args: dict[str, Any] = {"tail": tid, "path": spec.path, "max_line": self.max_line}
            if pos is not None:
                args.update(resume_ino=pos.inode, resume_off=pos.offset)
            else:
                args["history"] = -1 if self.history_lines is None else self.history_lines
            res = await client.request("tail_start", **args)
            if isinstance(res, dict):
                self.watch_modes[spec.name] = str(res.get("watch", "poll"))
        return client

    async def events(self) -> AsyncIterator[TailEvent]:
        failures = 0
        while not self._stopped:
            try:
                await self.host.wait_connected()
                self._client = client = await self._start_agent()
            except HostError as exc:
                if self.host.state.state in ("failed", "closed") or self._stopped:
                    raise
                failures += 1
                if failures >= self.max_agent_failures:
                    raise
                for spec in self.specs:
                    yield TailNotice(spec.name, spec.path, "error", {"error": str(exc)})
                await asyncio.sleep(min(5.0, 0.2 * 2**failures))
                continue
            failures = 0
            self.sessions += 1
            if self.sessions > 1:
                for spec in self.specs:
                    pos = self.positions.get(spec.name)
                    yield TailNotice(spec.name, spec.path, "resumed",
                                     {"inode": pos.inode if pos else None,
                                      "offset": pos.offset if pos else None})
            try:
                while True:
                    msg = await client.events.get()
                    if msg is None:
                        break
                    for ev in self._handle(msg):
                        yield ev
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.shield(client.close())
                self._client = None
            if not self._stopped:
                for spec in self.specs:
                    yield TailNotice(spec.name, spec.path, "disconnected",
                                     {"state": self.host.state.describe()})

    def _lines(self, spec: TailSpec, msg: dict[str, Any], now: float) -> Iterator[LogLine]:
        ino = int(msg["ino"])
        hist = self._history_until.get(spec.name)
        hist_end = hist[1] if hist is not None and hist[0] == ino else -1
        for item in msg["lines"]:
            off, end, text = int(item[0]), int(item[1]), item[2]
            extra = item[3] if len(item) > 3 else None
            # the position moves line by line, as each is handed over: exact resume
            self.positions[spec.name] = FilePosition(ino, end)
            if extra is None:
                yield LogLine(spec.name, spec.path, ino, off, end, text.encode("utf-8"), text,
                              now, end <= hist_end)
                continue
            cut = extra.get("cut")
            b64 = extra.get("b64")
            if b64 is not None:
                data = base64.b64decode(b64)
            elif cut is not None:
                data = text.rsplit(" \u2026[specmon: line cut", 1)[0].encode("utf-8")
            else:
                data = text.encode("utf-8")
            yield LogLine(spec.name, spec.path, ino, off, end, data, text, now,
                          end <= hist_end, cut, bool(extra.get("noeol")))

    def _handle(self, msg: dict[str, Any]) -> Iterator[TailEvent]:
        try:
            spec = self.specs[int(msg["tail"])]
        except (KeyError, ValueError, IndexError, TypeError):
            return
        now = time.time()
        if msg.get("t") == "lines":
            yield from self._lines(spec, msg, now)
            return
        kind = str(msg.get("ev"))
        detail = {k: v for k, v in msg.items() if k not in ("t", "tail", "ev", "path")}
        if kind == "opened":
            self.positions[spec.name] = FilePosition(int(msg["ino"]), int(msg["off"]))
            if not msg.get("resumed") and "size" in msg:
                self._history_until[spec.name] = (int(msg["ino"]), int(msg["size"]))
        elif kind == "rotated":
            self.positions[spec.name] = FilePosition(int(msg["ino"]), 0)
        elif kind == "truncated":
            pos = self.positions.get(spec.name)
            ino = int(msg.get("ino") or (pos.inode if pos else 0))
            self.positions[spec.name] = FilePosition(ino, 0)
        elif kind == "lost":
            self.positions.pop(spec.name, None)
        elif kind == "history_end":
            self._history_until.pop(spec.name, None)
        yield TailNotice(spec.name, spec.path, kind, detail, now)
