"""Recorded lines through the session model, as a live session would have received them.

`play` applies (server, line) pairs (and GPU polls) in received order to a `FleetSession` and
ticks it once per second of receive time (the live 1 Hz tick), so runs, windows, speedups and every alert the
session raises (drift, "speculation no longer pays") come from the one model: the report of a
record or snapshot shows what the screen showed, not a second computation.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from specmon.parse.gpu_sample import GpuSample
from specmon.session.events import LineItem
from specmon.session.fleet import FleetSession


def play(fleet: FleetSession, host: str,
         items: Iterable[tuple[str, LineItem | Sequence[GpuSample]]]) -> int:
    """Apply every line once, in order, ticking at each new second of receive time (before the
    first line of that second) and once after the last; returns the lines applied. The fleet's
    clock follows the receive time of the line being applied."""
    sec: int | None = None
    n = 0
    last_t = 0.0
    fleet.clock = lambda: last_t
    for server, it in items:
        t = it.t if isinstance(it, LineItem) else (it[0].ts if it and it[0].ts is not None
                                                   else math.nan)
        if not math.isfinite(t):
            continue
        s = math.floor(t)
        if sec is not None and s > sec:
            fleet.tick(float(s))
        sec = s
        last_t = t
        if isinstance(it, LineItem):
            fleet.lines(host, server, [it])
            n += 1
        else:  # one GPU poll (server ""): its samples go to the runs of the GPUs' owners
            fleet.gpus(host, list(it))
    if n:
        fleet.tick(float(math.floor(last_t) + 1))
    return n
