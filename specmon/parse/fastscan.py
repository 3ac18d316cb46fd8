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

import re
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache
from itertools import chain, compress, repeat, starmap
from operator import is_not
from typing import Any, TypeVar

from specmon.parse.sglang import INVALID, canon_value, read_number

# A value of one of the three fields: a plain token (no `=`, `%`, space or comma, which the general
# parser reads otherwise); `_values` reads it as the general parser does (nan, 1e5, 007, True).
_V = rb"([\w.+-]+)"
# The start of any other piece, after its ", ": a key's normalised form starts with its first
# character that is a letter or digit, lower-cased, after a '#' the parser drops; none of these
# can start `running_req`, `accept_len` or `gen_throughput`. Two real keys start with a/r.
_OTHER = rb"(?:#?[0-9b-fh-qs-zB-FH-QS-Z]|accept rate|#retracted-req)"
# After a slot value: nothing, or a piece with a key (it has ": ", so it is no `k=v` glued onto
# the value), then any other pieces (glued `k=v` parts, fragments the parser drops).
_AFTER = rb"(?:, " + _OTHER + rb"[^,:\n]*: [^,\n]*(?:, " + _OTHER + rb"[^,\n]*)*)?"
# One match per line that holds a batch marker, from its first marker to the end of the line.
# Groups: running-req, accept len (empty: none), gen throughput, the prefill head's [.,]. All
# four empty: a marker the scan cannot read exactly (the caller declines the buffer).
_BATCH = re.compile(
    rb"batch(?:(?<=Decode batch)(?:(?: \[\d+\])?[.,] #running-req: " + _V + _AFTER +
    rb"(?:, accept len: " + _V + _AFTER + rb")?, gen throughput \(token/s\): " + _V + _AFTER +
    rb"(?:, |,| )?$)?"
    # prefill: the general parser prefers a decode marker anywhere in the line
    rb"|(?<=Prefill batch)(?:(?: \[\d+\])?(?:\(mixed #running-req: \d+\))?([.,])(?= |$))?"
    rb"(?![^\n]*Decode batch))[^\n]*",
    re.M,
)
# A value whose float() is what the general parser stores: finite, >= 0, below MAX_THROUGHPUT,
# an int of at most 18 digits (the general parser's limits, specmon.parse.sglang).
_PLAIN = re.compile(rb"\n(\d{1,9}(?:\.\d*)?)(?=\n)")  # over "\n" + values joined + "\n"
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
    out = FastCounts()
    found = Counter(_BATCH.findall(buf, 0, end))  # C-level; Python below only per distinct key
    if _BAD in found:
        return None  # a marker the regex could not read exactly
    out.prefill = sum(found.pop(k, 0) for k in _PREFILL)
    if not found:
        return out  # an accept len outside decode lines is no field of any record
    out.decode = found.total()
    rrs, als, gts, _ = zip(*found, strict=True)
    rr_map, rr_bad = _values("running_req", set(rrs))
    gt_map, gt_bad = _values("gen_throughput", set(gts))
    al_map, al_bad = _values("accept_len", set(als))
    al_map[b""] = None  # no accept len: a baseline line
    accept = list(map(al_map.__getitem__, als))
    spec = list(map(is_not, accept, repeat(None)))  # the general parser: accept_len is not None
    _add(out.throughput, list(zip(spec, map(rr_map.__getitem__, rrs),
                                  map(gt_map.__getitem__, gts), strict=True)), found.values())
    if any(spec):
        add_counts(out.accept, compress(zip(accept, found.values(), strict=True), spec))
    if rr_bad or gt_bad or al_bad:  # rare: Python per distinct line shape
        out.invalid = sum(c * ((rr in rr_bad) + (gt in gt_bad) + (al in al_bad))
                          for (rr, al, gt, _), c in found.items())
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
        plain = _PLAIN.findall(b"\n%b\n" % b"\n".join(raws))
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
