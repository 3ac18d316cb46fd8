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


# Student's t, two-sided 95 %: exact for df 1..10 (interpolated in 1/df between), the
# Cornish-Fisher expansion above (within 0.003 of the exact value at df 10, closer beyond)
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)
_Z975 = 1.959964


def t975(df: float) -> float:
    """The 97.5 % quantile of Student's t with `df` degrees of freedom (fractional: Welch).
    A 95 % interval from n samples takes t975(n - 1), not 1.96: at n 3 it is 2.2x wider."""
    df = max(1.0, df)
    if df <= len(_T975):
        lo = math.floor(df)
        if lo == df:
            return _T975[lo - 1]
        # (interpolation in 1/df: t is near linear in it)
        w = (1 / lo - 1 / df) / (1 / lo - 1 / (lo + 1))
        return _T975[lo - 1] + w * (_T975[lo] - _T975[lo - 1])
    z = _Z975
    return (z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * df ** 3))


def welch_df(se_a: float, n_a: int, se_b: float, n_b: int) -> float:
    """Welch-Satterthwaite degrees of freedom of a difference of two means (here: of two log
    medians) from their standard errors and sample counts."""
    num = (se_a ** 2 + se_b ** 2) ** 2
    den = (se_a ** 4 / max(n_a - 1, 1)) + (se_b ** 4 / max(n_b - 1, 1))
    return num / den if den > 0 else float(max(n_a + n_b - 2, 1))
