"""Replay a snapshot through the same `FeedSink` events the live feeds send, on a virtual clock.

The UI cannot tell a replay from a live session: lines arrive with their recorded receive times,
GPU samples at theirs, alerts re-fire as notices at theirs. The app is given `feed.now` as its
clock, so every window and speedup is computed at the replay position, exactly as it was live.
Seeking backwards asks the owner to reset the session (`reset` callback, ordered with the
feed's messages) and replays everything up to the new position at once.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import time
from collections.abc import Callable

from specmon.export.snapshot import Snapshot
from specmon.export.timeline import declare, timeline
from specmon.session.events import FeedSink, LineItem
from specmon.session.state import HostState, ServerState

SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0)


def replay_session(snap: Snapshot) -> HostState:
    """The session a replay starts from: servers declared with their profile, no data yet."""
    start = snap.time_range[0] if snap.time_range else snap.created_at
    session = HostState(host=snap.host, started_at=start)
    for s in snap.servers:
        st = session.servers[s.name] = ServerState(s.name, role=s.role, path=s.path)
        s.seed_args(st)
    return session


class ReplayFeed:
    """A `Feed` that plays a snapshot; control it with play/pause/seek/set_speed from the UI."""

    def __init__(self, snap: Snapshot, *, speed: float = 1.0, playing: bool = True,
                 reset: Callable[[], None] | None = None,
                 wall: Callable[[], float] = time.monotonic) -> None:
        self.snap = snap
        tr = snap.time_range or snap.compute_time_range() or (snap.created_at, snap.created_at)
        self.start, self.end = tr
        self.speed = speed
        self.playing = playing
        self.reset = reset
        self._wall = wall
        self._events = timeline(snap)
        self._times = [ev.t for ev in self._events]
        self._next = 0
        self._anchor_v = self.start
        self._anchor_w = wall()
        self._rewind = False
        self._wake: asyncio.Event | None = None
        self.pushed_lines = 0
        self._sec: int | None = None  # the recorded second the model last ticked before
        self._ticked_end = False

    # --- the virtual clock --------------------------------------------------------------------

    def now(self) -> float:
        if not self.playing:
            return self._anchor_v
        return min(self.end, self._anchor_v + (self._wall() - self._anchor_w) * self.speed)

    @property
    def position(self) -> float:
        return self.now() - self.start

    @property
    def at_end(self) -> bool:
        return self.now() >= self.end and self._next >= len(self._events)

    def _reanchor(self, v: float) -> None:
        self._anchor_v = max(self.start, min(self.end, v))
        self._anchor_w = self._wall()
        if self._wake is not None:
            self._wake.set()

    def play(self) -> None:
        if self.now() >= self.end:  # play at the end starts over, like a media player
            self.seek(self.start)
        v = self.now()
        self.playing = True
        self._reanchor(v)

    def pause(self) -> None:
        v = self.now()
        self.playing = False
        self._reanchor(v)

    def toggle(self) -> None:
        self.pause() if self.playing else self.play()

    def set_speed(self, speed: float) -> None:
        v = self.now()
        self.speed = max(0.01, float(speed))
        self._reanchor(v)

    def faster(self) -> None:
        self.set_speed(next((s for s in SPEEDS if s > self.speed), SPEEDS[-1]))

    def slower(self) -> None:
        self.set_speed(next((s for s in reversed(SPEEDS) if s < self.speed), SPEEDS[0]))

    def seek(self, t: float) -> None:
        """Jump to virtual time t (clamped to the snapshot's range)."""
        t = max(self.start, min(self.end, t))
        if self._next > bisect.bisect_right(self._times, t):
            self._rewind = True
        self._reanchor(t)

    def seek_by(self, dt: float) -> None:
        self.seek(self.now() + dt)

    # --- pushing ------------------------------------------------------------------------------

    @property
    def host(self) -> str:
        return self.snap.host

    def _declare(self, sink: FeedSink) -> None:
        declare(sink, self.snap)

    def _push_due(self, sink: FeedSink, now: float) -> None:
        end = bisect.bisect_right(self._times, now)
        pending: dict[str, list[LineItem]] = {}
        order: list[str] = []

        def flush() -> None:
            for name in order:
                sink.lines(self.host, name, pending[name])
                self.pushed_lines += len(pending[name])
            pending.clear()
            order.clear()

        for ev in self._events[self._next:end]:
            sec = math.floor(ev.t)
            if self._sec is not None and sec > self._sec:
                flush()  # the model ticks at each new recorded second, before its first line
                sink.tick(float(sec))
            self._sec = sec
            if ev.kind == "lines":
                if ev.server not in pending:
                    pending[ev.server] = []
                    order.append(ev.server)
                pending[ev.server].append(ev.payload)
                continue
            flush()  # keep lines before an exit/alert/GPU poll ahead of it
            if ev.kind == "gpus":
                sink.gpus(self.host, list(ev.payload))
            elif ev.kind == "exit":
                sink.server_exited(self.host, ev.server, ev.payload)
            elif ev.kind == "probe":
                # (its recorded time: a seek pushes many events at once)
                sink.server_probe(self.host, ev.server, ev.payload[1], running=ev.payload[0],
                                  t=ev.t)
            elif ev.kind == "baseline":
                sink.watch_recorded(self.host, ev.server, ev.payload[0], ev.payload[1])
            elif ev.kind == "alert":
                sink.notice(self.host, ev.server, ev.payload)
        flush()
        self._next = max(self._next, end)
        if self._next >= len(self._events) and self._sec is not None and not self._ticked_end \
                and now >= self.end:
            sink.tick(float(self._sec + 1))  # and once after the last line, as a report does
            self._ticked_end = True

    async def run(self, sink: FeedSink) -> None:
        self._wake = asyncio.Event()
        self._declare(sink)
        while True:
            if self._rewind:
                self._rewind = False
                if self.reset is not None:
                    self.reset()
                self._next = 0
                self.pushed_lines = 0
                self._sec, self._ticked_end = None, False
                self._declare(sink)
            now = self.now()
            self._push_due(sink, now)
            if self.playing and now >= self.end and self._next >= len(self._events):
                self.playing = False  # hold the last frame at the end
                self._anchor_v, self._anchor_w = self.end, self._wall()
            timeout: float | None = None
            if self.playing:
                nxt = self._times[self._next] if self._next < len(self._times) else self.end
                timeout = min(0.25, max(0.0, (nxt - now) / self.speed))
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except asyncio.TimeoutError:
                pass
