"""Windowed, condition-matched decode statistics and the speedup between two servers.

Every number carries what it is: decode-only SGLang gen throughput, the window, the batch size
(#running-req) it was measured at, n, and its spread. Throughputs at different batch sizes are
never mixed, and the speedup is only computed from samples at the same #running-req.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from specmon.analysis.stats import mad, median, quantile_sorted
from specmon.parse.sglang import BatchRecord


class TimedDecode(Protocol):
    """A decode record and when it was received (the session's points are these)."""

    @property
    def t(self) -> float: ...

    @property
    def rec(self) -> BatchRecord: ...


class DecodeSeries(Protocol):
    """What the window reads of a server: its decode points in order and the latest record.

    A protocol, so analysis never imports the session that holds the points.
    """

    @property
    def decode(self) -> Sequence[TimedDecode]: ...

    @property
    def last_decode(self) -> BatchRecord | None: ...

DEFAULT_WINDOW_S = 60.0
MIN_N = 3


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
    def se_log(self) -> float | None:
        """Standard error of log(median): 1.2533 * robust sd / sqrt(n), in log space."""
        if self.robust_cv is None or self.n < 2:
            return None
        return 1.2533 * self.robust_cv / math.sqrt(self.n)


def window_points(state: DecodeSeries, now: float, window_s: float) -> list[TimedDecode]:
    cutoff = now - window_s
    pts: list[TimedDecode] = []
    for p in reversed(state.decode):
        if p.t < cutoff:
            break
        pts.append(p)
    pts.reverse()
    return pts


def stats_for(points: Iterable[TimedDecode], running_req: int, window_s: float) -> WindowStats | None:
    vals = [p.rec.gen_throughput for p in points
            if p.rec.running_req == running_req and p.rec.gen_throughput is not None
            and p.rec.gen_throughput > 0]
    if not vals:
        return None
    accepts = [p.rec.accept_len for p in points
               if p.rec.running_req == running_req and p.rec.accept_len is not None]
    s = sorted(vals)
    med = quantile_sorted(s, 0.5)
    assert med is not None
    d = mad(s)
    cv = 1.4826 * d / med if d is not None and med > 0 and len(s) >= 3 else None
    return WindowStats(
        running_req=running_req, n=len(s), median=med,
        p10=quantile_sorted(s, 0.1) or med, p90=quantile_sorted(s, 0.9) or med,
        robust_cv=cv, window_s=window_s, accept_len=median(accepts) if accepts else None,
    )


def current_stats(state: DecodeSeries, now: float, window_s: float = DEFAULT_WINDOW_S) -> WindowStats | None:
    """Stats at the server's current #running-req over the window."""
    if state.last_decode is None or state.last_decode.running_req is None:
        return None
    return stats_for(window_points(state, now, window_s), state.last_decode.running_req, window_s)


@dataclass(frozen=True)
class Speedup:
    ratio: float
    low: float  # ~95% interval from both medians' standard errors
    high: float
    running_req: int
    base: WindowStats
    spec: WindowStats

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
        """Accept length at which the speculative server would only match the baseline."""
        cycle = self.verify_cycle_ms
        return None if cycle is None else cycle / self.base_ms_per_token


def speedup(base: DecodeSeries, spec: DecodeSeries, now: float,
            window_s: float = DEFAULT_WINDOW_S) -> Speedup | None:
    """spec ÷ baseline at the same #running-req; None when no batch size has enough samples."""
    bp = window_points(base, now, window_s)
    sp = window_points(spec, now, window_s)
    if not bp or not sp:
        return None
    common = {p.rec.running_req for p in bp} & {p.rec.running_req for p in sp}
    prefer = spec.last_decode.running_req if spec.last_decode else None
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
    rr = b.running_req
    ratio = s.median / b.median
    se = math.sqrt((b.se_log or 0.0) ** 2 + (s.se_log or 0.0) ** 2)
    return Speedup(ratio=ratio, low=ratio * math.exp(-1.96 * se), high=ratio * math.exp(1.96 * se),
                   running_req=rr, base=b, spec=s)


def recomputed_accept_rate(accept_len: float | None, num_draft_tokens: int | None) -> float | None:
    """(accept_len - 1) / (draft tokens - 1): correct drafts per proposed draft.

    SGLang changed the printed rate's denominator twice (0.5.4, 0.5.6, 0.5.11), so specmon
    recomputes it from accept len and the server's own draft-token count.
    """
    if accept_len is None or num_draft_tokens is None or num_draft_tokens < 2:
        return None
    return max(0.0, min(1.0, (accept_len - 1.0) / (num_draft_tokens - 1)))
