"""Client side of the host agent: ONE agent process per host, shared by every user.

The agent's modules (specmon/hostside/: protocol, tail, procs, control, nvml, main) are sent
over the process's stdin as one bundle: a tiny bootstrap given to `python3 -c` reads exactly
that many bytes, loads them as a package (specmon.hostside.protocol.LOADER) and runs main(); the
same stdin then carries requests. Nothing is installed on the host and the agent exits when the channel
closes.

`AgentClient(host)` is a handle (use `async with`): every handle on one Host shares the one
running agent process (log tails, discovery, control, GPU samples are multiplexed over its
channel); the process is started by the first handle and closed with the last. Every message
is checked (specmon.hosts.agent_protocol); a bad one ends the process with a one-line
`ProtocolError`, and the next start waits an exponential, bounded backoff.

Nothing here queues without bound: tail messages are limited by the per-tail credit window
(the agent stops reading a file until the consumer has taken its lines), GPU samples keep the
newest few.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import json
import shlex
import time
import weakref
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specmon.hosts.agent_protocol import (
    MAX_MESSAGE,
    PROTOCOL_VERSION,
    AgentError,
    ProtocolError,
    decode,
)
from specmon.hosts.base import Host, HostError, HostProcess
from specmon.hostside import protocol as hostside_protocol

__all__ = ["AGENT_PATH", "AgentClient", "AgentError", "ProtocolError", "Subscription",
           "agent_source", "bootstrap_command", "bounded", "shielded"]

AGENT_PATH = Path(__file__).resolve().parents[1] / "hostside" / "agent.py"  # run-as-file entry
HOSTSIDE_DIR = AGENT_PATH.parent
HEARTBEAT_S = 20.0  # the agent exits after idle_timeout (120 s) without input
BACKOFF_BASE_S = 0.2
BACKOFF_MAX_S = 10.0
HEALTHY_S = 30.0  # a process that lived this long resets the failure count
GPU_QUEUE = 8  # newest GPU samples kept when the consumer falls behind


def agent_source() -> bytes:
    """The agent's modules as one bundle (what the bootstrap reads from stdin)."""
    return hostside_protocol.bundle(str(HOSTSIDE_DIR))


def bootstrap_command(python: str, source: bytes) -> str:
    """`python -c` code that reads exactly len(source) bytes (the bundle) from fd 0, loads
    them as the agent's package and runs its main().

    Unbuffered os.read leaves every later byte on fd 0 for the agent's request loop. The
    package keeps the bundle (to run the probe in another interpreter).
    """
    code = (
        f"{hostside_protocol.SAFE_PATH}"
        "import os\n"
        f"n={len(source)};B=b''\n"
        "while len(B)<n:\n"
        " c=os.read(0,n-len(B))\n"
        " if not c:sys.exit(3)\n"
        " B+=c\n"
        f"{hostside_protocol.LOADER}"
        f"sys.modules['{hostside_protocol.PACKAGE}.main'].main()\n"
    )
    return f"exec {shlex.quote(python)} -u -c {shlex.quote(code)}"


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: asyncio does not log "exception was never retrieved"


async def shielded(aw: Awaitable[Any]) -> Any:
    """Await `aw` (a teardown step: tail_stop, nvml_stop, close) shielded from the caller's
    cancellation. When the caller is cancelled meanwhile, the step still runs to its end, and
    its failure (typically "the agent went away" as the channel closes) is retrieved here
    instead of surfacing at exit as asyncio's "Task exception was never retrieved"."""
    task = asyncio.ensure_future(aw)
    task.add_done_callback(_retrieve)
    return await asyncio.shield(task)


async def bounded(aw: Awaitable[Any], timeout: float | None) -> Any:
    """Await `aw` for at most `timeout` seconds (None: no bound), else asyncio.TimeoutError.

    Not asyncio.wait_for: before Python 3.12 it returns the result when the caller is
    cancelled at the moment `aw` completes (the cancel is lost; a loop that should stop runs
    on forever). asyncio.wait never swallows the caller's cancel; `aw` is then cancelled."""
    task = asyncio.ensure_future(aw)
    task.add_done_callback(_retrieve)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except BaseException:
        task.cancel()
        raise
    if not done:
        task.cancel()
        raise asyncio.TimeoutError
    return task.result()


