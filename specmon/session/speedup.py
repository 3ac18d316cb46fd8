"""The speedup as the UI shows it: a pure, typed view model and its one-line text.

It compares the *current runs* of the baseline and the speculative server at the same batch
size, each over the last W seconds of its own log time. It says when the live baseline has
drifted from its recorded value (and what the speedup is against that recorded value), which
fingerprint differences between the two runs matter, and how old a run that ended is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from specmon.analysis.conditions import conditions_differ
from specmon.analysis.drift import BaselineStats, StratumBaseline, neff, rr_bucket
from specmon.analysis.fingerprint import Fingerprint
from specmon.analysis.stats import t975, welch_df
from specmon.session.state import Run, ServerState
from specmon.session.window import (
    DEFAULT_WINDOW_S,
    MAX_LOG_HALF_WIDTH,
    MIN_N,
    Speedup,
    run_speedup,
)


@dataclass(frozen=True)
class SpeedupView:
    value: float | None  # spec median / live baseline median (None: N/A, see `reason`)
    ci95: tuple[float, float] | None
    running_req: int | None
    window_s: float
    base_run: int | None  # the live baseline's run number
    base_median: float | None
    spec_run: int | None
    spec_median: float | None
    n_base: int = 0
    n_spec: int = 0
    recorded_base: float | None = None  # the recorded baseline's median at this batch size
    drift_pct: float | None = None  # live baseline vs recorded, % (shown while drift is alerted)
    drift_active: bool = False
    vs_recorded: float | None = None  # spec median / recorded baseline
    vs_recorded_ci95: tuple[float, float] | None = None  # from the spec median's and the
    # recorded stratum's standard errors (log space), like the live speedup's interval
    fingerprint_diffs: tuple[str, ...] = ()  # conditions that differ besides speculation
    conditions_unknown: tuple[str, ...] = ()  # what cannot be compared (a side's server args)
    base_ended_age_s: float | None = None  # seconds since the baseline's run ended (None: running)
    spec_ended_age_s: float | None = None
    # a side whose run goes on but printed no decode line for IDLE_SAY_S: its window ended then
    base_idle_s: float | None = None
    spec_idle_s: float | None = None
    reason: str | None = None  # why there is no value
    detail: Speedup | None = None  # medians, spreads, derived per-token times


def recorded_stratum(stats: BaselineStats | None, running_req: int) -> StratumBaseline | None:
    """The recorded baseline's largest non-speculative stratum at this batch size."""
    if stats is None:
        return None
    best = None
    for b in stats.strata.values():
        if b.stratum.spec:
            continue
        if not stats.fixed and b.stratum.rr != rr_bucket(running_req):
            continue
        if best is None or b.n > best.n:
            best = b
    return best


def _vs_recorded_ci(ratio: float, spec_se_log: float | None, spec_n: int,
                    rec: StratumBaseline) -> tuple[float, float]:
    """95% interval of spec median / recorded median: both medians' standard errors in log
    space (the recorded one from its robust sigma and lag-1 autocorrelation), Student's t at
    Welch's degrees of freedom (few samples: a wider interval, not 1.96)."""
    n_rec = neff(rec.n, rec.rho)
    se_rec = 1.2533 * rec.sig / math.sqrt(n_rec)
    se_spec = spec_se_log or 0.0
    se = math.sqrt(se_spec ** 2 + se_rec ** 2)
    t = t975(welch_df(se_spec, spec_n, se_rec, max(2, round(n_rec))))
    e = min(t * se, MAX_LOG_HALF_WIDTH)  # (a wild spread from a file: finite, plainly unbounded)
    return ratio * math.exp(-e), ratio * math.exp(e)


def _age(run: Run, now: float | None) -> float | None:
    if not run.ended or now is None or run.last_received is None:
        return None
    return max(0.0, now - run.last_received)


IDLE_SAY_S = 30.0  # a running server's last decode line older than this is said beside a speedup


def _last_decode(run: Run) -> float | None:
    return run.decode[-1].received if run.decode else None


def _idle(run: Run, other: Run, now: float | None) -> float | None:
    """Seconds since a running run's last decode line arrived, when it is over IDLE_SAY_S
    older than the other side's: its window ended that long before the other's (two windows
    that do not overlap: an idle speculative server against a live baseline)."""
    mine, theirs = _last_decode(run), _last_decode(other)
    if run.ended or now is None or mine is None or theirs is None:
        return None
    return now - mine if theirs - mine > IDLE_SAY_S and now - mine > IDLE_SAY_S else None


