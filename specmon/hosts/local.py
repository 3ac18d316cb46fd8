"""LocalHost: the Host interface over asyncio subprocesses (demo, `specmon connect local`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from typing import TypedDict

from specmon.hosts.base import (
    Command,
    CommandNotFound,
    ConnectionState,
    Host,
    HostError,
    HostProcess,
    PortForward,
    command_text,
)

STREAM_LIMIT = 16 << 20  # agent events can carry a capped 1 MiB line, base64 included


class _SpawnOptions(TypedDict):
    """The keyword arguments both asyncio.create_subprocess_* calls get (typed per key)."""

    stdin: int
    stdout: int
    stderr: int
    limit: int
    start_new_session: bool


class LocalProcess(HostProcess):
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @property
    def pid(self) -> int:
        return self.proc.pid

    def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)

    async def drain(self) -> None:
        assert self.proc.stdin is not None
        try:
            await self.proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise HostError(f"local process {self.proc.pid} closed its stdin") from exc

    async def readline(self) -> bytes:
        assert self.proc.stdout is not None
        try:
            return await self.proc.stdout.readline()
        except (ValueError, asyncio.LimitOverrunError) as exc:
            raise HostError(f"local process {self.proc.pid}: output line too long") from exc

    def close_stdin(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.is_closing():
            self.proc.stdin.close()

    async def read_stderr(self) -> bytes:
        if self.proc.stderr is None:
            return b""
        return await self.proc.stderr.read()

    async def wait(self, timeout: float | None = None) -> int | None:
        try:
            return await asyncio.wait_for(self.proc.wait(), timeout)
        except asyncio.TimeoutError:
            return None

    def terminate(self) -> None:
        # Only the process group we created (start_new_session=True), never anything else.
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGTERM)
        self.close_stdin()


class LocalHost(Host):
    """This machine. Always 'connected'; the agent runs as a local subprocess."""

    def __init__(self, name: str = "local", python: str | None = None) -> None:
        """python: the interpreter for the host agent (default: this one)."""
        super().__init__(name)
        self._python = python
        self._forwards: list[PortForward] = []

    async def connect(self) -> None:
        self._set_state(ConnectionState("connected"))

    async def wait_connected(self) -> None:
        if self.state.state != "connected":
            await self.connect()

    async def close(self) -> None:
        self._set_state(ConnectionState("closed"))

    async def open_process(self, cmd: Command) -> HostProcess:
        kwargs = _SpawnOptions(
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            limit=STREAM_LIMIT,
            start_new_session=True,
        )
        if isinstance(cmd, str):
            proc = await asyncio.create_subprocess_shell(cmd, **kwargs)
        else:
            try:
                proc = await asyncio.create_subprocess_exec(*cmd, **kwargs)
            except OSError as exc:
                raise CommandNotFound(
                    exc.errno, f"cannot run {command_text(cmd)}: {exc.strerror}"
                ) from exc
        return LocalProcess(proc)

    async def forward_port(
        self, remote_port: int, remote_host: str = "127.0.0.1", local_port: int = 0
    ) -> PortForward:
        """Locally the remote port is already reachable: no tunnel needed."""
        return PortForward(remote_port, remote_host, remote_port)

    async def read_file(self, path: str, offset: int = 0, size: int | None = None) -> bytes:
        def _read() -> bytes:
            with open(path, "rb") as f:
                f.seek(offset)
                return f.read() if size is None else f.read(size)

        try:
            return await asyncio.to_thread(_read)
        except OSError as exc:
            raise HostError(f"local: cannot read {path}: {exc.strerror}") from exc

    @property
    def python(self) -> str:
        return self._python or sys.executable or "python3"
