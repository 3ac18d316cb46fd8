"""Helpers that several test modules share (they began in test_demo.py)."""

from __future__ import annotations

import asyncio

from specmon.control.local import group_members


def fast(servers):
    for s in servers:
        s.args += ["--startup-s", "0.3"]
    return servers


async def wait_for(pilot, cond, timeout: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        assert loop.time() < end, "condition not reached"
        await pilot.pause(0.1)


def group_gone(pgid: int) -> bool:
    return not group_members(pgid)

