"""The Host interface: where things run (local machine or an SSH host), nothing about what.

Everything above `hosts/` talks to a `Host` only, so the demo, `specmon connect local` and a
remote GPU box follow the same code paths. A host also exposes an observable connection state
(connected / reconnecting in N s / failed) for the UI to show.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import errno
import shlex
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

Command = str | Sequence[str]

StateName = Literal["connecting", "connected", "reconnecting", "failed", "closed"]


class HostError(Exception):
    """A host could not be reached or used; the message is meant for the user."""


class HostKeyError(HostError):
    """The host key could not be verified: never retried automatically."""


class HostKeyUnknown(HostKeyError):
    """The host is not in known_hosts (pass --accept-new to add it)."""

    def __init__(self, message: str, fingerprint: str) -> None:
        super().__init__(message)
        self.fingerprint = fingerprint


class HostKeyChanged(HostKeyError):
    """known_hosts holds a different key for this host: possible man-in-the-middle."""


class CommandNotFound(HostError, OSError):
    """A local program could not be started (also an OSError, as subprocess would raise)."""


class HostAuthError(HostError):
    """Authentication failed: retrying with the same credentials cannot help."""


@dataclass(frozen=True)
class ConnectionState:
    """What the UI shows for a host. `retry_at` is a time.monotonic() deadline."""

    state: StateName
    reason: str | None = None
    next_in_s: float | None = None
    retry_at: float | None = None
    attempt: int = 0
    since: float = field(default_factory=time.monotonic)

    def seconds_left(self) -> float | None:
        """Countdown until the next reconnect attempt (None when not reconnecting)."""
        if self.retry_at is None:
            return None
        return max(0.0, self.retry_at - time.monotonic())

    def describe(self) -> str:
        if self.state == "reconnecting":
            left = self.seconds_left()
            return f"reconnecting in {left:.0f}s" if left is not None else "reconnecting"
        if self.state == "failed":
            return f"failed: {self.reason}"
        return self.state


StateListener = Callable[[ConnectionState], None]


@dataclass(frozen=True)
class CommandResult:
    rc: int | None
    stdout: str
    stderr: str


class HostProcess(abc.ABC):
    """A running command with binary stdin/stdout pipes."""

    @abc.abstractmethod
    def write(self, data: bytes) -> None: ...

    @abc.abstractmethod
    async def drain(self) -> None: ...

    @abc.abstractmethod
    async def readline(self) -> bytes:
        """Next stdout line including b"\\n"; b"" at end of stream."""

    @abc.abstractmethod
    def close_stdin(self) -> None: ...

    @abc.abstractmethod
    async def read_stderr(self) -> bytes:
        """Whatever the process wrote to stderr (call after stdout ended)."""

    @abc.abstractmethod
    async def wait(self, timeout: float | None = None) -> int | None: ...

    @abc.abstractmethod
    def terminate(self) -> None: ...


@dataclass
class PortForward:
    """A local TCP port that reaches `remote_host:remote_port` as seen from the host."""

    local_port: int
    remote_host: str
    remote_port: int
    _close: Callable[[], None] | None = None

    def close(self) -> None:
        if self._close is not None:
            self._close()
            self._close = None


def command_text(cmd: Command) -> str:
    """A shell command line; argv lists are quoted so remote text stays data."""
    return cmd if isinstance(cmd, str) else shlex.join(cmd)


class Host(abc.ABC):
    """One machine specmon observes. Implementations: LocalHost, SshHost."""

    name: str

    def __init__(self, name: str) -> None:
        self.name = name
        self._listeners: list[StateListener] = []
        self._state = ConnectionState("connecting")

    # -- connection state ------------------------------------------------------------------
    @property
    def state(self) -> ConnectionState:
        return self._state

    def add_state_listener(self, listener: StateListener) -> Callable[[], None]:
        """Call `listener` on every state change; returns a function that removes it."""
        self._listeners.append(listener)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                self._listeners.remove(listener)

        return remove

    def _set_state(self, state: ConnectionState) -> None:
        self._state = state
        for listener in list(self._listeners):
            listener(state)

    # -- lifecycle -------------------------------------------------------------------------
    @abc.abstractmethod
    async def connect(self) -> None:
        """Connect once; raise HostError (with a user-facing message) on failure."""

    @abc.abstractmethod
    async def wait_connected(self) -> None:
        """Return once connected (waiting through reconnects); raise HostError if failed."""

    @abc.abstractmethod
    async def close(self) -> None: ...

    async def __aenter__(self) -> Host:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- commands --------------------------------------------------------------------------
    @abc.abstractmethod
    async def open_process(self, cmd: Command) -> HostProcess:
        """Start a command with pipes (one SSH channel on the shared connection)."""

    async def run(
        self, cmd: Command, *, input: bytes | None = None, timeout: float | None = 60.0
    ) -> CommandResult:
        """Run a command to completion: (rc, stdout, stderr) decoded with errors='replace'."""
        proc = await self.open_process(cmd)
        try:
            if input:
                proc.write(input)
                await proc.drain()
            proc.close_stdin()

            async def collect() -> bytes:
                chunks = []
                while line := await proc.readline():
                    chunks.append(line)
                return b"".join(chunks)

            out = await asyncio.wait_for(collect(), timeout)
            err = await proc.read_stderr()
            rc = await proc.wait(timeout)
        finally:
            proc.terminate()
        return CommandResult(
            rc, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
        )

    async def stream(self, cmd: Command, stdin: bytes | None = None) -> AsyncGenerator[str, None]:
        """Yield a command's stdout lines (decoded, without the newline) until it exits.

        `stdin` is written first and stdin then stays OPEN (agents exit when it closes);
        leaving the iterator closes stdin and ends the command. This is the `StreamHost`
        protocol of specmon.sources.gpu_poll, so a Host can feed the GPU sources too. A program
        that does not exist raises FileNotFoundError, locally and over SSH (exit 127), so
        callers can say "nvidia-smi not found" instead of "it printed nothing".
        """
        try:
            proc = await self.open_process(cmd)
        except CommandNotFound as exc:
            if exc.errno == errno.ENOENT:
                raise FileNotFoundError(errno.ENOENT, str(exc)) from exc
            raise
        try:
            if stdin is not None:
                proc.write(stdin)
                await proc.drain()
            while line := await proc.readline():
                yield line.rstrip(b"\n").decode("utf-8", "replace")
            # stdout ended: stderr ends with it (read it before the exit status: over SSH
            # what is unread when the channel closes is gone)
            try:
                raw_err = await asyncio.wait_for(proc.read_stderr(), 5.0)
            except asyncio.TimeoutError:
                raw_err = b""
            if await proc.wait(5.0) == 127:
                err = raw_err.decode("utf-8", "replace").strip()
                raise FileNotFoundError(
                    errno.ENOENT,
                    f"{self.name}: {err.splitlines()[-1] if err else 'command not found'}",
                )
        finally:
            proc.close_stdin()
            proc.terminate()

    @abc.abstractmethod
    async def forward_port(
        self, remote_port: int, remote_host: str = "127.0.0.1", local_port: int = 0
    ) -> PortForward:
        """Make `remote_host:remote_port` (as seen from the host) reachable on localhost."""

    async def read_file(self, path: str, offset: int = 0, size: int | None = None) -> bytes:
        """Bytes of a file on the host (from `offset`, at most `size`)."""
        cmd = f"tail -c +{int(offset) + 1} -- {shlex.quote(path)}"
        if size is not None:
            cmd += f" | head -c {int(size)}"
        proc = await self.open_process(cmd)
        proc.close_stdin()
        chunks = []
        while line := await proc.readline():
            chunks.append(line)
        err = await proc.read_stderr()
        rc = await proc.wait(30)
        if rc not in (0, None) and not chunks:
            raise HostError(
                f"{self.name}: cannot read {path}: "
                f"{err.decode('utf-8', 'replace').strip() or f'exit {rc}'}"
            )
        return b"".join(chunks)

    @property
    def python(self) -> str:
        """The Python interpreter to run the agent with on this host."""
        return "python3"
