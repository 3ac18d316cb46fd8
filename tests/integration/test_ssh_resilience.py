"""More real-OpenSSH cases: copytruncate, 50 killed sessions, ProxyJump via a second sshd
(see tests/sshd.py for the sshd fixture)."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
from pathlib import Path

from kit import sshd
from kit.ssh_faults import session_process
from kit.ssh_host import make_host, no_connections, ssh_connections
from kit.sshd import descendants
from kit.tail import Collector
from kit.wait import until

from specmon.hosts.ssh import SshHost
from specmon.sources.tail import LogTailer, TailSpec

sshd_server = sshd.sshd_server


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)








# -- rotation by copytruncate ------------------------------------------------------------------


async def test_copytruncate_rotation_over_ssh(sshd_server, tmp_path):
    log = tmp_path / "ct.log"
    log.write_bytes(b"a1\na2\n")
    host = make_host(sshd_server, tmp_path)
    await host.connect()
    tailer = LogTailer(host, [TailSpec("ct", str(log))], history_lines=None)
    col = Collector(tailer)
    try:
        await col.wait_lines(2)
        ino = log.stat().st_ino
        append(log, b"a3\npart")  # an unterminated line when logrotate copies
        await col.wait_lines(3)
        # logrotate's copytruncate: copy the file, then truncate the original in place
        shutil.copyfile(log, tmp_path / "ct.log.1")
        with open(log, "r+b") as f:
            f.truncate(0)
        await until(lambda: col.notices("truncated"), what="truncated notice")
        append(log, b"b1\nb2\n")
        lines = await col.wait_lines(5)
        assert col.texts() == ["a1", "a2", "a3", "b1", "b2"]
        assert log.stat().st_ino == ino and all(x.inode == ino for x in lines)
        assert [(x.offset, x.end) for x in lines[3:]] == [(0, 3), (3, 6)]
        assert not col.notices("rotated")
        assert tailer.positions["ct"].offset == 6
        # a second copytruncate cycle, then a plain append: still exact
        shutil.copyfile(log, tmp_path / "ct.log.2")
        with open(log, "r+b") as f:
            f.truncate(0)
        await until(lambda: len(col.notices("truncated")) == 2, what="second truncation")
        append(log, b"c1\n")
        await col.wait_lines(6)
        assert col.texts()[5:] == ["c1"]
    finally:
        await col.close()
        await host.close()


# -- 50 killed SSH sessions while 10,000 lines are appended -----------------------------------

N_LINES = 10_000
N_KILLS = 50


class Writer(threading.Thread):
    """Appends numbered lines in small writes (often splitting a line between two writes),
    never more than `allowed` lines ahead, so lines are in flight at every kill."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.allowed = 0
        self.written = 0
        self.stop = threading.Event()

    def run(self) -> None:
        pending = b""
        with open(self.path, "ab", buffering=0) as f:
            while self.written < N_LINES and not self.stop.is_set():
                if self.written >= self.allowed:
                    self.stop.wait(0.005)
                    continue
                n = min(13, self.allowed - self.written, N_LINES - self.written)
                data = pending + b"".join(
                    b"line %05d\n" % i for i in range(self.written, self.written + n)
                )
                self.written += n
                cut = len(data) - 4 if self.written < N_LINES else len(data)
                f.write(data[:cut])  # the last 4 bytes go out with the next write
                pending = data[cut:]
                self.stop.wait(0.002)
            if pending:
                f.write(pending)


