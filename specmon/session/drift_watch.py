"""Baselines on live sessions: record one from what a server just did, and the live
fingerprint its alerts are explained against.

Glue between the session (what was received) and the pure drift detector / fingerprints; the
session model (`FleetSession`) owns the monitors and calls these, the UI computes none of it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from specmon.analysis.conditions import conditions_unknown
from specmon.analysis.drift import Alert, DriftParams, baseline_from_records
from specmon.analysis.fingerprint import Fingerprint
from specmon.parse.gpu_sample import GpuSample
from specmon.session.baselines import Baseline
from specmon.session.ownership import owned_gpus
from specmon.session.runs import run_fingerprint_offline
from specmon.session.speedup import SpeedupView, fingerprint_differences, speedup_view
from specmon.session.state import HostState, Run, ServerState


class NotEnoughSamples(Exception):
    """The window holds too few clean samples for a baseline someone could trust."""


def server_gpus(session: HostState, state: ServerState) -> list[GpuSample]:
    """The latest samples of the server's own GPUs (specmon.session.ownership: its processes,
    else its arguments; none when unknown, never every GPU of the host)."""
    gpus = [g for g in session.gpus if isinstance(g, GpuSample)]
    own = set(owned_gpus(gpus, state.pids, state.args).indices)
    return [g for g in gpus if g.index in own]


def server_gpu_history(session: HostState, state: ServerState) -> list[GpuSample]:
    idx = {g.index for g in server_gpus(session, state)}
    return [s for i, hist in session.gpu_history.items() if i in idx for s in hist]


def run_fingerprint(session: HostState, state: ServerState, run: Run | None = None,
                    history: bool = False, now: float | None = None) -> Fingerprint:
    """A run's fingerprint: its server args, NCCL_DEBUG lines, host probe (SGLang version and
    files modified against the wheel's RECORD), and its GPUs (now, or over the run)."""
    r = run if run is not None else state.run
    gpus: list[GpuSample] = server_gpus(session, state)
    if history:  # the run's own samples of this server's GPUs (else what the session holds)
        mine = {g.index for g in gpus}
        gpus = [g for g in r.gpu_samples if isinstance(g, GpuSample) and g.index in mine] or \
            server_gpu_history(session, state)
    return run_fingerprint_offline(r, gpus, sorted(state.pids),
                                   now if now is not None else time.time())


def live_fingerprint(session: HostState, state: ServerState) -> Fingerprint:
    """What the session knows now about the server's current run."""
    return run_fingerprint(session, state)


def record_baseline(session: HostState, state: ServerState, name: str | None = None,
                    params: DriftParams | None = None, now: float | None = None) -> Baseline:
    """A baseline from the server's current run (since its last start), with its fingerprint."""
    p = params or DriftParams()
    run = state.run
    stats = baseline_from_records(((pt.rec, pt.t) for pt in run.decode), p)
    usable = [b for b in stats.strata.values() if b.n >= p.min_base]
    if not usable:
        best = stats.best()
        raise NotEnoughSamples(
            "not enough clean decode samples for a baseline "  # (the notice names the server)
            f"(best stratum n={best.n if best else 0}, need {p.min_base})")
    now = now if now is not None else time.time()
    fp = run_fingerprint(session, state, run, history=True, now=now)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    return Baseline(name=name or f"{session.host}/{state.name}/{stamp}", stats=stats,
                    fingerprint=fp, host=session.host, server=state.name, role=state.role,
                    created_at=now, source={"window": f"live session, {run.since_text()}",
                                            "decode_points": len(run.decode)})


def alert_lines(server: str, alert: Alert, causes: Sequence[str] | None = None) -> list[str]:
    lines = [f"{server}: {alert.text}"]
    for c in causes if causes is not None else alert.causes:
        lines.append(f"  cause: {c}")
    return lines


def session_speedup_view(session: HostState, base: ServerState | None, spec: ServerState | None,
                         watch: Any, window_s: float, now: float) -> SpeedupView:
    """The speedup bar's model: current runs, the baseline's recorded value and its drift
    alert (`watch`: the baseline server's `Watch` in the session model, when it is watched),
    and the differences between the two runs' fingerprints."""
    recorded = None
    active = False
    if base is not None and watch is not None:
        recorded = watch.baseline.stats
        active = watch.last is not None and not watch.last.cleared and watch.last.level != "info" \
            and bool(base.runs) and watch.watches(base.runs[-1])  # this run's (and stretch)
    view = speedup_view(base, spec, window_s=window_s, now=now, recorded=recorded,
                        drift_active=active)
    if base is not None and spec is not None and base.runs and spec.runs:
        rr = view.running_req if view.running_req is not None else \
            (spec.last_decode.running_req if spec.last_decode is not None else None)
        bfp, sfp = run_fingerprint(session, base), run_fingerprint(session, spec)
        view = replace(view, fingerprint_diffs=tuple(fingerprint_differences(bfp, sfp, rr)),
                       conditions_unknown=tuple(conditions_unknown(bfp, sfp)))
    return view
