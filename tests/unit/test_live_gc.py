"""While feeds run, the collector runs at LIVE_GC's thresholds (its full passes over the live
path's objects were ~20% of `record`'s CPU); the process's own come back after, also when runs
overlap."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from typing import Any

import pytest

from specmon.feeds.common import LIVE_GC, live_gc
from specmon.feeds.host import HostFeeds


@pytest.fixture
def own() -> Iterator[tuple[int, int, int]]:
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield (700, 10, 10)
    gc.set_threshold(*before)


def test_thresholds_while_a_block_runs_and_back_after_overlapping_ones(own: tuple[int, ...]) -> None:
    a, b = live_gc(), live_gc()
    a.__enter__()
    assert gc.get_threshold() == LIVE_GC != own
    b.__enter__()
    a.__exit__(None, None, None)  # the first ends while the second still runs
    assert gc.get_threshold() == LIVE_GC
    b.__exit__(None, None, None)
    assert gc.get_threshold() == own


class _Feed:
    """A feed that notes the thresholds it runs under (HostFeeds needs `name` and `run`)."""

    def __init__(self) -> None:
        self.name = "box"
        self.seen: tuple[int, ...] | None = None

    async def run(self, sink: Any) -> None:
        await asyncio.sleep(0)
        self.seen = gc.get_threshold()


def test_host_feeds_run_under_the_live_thresholds(own: tuple[int, ...]) -> None:
    feed = _Feed()
    asyncio.run(HostFeeds([feed]).run(object()))  # type: ignore[list-item, arg-type]
    assert feed.seen == LIVE_GC
    assert gc.get_threshold() == own
