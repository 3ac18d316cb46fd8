"""Weighted quantiles over (value, count) pairs equal the quantiles of the expanded multiset."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from specmon.analysis.stats import quantile_sorted, weighted_quantiles


@settings(max_examples=300, deadline=None)
@given(pairs=st.dictionaries(st.floats(min_value=0, max_value=1e6, allow_nan=False),
                             st.integers(min_value=0, max_value=6), max_size=30),
       qs=st.lists(st.floats(min_value=0, max_value=1), min_size=1, max_size=4))
def test_weighted_quantiles_equal_the_expanded_ones(pairs: dict[float, int],
                                                    qs: list[float]) -> None:
    expanded = sorted(v for v, c in pairs.items() for _ in range(c))
    assert weighted_quantiles(pairs.items(), qs) == [quantile_sorted(expanded, q) for q in qs]
