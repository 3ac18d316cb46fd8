"""Helpers that several test modules share (they began in test_ssh_resilience.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit.sshd import Sshd


def ppid(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def session_process(server: Sshd, pid: int) -> int:
    """The sshd child (of our test listener) that serves the connection `pid` runs under."""
    listener = server.proc.pid if server.proc else -1
    cur = pid
    while True:
        parent = ppid(cur)
        if parent == listener:
            return cur
        if parent <= 1:
            raise AssertionError(f"pid {pid} does not run under the test sshd {listener}")
        cur = parent


@pytest.fixture(scope="module")
def second_sshd(tmp_path_factory: pytest.TempPathFactory):
    """Another sshd instance (own port, own host key): the host behind the jump."""
    server = Sshd(tmp_path_factory.mktemp("sshd2")).start()
    yield server
    server.stop()

