"""Helpers that several test modules share (they began in test_ssh.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from kit.sshd import children
from kit.wait import until
from specmon.hosts.ssh import SshHost


def make_host(sshd, tmp_path: Path, *, known: bool = True, alias: str = "testbox",
              extra: str = "", **kw) -> SshHost:
    kh = tmp_path / "known_hosts"
    if known:
        sshd.write_known_hosts(kh)
    cfg = sshd.write_client_config(tmp_path / "ssh_config", kh, alias=alias, extra=extra)
    kw.setdefault("reconnect_base", 0.1)
    return SshHost(alias, ssh_config=cfg, **kw)


def ssh_connections(sshd) -> int:
    """Connections open on this sshd: the listener forks one session process per connection."""
    return len(children(sshd.proc.pid))


async def no_connections(sshd) -> None:
    """Earlier tests' sessions (and the readiness probe) end a moment after they close."""
    await until(lambda: ssh_connections(sshd) == 0, what="sshd sessions to end")


def record_cmd(cfg: Path, out: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "specmon", "record", "testbox", "--ssh-config", str(cfg),
            "--out", str(out), *args]

