"""The headline's view model: is speculation winning right now, and does each baseline still hold?

One adapter (`headline_model`) turns the session's analysis into plain values the widgets render.
It reads `analysis.window.speedup` and the app's `DriftWatcher` today; when the runs work's typed
view model lands in `specmon.analysis`, only this function changes. Pure: no Textual import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specmon.analysis.window import Speedup, speedup
from specmon.session.state import ServerState


@dataclass(frozen=True)
class DriftState:
    """One server against its recorded baseline."""

    server: str
    state: str  # "ok" | "drift" | "improved" | "none" (no baseline recorded)
    level: str | None  # the alert's level while one is active
    text: str  # "OK vs recorded 88.8" | "DRIFT -29% vs recorded 88.8" | "no recorded baseline"
    cause: str | None  # the first likely cause of an active alert
    recorded: float | None  # the recorded baseline's median decode tok/s (its best stratum)


@dataclass(frozen=True)
class HeadlineModel:
    """The speedup with its interval and batch size, its state, and the drift of both servers."""

    state: str  # "win" | "lose" | "tie" (the interval holds 1.0) | "na"
    speedup: Speedup | None
    window_s: float
    reason: str | None  # why N/A
    drift: tuple[DriftState, ...]
    # while the baseline drifts: (spec median ÷ the recorded baseline at the same bs, recorded)
    vs_recorded: tuple[float, float] | None = None

    @property
    def ratio_text(self) -> str:
        return "N/A" if self.speedup is None else f"{self.speedup.ratio:.2f}x"


def _recorded(watch: Any) -> float | None:
    best = watch.baseline.stats.best()
    return best.median_thr if best is not None else None


def drift_state(server: str, drift: Any) -> DriftState:
    """What the drift watcher says about one server, in the headline's words."""
    watch = drift.watches.get(server) if drift is not None else None
    if watch is None:
        return DriftState(server, "none", None, "no recorded baseline", None, None)
    rec = _recorded(watch)
    rec_txt = f" vs recorded {rec:.1f}" if rec is not None else ""
    alert = watch.last
    if alert is None or alert.cleared:
        return DriftState(server, "ok", None, f"OK{rec_txt}", None, rec)
    est = alert.estimate
    if est is not None:
        what = {"t_cycle": " t_cycle", "accept_len": " accept len"}.get(est.metric, "")
        unit = " ms" if est.metric == "t_cycle" else ""
        rel = f"{est.delta_pct:+.0f}%{what} vs recorded {est.base:.1f}{unit}"
    else:
        rel = f"vs recorded{rec_txt}"
    word = "IMPROVED" if alert.level == "info" else "DRIFT"
    return DriftState(server, "improved" if alert.level == "info" else "drift", alert.level,
                      f"{word} {rel}", alert.causes[0] if alert.causes else None, rec)


def headline_model(base: ServerState | None, spec: ServerState | None, drift: Any, now: float,
                   window_s: float) -> HeadlineModel:
    """The one place the headline reads the analysis (swap in the runs view model here)."""
    states = tuple(drift_state(s.name, drift) for s in (base, spec) if s is not None)
    if base is None or spec is None:
        return HeadlineModel("na", None, window_s,
                             "needs one baseline and one speculative server", states)
    sp = speedup(base, spec, now, window_s)
    if sp is None:
        return HeadlineModel("na", None, window_s, f"no batch size with ≥3 decode samples on both "
                             f"in the last {window_s:.0f} s", states)
    state = "win" if sp.low > 1.0 else ("lose" if sp.high < 1.0 else "tie")
    vs = None
    if states and states[0].state == "drift":
        rec = recorded_at(drift.watches[base.name], sp.running_req)
        if rec:
            vs = (sp.spec.median / rec, rec)
    return HeadlineModel(state, sp, window_s, None, states, vs)


def recorded_at(watch: Any, running_req: int) -> float | None:
    """The recorded baseline's median decode tok/s at this batch size (its largest stratum)."""
    from specmon.analysis.drift import rr_bucket

    strata = [b for b in watch.baseline.stats.strata.values()
              if b.stratum.rr == rr_bucket(running_req) and b.median_thr]
    if not strata:
        return None
    return max(strata, key=lambda b: b.n).median_thr


__all__ = ["DriftState", "HeadlineModel", "drift_state", "headline_model"]
