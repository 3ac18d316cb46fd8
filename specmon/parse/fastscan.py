"""A fast path for summarising whole log buffers in the common formats.

`specmon parse` (summary mode) must keep up with multi-gigabyte logs. Per-line Python costs
~1 µs; the scan here is one regex pass over the buffer (batch lines) and C-level counting, with
Python work only per distinct value. The regex starts with a literal, so the engine jumps from
one occurrence of it to the next instead of trying a match at every byte (a lookbehind or a
class first makes it try every byte: 14x slower, issue 25); tests/unit/test_parse_budget.py
counts that.

Exact by construction (issue 25): a decode line counts only if one pattern covers its whole
body, from the marker to the end of the line, piece by piece as the general parser
(`specmon.parse.sglang`) splits it, with the three fields the summary reads (#running-req,
accept len, gen throughput) each in its own slot, once; any other piece starts with a
character that no spelling of those three keys can start with after normalisation, and the
piece after a slot value holds a `: ` (so it cannot be glued onto that value). Any batch marker
the pattern cannot read so makes the whole buffer decline to the general parser (`parse_line`,
line by line); tests/unit/test_parse_fast_exact.py checks the two agree on mutated real lines.
"""

from __future__ import annotations

import gc
import re
import sys
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache
from itertools import chain, repeat, starmap
from operator import itemgetter
from typing import Any, TypeVar

from specmon.parse.sglang import INVALID, canon_value, read_number

# A value of one of the three fields: a plain token (no `=`, `%`, space or comma, which the general
# parser reads otherwise); `_values` reads it as the general parser does (nan, 1e5, 007, True).
_V = rb"([\w.+-]+)"
# The start of any other piece, after its ", ": an optional '#' (the parser drops it), then a
# letter or digit, which is then the first character of the key's normalised form (lower-cased)
# and is none of a, g, r in either case, so the key cannot read as `accept_len`,
# `gen_throughput` or `running_req`; two real keys that start with a or r are spelled out.
_OTHER = rb"(?:#?[0-9b-fh-qs-zB-FH-QS-Z]|accept rate|#retracted-req)"
# Possessive repeats (3.11+) spare sre the backtracking state: ~10% of the scan. The pattern
# never needs to give back what they take (no piece they read can start a slot), so they
# change no match; 3.10 reads the same pattern without them.
_P = b"+" if sys.version_info >= (3, 11) else b""


def _after(known: bytes, usual: bytes = b"") -> bytes:
    """After a slot value: nothing, or a piece with a key (it has ": ", so it is no `k=v` glued
    onto the value), then any other pieces (glued `k=v` parts, fragments the parser drops).
    `known`, the keyed piece real logs print there, is tried first as literal text, then
    `usual`, the pieces that mostly follow it: each is one instance of the generic piece (a key
    that starts with a character of `_OTHER`, then `[^,\n]*`), so the match is the same, and
    sre walks a literal piece faster than a turn of the generic loop (the pattern: -13%)."""
    rest = rb"[^,\n]*" + _P
    keyed = _OTHER + rb"[^,:\n]*" + _P + rb": " + rest
    usual_pieces = b"".join(rb"(?:, " + k + rest + rb")?" + _P for k in usual.split(b"|") if k)
    return (rb"(?:, (?:" + known + rest + rb"|" + keyed + rb")" + usual_pieces +
            rb"(?:, " + _OTHER + rest + rb")*" + _P + rb")?" + _P)


# One match per line that holds a batch marker, from its first marker to the end of the line.
# Groups: running-req, 'a' if accept len, accept len, gen throughput, the prefill head's [.,].
# All empty: a marker the scan cannot read exactly (the caller declines the buffer).
_BATCH = re.compile(
    rb"batch(?:(?<=Decode batch)(?:(?: \[\d+\])?[.,] #running-req: " + _V +
    _after(rb"#token: ", rb"token usage: |cuda graph: ") +
    rb"(?:, (a)ccept len: " + _V + _after(rb"accept rate: ", rb"cuda graph: ") +
    rb")?, gen throughput \(token/s\): " + _V + _after(rb"#queue-req: ") +
    rb"(?:, |,| )?$|[^\n]*)"
    # prefill: the general parser prefers a decode marker anywhere in the line; `_scan` checks
    # that every decode marker starts a match (none hides in a line read as prefill)
    rb"|(?<=Prefill batch)(?:(?: \[\d+\])?(?:\(mixed #running-req: \d+\))?([.,])(?= |$))?"
    rb"[^\n]*)",
    re.M,
)
# A value whose float() is what the general parser stores: finite, >= 0, below MAX_THROUGHPUT,
# an int of at most 18 digits (the general parser's limits, specmon.parse.sglang).
_PLAIN = re.compile(rb"\n(\d{1,9}(?:\.\d*)?)(?=\n)")  # over "\n" + values joined + "\n"
_PLAIN_ACCEPT = re.compile(rb"\n(\d{1,3}(?:\.\d*)?)(?=\n)")  # below MAX_ACCEPT_LEN (1000)
# A line's key for the throughput count: running-req, 'a', gen throughput, prefill head
_KEY = itemgetter(0, 1, 3, 4)
_BAD = (b"", b"", b"", b"")
_PREFILL = ((b"", b"", b"", b"."), (b"", b"", b"", b","))
_K = TypeVar("_K")

ThroughputKey = tuple[bool, "int | None", "float | None"]