async def test_fifty_killed_sessions_lose_and_repeat_nothing(sshd_server, tmp_path):
    log = tmp_path / "k.log"
    log.write_bytes(b"")
    # the venv interpreter starts faster than a pyenv shim that `python3` may be
    host = make_host(sshd_server, tmp_path, reconnect_base=0.02, reconnect_max=0.2,
                     python=sys.executable)
    states: list[str] = []
    host.add_state_listener(lambda s: states.append(s.state))
    await host.connect()
    tailer = LogTailer(host, [TailSpec("k", str(log))], history_lines=None)
    col = Collector(tailer)
    writer = Writer(log)
    per_kill = N_LINES // N_KILLS
    killed: set[int] = set()
    try:
        writer.start()
        for k in range(N_KILLS):
            # a fresh agent is up (the previous one's session is gone) ...
            await until(lambda: tailer._client is not None and tailer._client.hello
                        and tailer._client.hello["pid"] not in killed, what=f"agent {k}")
            agent_pid = tailer._client.hello["pid"]
            # ... and lines keep being appended and received through it
            writer.allowed = per_kill * (k + 1)
            seen = len(col.lines)
            await until(lambda n=seen: len(col.lines) > n or col.error,
                        what=f"lines in session {k}")
            victim = session_process(sshd_server, agent_pid)
            os.kill(victim, signal.SIGKILL)  # the sshd process serving our connection only
            killed.add(agent_pid)
        writer.allowed = N_LINES
        await col.wait_lines(N_LINES, timeout=60)
        writer.join(10)
        await until(lambda: len(col.lines) >= N_LINES, what="all lines")
        assert col.texts() == [f"line {i:05d}" for i in range(N_LINES)]
        lines = col.lines
        assert all(b.offset == a.end for a, b in zip(lines, lines[1:], strict=False))
        assert lines[-1].end == log.stat().st_size
        assert tailer.sessions >= N_KILLS + 1
        assert states.count("reconnecting") >= N_KILLS
        assert len(col.notices("resumed")) >= N_KILLS
    finally:
        writer.stop.set()
        await col.close()
        await host.close()
    # every agent we started ended with its session
    await until(lambda: not any(Path(f"/proc/{p}").exists() for p in killed),
                what="killed sessions' agents to exit")


# -- ProxyJump through a second sshd ---------------------------------------------------------


def socket_inodes(pid: int) -> set[int]:
    out = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return out
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(int(target[8:-1]))
    return out


def tcp_inode(local_port: int, remote_port: int) -> int | None:
    """Inode of the loopback TCP socket local_port -> remote_port (from /proc/net/tcp)."""
    for row in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        parts = row.split()
        lport = int(parts[1].split(":")[1], 16)
        rport = int(parts[2].split(":")[1], 16)
        if (lport, rport) == (local_port, remote_port):
            return int(parts[9])
    return None


async def test_proxyjump_through_a_second_sshd(sshd_server, second_sshd, tmp_path):
    kh = tmp_path / "known_hosts"
    kh.write_text(sshd_server.known_hosts_line() + second_sshd.known_hosts_line())
    target = (
        "Host behind\n  HostName 127.0.0.1\n"
        f"  Port {second_sshd.port}\n  User {second_sshd.user}\n"
        f"  IdentityFile {second_sshd.client_key}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {kh}\n  ProxyJump jumpbox\n"
    )
    cfg = sshd_server.write_client_config(tmp_path / "cfg", kh, alias="jumpbox", extra=target)
    await no_connections(sshd_server)
    await no_connections(second_sshd)
    host = SshHost("behind", ssh_config=cfg)
    await host.connect()
    try:
        res = await host.run("echo $SSH_CONNECTION")
        client_ip, client_port, _, server_port = res.stdout.split()
        assert int(server_port) == second_sshd.port
        assert ssh_connections(sshd_server) == 1 and ssh_connections(second_sshd) == 1
        # The target's TCP peer is a socket held by the jump host's sshd, not by us.
        inode = tcp_inode(int(client_port), second_sshd.port)
        assert inode is not None
        assert any(inode in socket_inodes(p) for p in descendants(sshd_server.proc.pid))
        assert inode not in socket_inodes(os.getpid())
        # and the tail works through the jump
        log = tmp_path / "j.log"
        log.write_bytes(b"j1\nj2\n")
        col = Collector(LogTailer(host, [TailSpec("j", str(log))]))
        try:
            await col.wait_lines(2)
            append(log, b"j3\n")
            await col.wait_lines(3)
            assert col.texts() == ["j1", "j2", "j3"]
        finally:
            await col.close()
    finally:
        await host.close()
    assert (client_ip, kh.read_text().count("\n")) == ("127.0.0.1", 2)
