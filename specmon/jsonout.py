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
import re
from typing import Any

import orjson

# an int this long is not a measurement (and str() of it may raise): written as null
MAX_INT_DIGITS = 4000
# How deep lists and objects in one value read from a file (a snapshot's field, a record row's
# probe, a baseline store payload, --server-info) may nest. specmon's own values nest a few
# levels; deeper is damage, and every walker of the value (redaction, `_jsonable`, the writers)
# recurses: 600 levels was a RecursionError traceback. Python's parser reads ~1000.
MAX_DEPTH = 64
_PATH_STEPS = 4  # steps of a too-deep value's path shown
_RE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,39}\Z")


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


def too_deep(obj: Any, limit: int = MAX_DEPTH) -> str | None:
    """None when `obj` nests lists and objects at most `limit` levels (a number is 0 levels,
    `[]` and `{}` one); else where it goes deeper: the path from `obj` to the first list or
    object past the limit, its first steps ('.env.a[0][0]…'; '' for `obj` itself). Iterative:
    never a RecursionError, however deep."""
    # a node is (parent node, key, key of a list?): the path is built only when it is shown
    stack: list[tuple[Any, int, Any]] = [(obj, 1, None)]
    while stack:
        x, depth, node = stack.pop()
        if not isinstance(x, dict | list | tuple):
            continue
        if depth > limit:
            return _path(node)
        in_list = not isinstance(x, dict)
        items = x.items() if isinstance(x, dict) else enumerate(x)
        stack.extend((v, depth + 1, (node, k, in_list)) for k, v in items
                     if isinstance(v, dict | list | tuple))
    return None


def not_finite(obj: Any) -> str | None:
    """None when every number in `obj` is finite; else the path to the first that is not
    ('.a', '.x[2].b', '' for `obj` itself): NaN, Infinity and 1e400, which Python's json
    reads and no other JSON reader (nor `dumps`) writes. Iterative, like `too_deep`."""
    stack: list[tuple[Any, Any]] = [(obj, None)]
    while stack:
        x, node = stack.pop()
        if isinstance(x, float) and not math.isfinite(x):
            return _path(node)
        if isinstance(x, dict | list | tuple):
            in_list = not isinstance(x, dict)
            items = list(x.items() if isinstance(x, dict) else enumerate(x))
            stack.extend((v, (node, k, in_list)) for k, v in reversed(items))
    return None


def _path(node: Any) -> str:
    steps: list[str] = []
    while node is not None:
        node, key, in_list = node
        text = str(key)
        steps.append(f"[{text}]" if in_list else f".{text}" if _RE_NAME.match(text)
                     else f"[{ascii(text[:40])}]")  # (ascii: no control or bidi character)
    steps.reverse()
    return "".join(steps[:_PATH_STEPS]) + ("…" if len(steps) > _PATH_STEPS else "")


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
