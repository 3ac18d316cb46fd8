"""Windowed, condition-matched decode statistics and the speedup between two servers.

Every number carries what it is: decode-only SGLang gen throughput, the window, the batch size
(#running-req) it was measured at, n, and its spread. Throughputs at different batch sizes are
never mixed, and the speedup is only computed from samples at the same #running-req.

A window is "the last W seconds of the current run's log time": it ends at the newest line the
run printed, never spans two runs, and no receive time (or host/laptop clock skew) enters it.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass

from specmon.analysis.stats import MIN_SPREAD_N, mad, median, quantile_sorted, t975, welch_df
from specmon.session.state import DecodePoint, Run, ServerState

DEFAULT_WINDOW_S = 60.0
MIN_N = MIN_SPREAD_N  # samples a side before a batch size is the headline speedup
MIN_CI_N = 2  # samples a side before an interval is given (fewer: N/A with the reason)
MAX_LOG_HALF_WIDTH = 20.0  # an interval wider than x/e^20..x*e^20 bounds nothing
MIN_CV_N = 5  # samples before a robust CV is printed
SMALL_N = 10  # below this a side's own spread is not trusted to be smaller than the other's


@dataclass(frozen=True)
class WindowStats:
    running_req: int
    n: int
    median: float
    p10: float
    p90: float
    robust_cv: float | None
    window_s: float
    accept_len: float | None  # median over the same samples (speculative only)

    @property
    def spread(self) -> tuple[float, float] | None:
        """(p10, p90), or None (N/A) from fewer than MIN_SPREAD_N samples."""
        return (self.p10, self.p90) if self.n >= MIN_SPREAD_N else None

    @property
    def shown_cv(self) -> float | None:
        """The robust CV as front ends print it: from MIN_CV_N samples (of 3, the MAD is the
        smaller of two gaps: 'p10-p90 79.5-106.0 · CV 0.2%')."""
        return self.robust_cv if self.n >= MIN_CV_N else None

    @property
    def se_log(self) -> float | None:
        """Standard error of log(median): 1.2533 * robust sd / sqrt(n), in log space."""
        if self.robust_cv is None or self.n < 2:
            return None
        return 1.2533 * self.robust_cv / math.sqrt(self.n)


def run_window(run: Run, window_s: float) -> list[DecodePoint]:
    """Server-level points of the last `window_s` seconds of the run's log time."""
    if not run.decode:
        return []
    return list(run.points_since(run.decode[-1].t - window_s))


def window_points(state: ServerState, now: float | None, window_s: float) -> list[DecodePoint]:
    """The current run's window (`now` is not used: windows follow the run's own log time)."""
    if not state.runs:
        return []
    return run_window(state.runs[-1], window_s)


def stats_for(points: Iterable[DecodePoint], running_req: int, window_s: float) -> WindowStats | None:
    samples = [p.rec for p in points if p.rec.sample_rr == running_req]
    vals = [r.gen_throughput for r in samples if r.gen_throughput is not None]
    if not vals:
        return None
    accepts = [r.accept_len for r in samples if r.accept_len is not None]
    s = sorted(vals)
    med = quantile_sorted(s, 0.5)
    assert med is not None
    d = mad(s)
    if d == 0 and len(set(s)) > 1:  # over half the values equal (printed rounded): the MAD
        d = statistics.fmean(abs(x - med) for x in s) * 1.2533 / 1.4826  # says 0; the mean
        # absolute deviation does not (scaled so 1.4826 d is the normal sigma, as from a MAD)
    # (all values equal: no spread is measured, which is not a zero spread: no interval)
    cv = 1.4826 * d / med if d and med > 0 and len(s) >= MIN_CI_N else None
    return WindowStats(
        running_req=running_req, n=len(s), median=med,
        p10=quantile_sorted(s, 0.1) or med, p90=quantile_sorted(s, 0.9) or med,
        robust_cv=cv, window_s=window_s, accept_len=median(accepts) if accepts else None,
    )


def current_stats(state: ServerState, now: float | None = None,
                  window_s: float = DEFAULT_WINDOW_S) -> WindowStats | None:
    """Stats at the current run's current #running-req over the window (None before any)."""
    if not state.runs:
        return None
    run = state.runs[-1]
    if run.bs is None:
        return None
    return stats_for(run_window(run, window_s), run.bs, window_s)


@dataclass(frozen=True)
class GroupRow:
    """One DP group of the current run, for the panel's per-group breakdown."""

    dp_rank: int | None
    lines: int  # decode lines of this group in the run
    stats: WindowStats | None  # at the group's own current #running-req, last window_s of log time
    last_t: float | None  # record time of its newest line
    silent: bool  # stopped logging while the other groups go on


