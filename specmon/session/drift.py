"""Baselines on live sessions: record one from what a server just did, and the live
fingerprint its alerts are explained against.

Glue between the session (what was received) and the pure drift detector / fingerprints; the
session model (`FleetSession`) owns the monitors and calls these, the UI computes none of it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from specmon.analysis.drift import Alert, DriftParams, baseline_from_records
from specmon.analysis.fingerprint import Fingerprint, fingerprint_from, gpu_states
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


def alert_lines(server: str, alert: Alert, causes: Sequence[str] | None = None) -> list[str]:
    lines = [f"{server}: {alert.text}"]
    for c in causes if causes is not None else alert.causes:
        lines.append(f"  cause: {c}")
    return lines
