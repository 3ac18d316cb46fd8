"""Small robust statistics over plain floats (no numpy: the core must stay light)."""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from itertools import accumulate

# Samples before a p10-p90 spread is shown: the "spread" of one or two values is no spread
# (p10 = p90 = the value reads as zero variation), so it is N/A, as the live panel says it
MIN_SPREAD_N = 3


def quantile_sorted(xs: Sequence[float], q: float) -> float | None:
    """Linear-interpolated quantile of an already sorted sequence (numpy's default method)."""
    n = len(xs)
    if n == 0:
        return None
    if n == 1:
        return float(xs[0])
    pos = q * (n - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    frac = pos - lo
    return float(xs[lo] + (xs[hi] - xs[lo]) * frac)


def weighted_quantiles(counts: Iterable[tuple[float, int]], qs: Sequence[float]) -> list[float | None]:
    """Quantiles of a multiset given as (value, count) pairs, identical to expanding it (a log's
    summary holds a pair per distinct throughput value: hundreds of thousands of them)."""
    pairs = sorted(counts)
    ends = list(accumulate(c for _, c in pairs))  # ends[i]: values up to and including pairs[i]
    n = ends[-1] if ends else 0
    if n == 0:
        return [None for _ in qs]
    out: list[float | None] = []
    for q in qs:
        pos = q * (n - 1)
        lo = math.floor(pos)
        hi = min(lo + 1, n - 1)
        a = pairs[bisect_right(ends, lo)][0]  # the value at sorted position lo
        b = pairs[bisect_right(ends, hi)][0]
        out.append(float(a + (b - a) * (pos - lo)))
    return out


def median(xs: Iterable[float]) -> float | None:
    s = sorted(xs)
    return quantile_sorted(s, 0.5)


def mad(xs: Sequence[float]) -> float | None:
    """Median absolute deviation (unscaled)."""
    m = median(xs)
    if m is None:
        return None
    return median(abs(x - m) for x in xs)


def robust_cv(xs: Sequence[float]) -> float | None:
    """1.4826 * MAD / median: the noise measure used in shared/fixtures INDEX.md."""
    m = median(xs)
    d = mad(xs)
    if m is None or d is None or m == 0:
        return None
    return 1.4826 * d / m
