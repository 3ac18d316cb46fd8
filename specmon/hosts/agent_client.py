"""Client side of the host agent: start it over a Host channel and talk JSON lines to it.

The agent's source (specmon/hosts/agent.py) is sent over the process's stdin: a tiny bootstrap
given to `python3 -c` reads exactly that many bytes, execs them, and the same stdin then carries
requests. Nothing is installed on the host and the agent exits when the channel closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import shlex
from pathlib import Path
from typing import Any

from specmon.hosts.base import Host, HostError, HostProcess

PROTOCOL_VERSION = 1
AGENT_PATH = Path(__file__).with_name("agent.py")
EVENT_QUEUE_MAX = 20_000  # a slow consumer blocks the reader, which backpressures the channel
HEARTBEAT_S = 20.0  # the agent exits after idle_timeout (120 s) without input


def agent_source() -> bytes:
    return AGENT_PATH.read_bytes()


def bootstrap_command(python: str, source: bytes) -> str:
    """`python -c` code that reads exactly len(source) bytes from fd 0 and execs them.

    Unbuffered os.read leaves every later byte on fd 0 for the agent's request loop.
    """
    code = (
        "import os,sys\n"
        f"n={len(source)};b=b''\n"
        "while len(b)<n:\n"
        " c=os.read(0,n-len(b))\n"
        " if not c:sys.exit(3)\n"
        " b+=c\n"
        "exec(compile(b,'specmon-agent','exec'))\n"
    )
    return f"exec {shlex.quote(python)} -u -c {shlex.quote(code)}"


class AgentError(HostError):
    """The agent could not start, answered with an error, or went away."""


class AgentClient:
    """One running agent on one host channel. Not restartable: make a new one after loss."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.proc: HostProcess | None = None
        self.hello: dict[str, Any] = {}
        self.events: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(EVENT_QUEUE_MAX)
        self.closed = asyncio.Event()
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._write_lock = asyncio.Lock()

    async def start(self, timeout: float = 30.0) -> None:
        source = agent_source()
        self.proc = await self.host.open_process(bootstrap_command(self.host.python, source))
        try:
            self.proc.write(source)
            await self.proc.drain()
            line = await asyncio.wait_for(self.proc.readline(), timeout)
        except (HostError, asyncio.TimeoutError) as exc:
            self.proc.terminate()
            raise AgentError(f"{self.host.name}: the specmon agent did not start ({exc})") from exc
        try:
            hello = json.loads(line) if line else None
        except ValueError:
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
        self._reader = asyncio.create_task(self._read_loop())
        self._heartbeat = asyncio.create_task(self._beat())

    async def _beat(self) -> None:
        """Keep the agent's idle watchdog fed; the reply (id 0) is ignored."""
        while not self.closed.is_set():
            await asyncio.sleep(HEARTBEAT_S)
            try:
                async with self._write_lock:
                    assert self.proc is not None
                    self.proc.write(b'{"id":0,"op":"ping"}\n')
                    await self.proc.drain()
            except HostError:
                return

    async def _read_loop(self) -> None:
        assert self.proc is not None
        try:
            while line := await self.proc.readline():
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if msg.get("t") == "reply":
                    fut = self._pending.pop(msg.get("id"), None)
                    if fut is not None and not fut.done():
                        if msg.get("ok"):
                            fut.set_result(msg.get("result"))
                        else:
                            fut.set_exception(AgentError(str(msg.get("error"))))
                else:
                    await self.events.put(msg)
        finally:
            self.closed.set()
            if self._heartbeat is not None:
                self._heartbeat.cancel()
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(AgentError(f"{self.host.name}: the agent went away"))
            self._pending.clear()
            with contextlib.suppress(asyncio.QueueFull):
                self.events.put_nowait(None)

    async def request(self, op: str, timeout: float | None = 60.0, **args: Any) -> Any:
        if self.proc is None or self.closed.is_set():
            raise AgentError(f"{self.host.name}: the agent is not running")
        rid = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        data = json.dumps({"id": rid, "op": op, **args}).encode() + b"\n"
        async with self._write_lock:
            self.proc.write(data)
            await self.proc.drain()
        return await asyncio.wait_for(fut, timeout)

    async def close(self) -> None:
        """Close stdin (the agent exits on EOF) and the channel."""
        if self.proc is None:
            return
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        self.proc.close_stdin()
        await self.proc.wait(2.0)
        self.proc.terminate()
        if self._reader is not None:
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._reader), 2.0)
            if not self._reader.done():
                self._reader.cancel()
