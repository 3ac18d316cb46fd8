"""A snapshot as the feed events it was made of: what `replay` plays on its virtual clock and
`report` plays at once (`session.offline.play`), so both show the same runs, exits, GPU
ownership and alerts: one order, one way to declare the servers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specmon.export.snapshot import Snapshot
from specmon.hosts.base import ConnectionState
from specmon.numfmt import unix_time
from specmon.session.events import FeedSink, LineItem

NOT_KEPT = "[line text not kept in snapshot]"
# at one recorded time: a baseline recorded then (watched from that time), a server's lines,
# then a host probe of it, then its exit, then a GPU poll, then an alert
ORDER = {"baseline": -1, "lines": 0, "probe": 1, "exit": 2, "gpus": 3, "alert": 4}


@dataclass(slots=True)
class Event:
    t: float
    kind: str  # "baseline" | "lines" | "probe" | "exit" | "gpus" | "alert"
    server: str
    payload: Any  # LineItem | (running, probe) | exit code | GPU samples (one poll) | notice text


def timeline(snap: Snapshot) -> list[Event]:
    """Everything the snapshot holds, in time order (stable: same-time items keep file order)."""
    events: list[Event] = []
    for s in snap.servers:
        for e in s.entries:
            text = e.line if e.line is not None else NOT_KEPT
            events.append(Event(e.t, "lines", s.name, LineItem(text, e.record, e.t, e.skipped)))
        for pt, running, probe in s.probes:  # the run current then takes it, as live
            events.append(Event(pt, "probe", s.name, (running, probe)))
        if (s.exit_code is not None or s.status in ("stopped", "crashed")) and s.entries:
            # (None: a server started by hand, seen gone, whose exit code nobody knows)
            events.append(Event(s.entries[-1].t, "exit", s.name, s.exit_code))
    batch: list[Any] = []
    seen: set[int | None] = set()
    for g in snap.gpu_samples:
        if g.ts is None:
            continue
        if g.index in seen:  # one batch holds one sample per GPU, like a live poll
            events.append(Event(batch[0].ts, "gpus", "", batch))
            batch, seen = [], set()
        batch.append(g)
        seen.add(g.index)
    if batch:
        events.append(Event(batch[0].ts, "gpus", "", batch))
    names = [s.name for s in snap.servers]
    for b in snap.baselines:  # recorded during the session (b): watched again from that time
        if isinstance(b, dict) and b.get("server") in names and isinstance(b.get("stats"), dict):
            t = unix_time(b.get("created_at"))  # (file input: 10**400 is no time)
            srv = next(s for s in snap.servers if s.name == b["server"])
            first = srv.entries[0].t if srv.entries else 0.0
            events.append(Event(t if t is not None else first, "baseline", srv.name,
                                (b, srv.fingerprint)))
    for a in snap.alerts:
        t = a.get("t")
        if not isinstance(t, int | float):
            continue
        server = a.get("server") if a.get("server") in names else (names[0] if names else None)
        if server is None:
            continue
        text = str(a.get("message") or a.get("text") or a.get("kind") or "alert")
        cause = a.get("cause")
        events.append(Event(float(t), "alert", server,
                            f"alert: {text}" + (f" (likely cause: {cause})" if cause else "")))
    events.sort(key=lambda ev: (ev.t, ORDER[ev.kind]))
    return events


def declare(sink: FeedSink, snap: Snapshot) -> None:
    """The host and its servers as the snapshot knew them (role, log path, process ids: the
    GPUs they own), before any event plays."""
    sink.host_state(snap.host, ConnectionState("connected"))  # recorded data: never stale
    for s in snap.servers:
        sink.declare_server(snap.host, s.name, s.role, s.path)
        sink.server_pids(snap.host, s.name, s.pids)
