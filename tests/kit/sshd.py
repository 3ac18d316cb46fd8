"""A real OpenSSH sshd on 127.0.0.1 for integration tests and the tail benchmark.

It generates its own host and client keys, writes its own sshd_config (free port, own
authorized_keys, no PAM, no passwords, pid file in its temp dir), runs `sshd -D -e` and, at the
end, kills exactly the processes it started (the listener and the session processes under it).
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

SSHD_CANDIDATES = ("/usr/sbin/sshd", "/usr/local/sbin/sshd")


def find_sshd() -> str:
    for cand in (*SSHD_CANDIDATES, shutil.which("sshd")):
        if cand and os.access(cand, os.X_OK):
            return cand
    raise RuntimeError("sshd not found: run `make sysdeps` (installs openssh-server)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(path: Path, kind: str = "ed25519") -> Path:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", "specmon-test", "-f", str(path)],
        check=True, capture_output=True,
    )
    return path


def children(pid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(name))
    return out


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        for child in children(todo.pop()):
            found.append(child)
            todo.append(child)
    return found


def descendant_cmdlines(pid: int) -> dict[int, bytes]:
    """{pid: raw /proc cmdline} of every live descendant of `pid`."""
    out = {}
    for child in descendants(pid):
        try:
            out[child] = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
    return out


class Sshd:
    """One sshd instance; `start()` returns once it accepts TCP connections."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.user = getpass.getuser()
        self.host_key = root / "host_ed25519"
        self.client_key = root / "client_ed25519"
        self.config = root / "sshd_config"
        self.log = root / "sshd.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def ssh_argv(self, known_hosts: Path, remote: str) -> list[str]:
        """OpenSSH's own client running `remote` on this sshd (the benchmarks' reference)."""
        return ["ssh", "-q", "-p", str(self.port), "-i", str(self.client_key),
                "-o", "IdentitiesOnly=yes", "-o", f"UserKnownHostsFile={known_hosts}",
                "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
                f"{self.user}@127.0.0.1", remote]

    def start(self) -> Sshd:
        if not self.host_key.exists():
            keygen(self.host_key)
            keygen(self.client_key)
            (self.root / "authorized_keys").write_bytes(
                self.client_key.with_suffix(".pub").read_bytes()
            )
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # privilege separation dir
        self.config.write_text(
            f"Port {self.port}\n"
            "ListenAddress 127.0.0.1\n"
            f"HostKey {self.host_key}\n"
            f"PidFile {self.root / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {self.root / 'authorized_keys'}\n"
            "UsePAM no\nStrictModes no\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
            "PermitRootLogin prohibit-password\nAllowTcpForwarding yes\n"
            "X11Forwarding no\nPrintMotd no\nLogLevel ERROR\n"
            "MaxSessions 64\nMaxStartups 64\n"
        )
        self.proc = subprocess.Popen(
            [find_sshd(), "-D", "-e", "-f", str(self.config)],
            stdout=subprocess.DEVNULL, stderr=open(self.log, "ab"),
        )
        deadline = time.monotonic() + 15
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited: {self.log.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("sshd did not start listening") from None
                time.sleep(0.02)

    def known_hosts_line(self, key: Path | None = None) -> str:
        kind, data = (key or self.host_key).with_suffix(".pub").read_text().split()[:2]
        return f"[127.0.0.1]:{self.port} {kind} {data}\n"

    def write_known_hosts(self, path: Path, key: Path | None = None) -> Path:
        path.write_text(self.known_hosts_line(key))
        return path

    def write_client_config(self, path: Path, known_hosts: Path, alias: str = "testbox",
                            extra: str = "") -> Path:
        path.write_text(
            f"Host {alias}\n"
            "  HostName 127.0.0.1\n"
            f"  Port {self.port}\n"
            f"  User {self.user}\n"
            f"  IdentityFile {self.client_key}\n"
            "  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {known_hosts}\n"
            f"{extra}"
        )
        return path

    def session_pids(self) -> list[int]:
        """Every process under the listener: per-connection sshd processes and their children."""
        return descendants(self.proc.pid) if self.proc else []

    def drop_connections(self) -> list[int]:
        """Kill every session process this sshd started (the listener keeps listening)."""
        pids = self.session_pids()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return pids

    def stop(self) -> None:
        if self.proc is None:
            return
        self.drop_connections()
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.proc = None


@pytest.fixture(scope="session")
def sshd_server(tmp_path_factory: pytest.TempPathFactory):
    server = Sshd(tmp_path_factory.mktemp("sshd")).start()
    yield server
    server.stop()
