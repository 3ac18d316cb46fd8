"""Helpers that several test modules share (they began in test_phantom_baseline.py)."""

from __future__ import annotations

import asyncio

from specmon.feeds.demo import DemoFeed


async def wait_for(pilot, cond, timeout: float, each=None) -> float:
    loop = asyncio.get_running_loop()
    start = loop.time()
    while not cond():
        assert loop.time() - start < timeout, "condition not reached"
        await pilot.pause(0.2)
        if each is not None:
            each()
    return loop.time() - start


def group_free(feed: DemoFeed) -> bool:
    from specmon.control.local import group_members

    return all(not group_members(s.proc.pid) for s in feed.servers if s.proc is not None)