def speedup_view(base: ServerState | None, spec: ServerState | None, *,
                 window_s: float = DEFAULT_WINDOW_S, now: float | None = None,
                 recorded: BaselineStats | None = None, drift_active: bool = False,
                 fingerprint_diffs: Sequence[str] = ()) -> SpeedupView:
    """Everything the speedup line says, computed from the two servers' current runs."""
    if base is None or spec is None or not base.runs or not spec.runs:
        why = "needs one baseline and one speculative server" if base is None or spec is None \
            else "no decode lines yet"
        return SpeedupView(None, None, None, window_s, None, None, None, None, reason=why,
                           fingerprint_diffs=tuple(fingerprint_diffs))
    br, sr = base.runs[-1], spec.runs[-1]
    sp = run_speedup(br, sr, window_s)
    view = SpeedupView(None, None, None, window_s, br.index, None, sr.index, None,
                       fingerprint_diffs=tuple(fingerprint_diffs), base_ended_age_s=_age(br, now),
                       spec_ended_age_s=_age(sr, now), drift_active=drift_active,
                       base_idle_s=_idle(br, sr, now), spec_idle_s=_idle(sr, br, now))
    if sp is None:
        return replace(view, reason=f"no batch size with >= {MIN_N} decode samples in both current "
                                    f"runs (baseline run {br.index}, speculative run {sr.index}) "
                                    f"in their last {window_s:.0f} s")
    rst = recorded_stratum(recorded, sp.running_req)
    rec = rst.median_thr if rst is not None else None
    vs_rec = sp.spec.median / rec if rec else None
    return replace(
        view, value=sp.ratio, ci95=sp.ci95, running_req=sp.running_req,
        base_median=sp.base.median, spec_median=sp.spec.median, n_base=sp.base.n,
        n_spec=sp.spec.n, recorded_base=rec,
        drift_pct=100.0 * (sp.base.median / rec - 1.0) if rec else None,
        vs_recorded=vs_rec, detail=sp,
        vs_recorded_ci95=_vs_recorded_ci(vs_rec, sp.spec.se_log, sp.spec.n, rst)
        if vs_rec is not None and rst is not None else None)


def _age_text(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"


def conditions_text(diffs: Sequence[str]) -> str:
    """`conditions differ: tp_size: 8 vs 4; NCCL env seen by workers: ...` (said beside every
    speedup whose two servers differ in anything but speculation)."""
    return "conditions differ: " + "; ".join(diffs)


def unknown_text(unknown: list[str] | tuple[str, ...]) -> str:
    """`conditions unknown: the baseline's server args (...): the speedup may measure more
    than speculation` (every front end that shows a speedup says it so)."""
    return ("conditions unknown: " + "; ".join(unknown) + ": the speedup may measure more than "
            "speculation")


def baseline_label(v: SpeedupView) -> str:
    """`live baseline 62.9 (run 2)`; a baseline run that ended is not live: `baseline 62.9
    (run 2, ended 5 min ago)`."""
    if v.base_ended_age_s is not None:
        return (f"baseline {v.base_median:.1f} (run {v.base_run}, ended "
                f"{_age_text(v.base_ended_age_s)} ago)")
    return f"live baseline {v.base_median:.1f} (run {v.base_run})"


def format_speedup(v: SpeedupView) -> str:
    """`1.50x vs live baseline 62.9 (run 2) · baseline DRIFT -29% vs recorded 88.8 · 1.07x vs
    recorded` (plus the fingerprint differences and the age of an ended run)."""
    if v.value is None:
        text = f"speedup N/A: {v.reason}"
        return text + (" · " + conditions_text(v.fingerprint_diffs) if v.fingerprint_diffs else "")
    parts = [f"{v.value:.2f}x vs {baseline_label(v)}"]
    if v.spec_ended_age_s is not None:
        parts.append(f"speculative run {v.spec_run} ended {_age_text(v.spec_ended_age_s)} ago")
    if v.drift_active and v.drift_pct is not None and v.recorded_base is not None \
            and v.vs_recorded is not None:
        parts.append(f"baseline DRIFT {v.drift_pct:+.0f}% vs recorded {v.recorded_base:.1f}")
        parts.append(f"{v.vs_recorded:.2f}x vs recorded")
    if v.fingerprint_diffs:
        parts.append(conditions_text(v.fingerprint_diffs))
    if v.conditions_unknown:
        parts.append(unknown_text(v.conditions_unknown))
    for side, idle in (("baseline", v.base_idle_s), ("speculative", v.spec_idle_s)):
        if idle is not None:
            parts.append(f"{side} idle: its last decode line {_age_text(idle)} ago (its window "
                         "ends there)")
    return " · ".join(parts)


def fingerprint_differences(base: Fingerprint, spec: Fingerprint,
                            running_req: int | None = None) -> list[str]:
    """The conditions that differ between the two runs besides speculation
    (specmon.analysis.conditions.conditions_differ, the one rule)."""
    return conditions_differ(base, spec, running_req)
