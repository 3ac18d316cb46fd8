"""Helpers for server-control tests: sim profiles in a temp dir, a decoy with the same command
line, and cleanup of exactly the processes a test started (by pid / process group)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from specmon.config import HostProfile, ServerProfile
from specmon.control.local import group_members

N_GPUS = 4


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def host_profile(tmp: Path, name: str = "local", target: str = "local") -> HostProfile:
    return HostProfile(name, target=target, python=sys.executable, run_dir=str(tmp / "run"),
                       sim_dir=str(tmp / "sim"), n_gpus=N_GPUS)


def sim_profile(tmp: Path, name: str, gpus: list[int], env: dict[str, str] | None = None,
                role: str = "baseline", extra: list[str] | None = None, **kw) -> ServerProfile:
    base = gpus[0]
    args = ["--startup-s", "0.3", "--sim-dir", str(tmp / "sim"), "--n-gpus", str(N_GPUS),
            "--base-gpu-id", str(base), "--decode-log-interval", "4", *(extra or [])]
    return ServerProfile(name, role, port=free_port(), model_path="org/model", tp=len(gpus),
                         launcher="sim", gpus=gpus, env=dict(env or {}), extra_args=args,
                         ready_timeout=60, **kw)


group_alive = group_members  # the live members of a process group, from /proc


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:].split()[0] != "Z"


def kill_group(pgid: int) -> None:
    """Cleanup of a group THIS test started (recorded pgid), never by name. pgid 0 would be
    the caller's own group and 1 init's: a forged pidfile must not make cleanup kill those."""
    if pgid <= 1:
        return
    if group_alive(pgid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


def cleanup_pidfiles(run_dir: Path) -> None:
    """Kill what the controller started in this test (from its own pidfiles) if a test failed."""
    if not run_dir.is_dir():
        return
    for f in run_dir.glob("*.pid.json"):
        with contextlib.suppress(Exception):
            rec = json.loads(f.read_text())
            kill_group(int(rec["pgid"]))


def start_decoy(tmp: Path, argv: list[str]) -> subprocess.Popen[bytes]:
    """A process whose /proc/PID/cmdline is exactly `argv` (python -m specmon ...) but which is a
    different program: a fake `specmon` package first on PYTHONPATH that only sleeps."""
    fake = tmp / "decoy" / "specmon"
    fake.mkdir(parents=True, exist_ok=True)
    (fake / "__init__.py").write_text("")
    (fake / "__main__.py").write_text("import time\ntime.sleep(300)\n")
    env = {**os.environ, "PYTHONPATH": str(tmp / "decoy")}
    # cwd matters: `python -m` puts the current folder first on sys.path
    proc = subprocess.Popen(argv, env=env, cwd=tmp / "decoy", start_new_session=True,
                            stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while cmdline(proc.pid) != argv:
        assert time.monotonic() < deadline, "decoy did not start"
        time.sleep(0.01)
    return proc


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    parts = raw.split(b"\0")
    if parts and parts[-1] == b"":
        parts.pop()
    return [p.decode() for p in parts]


def starttime(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rfind(")") + 2:].split()[19])
