"""The headline's view model: is speculation winning right now, and does each baseline still hold?

One adapter (`headline_model`) turns the session's analysis into plain values the widgets render.
It reads the typed `SpeedupView` (specmon.session.speedup, through
`session.drift.session_speedup_view`) and the session model's drift watches of the shown host.
Pure: no Textual import.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specmon.session.drift import session_speedup_view
from specmon.session.speedup import SpeedupView
from specmon.session.state import ServerState, Session
from specmon.session.window import Speedup


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
    view: SpeedupView | None = None  # the runs work's model (session.speedup): current runs
    engine: str | None = None  # "vllm" when either server is vLLM (its throughput is not decode-only)

    @property
    def ratio_text(self) -> str:
        return "N/A" if self.speedup is None else f"{self.speedup.ratio:.2f}x"

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


def drift_state(server: str, watches: Mapping[str, Any]) -> DriftState:
    """What the server's drift watch says, in the headline's words."""
    watch = watches.get(server)
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


def headline_model(session: Session, base: ServerState | None, spec: ServerState | None,
                   watches: Mapping[str, Any], now: float, window_s: float) -> HeadlineModel:
    """The one place the headline reads the analysis: the runs work's `SpeedupView` (current
    runs, the recorded baseline, fingerprint differences) and the drift watches' alerts
    (`watches`: server name -> its Watch, on the shown host)."""
    states = tuple(drift_state(s.name, watches) for s in (base, spec) if s is not None)
    watch = watches.get(base.name) if base is not None else None
    view = session_speedup_view(session, base, spec, watch, window_s, now)
    sp = view.detail if view.value is not None else None
    engine = "vllm" if any(s is not None and s.engine == "vllm" for s in (base, spec)) else None
    if sp is None:
        return HeadlineModel("na", None, window_s, view.reason, states, view, engine)
    state = sp.verdict  # "na" when the interval is N/A (session.window.speedup_of)
    return HeadlineModel(state, sp, window_s, None, states, view, engine)


__all__ = ["DriftState", "HeadlineModel", "drift_state", "headline_model"]