def group_rows(state: ServerState, window_s: float = DEFAULT_WINDOW_S) -> list[GroupRow]:
    """Per-DP-group breakdown of the current run (one row for a server without DP)."""
    if not state.runs:
        return []
    run = state.runs[-1]
    end = run.decode[-1].t if run.decode else None
    rows = []
    for k in sorted(run.groups, key=lambda x: -1 if x is None else x):
        g = run.groups[k]
        last = g.last
        st = None
        if g.bs is not None and end is not None:
            pts = [p for p in g.points if p.t >= end - window_s and p.seg == run.segment]
            st = stats_for(pts, g.bs, window_s)
        rows.append(GroupRow(k, g.total, st, last.t if last else None, g.silent))
    return rows


def run_stats_text(state: ServerState, w: WindowStats | None, with_n: bool = True) -> str:
    """`run 3 since 14:02:11, n 4` (what the panel says next to the window median; without
    `with_n` the panel puts n first itself)."""
    if not state.runs:
        return "no run yet"
    run = state.runs[-1]
    n = w.n if w is not None else 0
    text = f"{run.since_text()}, n {n}" if with_n else run.since_text()
    if run.ended:
        text += ", ended"
    if run.skipped_bytes and run.read_from_t is not None:  # history after the start-up lines
        text += f", read from {time.strftime('%H:%M:%S', time.localtime(run.read_from_t))}"
    silent = run.silent_groups()
    if silent:  # vLLM prints nothing for an idle engine (0.8.5+): idle, not a stall
        label = ", idle engine " if state.engine == "vllm" else ", silent DP group "
        text += label + ",".join(str(k) for k in silent)
    seg = run.segment_text()
    if seg is not None:  # the window starts at the break: it never blends two clocks
        text += f", {seg}"
    return text


@dataclass(frozen=True)
class Speedup:
    """spec ÷ baseline median at one batch size; the one speedup every front end shows."""

    ratio: float
    low: float | None  # ~95% interval from both medians' standard errors (None: see ci_reason)
    high: float | None
    running_req: int
    base: WindowStats
    spec: WindowStats
    ci_reason: str | None = None  # why there is no interval

    @property
    def ci95(self) -> tuple[float, float] | None:
        return None if self.low is None or self.high is None else (self.low, self.high)

    @property
    def verdict(self) -> str:
        """"win" (interval wholly above 1), "lose" (wholly below), "tie", "na" (no interval)."""
        ci = self.ci95
        if ci is None:
            return "na"
        return "win" if ci[0] > 1.0 else "lose" if ci[1] < 1.0 else "tie"

    @property
    def base_ms_per_token(self) -> float:
        """Per-request inter-token time of the baseline at this batch size."""
        return 1000.0 * self.running_req / self.base.median

    @property
    def spec_ms_per_token(self) -> float:
        return 1000.0 * self.running_req / self.spec.median

    @property
    def verify_cycle_ms(self) -> float | None:
        """Implied draft+verify round time: accept_len tokens per round per request."""
        if self.spec.accept_len is None:
            return None
        return self.spec.accept_len * self.spec_ms_per_token

    @property
    def break_even_accept_len(self) -> float | None:
        """Accept length at which the speculative server would only match the baseline; None
        below 1 (no accept length is: a verify round faster than a baseline step means the
        two servers differ in more than speculation, or the windows do)."""
        cycle, base = self.verify_cycle_ms, self.base_ms_per_token
        be = None if cycle is None or not base > 0 else cycle / base
        return be if be is not None and be >= 1.0 else None


def speedup(base: ServerState, spec: ServerState, now: float,
            window_s: float = DEFAULT_WINDOW_S) -> Speedup | None:
    """spec ÷ baseline at the same #running-req; None when no batch size has enough samples."""
    if not base.runs or not spec.runs:
        return None
    return run_speedup(base.runs[-1], spec.runs[-1], window_s)


def run_speedup(base: Run, spec: Run, window_s: float = DEFAULT_WINDOW_S,
                running_req: int | None = None) -> Speedup | None:
    """spec run ÷ baseline run at the same #running-req, each over its own last `window_s`
    seconds of log time (math.inf: the whole run)."""
    return best_speedup(run_window(base, window_s), run_window(spec, window_s), window_s,
                        spec.bs, running_req)


