"""Baselines and drift on live sessions: record from what a server just did, watch it after.

Pure glue between the session (what was received) and the drift detector / fingerprints; the UI
calls it, the UI does not compute any of it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from specmon.analysis.drift import Alert, DriftMonitor, DriftParams, baseline_from_records
from specmon.analysis.fingerprint import Fingerprint, fingerprint_from, gpu_states, make_explainer
from specmon.parse.gpu import GpuSample
from specmon.session.baselines import Baseline
from specmon.session.state import ServerState, Session


class NotEnoughSamples(Exception):
    """The window holds too few clean samples for a baseline someone could trust."""


def server_gpus(session: Session, state: ServerState) -> list[GpuSample]:
    """The latest samples of the GPUs this server's processes use (all GPUs if unknown)."""
    gpus = [g for g in session.gpus if isinstance(g, GpuSample)]
    if not state.pids:
        return gpus
    mine = [g for g in gpus if g.processes and any(p.pid in state.pids for p in g.processes)]
    return mine or gpus


def server_gpu_history(session: Session, state: ServerState) -> list[GpuSample]:
    idx = {g.index for g in server_gpus(session, state)}
    return [s for i, hist in session.gpu_history.items() if i in idx for s in hist]


def live_fingerprint(session: Session, state: ServerState) -> Fingerprint:
    """What the session knows now: server args, NCCL_DEBUG lines, this server's GPUs."""
    return fingerprint_from(server_args=state.args, nccl_lines=state.nccl_lines,
                            gpus=gpu_states(server_gpus(session, state)),
                            server_pids=sorted(state.pids), collected_at=time.time())


def record_baseline(session: Session, state: ServerState, name: str | None = None,
                    params: DriftParams | None = None, now: float | None = None) -> Baseline:
    """A baseline from the server's current run (since its last start), with its fingerprint."""
    p = params or DriftParams()
    stats = baseline_from_records(((pt.rec, pt.t) for pt in state.decode), p)
    usable = [b for b in stats.strata.values() if b.n >= p.min_base]
    if not usable:
        best = stats.best()
        raise NotEnoughSamples(
            f"{state.name}: not enough clean decode samples for a baseline "
            f"(best stratum n={best.n if best else 0}, need {p.min_base})")
    now = now if now is not None else time.time()
    fp = fingerprint_from(server_args=state.args, nccl_lines=state.nccl_lines,
                          gpus=gpu_states(server_gpu_history(session, state)),
                          server_pids=sorted(state.pids), collected_at=now)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    return Baseline(name=name or f"{session.host}/{state.name}/{stamp}", stats=stats,
                    fingerprint=fp, host=session.host, server=state.name, role=state.role,
                    created_at=now, source={"window": "live session", "decode_points":
                                            len(state.decode)})


@dataclass
class Watch:
    """One server watched against one recorded baseline."""

    baseline: Baseline
    monitor: DriftMonitor
    last: Alert | None = None
    history: list[Alert] = field(default_factory=list)


class DriftWatcher:
    """All watched servers of a session; `tick` at ~1 Hz returns alerts that changed."""

    def __init__(self, session: Session, params: DriftParams | None = None) -> None:
        self.session = session
        self.params = params
        self.watches: dict[str, Watch] = {}

    def watch(self, server: str, baseline: Baseline) -> None:
        state = self.session.server(server)
        explain = make_explainer(baseline.fingerprint,
                                 lambda: live_fingerprint(self.session, state))
        mon = DriftMonitor(baseline.stats, self.params, label=baseline.server_label,
                           explain=explain)
        # only what arrives from now on is compared: the recording window is the baseline
        mon.skip_to(state)
        self.watches[server] = Watch(baseline, mon)

    def tick(self, now: float) -> list[tuple[str, Alert]]:
        changed: list[tuple[str, Alert]] = []
        for server, w in self.watches.items():
            state = self.session.server(server)
            alert = w.monitor.update(state, server_gpus(self.session, state), now)
            if alert is None:
                continue
            prev = w.last
            if prev is None or (prev.level, prev.cleared, prev.kind) != (
                    alert.level, alert.cleared, alert.kind) or prev.causes != alert.causes:
                changed.append((server, alert))
                w.history.append(alert)
            w.last = alert
        return changed

    def active(self) -> list[tuple[str, Alert]]:
        return [(s, w.last) for s, w in self.watches.items()
                if w.last is not None and not w.last.cleared]


def alert_lines(server: str, alert: Alert, causes: Sequence[str] | None = None) -> list[str]:
    lines = [f"{server}: {alert.text}"]
    for c in causes if causes is not None else alert.causes:
        lines.append(f"  cause: {c}")
    return lines
