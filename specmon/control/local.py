"""Stopping a process group this process started itself (asyncio child, same machine).

For children of this process (the demo's simulated servers), where the Popen object is the
record: SIGTERM the child's own process group only while the leader still runs the command we
started (exact argv, so a recycled pid is never signalled), wait, SIGKILL what is left, and
wait until no member of the group remains. Remote or detached servers go through
specmon.control.server.ServerController and its pidfiles instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

from specmon.hostside.procs import proc_cmdline, proc_stat


def cmdline(pid: int) -> list[str] | None:
    """argv of a process (the host agent's reader: one parser of /proc for all of specmon)."""
    return proc_cmdline(pid)


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group, read from /proc/PID/stat."""
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            st = proc_stat(int(p.name))
            if st is not None and st["pgid"] == pgid and st["state"] not in ("Z", "X"):
                out.append(st["pid"])
    return out


def is_ours(pid: int, argv: list[str]) -> bool:
    """The group leader still runs exactly the command we started (not a recycled pid)."""
    return cmdline(pid) == [str(a) for a in argv]


def kill_leftovers(pgid: int | None) -> None:
    """Members of our group that outlived their leader (workers of a crashed launcher). While any
    member exists the group id cannot be reused, so these are still ours."""
    if pgid is None or not group_members(pgid):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def stop_child_group(proc: asyncio.subprocess.Process | None, argv: list[str],
                           grace: float = 5.0) -> None:
    """SIGTERM the group of a child started with start_new_session=True, then SIGKILL."""
    if proc is None or proc.returncode is not None:
        kill_leftovers(proc.pid if proc else None)
        return
    if not is_ours(proc.pid, argv):
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), grace)
    except asyncio.TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
    loop = asyncio.get_running_loop()
    end = loop.time() + grace
    while group_members(proc.pid) and loop.time() < end:
        await asyncio.sleep(0.05)
    kill_leftovers(proc.pid)


def kill_child_group_now(proc: asyncio.subprocess.Process | None, argv: list[str]) -> None:
    """Last resort without an event loop: SIGKILL the child's group if it is still ours."""
    if proc is not None and proc.returncode is None and is_ours(proc.pid, argv):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
