"""The headline's view model: is speculation winning right now, and does each baseline still hold?

One adapter (`headline_model`) turns the session's analysis into plain values the widgets render.
It reads the typed `SpeedupView` (specmon.session.speedup, through
`session.drift_watch.session_speedup_view`) and the session model's drift watches of the shown host.
Pure: no Textual import.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specmon.session.drift_watch import session_speedup_view
from specmon.session.speedup import SpeedupView, baseline_label, format_speedup
from specmon.session.state import HostState, ServerState
from specmon.session.window import Speedup


@dataclass(frozen=True)
class DriftState:
    """One server against its recorded baseline, on its current run's evidence only."""

    server: str
    state: str  # "checking" (too few samples of this run) | "ok" | "drift" | "improved" | "none"
    level: str | None  # the alert's level while one is active
    text: str  # "checking n 3/10 vs recorded 88.8" | "OK vs recorded 88.8" | "DRIFT -29% ..."
    cause: str | None  # the first likely cause of an active alert
    recorded: float | None  # the recorded baseline's median decode tok/s (its best stratum)
    n: int = 0  # clean samples of the current run the verdict rests on
    need: int = 0  # the n a verdict needs


@dataclass(frozen=True)
class BigFigure:
    """The headline's biggest number: the speedup that is true right now, with what it is."""

    text: str  # "1.07x" | "N/A"
    state: str  # "win" | "lose" | "tie" | "na": from this figure's own 95% interval
    label: str  # "vs recorded baseline 88.8" | "vs live baseline 62.9 (run 2)" | "speedup"
    short: str = "speedup"  # under the digits: "vs recorded" | "vs live base" | "vs ended base"


@dataclass(frozen=True)
class HeadlineModel:
    """The speedup with its interval and batch size, its state, and the drift of both servers."""

    state: str  # "win" | "lose" | "tie" (the interval holds 1.0) | "na"
    speedup: Speedup | None
    window_s: float
    reason: str | None  # why N/A
    drift: tuple[DriftState, ...]
    view: SpeedupView | None = None  # the runs work's model (session.speedup): current runs
    engine: str | None = None  # "vllm" when either server is vLLM (its throughput is not decode-only)
    big: BigFigure = BigFigure("N/A", "na", "speedup")
    # what makes the live number suspect, one statement each, from the session's speedup text
    # (drift against the recorded baseline, conditions that differ, an ended run's age)
    statements: tuple[str, ...] = ()

    @property
    def vs_recorded(self) -> tuple[float, float] | None:
        """(spec ÷ recorded baseline, recorded) while the baseline's drift alert is active."""
        v = self.view
        if v is None or not v.drift_active or v.vs_recorded is None or v.recorded_base is None:
            return None
        return v.vs_recorded, v.recorded_base


def _recorded(watch: Any) -> float | None:
    best = watch.baseline.stats.best()
    return best.median_thr if best is not None else None


def drift_state(server: str, watches: Mapping[str, Any], state: ServerState) -> DriftState:
    """What the server's drift watch says (`Watch.verdict`, the session's one verdict), in the
    headline's words: "checking" until the current run gave the n a verdict needs (a restart
    starts over) and while a change is being confirmed, then OK, DRIFT or IMPROVED."""
    watch = watches.get(server)
    if watch is None:
        return DriftState(server, "none", None, "no recorded baseline", None, None)
    rec = _recorded(watch)
    rec_txt = f" vs recorded {rec:.1f}" if rec is not None else ""
    v = watch.verdict(state)
    n, need, alert = v.n, v.need, v.alert
    if v.state == "checking":
        text = (f"checking n {n}, confirming a change{rec_txt}" if v.confirming
                else f"checking n {n}/{need}{rec_txt}")
        return DriftState(server, "checking", None, text, None, rec, n, need)
    if alert is None:
        return DriftState(server, "ok", None, f"OK{rec_txt} (n {n})", None, rec, n, need)
    est = alert.estimate
    if est is not None:
        what = {"t_cycle": " t_cycle", "accept_len": " accept len"}.get(est.metric, "")
        unit = " ms" if est.metric == "t_cycle" else ""
        # (its batch size: the headline's recorded value is the speedup's batch size's, which
        # may be another stratum: "vs recorded 260.8" beside "vs recorded 346.4")
        rel = f"{est.delta_pct:+.0f}%{what} vs recorded {est.base:.1f}{unit} (bs {est.running_req})"
    else:
        rel = f"vs recorded{rec_txt}"
    word = "IMPROVED" if alert.level == "info" else "DRIFT"
    # the first cause, and how many more the alert has (the rest are on the alerts screen, the
    # report and /metrics): a first cause alone read as the whole story (NCCL variables named
    # for a 3.3x gain that a tp 2 -> 8 relaunch, the second cause, made)
    cause = alert.causes[0] if alert.causes else None
    if cause is not None and len(alert.causes) > 1:
        cause += (f" (+{len(alert.causes) - 1} more: the alert notice and the report list "
                  "every cause)")
    return DriftState(server, "improved" if alert.level == "info" else "drift", alert.level,
                      f"{word} {rel}", cause, rec, n, need)


def headline_model(session: HostState, base: ServerState | None, spec: ServerState | None,
                   watches: Mapping[str, Any], now: float, window_s: float) -> HeadlineModel:
    """The one place the headline reads the analysis: the runs work's `SpeedupView` (current
    runs, the recorded baseline, fingerprint differences) and the drift watches' alerts
    (`watches`: server name -> its Watch, on the shown host)."""
    states = tuple(drift_state(s.name, watches, s) for s in (base, spec) if s is not None)
    watch = watches.get(base.name) if base is not None else None
    view = session_speedup_view(session, base, spec, watch, window_s, now)
    sp = view.detail if view.value is not None else None
    engine = "vllm" if any(s is not None and s.engine == "vllm" for s in (base, spec)) else None
    if sp is None:
        return HeadlineModel("na", None, window_s, view.reason, states, view, engine)
    state = sp.verdict  # "na" when the interval is N/A (session.window.speedup_of)
    parts = format_speedup(view).split(" · ")
    big = BigFigure(f"{sp.ratio:.2f}x", state, f"vs {baseline_label(view)}",
                    "vs ended base" if view.base_ended_age_s is not None else "vs live base")
    if view.drift_active and view.vs_recorded is not None and view.vs_recorded_ci95 is not None \
            and view.recorded_base is not None:
        # the live baseline drifts: the number true right now is against the recorded one
        lo, hi = view.vs_recorded_ci95
        big = BigFigure(f"{view.vs_recorded:.2f}x", interval_state(lo, hi),
                        f"vs recorded baseline {view.recorded_base:.1f}", "vs recorded")
    return HeadlineModel(state, sp, window_s, None, states, view, engine, big, tuple(parts[1:]))


def interval_state(low: float, high: float) -> str:
    """win: the 95% interval is above 1; lose: below 1; tie: it holds 1."""
    return "win" if low > 1.0 else ("lose" if high < 1.0 else "tie")


__all__ = ["BigFigure", "DriftState", "HeadlineModel", "drift_state", "headline_model",
           "interval_state"]
