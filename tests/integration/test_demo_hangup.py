"""`specmon demo` whose terminal goes away (the window closed, the SSH session dropped): told
SIGHUP, it ends and its simulated servers with it. With the terminal gone, Textual's writer
thread dies on EIO and the next refresh blocks the event loop for good, so the exit the
SIGHUP handler asked for never ran: the demo and both servers stayed up, forever."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

from kit.wait import wait_until


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_a_demo_whose_terminal_is_gone_ends_on_sighup_with_its_servers(tmp_path: Path) -> None:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "HOME": str(tmp_path),
           "XDG_CONFIG_HOME": str(tmp_path / "cfg"), "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "specmon", "demo"], stdin=slave,
                            stdout=slave, stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    try:
        out = bytearray()
        deadline = time.monotonic() + 90
        while b"tok/s" not in out and time.monotonic() < deadline and proc.poll() is None:
            if select.select([master], [], [], 0.2)[0]:
                out.extend(os.read(master, 65536))
        assert b"tok/s" in out, out[-2000:]  # drawn, servers running
        wait_until(lambda: len([p for p in _children(proc.pid) if _alive(p)]) >= 2, 30,
                   "the two servers")
        servers = [p for p in _children(proc.pid) if _alive(p)]
        os.close(master)  # the terminal goes away; its writes now fail
        master = -1
        time.sleep(2.0)  # Textual's refreshes meet the dead terminal meanwhile
        proc.send_signal(signal.SIGHUP)
        proc.wait(timeout=60)
        assert proc.returncode in (0, 128 + signal.SIGHUP, -signal.SIGHUP), proc.returncode
        wait_until(lambda: not [p for p in servers if _alive(p)], 30, f"servers {servers} gone")
    finally:
        if master >= 0:
            os.close(master)
        if proc.poll() is None:  # our own child, still up after a failure: stopped
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