class FastCounts:
    """Mergeable counts for one buffer, in the same shape the general path produces."""

    __slots__ = ("decode", "prefill", "throughput", "accept", "invalid")

    def __init__(self) -> None:
        self.decode = 0
        self.prefill = 0
        self.invalid = 0  # values the general parser would turn into None + a warning
        self.throughput: Counter[tuple[bool, int | None, float | None]] = Counter()
        self.accept: Counter[float | None] = Counter()


def scan_buffer(buf: bytes, end: int | None = None) -> FastCounts | None:
    """Counts for `buf[:end]`, whole lines, or None when the general parser must be used.
    (`end` spares the caller a copy of a 64 MiB chunk.)"""
    end = len(buf) if end is None else end
    if buf.find(b"\x00", 0, end) >= 0:
        return None  # the general parser drops NULs, which can join a marker or a key
    # findall makes a tuple and bytes per batch line, none of them in a cycle: the collector's
    # passes over them cost ~40% of the scan (64 MiB chunk: 570 ms with it, 350 ms without)
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _scan(buf, end)
    finally:
        if enabled:
            gc.enable()


def _scan(buf: bytes, end: int) -> FastCounts | None:
    out = FastCounts()
    lines = _BATCH.findall(buf, 0, end)
    # C-level counting of two projections; Python below only per distinct key
    found = Counter(map(_KEY, lines))
    if _BAD in found:
        return None  # a marker the regex could not read exactly
    out.prefill = sum(found.pop(k, 0) for k in _PREFILL)
    out.decode = found.total()
    if buf.count(b"Decode batch", 0, end) != out.decode:
        return None  # a decode marker inside a line read otherwise (a prefill line's tail)
    if not found:
        return out
    accepts = Counter(map(itemgetter(2), lines))
    del accepts[b""]
    al_map, al_bad = _values("accept_len", set(accepts))
    if None in al_map.values():  # rare: an accept len read as no value makes no speculative line
        return _scan_by_line(Counter(lines), out, al_map, al_bad)
    rrs, specs, gts = (list(map(itemgetter(i), found)) for i in range(3))
    rr_map, rr_bad = _values("running_req", set(rrs))
    gt_map, gt_bad = _values("gen_throughput", set(gts))
    _add(out.throughput, list(zip(map(bool, specs), map(rr_map.__getitem__, rrs),
                                  map(gt_map.__getitem__, gts), strict=True)), found.values())
    _add(out.accept, list(map(al_map.__getitem__, accepts)), accepts.values())
    if rr_bad or gt_bad:  # rare: Python per distinct line shape
        out.invalid += sum(c * ((rr in rr_bad) + (gt in gt_bad))
                           for (rr, _, gt, _), c in found.items())
    out.invalid += sum(accepts[v] for v in al_bad)
    return out


def _scan_by_line(found: Counter[tuple[bytes, ...]], out: FastCounts,
                  al_map: dict[bytes, Any], al_bad: set[bytes]) -> FastCounts:
    """The decode counts, in Python per distinct line (values, not shapes): for buffers where
    some accept len reads as no value (`nan`, `1.2.3`), so its line is no speculative one."""
    rr_map, rr_bad = _values("running_req", {k[0] for k in found})
    gt_map, gt_bad = _values("gen_throughput", {k[3] for k in found})
    for (rr, _, al, gt, p), c in found.items():
        if p:
            continue  # prefill, counted already
        v = al_map[al] if al else None
        out.throughput[(v is not None, rr_map[rr], gt_map[gt])] += c
        if v is not None:
            out.accept[v] += c
        out.invalid += c * ((rr in rr_bad) + (gt in gt_bad) + (al in al_bad))
    return out


def _add(counter: Counter[_K], keys: list[_K], counts: Iterable[int]) -> None:
    """counter[k] += n for each pair, in C (two raw spellings may share one value)."""
    if not counter and len(set(keys)) == len(keys):
        counter.update(dict(zip(keys, counts, strict=True)))
    else:
        add_counts(counter, zip(keys, counts, strict=True))


def add_counts(counter: Counter[_K], items: Iterable[tuple[_K, int]]) -> None:
    """counter[k] += n for each (k, n), in C per counted item (`Counter.update` of a mapping
    loops in Python per key: the dearer one when most keys are counted once)."""
    counter.update(chain.from_iterable(starmap(repeat, items)))


def _values(field: str, raws: set[bytes]) -> tuple[dict[bytes, Any], set[bytes]]:
    """{raw: value as the general parser stores it} and the raws it counts as invalid.
    Plain decimals (nearly all) go through float() in C; the rest through `canon_value`."""
    raws.discard(b"")
    plain: list[bytes] = []
    if field != "running_req":
        plain = (_PLAIN_ACCEPT if field == "accept_len" else _PLAIN).findall(
            b"\n%b\n" % b"\n".join(raws))
    values: dict[bytes, Any] = dict(zip(plain, map(float, plain), strict=True))
    bad: set[bytes] = set()
    for raw in raws.difference(plain):
        v, invalid = _canon(field, raw)
        values[raw] = v
        if invalid:
            bad.add(raw)
    return values, bad


@lru_cache(maxsize=1 << 12)
def _canon(field: str, raw: bytes) -> tuple[int | float | None, int]:
    """(value as the general parser stores it, 1 if it counts as an invalid value)."""
    v = canon_value(field, read_number(raw.decode("ascii")))
    if v is INVALID:
        return None, 1
    if field == "running_req" and not isinstance(v, int):
        return None, 0
    return v, 0
