"""JSON lines (`dumps_line`, orjson) are as strict as `dumps`: no Infinity/NaN, nothing that
raises, and with ascii_only no raw non-ASCII (a terminal gets no C1 control or bidi override)."""

from __future__ import annotations

import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from specmon.jsonout import dumps, dumps_line

_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=12,
)


def _finite(v: object) -> object:
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, list):
        return [_finite(x) for x in v]
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    return v


@settings(max_examples=300, deadline=None)
@given(obj=_VALUES, ascii_only=st.booleans())
def test_any_tree_is_one_strict_line(obj: object, ascii_only: bool) -> None:
    line = dumps_line(obj, ascii_only=ascii_only)
    assert "\n" not in line
    back = json.loads(line, parse_constant=_refuse)  # strict JSON: no NaN/Infinity literal
    # (ints past 4300 digits are written as null, as `dumps` does)
    if not any(isinstance(x, int) and abs(x) > 10**4000 for x in _leaves(obj)):
        assert back == _finite(obj)
    if ascii_only:
        assert line.isascii()


def _refuse(name: str) -> object:
    raise AssertionError(f"{name} written")


def _leaves(v: object) -> list[object]:
    if isinstance(v, list):
        return [y for x in v for y in _leaves(x)]
    if isinstance(v, dict):
        return [y for x in v.values() for y in _leaves(x)]
    return [v]


def test_what_orjson_refuses_goes_through_dumps() -> None:
    assert json.loads(dumps_line({"n": 2**70})) == {"n": 2**70}  # past 64 bits
    assert json.loads(dumps_line({"s": "a\ud800b"})) == {"s": "a\ud800b"}  # lone surrogate
    assert json.loads(dumps_line({1: "x"})) == {"1": "x"}  # a key that is not a string
    assert dumps_line({"x": float("nan"), "y": -float("inf")}) == '{"x":null,"y":null}'
    # C1 CSI and a bidi override: escaped (still the same JSON string), never raw
    line = dumps_line({"t": "a\x9b2Jb\u202e"}, ascii_only=True)
    assert line == '{"t":"a\\u009b2Jb\\u202e"}'
    assert json.loads(line) == json.loads(dumps({"t": "a\x9b2Jb\u202e"}))


def test_too_deep_names_where_a_value_goes_past_the_bound_without_recursing() -> None:
    from specmon.jsonout import MAX_DEPTH, too_deep

    deep: list = []
    for _ in range(100_000):  # built without json (past any recursion limit)
        deep = [deep]
    assert too_deep(deep) == "[0][0][0][0]…"
    assert too_deep({"a b\x1b": {"x": deep}}) == "['a b\\x1b'].x[0][0]…"
    assert too_deep({"env": {"a": [[]]}}, 3) == ".env.a[0]" and too_deep({"env": {"a": [[]]}}, 4) is None
    assert too_deep(5) is None and too_deep([], 0) == "" and MAX_DEPTH == 64


def test_not_finite_names_the_first_number_no_float_holds() -> None:
    from specmon.jsonout import not_finite

    assert not_finite({"a": 1, "b": [1.5, {"c": "nan"}], "d": None}) is None
    assert not_finite({"a": float("nan")}) == ".a"
    assert not_finite({"ok": 1.0, "x": [0, {"y b": float("inf")}], "z": float("-inf")}) == \
        ".x[1]['y b']"
    assert not_finite([[float("inf")]]) == "[0][0]"
    assert not_finite(float("nan")) == ""