def speedups_by_rr(bp: list[DecodePoint], sp: list[DecodePoint], window_s: float,
                   min_n: int = 1) -> list[Speedup]:
    """One Speedup per #running-req present on both sides with >= min_n samples each."""
    out = []
    common = {p.rec.running_req for p in bp} & {p.rec.running_req for p in sp}
    for rr in sorted(r for r in common if r is not None):
        b = stats_for(bp, rr, window_s)
        s = stats_for(sp, rr, window_s)
        if b is None or s is None or b.n < min_n or s.n < min_n:
            continue
        out.append(speedup_of(b, s))
    return out


def speedup_of(b: WindowStats, s: WindowStats) -> Speedup:
    """spec ÷ baseline median and its ~95% interval from both medians' standard errors (in log
    space). The one place the interval is computed: none from fewer than MIN_CI_N samples a
    side (a missing spread is not a zero spread)."""
    ratio = s.median / b.median
    short = [f"{label} n {w.n}" for label, w in (("baseline", b), ("speculative", s))
             if w.n < MIN_CI_N]
    if short or b.se_log is None or s.se_log is None:
        why = (f"95% interval N/A: fewer than {MIN_CI_N} samples ({', '.join(short)})" if short
               else "95% interval N/A: no spread measured")
        return Speedup(ratio, None, None, b.running_req, b, s, why)
    se_b, se_s = b.se_log, s.se_log
    # a spread read off a few samples can be tiny by chance (3 values 200.49, 200.71, 203.09:
    # a robust CV of 0.16 % where the lines' noise is 3 %): below SMALL_N a side's spread is
    # taken no smaller than the other side's
    if b.n < SMALL_N and b.robust_cv is not None and s.robust_cv is not None:
        se_b = max(se_b, 1.2533 * s.robust_cv / math.sqrt(b.n))
    if s.n < SMALL_N and b.robust_cv is not None and s.robust_cv is not None:
        se_s = max(se_s, 1.2533 * b.robust_cv / math.sqrt(s.n))
    se = math.sqrt(se_b ** 2 + se_s ** 2)
    # Student's t at Welch's degrees of freedom: 1.96 claimed at n 3 what n 3 cannot support
    t = t975(welch_df(se_b, b.n, se_s, s.n))
    if not t * se < MAX_LOG_HALF_WIDTH:  # (a wild spread from a file: no factor of e^50)
        return Speedup(ratio, None, None, b.running_req, b, s,
                       "95% interval N/A: the spread is too wide to bound the ratio")
    return Speedup(ratio=ratio, low=ratio * math.exp(-t * se), high=ratio * math.exp(t * se),
                   running_req=b.running_req, base=b, spec=s)


def interval_text(sp: Speedup, fmt: str = "{:.3f}") -> str:
    """`1.412–1.588`, or `N/A (fewer than 2 samples ...)`."""
    ci = sp.ci95
    if ci is None:
        return "N/A (" + (sp.ci_reason or "").removeprefix("95% interval N/A: ") + ")"
    return f"{fmt.format(ci[0])}–{fmt.format(ci[1])}"


def best_speedup(bp: list[DecodePoint], sp: list[DecodePoint], window_s: float,
                 prefer: int | None = None, running_req: int | None = None) -> Speedup | None:
    """The current batch size first, else the one with most samples on both (>= MIN_N each)."""
    if not bp or not sp:
        return None
    common = {p.rec.running_req for p in bp} & {p.rec.running_req for p in sp}
    if running_req is not None:
        common &= {running_req}
    best: tuple[tuple[int, int], WindowStats, WindowStats] | None = None
    for rr in sorted(r for r in common if r is not None):
        b = stats_for(bp, rr, window_s)
        s = stats_for(sp, rr, window_s)
        if b is None or s is None or b.n < MIN_N or s.n < MIN_N:
            continue
        score = (1 if rr == prefer else 0, min(b.n, s.n))  # the current batch size first
        if best is None or score > best[0]:
            best = (score, b, s)
    if best is None:
        return None
    _, b, s = best
    return speedup_of(b, s)


def recomputed_accept_rate(accept_len: float | None, num_draft_tokens: int | None) -> float | None:
    """(accept_len - 1) / (draft tokens - 1): correct drafts per proposed draft.

    SGLang changed the printed rate's denominator twice (0.5.4, 0.5.6, 0.5.11), so specmon
    recomputes it from accept len and the server's own draft-token count.
    """
    if accept_len is None or num_draft_tokens is None or not 2 <= num_draft_tokens <= 1 << 20:
        return None  # (a number of drafts no server uses, from a damaged snapshot: not a rate)
    return max(0.0, min(1.0, (accept_len - 1.0) / (num_draft_tokens - 1)))
