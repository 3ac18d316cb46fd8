"""The one way specmon writes JSON: strict (never `Infinity`/`NaN`), whatever the input held.

`json.dumps` writes `Infinity` and `NaN` by default, which no other JSON reader accepts, and
fails on ints past Python's 4300-digit limit. Every JSON that leaves specmon (parse --json,
record JSONL, snapshots, baseline/check/status --json) goes through `dumps`: the fast path
is plain `json.dumps(allow_nan=False)`; only when that fails is the tree cleaned (non-finite
floats and unprintable ints become null) and dumped again, still with allow_nan=False.
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson

# an int this long is not a measurement (and str() of it may raise): written as null
MAX_INT_DIGITS = 4000


def finite(obj: Any) -> Any:
    """A copy of a JSON-like tree with non-finite floats and absurd ints replaced by None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, int):
        return obj if obj.bit_length() <= MAX_INT_DIGITS * 3 else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    return obj


def dumps(obj: Any, **kw: Any) -> str:
    """`json.dumps` that never emits Infinity/NaN and never raises on a hostile number."""
    kw["allow_nan"] = False
    try:
        return json.dumps(obj, **kw)
    except ValueError:
        return json.dumps(finite(obj), **kw)


def dumps_line(obj: Any, *, ascii_only: bool = False) -> str:
    """One JSON-lines row, compact. `record` and `parse --json` write one per log line, and
    orjson (the JSON library SGLang and vLLM use) encodes a 30-field record in ~0.5 us against
    ~6 us for `json`. Non-finite floats become null, as in `dumps`; what orjson refuses (an int
    past 64 bits, a lone surrogate, a key that is not a string) goes through `dumps`.
    `ascii_only`: non-ASCII written as \\u escapes (a terminal then shows no raw C1 control or
    bidi override; they stay valid JSON)."""
    try:
        out = orjson.dumps(obj).decode()
    except TypeError:  # (orjson.JSONEncodeError is a TypeError)
        return dumps(obj, ensure_ascii=ascii_only, separators=(",", ":"))
    if ascii_only and not out.isascii():
        return dumps(obj, separators=(",", ":"))
    return out
