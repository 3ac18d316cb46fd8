"""Helpers that several test modules share (they began in test_sim_server.py)."""

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid:
                out.append(int(d.name))
    return out


def cmdline(pid: int) -> str:
    return (Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]).decode()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not a process left behind for our purposes
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
def launch(tmp_path):
    procs = []

    def start(*args, env_extra=None, env_drop=()):
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
        for k in env_drop:
            env.pop(k, None)
        env.update(env_extra or {})
        log = tmp_path / f"server-{port}.log"
        cmd = [sys.executable, "-m", "specmon", "sim", "server", "--port", str(port),
               "--log-file", str(log), "--sim-dir", str(tmp_path / "host"), "--seed", "1",
               *args]  # fmt: skip
        p = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
        procs.append(p)
        return p, port, log

    yield start
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)  # our own session only
            p.wait(10)

