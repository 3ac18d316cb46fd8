"""SshHost: the Host interface over one asyncssh connection per host.

Honours ~/.ssh/config (aliases, User, Port, IdentityFile, ProxyJump, UserKnownHostsFile), the
SSH agent, default keys and known_hosts. Host keys are checked like OpenSSH with
StrictHostKeyChecking=yes, or accept-new when asked; a changed key is always refused. Password
and keyboard-interactive authentication are off: specmon never asks for or stores a password.
Every command is a channel on the one connection; a dropped connection is re-established with
exponential backoff and jitter while the state says "reconnecting in Ns".
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
import warnings
from pathlib import Path
from typing import Any

with warnings.catch_warnings():
    # cryptography 48+ deprecates DSA, and asyncssh names its DSA types at import: ten lines of
    # warnings on every command's stderr that are about asyncssh, not the user's keys
    warnings.filterwarnings("ignore", message="DSA is deprecated")
    import asyncssh

from specmon.hosts.base import (
    Command,
    ConnectionState,
    Host,
    HostAuthError,
    HostError,
    HostKeyChanged,
    HostKeyError,
    HostKeyUnknown,
    HostProcess,
    PortForward,
    command_text,
)
from specmon.sshtarget import SshTarget, parse_target


def _hostpat(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


LINE_LIMIT = 16 << 20  # like LocalHost's stream limit: a longer output line is an error
READ_SIZE = 1 << 16


class _SshProcess(HostProcess):
    def __init__(self, proc: asyncssh.SSHClientProcess) -> None:
        self.proc = proc
        self._buf = b""  # read from stdout, not yet returned: self._buf[self._pos:]
        self._pos = 0
        self._eof = False

    def write(self, data: bytes) -> None:
        try:
            self.proc.stdin.write(data)
        except (asyncssh.Error, BrokenPipeError, OSError) as exc:
            raise HostError(f"channel closed: {exc}") from exc

    async def drain(self) -> None:
        try:
            await self.proc.stdin.drain()
        except (asyncssh.Error, BrokenPipeError, OSError) as exc:
            raise HostError(f"channel closed: {exc}") from exc

    async def readline(self) -> bytes:
        """Next stdout line, read in chunks; a line over LINE_LIMIT raises HostError instead
        of filling memory (asyncssh's own readline has no limit)."""
        i = self._buf.find(b"\n", self._pos)
        if i >= 0:
            line = self._buf[self._pos:i + 1]
            self._pos = i + 1
            return line
        parts = [self._buf[self._pos:]]
        size = len(parts[0])
        self._buf, self._pos = b"", 0
        while not self._eof:
            try:
                chunk = await self.proc.stdout.read(READ_SIZE)
            except (asyncssh.Error, BrokenPipeError, OSError):
                return b""  # the connection went away: end of stream for the reader
            if not chunk:
                self._eof = True
                break
            j = chunk.find(b"\n")
            if j >= 0:
                parts.append(chunk[:j + 1])
                self._buf, self._pos = chunk, j + 1
                return b"".join(parts)
            parts.append(chunk)
            size += len(chunk)
            if size > LINE_LIMIT:
                raise HostError(f"output line over {LINE_LIMIT} bytes")
        return b"".join(parts)

    def close_stdin(self) -> None:
        with contextlib.suppress(asyncssh.Error, OSError):
            self.proc.stdin.write_eof()

    async def read_stderr(self) -> bytes:
        try:
            return await asyncio.wait_for(self.proc.stderr.read(), 5)
        except (asyncssh.Error, OSError, asyncio.TimeoutError):
            return b""

    async def wait(self, timeout: float | None = None) -> int | None:
        try:
            res = await asyncio.wait_for(self.proc.wait(), timeout)
        except (asyncssh.Error, OSError, asyncio.TimeoutError):
            return None
        return res.exit_status

    def terminate(self) -> None:
        self.proc.close()


class SshHost(Host):
    """One SSH host: one connection, channels multiplexed, reconnect with backoff + jitter."""

    def __init__(
        self,
        host: str,
        *,
        user: str | None = None,
        port: int | None = None,
        ssh_config: str | os.PathLike[str] | None = None,
        known_hosts: str | os.PathLike[str] | None = None,
        accept_new: bool = False,
        client_keys: list[str] | None = None,
        keepalive_interval: float = 10.0,
        keepalive_count_max: int = 3,
        connect_timeout: float = 15.0,
        reconnect_base: float = 1.0,
        reconnect_max: float = 30.0,
        name: str | None = None,
        python: str = "python3",
    ) -> None:
        """python: the host's interpreter for the agent (any Python >= 3.8 on its PATH)."""
        super().__init__(name or host)
        self._python = python
        self.target = SshTarget(host, user, port)
        self.ssh_config = ssh_config
        self.known_hosts = known_hosts
        self.accept_new = accept_new
        self.client_keys = client_keys
        self.keepalive_interval = keepalive_interval
        self.keepalive_count_max = keepalive_count_max
        self.connect_timeout = connect_timeout
        self.reconnect_base = reconnect_base
        self.reconnect_max = reconnect_max
        self._conn: asyncssh.SSHClientConnection | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._closing = False
        self._changed = asyncio.Event()
        self._forwards: list[_Forward] = []
        self.added_host_key: str | None = None  # known_hosts line written by accept-new
        self._session_keys: list[str] = []  # accepted, but known_hosts cannot keep them
        self.notes: list[str] = []  # things the user should know (one line each)

    @classmethod
    def from_target(cls, text: str, **kwargs: Any) -> SshHost:
        t = parse_target(text)
        kwargs.setdefault("name", t.host if t.port is None else f"{t.host}:{t.port}")
        return cls(t.host, user=t.user, port=t.port, **kwargs)

    # -- state -----------------------------------------------------------------------------
    def _set_state(self, state: ConnectionState) -> None:
        super()._set_state(state)
        self._changed.set()
        self._changed = asyncio.Event()

    @property
    def python(self) -> str:
        return self._python

    # -- connecting --------------------------------------------------------------------------
    def _base_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = dict(
            keepalive_interval=self.keepalive_interval,
            keepalive_count_max=self.keepalive_count_max,
            connect_timeout=self.connect_timeout,
            password_auth=False,
            kbdint_auth=False,
        )
        if self.ssh_config is not None:
            kw["config"] = [str(self.ssh_config)]
        if self.target.user is not None:
            kw["username"] = self.target.user
        if self.target.port is not None:
            kw["port"] = self.target.port
        if self.known_hosts is not None:
            kw["known_hosts"] = str(self.known_hosts)
        if self.client_keys is not None:
            kw["client_keys"] = self.client_keys
        return kw

    def _kwargs(self) -> dict[str, Any]:
        """connect() arguments; known_hosts files that do not exist count as empty (like
        OpenSSH) instead of failing, and no file at all means every key is unknown. Keys are
        matched like OpenSSH: on a port other than 22 only `[host]:port` entries count."""
        kw = self._base_kwargs()
        kw["known_hosts"] = _openssh_matcher(self._known_hosts(self._options()))
        return kw

    def _known_hosts(self, opts: asyncssh.SSHClientConnectionOptions) -> asyncssh.SSHKnownHosts:
        """The known_hosts files' entries plus the keys accepted for this session only."""
        text = []
        for f in self._known_hosts_files(opts):
            if f.is_file():
                text.append(f.read_text(errors="replace"))
        text.extend(self._session_keys)
        return asyncssh.import_known_hosts("\n".join(text))

    def _options(self) -> asyncssh.SSHClientConnectionOptions:
        """The options connect() resolves (alias, HostName, Port, known_hosts). Built directly,
        asyncssh loads no config unless told: `config=()` is its "~/.ssh/config" default, the
        one connect() uses, so a key lookup sees the alias's Port, not port 22."""
        kw = self._base_kwargs()
        kw.pop("client_keys", None)
        kw.setdefault("config", ())
        return asyncssh.SSHClientConnectionOptions(host=self.target.host, client_keys=None,
                                                   **kw)

    def _options_or_none(self) -> asyncssh.SSHClientConnectionOptions | None:
        """`_options()`, or None where the config cannot be read (that error is said apart)."""
        try:
            return self._options()
        except (OSError, ValueError, asyncssh.Error):
            return None

    def _known_hosts_files(self, opts: asyncssh.SSHClientConnectionOptions) -> list[Path]:
        kh = opts.known_hosts
        if isinstance(kh, (str, os.PathLike)):
            return [Path(kh).expanduser()]
        if isinstance(kh, (list, tuple)) and kh and all(
            isinstance(p, (str, os.PathLike)) for p in kh
        ):
            return [Path(p).expanduser() for p in kh]
        return [Path("~/.ssh/known_hosts").expanduser()]

    def _where(self) -> str:
        t = self.target
        where = t.host if t.port is None else f"{t.host}:{t.port}"
        return f"{t.user}@{where}" if t.user else where

    async def _connect_once(self) -> asyncssh.SSHClientConnection:
        """One attempt, errors mapped to HostError subclasses with user-facing messages."""
        try:
            return await asyncssh.connect(self.target.host, **self._kwargs())
        except asyncssh.HostKeyNotVerifiable as exc:
            raise await self._host_key_problem(exc) from exc
        except asyncssh.PermissionDenied as exc:
            raise HostAuthError(
                f"{self._where()}: authentication failed ({exc.reason}); specmon uses the SSH "
                "agent and your keys (IdentityFile, ~/.ssh/id_*) and never asks for a password"
            ) from exc
        except asyncssh.Error as exc:
            raise HostError(f"{self._where()}: {exc.reason}") from exc
        except (OSError, asyncio.TimeoutError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            code = getattr(exc, "errno", None)
            if isinstance(code, int) and reason.startswith("Connect call failed"):
                reason = os.strerror(code)  # (asyncio's words: "... ('127.0.0.1', 1)")
            jump = getattr(self._options_or_none(), "tunnel", None)
            if jump and not isinstance(exc, asyncio.TimeoutError):
                reason += f" (through ProxyJump {jump}: either hop)"
            filename = getattr(exc, "filename", None)
            if filename:  # e.g. a missing IdentityFile: name the file, not only the errno
                what = "IdentityFile " if _is_identity(
                    filename, self._base_kwargs().get("config")) else ""
                reason = f"{what}{filename}: {reason}"
            raise HostError(f"{self._where()}: {reason}") from exc
        except ValueError as exc:  # bad config values (asyncssh raises ValueError)
            raise HostError(f"{self._where()}: {exc}") from exc

    async def _host_key_problem(self, exc: asyncssh.HostKeyNotVerifiable) -> HostError:
        """Tell an unknown key (accept-new can add it) from a changed or revoked one (always
        refused), and a problem of the ProxyJump host from one of the target."""
        opts = self._options()
        host = opts.host_key_alias or opts.host
        port = int(opts.port)
        pat = _hostpat(host, port)
        jump = getattr(opts, "tunnel", None)
        try:
            key = await asyncssh.get_server_host_key(
                self.target.host, port, config=self._base_kwargs().get("config", ())
            )
        except (asyncssh.Error, OSError, asyncio.TimeoutError, ValueError) as exc2:
            if isinstance(jump, str) and jump:
                return await self._jump_key_problem(jump, exc)
            return HostKeyError(f"{self._where()}: host key not verifiable ({exc.reason}); "
                                f"fetching it again failed: {exc2}")
        if key is None:
            return HostKeyError(f"{self._where()}: {exc.reason}")
        fp = key.get_fingerprint("sha256")
        alg = key.get_algorithm()
        files = self._known_hosts_files(opts)
        trusted, _ca, revoked = _openssh_matcher(self._known_hosts(opts))(host, "", port)[:3]
        if key.public_data in [k.public_data for k in revoked]:
            return HostKeyError(
                f"host key {alg} {fp} of {pat} is marked @revoked in {files[0]}; refusing to "
                "connect (and not adding it)")
        known = [k.public_data for k in trusted]
        if known and key.public_data not in known:
            return HostKeyChanged(
                f"HOST KEY CHANGED for {pat}: the server offers {alg} {fp} but "
                f"{files[0]} holds a different key (possible man-in-the-middle); refusing to "
                f"connect. If the change is expected, remove the old key with "
                f"ssh-keygen -R '{pat}' -f {files[0]}"
            )
        if known:  # the key is known: the failure is elsewhere (e.g. the ProxyJump host)
            if isinstance(jump, str) and jump:
                return await self._jump_key_problem(jump, exc)
            return HostKeyError(f"{self._where()}: {exc.reason}")
        if self.accept_new:
            line = f"{pat} {key.export_public_key('openssh').decode().strip()}\n"
            if _can_store(files[0]):
                _append_known_host(files[0], line)
            else:  # e.g. UserKnownHostsFile /dev/null: trust it for this session only
                self._session_keys.append(line)
                self.notes.append(f"accepted host key {alg} {fp} for {pat} for this session "
                                  f"only: {files[0]} cannot keep it")
            self.added_host_key = line
            return _Retry()
        return HostKeyUnknown(
            f"unknown host key for {pat}: {alg} {fp} (not in {files[0]}); check the "
            f"fingerprint, then pass --accept-new to add it",
            fp,
        )

    async def _jump_key_problem(self, jump: str, exc: asyncssh.HostKeyNotVerifiable
                                ) -> HostError:
        """The target's key could not be checked through the ProxyJump host: name the jump
        host and say what is wrong with its key (never added automatically)."""
        name = jump.rsplit("@", 1)[-1]
        cfg = self._base_kwargs().get("config", ())  # (): ~/.ssh/config, as connect() reads it
        try:
            jopts = asyncssh.SSHClientConnectionOptions(host=name.split(":")[0], config=cfg,
                                                        client_keys=None)
            jhost, jport = jopts.host_key_alias or jopts.host, int(jopts.port)
            key = await asyncssh.get_server_host_key(jopts.host, jport)
        except (asyncssh.Error, OSError, asyncio.TimeoutError, ValueError) as exc2:
            return HostKeyError(f"{self._where()}: host key not verifiable through jump host "
                                f"{jump} ({exc.reason}); reaching {jump} failed: {exc2}")
        if key is None:
            return HostKeyError(f"{self._where()}: jump host {jump}: {exc.reason}")
        pat = _hostpat(jhost, jport)
        fp = key.get_fingerprint("sha256")
        files = self._known_hosts_files(jopts)
        trusted, _ca, revoked = _openssh_matcher(self._known_hosts(jopts))(jhost, "", jport)[:3]
        if key.public_data in [k.public_data for k in revoked]:
            return HostKeyError(f"jump host {jump}: host key {fp} of {pat} is marked @revoked "
                                f"in {files[0]}; refusing to connect")
        if trusted and key.public_data not in [k.public_data for k in trusted]:
            return HostKeyChanged(
                f"HOST KEY CHANGED for jump host {jump} ({pat}): it offers {fp} but "
                f"{files[0]} holds a different key (possible man-in-the-middle); refusing to "
                f"connect")
        if not trusted:
            return HostKeyUnknown(
                f"unknown host key for jump host {jump} ({pat}): {key.get_algorithm()} {fp} "
                f"(not in {files[0]}); check the fingerprint and add it (specmon does not "
                "add a jump host's key)", fp)
        return HostKeyError(f"{self._where()}: through jump host {jump}: {exc.reason}")

    async def _establish(self) -> asyncssh.SSHClientConnection:
        try:
            return await self._connect_once()
        except _Retry:
            pass
        try:
            return await self._connect_once()
        except _Retry:  # accepted, yet still not trusted: say why instead of "retry"
            raise HostKeyError(f"{self._where()}: the host key was accepted but is still not "
                               "trusted on the second attempt (check UserKnownHostsFile and "
                               "HostKeyAlias in your ssh config)") from None

    async def connect(self) -> None:
        """First connection: one attempt (plus one after accept-new), raising HostError."""
        self._closing = False
        self._set_state(ConnectionState("connecting"))
        try:
            conn = await self._establish()
        except HostError as exc:
            self._set_state(ConnectionState("failed", reason=str(exc)))
            raise
        await self._adopt(conn)

    async def _adopt(self, conn: asyncssh.SSHClientConnection) -> None:
        self._conn = conn
        for fwd in self._forwards:
            # A forward that cannot be re-opened (its local port taken meanwhile) must not
            # keep the host down; its listener stays closed.
            with contextlib.suppress(HostError):
                await fwd.open(conn)
        self._set_state(ConnectionState("connected"))
        self._watcher = asyncio.create_task(self._watch(conn))

    async def _watch(self, conn: asyncssh.SSHClientConnection) -> None:
        await conn.wait_closed()
        if self._closing or self._conn is not conn:
            return
        self._conn = None
        await self._reconnect_loop("connection lost")

    def backoff(self, attempt: int) -> float:
        """Exponential backoff with jitter: base * 2**attempt capped, times U(0.5, 1)."""
        delay = min(self.reconnect_max, self.reconnect_base * (2 ** min(attempt, 30)))
        return delay * random.uniform(0.5, 1.0)

    async def _reconnect_loop(self, reason: str) -> None:
        attempt = 0
        while not self._closing:
            delay = self.backoff(attempt)
            self._set_state(ConnectionState(
                "reconnecting", reason=reason, next_in_s=delay,
                retry_at=time.monotonic() + delay, attempt=attempt + 1,
            ))
            await asyncio.sleep(delay)
            if self._closing:
                return
            try:
                conn = await self._establish()
            except (HostKeyError, HostAuthError) as exc:
                self._set_state(ConnectionState("failed", reason=str(exc)))
                return
            except HostError as exc:
                reason = str(exc)
                attempt += 1
                continue
            await self._adopt(conn)
            return

    async def wait_connected(self) -> None:
        while True:
            st = self.state
            if st.state == "connected" and self._conn is not None:
                return
            if st.state in ("failed", "closed"):
                raise HostError(f"{self.name}: {st.describe()}")
            await self._changed.wait()

    async def close(self) -> None:
        self._closing = True
        for fwd in self._forwards:
            fwd.shut()
        self._forwards.clear()
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.wait_closed(), 5)
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._watcher
        self._set_state(ConnectionState("closed"))

    # -- channels ----------------------------------------------------------------------------
    async def open_process(self, cmd: Command) -> HostProcess:
        await self.wait_connected()
        conn = self._conn
        assert conn is not None
        try:
            proc = await conn.create_process(command_text(cmd), encoding=None)
        except (asyncssh.Error, OSError) as exc:
            raise HostError(f"{self.name}: cannot start {command_text(cmd)!r}: {exc}") from exc
        return _SshProcess(proc)

    async def forward_port(
        self, remote_port: int, remote_host: str = "127.0.0.1", local_port: int = 0
    ) -> PortForward:
        """A local listener tunnelled over the connection; re-opened on the same local port
        after a reconnect, so pollers keep their URL."""
        await self.wait_connected()
        assert self._conn is not None
        fwd = _Forward(remote_host, remote_port, local_port)
        await fwd.open(self._conn)
        self._forwards.append(fwd)

        def close() -> None:
            fwd.shut()
            with contextlib.suppress(ValueError):
                self._forwards.remove(fwd)

        return PortForward(fwd.local_port, remote_host, remote_port, close)


class _Retry(HostError):
    """Internal: the host key was just added (accept-new); connect again."""

    def __init__(self) -> None:
        super().__init__("retry")


class _Forward:
    def __init__(self, remote_host: str, remote_port: int, local_port: int) -> None:
        self.remote_host = remote_host
        self.remote_port = remote_port
        self.local_port = local_port
        self.listener: asyncssh.SSHListener | None = None

    async def open(self, conn: asyncssh.SSHClientConnection) -> None:
        try:
            self.listener = await conn.forward_local_port(
                "127.0.0.1", self.local_port, self.remote_host, self.remote_port
            )
        except (asyncssh.Error, OSError) as exc:
            raise HostError(
                f"cannot forward 127.0.0.1:{self.local_port} to "
                f"{self.remote_host}:{self.remote_port}: {exc}"
            ) from exc
        self.local_port = self.listener.get_port()

    def shut(self) -> None:
        if self.listener is not None:
            self.listener.close()
            self.listener = None


def _append_known_host(path: Path, line: str) -> None:
    """Append one known_hosts line, creating ~/.ssh (0700) and the file (0600) as needed."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    prefix = ""
    if path.exists() and path.stat().st_size > 0:
        with open(path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                prefix = "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a") as f:
        f.write(prefix + line)


def _openssh_matcher(kh: asyncssh.SSHKnownHosts) -> Any:
    """A known_hosts matcher with OpenSSH's rule: on a port other than 22 only `[host]:port`
    entries match (asyncssh falls back to the bare host name, which would trust another
    port's key and hide an `@revoked` entry of this port)."""

    def match(host: str, addr: str, port: int | None) -> Any:
        names = [n for n in (host, addr) if n]
        if port and port != 22:
            names = [f"[{n}]:{port}" for n in names]
        out: list[list[Any]] = [[] for _ in range(7)]
        for n in dict.fromkeys(names):
            for acc, got in zip(out, kh.match(n, "", None), strict=True):
                acc.extend(x for x in got if x not in acc)
        return tuple(out)

    return match


def _can_store(path: Path) -> bool:
    """Can accept-new append to this known_hosts file? (not /dev/null, a folder, ...)"""
    try:
        if path.exists():
            return path.is_file() and os.access(path, os.W_OK)
    except OSError:
        return False
    return True  # created by _append_known_host


def _is_identity(filename: str, config: Any) -> bool:
    """Is `filename` an IdentityFile of the ssh config files? (for the error message)"""
    for cfg in config or ():
        try:
            text = Path(cfg).expanduser().read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            parts = line.strip().split(None, 1)
            if len(parts) == 2 and parts[0].lower() == "identityfile":
                if os.path.expanduser(parts[1].strip().strip('"')) == filename:
                    return True
    return False