class Subscription:
    """Messages for some tail ids or one GPU stream; `get()` returns None once the agent is
    gone (or `wake()` was called)."""

    def __init__(self, kind: str, keys: list[int], maxlen: int | None = None) -> None:
        self.kind = kind
        self.keys = keys
        self._items: collections.deque[dict[str, Any] | None] = collections.deque(maxlen=maxlen)
        self._ready = asyncio.Event()
        self.dropped = 0  # GPU samples dropped because the consumer fell behind
        self.outstanding: dict[int, int] = dict.fromkeys(keys, 0)  # tail cost not yet credited
        self.max_outstanding = 0  # the largest total seen (tests check the bound)
        self.ended = False

    def put(self, msg: dict[str, Any] | None) -> None:
        if self._items.maxlen is not None and len(self._items) == self._items.maxlen:
            self.dropped += 1
        self._items.append(msg)
        self._ready.set()

    def wake(self) -> None:
        """End the consumer's current get() with None (stop from another task)."""
        self.put(None)

    def __len__(self) -> int:
        return len(self._items)

    async def get(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The next message; asyncio.TimeoutError when none came within `timeout` seconds.

        The deadline is a timer on this task, not asyncio.wait_for: before Python 3.12,
        wait_for returns the inner result when the caller is cancelled at the moment a message
        arrives, i.e. it loses the cancel, and a consumer loop then runs on forever. Here a
        cancel always raises, and the message stays queued."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while not self._items:
            if self.ended:
                return None
            self._ready.clear()
            if deadline is None:
                await self._ready.wait()
                continue
            left = deadline - loop.time()
            if left <= 0:
                raise asyncio.TimeoutError
            timer = loop.call_later(left, self._ready.set)  # wakes this loop to re-check
            try:
                await self._ready.wait()
            finally:
                timer.cancel()
        return self._items.popleft()


class _AgentProcess:
    """One running agent on one host channel (shared through AgentClient handles)."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.proc: HostProcess | None = None
        self.hello: dict[str, Any] = {}
        self.closed = asyncio.Event()
        self.error: str | None = None
        self.started_at = time.monotonic()
        self.users = 0  # AgentClient handles attached
        self._noted = False
        self._ids = itertools.count(1)
        self._keys = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._subs: dict[tuple[str, int], Subscription] = {}
        self._reader: asyncio.Task[None] | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._write_lock = asyncio.Lock()

    async def start(self, timeout: float = 30.0) -> None:
        source = agent_source()
        self.proc = await self.host.open_process(bootstrap_command(self.host.python, source))
        try:
            self.proc.write(source)
            await self.proc.drain()
            line = await bounded(self.proc.readline(), timeout)
        except (HostError, asyncio.TimeoutError) as exc:
            self.proc.terminate()
            raise AgentError(f"{self.host.name}: the specmon agent did not start "
                             f"({exc or type(exc).__name__})") from exc
        except BaseException:  # cancelled: no channel (and agent) left behind
            self.proc.terminate()
            raise
        try:
            hello: Any = decode(line) if line else None
        except ProtocolError:
            hello = None
        if not isinstance(hello, dict) or hello.get("t") != "hello":
            err = (await self.proc.read_stderr()).decode("utf-8", "replace").strip()
            self.proc.terminate()
            detail = err.splitlines()[-1] if err else (line[:200].decode("utf-8", "replace")
                                                      or "no output")
            raise AgentError(
                f"{self.host.name}: the specmon agent did not start with "
                f"{self.host.python!r}: {detail}"
            )
        if hello.get("v") != PROTOCOL_VERSION:
            self.proc.terminate()
            raise AgentError(f"{self.host.name}: agent protocol {hello.get('v')} is not "
                             f"{PROTOCOL_VERSION}")
        self.hello = hello
        self.started_at = time.monotonic()
        self._reader = asyncio.create_task(self._read_loop())
        self._heartbeat = asyncio.create_task(self._beat())

    def new_keys(self, n: int) -> list[int]:
        return [next(self._keys) for _ in range(n)]

    def subscribe(self, kind: str, n: int = 1) -> Subscription:
        sub = Subscription(kind, self.new_keys(n), GPU_QUEUE if kind == "gpu" else None)
        if self.closed.is_set():
            sub.ended = True
        for k in sub.keys:
            self._subs[(kind, k)] = sub
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        for k in sub.keys:
            self._subs.pop((sub.kind, k), None)

    async def _beat(self) -> None:
        """Keep the agent's idle watchdog fed; the reply (id 0) is ignored."""
        while not self.closed.is_set():
            await asyncio.sleep(HEARTBEAT_S)
            with contextlib.suppress(HostError):
                await self._write(b'{"id":0,"op":"ping"}\n')

    async def _write(self, data: bytes) -> None:
        if self.proc is None or self.closed.is_set():
            raise AgentError(f"{self.host.name}: the agent is not running")
        async with self._write_lock:
            self.proc.write(data)
            await self.proc.drain()

    def _route(self, msg: dict[str, Any]) -> None:
        t = msg["t"]
        if t == "reply":
            fut = self._pending.pop(msg.get("id"), None)  # type: ignore[arg-type]
            if fut is not None and not fut.done():
                if msg["ok"]:
                    fut.set_result(msg.get("result"))
                else:
                    fut.set_exception(AgentError(str(msg.get("error"))))
            return
        if t in ("lines", "tail"):
            sub = self._subs.get(("tail", msg["tail"]))
            if sub is None:
                return  # a tail stopped meanwhile
            if t == "lines":
                key = msg["tail"]
                sub.outstanding[key] = sub.outstanding.get(key, 0) + msg["cost"]
                sub.max_outstanding = max(sub.max_outstanding, sum(sub.outstanding.values()))
            sub.put(msg)
        elif t in ("gpu", "gpu_end"):
            sub = self._subs.get(("gpu", msg["stream"]))
            if sub is not None:
                sub.put(msg)
        else:
            raise ProtocolError(f"unexpected {t!r} message")

    async def _read_loop(self) -> None:
        assert self.proc is not None
        try:
            while True:
                try:
                    line = await self.proc.readline()
                except HostError as exc:  # e.g. a line over the stream limit
                    raise ProtocolError(str(exc)) from None
                if not line:
                    break
                if len(line) > MAX_MESSAGE:
                    raise ProtocolError(f"message of {len(line)} bytes (limit {MAX_MESSAGE})")
                if not line.strip():
                    continue
                self._route(decode(line))
        except ProtocolError as exc:
            self.error = f"{self.host.name}: agent protocol error: {exc}"
        finally:
            self._shut()

    def fail(self, message: str) -> None:
        """End this process because of a protocol error found by a consumer."""
        if self.error is None:
            self.error = f"{self.host.name}: agent protocol error: {message}"
        self._shut()

    def _shut(self) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        if self.proc is not None:
            self.proc.close_stdin()
            self.proc.terminate()
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        if self._reader is not None and self._reader is not asyncio.current_task():
            self._reader.cancel()
        why = self.error or f"{self.host.name}: the agent went away"
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(ProtocolError(why) if self.error else AgentError(why))
        self._pending.clear()
        for sub in set(self._subs.values()):
            sub.ended = True
            sub.wake()

    async def request(self, op: str, timeout: float | None = 60.0, **args: Any) -> Any:
        """Send one request and return its result. Bounded: AgentError when the agent goes
        away, asyncio.TimeoutError when no reply (or no room to write) within `timeout`;
        the caller's cancel is never lost (see bounded)."""
        if self.proc is None or self.closed.is_set():
            raise AgentError(self.error or f"{self.host.name}: the agent is not running")
        rid = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        # the agent going away fails every pending reply, also one whose request never got
        # written (the write failed first): nobody awaits that one, so it is retrieved here
        fut.add_done_callback(_retrieve)
        self._pending[rid] = fut
        try:
            return await bounded(self._call(rid, op, fut, args), timeout)
        finally:
            self._pending.pop(rid, None)

    async def _call(self, rid: int, op: str, fut: asyncio.Future[Any],
                    args: dict[str, Any]) -> Any:
        await self._write(json.dumps({"id": rid, "op": op, **args}).encode() + b"\n")
        return await fut

    async def send(self, op: str, **args: Any) -> None:
        """A request without an id: the agent sends no reply."""
        await self._write(json.dumps({"op": op, **args}).encode() + b"\n")

    async def close(self) -> None:
        """Close stdin (the agent exits on EOF) and the channel."""
        if self.proc is None:
            return
        if not self.closed.is_set():
            self.proc.close_stdin()
            if await self.proc.wait(2.0) is None:  # still running: end our process group and
                self.proc.terminate()  # reap it, so no child outlives the event loop
                await self.proc.wait(2.0)
        self._shut()
        if self._reader is not None:
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError, Exception):
                await asyncio.wait_for(asyncio.shield(self._reader), 2.0)


