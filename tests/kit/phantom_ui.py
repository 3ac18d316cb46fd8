"""Helpers that several test modules share (they began in test_phantom_baseline.py)."""

from __future__ import annotations

from specmon.feeds.demo import DemoFeed


def group_free(feed: DemoFeed) -> bool:
    from specmon.control.local import group_members

    return all(not group_members(s.proc.pid) for s in feed.servers if s.proc is not None)

