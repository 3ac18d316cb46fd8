"""Recorded lines through the session model, as a live session would have received them.

`play` applies recorded events (lines, GPU polls, exits) in received order to a `FleetSession`
and ticks it once per second of receive time (the live 1 Hz tick), so runs, windows, speedups
and every alert the session raises (drift, "speculation no longer pays") come from the one
model: the report of a record or snapshot shows what the screen showed, not a second
computation.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from specmon.session.fleet import FleetSession


def play(fleet: FleetSession, host: str, events: Iterable[tuple[float, str, str, Any]]) -> int:
    """Apply every (time, kind, server, payload) event once, in order: "lines" (a LineItem),
    "gpus" (one poll; its samples go to the runs of the GPUs' owners), "probe" ((running, the
    host probe): the run current then takes it), "exit" (the exit code);
    any other kind (a recorded alert, which the caller lists itself) only moves the clock.
    Ticks at each new second, before its first event, and once after the last, as the replay
    does; the fleet's clock follows the event being applied. Returns the lines applied."""
    sec: int | None = None
    n = 0
    last_t = 0.0
    fleet.clock = lambda: last_t
    for t, kind, server, payload in events:
        if not math.isfinite(t):
            continue
        s = math.floor(t)
        if sec is not None and s > sec:
            fleet.tick(float(s))
        sec = s
        last_t = t
        if kind == "lines":
            fleet.lines(host, server, [payload])
            n += 1
        elif kind == "gpus":
            fleet.gpus(host, list(payload))
        elif kind == "exit":
            fleet.server_exited(host, server, payload)
        elif kind == "probe":
            fleet.server_probe(host, server, payload[1], running=payload[0], t=t)
        elif kind == "baseline":  # (a baseline recorded during the session: watched again)
            fleet.watch_recorded(host, server, payload[0], payload[1])
    if sec is not None:
        fleet.tick(float(sec + 1))
    return n