@dataclass
class _Shared:
    """The host's agent process and who uses it."""

    proc: _AgentProcess | None = None
    failures: int = 0
    last_end: float = 0.0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def delay(self) -> float:
        """Seconds still to wait before starting again (exponential in failures, bounded)."""
        if not self.failures:
            return 0.0
        wait = min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** (self.failures - 1))
        return max(0.0, self.last_end + wait - time.monotonic())


_SHARED: weakref.WeakKeyDictionary[Host, _Shared] = weakref.WeakKeyDictionary()


def _shared(host: Host) -> _Shared:
    sh = _SHARED.get(host)
    if sh is None:
        sh = _SHARED[host] = _Shared()
    return sh


def _note_end(sh: _Shared, proc: _AgentProcess) -> None:
    """Count a process that ended on a protocol error (for the restart backoff)."""
    if proc._noted:
        return
    proc._noted = True
    if proc.error is not None:
        if time.monotonic() - proc.started_at > HEALTHY_S:
            sh.failures = 0
        sh.failures += 1
        sh.last_end = time.monotonic()


class AgentClient:
    """A handle on the host's one agent process. `async with AgentClient(host) as agent:`.

    Not restartable: after the process is lost, make (and start) a new handle; it shares
    the replacement process with every other handle on that host.
    """

    def __init__(self, host: Host) -> None:
        self.host = host
        self._proc: _AgentProcess | None = None
        self._released = False
        self._closed = asyncio.Event()
        self._waiter: asyncio.Future[None] | None = None

    async def __aenter__(self) -> AgentClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self, timeout: float = 30.0) -> None:
        sh = _shared(self.host)
        async with sh.lock:
            cur = sh.proc
            if cur is not None and cur.closed.is_set():
                _note_end(sh, cur)
                cur = sh.proc = None
            if cur is None:
                wait = sh.delay()
                if wait > 0:
                    await asyncio.sleep(wait)
                cur = _AgentProcess(self.host)
                try:
                    await cur.start(timeout)
                except AgentError:
                    sh.failures += 1
                    sh.last_end = time.monotonic()
                    raise
                sh.proc = cur
            cur.users += 1
        self._proc = cur
        self._waiter = asyncio.ensure_future(self._follow(cur))

    async def _follow(self, proc: _AgentProcess) -> None:
        await proc.closed.wait()
        self._closed.set()

    # -- state ------------------------------------------------------------------------------
    @property
    def closed(self) -> asyncio.Event:
        """Set once this handle cannot be used any more (the process ended, or close())."""
        return self._closed

    @property
    def hello(self) -> dict[str, Any]:
        return self._proc.hello if self._proc is not None else {}

    @property
    def error(self) -> str | None:
        """The protocol error that ended the process, if one did."""
        return self._proc.error if self._proc is not None else None

    @property
    def pid(self) -> int | None:
        pid = self.hello.get("pid")
        return pid if isinstance(pid, int) else None

    def _need(self) -> _AgentProcess:
        if self._proc is None or self._released:
            raise AgentError(f"{self.host.name}: the agent is not running")
        return self._proc

    # -- calls ------------------------------------------------------------------------------
    async def request(self, op: str, timeout: float | None = 60.0, **args: Any) -> Any:
        return await self._need().request(op, timeout, **args)

    async def send(self, op: str, **args: Any) -> None:
        await self._need().send(op, **args)

    def subscribe(self, kind: str, n: int = 1) -> Subscription:
        """Receive "lines"/"tail" messages for n new tail ids (kind "tail"), or the samples
        of one new GPU stream id (kind "gpu")."""
        return self._need().subscribe(kind, n)

    def unsubscribe(self, sub: Subscription) -> None:
        if self._proc is not None:
            self._proc.unsubscribe(sub)

    def fail(self, message: str) -> None:
        """A consumer found a message that breaks the protocol: end the process (every
        handle restarts; the next start backs off)."""
        if self._proc is not None:
            self._proc.fail(message)

    async def close(self) -> None:
        """Release this handle; the last one closes the agent process."""
        if self._proc is None or self._released:
            self._closed.set()
            return
        self._released = True
        self._closed.set()
        proc = self._proc
        sh = _shared(self.host)
        async with sh.lock:
            proc.users -= 1
            last = proc.users <= 0
            if proc.closed.is_set():
                _note_end(sh, proc)
            if last and sh.proc is proc:
                sh.proc = None
        if last or proc.closed.is_set():
            await proc.close()
        if self._waiter is not None:
            self._waiter.cancel()
