"""Waiting in tests: poll a condition against a generous deadline, never a fixed sleep, and fail
with a message (a test that waits must fail, not hang)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any


async def wait_for(pilot: Any, cond: Callable[[], object], timeout: float = 60.0,
                   each: Callable[[], object] | None = None, step: float = 0.1) -> float:
    """In a Textual Pilot test: let the app run until `cond()` holds; the seconds it took.
    `each` runs after every pause (e.g. to advance a fake clock)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    while not cond():
        assert loop.time() - start < timeout, "condition not reached"
        await pilot.pause(step)
        if each is not None:
            each()
    return loop.time() - start


async def until(cond: Callable[[], object], timeout: float = 20.0, what: str = "condition") -> Any:
    """In an asyncio test without an app: poll `cond` until truthy; its value."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def wait_until(cond: Callable[[], object], timeout: float = 30.0, what: str = "condition") -> Any:
    """In a plain (synchronous) test: poll `cond` until truthy; its value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def wait_control_idle(pilot: Any, app: Any, timeout: float = 60.0) -> float:
    """In a Pilot test with server control: wait until no control action is in progress. A
    server's panel can say "ready" or "stopped" while the action that got it there is still
    finishing (GPU check, notify); the next key pressed then is refused, as for a user."""
    return await wait_for(pilot, lambda: not app.control.busy, timeout)
