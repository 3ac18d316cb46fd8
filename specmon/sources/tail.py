"""Resumable log tails over a Host, through the host agent.

Lines are framed on b"\\n" (a partial last line waits for its end), and a lone CR inside a
line ends a line too (CR-only logs, split here with exact offsets); each file's position
is (inode, byte offset after the last delivered line). After a reconnect a new agent resumes
every file at exactly that byte, so no line is lost or repeated; truncation (restart at 0) and
rotation (finish the old inode, then follow the new file) are reported as notices.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

from specmon.hosts.agent_client import AgentClient, ProtocolError, Subscription, shielded
from specmon.hosts.base import Host, HostError
from specmon.hostside import protocol as hostside_protocol

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


# bytes before a resume offset whose hash the agent verifies (copytruncate); line bytes per
# tail in flight between the agent and the consumer: the protocol's own constants
CHECK_BYTES = hostside_protocol.CHECK_BYTES
WINDOW = hostside_protocol.DEFAULT_WINDOW
# at a stop, an unterminated last line quiet this long is the file's end, not a line cut
# mid-write (the agent's rule for a CR at the end of a file: hostside/tail.py CR_QUIET_S)
QUIET_LAST_S = 0.5


@dataclass
class FilePosition:
    inode: int
    offset: int
    check: bytes = b""  # the last CHECK_BYTES bytes before `offset`, as delivered

    def resume_check(self) -> dict[str, Any] | None:
        if not self.check:
            return None
        return {"n": len(self.check), "sha256": hashlib.sha256(self.check).hexdigest()}


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
    eol: bytes = b"\n"  # what ended it: b"\r" (a piece of a CR-only line) or b"\r\n" (CRLF)
    skipped: int = 0  # bytes of the file not read right before this line (history after the head)
    # bytes written while disconnected and never read before this line (a copytruncate while
    # away: they are in the copy), marked on the first line read after them
    lost: int = 0


def split_cr(ln: LogLine) -> list[LogLine]:
    """A line holding lone CRs (CR-only line endings, progress bars) as the lines they end,
    offsets exact (each piece ends after its CR; the last ends where the line did). A CR right
    before the newline stays (CRLF is one line end); a cut line is left whole."""
    data = ln.data
    body = data[:-1] if data.endswith(b"\r") else data
    if ln.cut is not None or b"\r" not in body:
        return [ln]
    parts = body.split(b"\r")
    if body is not data:
        parts[-1] += b"\r"
    out, off = [], ln.offset
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        end = ln.end if last else off + len(part) + 1
        out.append(LogLine(ln.server, ln.path, ln.inode, off, end, part,
                           part.decode("utf-8", "replace"), ln.received_at, ln.history, None,
                           ln.noeol if last else False, ln.eol if last else b"\r",
                           skipped=0 if i else ln.skipped, lost=0 if i else ln.lost))
        off = end
    return out


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


def truncation_text(detail: dict[str, Any]) -> str | None:
    """The notice for a truncation found on resume ("while disconnected"), else None."""
    if not detail.get("while_disconnected"):
        return None
    n = detail.get("not_seen")
    if isinstance(n, int):
        where = f" (they are in {detail['copy']})" if detail.get("copy") else ""
        return f"truncated while disconnected; up to {n} bytes not seen{where}"
    return (f"truncated while disconnected; bytes after offset {detail.get('at')} of the old "
            "content were not seen")


class LogTailer:
    """Follow several files on one host; survive reconnects with exact resume.

    The tails run in the host's one agent process (shared with discovery, GPUs, control).
    Every agent message is checked; a bad one is a protocol error: a one-line "error" notice,
    then the agent is restarted (with bounded exponential backoff) and resumes at the last
    good offset, so the next valid line is neither lost nor repeated.
    """

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
        window: int = WINDOW,
    ) -> None:
        """history_lines: lines of history on first open; None reads the whole file.
        poll_interval: the agent's poll period; with `watch` (inotify, where the host has it)
        lines arrive as they are written and polling is only the fallback.
        window: line bytes per tail the agent may send before the consumer has taken them."""
        self.host = host
        self.specs = list(specs)
        self.history_lines = history_lines
        self.poll_interval = poll_interval
        self.max_line = max_line
        self.max_agent_failures = max_agent_failures
        self.watch = watch
        self.window = window
        self.watch_modes: dict[str, str] = {}  # server name -> "inotify" | "poll" (agent's)
        self.positions: dict[str, FilePosition] = {}
        self._history_until: dict[str, tuple[int, int]] = {}
        self._head_end: dict[str, tuple[int, int]] = {}  # (inode, end) of the last head line
        self._gap: dict[str, tuple[int, int]] = {}  # (inode, bytes) between head and history
        self._lost: dict[str, int] = {}  # bytes written while away and never read (per server)
        self._client: AgentClient | None = None
        self._sub: Subscription | None = None
        self._stopped = False
        self.sessions = 0  # agent sessions (1 + number of resumes)
        self.protocol_errors = 0
        self.max_outstanding = 0  # most line bytes queued between agent and consumer
        self.lines_out = 0  # lines handed over (`record` says if any went unwritten)

    def stop(self) -> None:
        """End events() soon (from a signal handler or another task)."""
        self._stopped = True
        if self._sub is not None:
            self._sub.wake()

    async def _start_agent(self) -> tuple[AgentClient, Subscription]:
        client = AgentClient(self.host)
        await client.start()
        try:
            sub = client.subscribe("tail", len(self.specs))
            await client.request("config", poll_interval=self.poll_interval, watch=self.watch)
            for key, spec in zip(sub.keys, self.specs, strict=True):
                pos = self.positions.get(spec.name)
                args: dict[str, Any] = {"tail": key, "path": spec.path,
                                        "max_line": self.max_line, "window": self.window}
                if pos is not None:
                    args.update(resume_ino=pos.inode, resume_off=pos.offset,
                                resume_check=pos.resume_check())
                else:
                    args["history"] = -1 if self.history_lines is None else self.history_lines
                res = await client.request("tail_start", **args)
                if isinstance(res, dict):
                    self.watch_modes[spec.name] = str(res.get("watch", "poll"))
        except BaseException:
            await client.close()
            raise
        return client, sub

    async def events(self) -> AsyncIterator[TailEvent]:
        """The tail's events one by one (see `batches`)."""
        async for evs in self.batches():
            for ev in evs:
                yield ev

    async def batches(self) -> AsyncGenerator[list[TailEvent], None]:
        """The tail's events, a list per agent message: the lines of one "lines" message are
        checked whole and handed over together (the position is past all of them), so the
        consumer pays the async machinery once per message, not per line (~10% of `record`
        while catching up)."""
        failures = 0
        while not self._stopped:
            try:
                await self.host.wait_connected()
                client, sub = await self._start_agent()
            except HostError as exc:
                if self.host.state.state in ("failed", "closed") or self._stopped:
                    raise
                failures += 1
                if failures >= self.max_agent_failures:
                    raise
                yield [TailNotice(spec.name, spec.path, "error", {"error": str(exc)})
                       for spec in self.specs]
                await asyncio.sleep(min(5.0, 0.2 * 2**failures))
                continue
            self._client, self._sub = client, sub
            failures = 0
            self.sessions += 1
            # (a resume is said when the agent's "opened" confirms it: said here, before the
            # check of the bytes before the offset, it read "resumed at the exact byte" just
            # before "truncated while disconnected")
            index = {k: i for i, k in enumerate(sub.keys)}
            try:
                # stopped: what the agent already sent is still delivered (record writes every
                # line it received), but no more credit goes out, so that is bounded by the window
                while not (self._stopped and not len(sub)):
                    msg = await sub.get()
                    if msg is None:
                        break
                    spec = self.specs[index[msg["tail"]]]
                    try:
                        evs = list(self._handle(spec, msg))
                    except ProtocolError as exc:
                        client.fail(str(exc))
                        break
                    self.max_outstanding = max(self.max_outstanding, sub.max_outstanding)
                    if evs:
                        if msg["t"] == "lines":
                            self.lines_out += len(evs)
                        yield evs
                    if msg["t"] == "lines" and not self._stopped:
                        sub.outstanding[msg["tail"]] -= msg["cost"]
                        with contextlib.suppress(HostError):
                            await client.send("tail_credit", tail=msg["tail"], n=msg["cost"])
                if self._stopped and not client.closed.is_set():
                    for evs in await self._last_lines(client, sub.keys):
                        self.lines_out += len(evs)
                        yield evs
            finally:
                self._sub = None
                self._client = None
                error = client.error
                if not client.closed.is_set():
                    for key in sub.keys:
                        with contextlib.suppress(Exception):
                            await shielded(client.request("tail_stop", tail=key, timeout=5.0))
                client.unsubscribe(sub)
                with contextlib.suppress(Exception):
                    await shielded(client.close())
            if self._stopped:
                break
            if error is not None:
                self.protocol_errors += 1
                yield [TailNotice(spec.name, spec.path, "error", {"error": error})
                       for spec in self.specs]
            else:
                yield [TailNotice(spec.name, spec.path, "disconnected",
                                  {"state": self.host.state.describe()}) for spec in self.specs]

    async def _last_lines(self, client: AgentClient, keys: list[int]) -> list[list[TailEvent]]:
        """Stopping: each file's unterminated last line that has been quiet for QUIET_LAST_S
        (the file ends there), as offline reading ends it (`record` of a file whose last line
        has no newline had one row fewer than `parse` read)."""
        async def ask(key: int) -> Any:
            try:
                return await client.request("tail_flush", tail=key, quiet=QUIET_LAST_S,
                                            timeout=0.5)
            except Exception:  # noqa: BLE001 - an agent going away: nothing more to deliver
                return None

        # at once for every tail, briefly and not shielded: a busy or gone agent must not hold
        # the stop (the drain's deadline cancels this like the rest)
        answers = await asyncio.gather(*(ask(k) for k in keys))
        out: list[list[TailEvent]] = []
        for spec, key, msg in zip(self.specs, keys, answers, strict=True):
            if isinstance(msg, dict) and msg.get("t") == "lines" and msg.get("tail") == key:
                try:
                    evs = list(self._handle(spec, msg))
                except ProtocolError:
                    continue
                if evs:
                    out.append(evs)
        return out

    def _lines(self, spec: TailSpec, msg: dict[str, Any], now: float) -> list[LogLine]:
        """Decode one checked "lines" message; ProtocolError when it does not continue the
        file where the last message ended (nothing of it is delivered then)."""
        ino = msg["ino"]
        pos = self.positions.get(spec.name)
        first = msg["lines"][0][0]
        if pos is None or pos.inode != ino or pos.offset != first:
            where = "no open file" if pos is None else f"inode {pos.inode} offset {pos.offset}"
            raise ProtocolError(f"lines of inode {ino} from offset {first} do not follow "
                                f"{where} of {spec.path}")
        hist = self._history_until.get(spec.name)
        hist_end = hist[1] if hist is not None and hist[0] == ino else -1
        out = self._items(spec, ino, msg["lines"], now, hist_end)
        gap = self._gap.pop(spec.name, None)
        if gap is not None and gap[0] == ino and out:  # the run's lines between its head and
            out[0].skipped = gap[1]  # the history were not read
        lost = self._lost.pop(spec.name, 0)
        if lost and out:
            out[0].lost = lost
        # the lines are handed over together (`batches`): the position moves past all of them
        # at once, exact resume from the end of the message
        self.positions[spec.name] = FilePosition(ino, out[-1].end, self._end_check(pos.check, out))
        return out

    @staticmethod
    def _items(spec: TailSpec, ino: int, items: list[Any], now: float,
               hist_end: int) -> list[LogLine]:
        """Checked line items as LogLines (history: those ending by `hist_end`); ProtocolError
        when a line's bytes do not match its offsets."""
        out: list[LogLine] = []
        for item in items:
            off, end, text = item[0], item[1], item[2]
            extra = item[3] if len(item) > 3 else None
            if extra is None:
                data = text.encode("utf-8")
                if text.endswith("\r"):  # CRLF: the CR is the line end's, not the text's
                    out.append(LogLine(spec.name, spec.path, ino, off, end, data[:-1],
                                       text[:-1], now, end <= hist_end, eol=b"\r\n"))
                    continue
                out.append(LogLine(spec.name, spec.path, ino, off, end, data, text, now,
                                   end <= hist_end))
                continue
            cut = extra.get("cut")
            b64 = extra.get("b64")
            noeol = bool(extra.get("noeol"))
            if b64 is not None:
                data = base64.b64decode(b64)
            elif cut is not None:
                data = text.rsplit(" \u2026[specmon: line cut", 1)[0].encode("utf-8")
            else:
                data = text.encode("utf-8")
            if cut is None and len(data) + (0 if noeol else 1) != end - off:
                raise ProtocolError(f"a line's bytes ({len(data)}) do not match its offsets "
                                    f"{off}..{end} in {spec.path}")
            eol = b"\n"
            if noeol and cut is None and data.endswith(b"\r"):  # ended at a lone CR (the
                data, noeol, eol = data[:-1], False, b"\r"  # agent sends its CR): as split_cr
                text = text[:-1] if text.endswith("\r") else text
            elif not noeol and cut is None and data.endswith(b"\r"):  # CRLF, as above
                data, eol = data[:-1], b"\r\n"
                text = text[:-1] if text.endswith("\r") else text
            out.append(LogLine(spec.name, spec.path, ino, off, end, data, text, now,
                               end <= hist_end, cut, noeol, eol))
        if b"\r" in b"".join([ln.data for ln in out]):  # (one C search per message)
            out = [piece for ln in out for piece in split_cr(ln)]
        return out

    @staticmethod
    def _end_check(check: bytes, lines: list[LogLine]) -> bytes:
        """The check bytes after the last line (see FilePosition.check): its last CHECK_BYTES
        bytes read, none before a cut line (its sent bytes end before its `end`)."""
        parts: list[bytes] = []
        size = 0
        for ln in reversed(lines):
            if ln.cut is not None:
                check = b""
                break
            part = ln.data + (b"" if ln.noeol else ln.eol)
            parts.append(part)
            size += len(part)
            if size >= CHECK_BYTES:
                check = b""
                break
        parts.append(check)
        return b"".join(reversed(parts))[-CHECK_BYTES:]

    def _handle(self, spec: TailSpec, msg: dict[str, Any]) -> Iterator[TailEvent]:
        now = time.time()
        if msg["t"] == "lines":
            yield from self._lines(spec, msg, now)  # checked whole before delivery
            return
        kind = msg["ev"]
        if kind == "head":  # the run's start-up lines before the history: history too, at
            # their own offsets (the tail's position is set by the "opened" that follows)
            yield from self._items(spec, msg["ino"], msg["lines"], now, 1 << 62)
            if msg["lines"]:
                self._head_end[spec.name] = (msg["ino"], msg["lines"][-1][1])
            return
        detail = {k: v for k, v in msg.items() if k not in ("t", "tail", "ev", "path")}
        if kind == "opened":
            if msg.get("resumed"):  # the bytes before the offset checked: the exact byte
                yield TailNotice(spec.name, spec.path, "resumed",
                                 {"inode": msg["ino"], "offset": msg["off"]}, now)
            self.positions[spec.name] = FilePosition(msg["ino"], msg["off"],
                                                     self._kept_check(spec, msg))
            head = self._head_end.pop(spec.name, None)
            if head is not None and not msg.get("resumed") and head[0] == msg["ino"] \
                    and msg["off"] > head[1]:
                self._gap[spec.name] = (msg["ino"], msg["off"] - head[1])
            if not msg.get("resumed") and "size" in msg:
                self._history_until[spec.name] = (msg["ino"], msg["size"])
        elif kind == "rotated":
            self.positions[spec.name] = FilePosition(msg["ino"], 0)
        elif kind == "truncated":
            pos = self.positions.get(spec.name)
            ino = msg.get("ino") or (pos.inode if pos else 0)
            self.positions[spec.name] = FilePosition(ino, 0)
            text = truncation_text(detail)
            if text is not None:
                detail["message"] = text
            if isinstance(detail.get("not_seen"), int) and detail["not_seen"] > 0:
                self._lost[spec.name] = detail["not_seen"]  # said on the next line read
        elif kind == "lost":
            self.positions.pop(spec.name, None)
        elif kind == "history_end":
            self._history_until.pop(spec.name, None)
        yield TailNotice(spec.name, spec.path, kind, detail, now)

    def _kept_check(self, spec: TailSpec, msg: dict[str, Any]) -> bytes:
        """An "opened" at the offset we resumed from keeps our check bytes."""
        pos = self.positions.get(spec.name)
        if pos is not None and msg.get("resumed") and pos.inode == msg["ino"] and \
                pos.offset == msg["off"]:
            return pos.check
        return b""
