"""A fast path for summarising whole log buffers in the common formats.

`specmon parse` (summary mode) must keep up with multi-gigabyte logs. Per-line Python costs
~1 µs; the scan here is two regex passes over the buffer (batch lines, accept len) and C-level
counting, with Python work only per distinct value. Each regex starts with a literal, so the
engine jumps from one occurrence of it to the next instead of trying a match at every byte (a
lookbehind or a class first makes it try every byte: 14x slower, issue 25);
tests/unit/test_parse_budget.py counts that.

The scan is exact or declines: it returns None whenever the buffer holds anything it might read
differently from the general parser (`parse_line`), which then reads the buffer line by line.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache
from itertools import chain, compress, repeat, starmap
from typing import Any, TypeVar

from specmon.parse.sglang import INVALID, canon_value, read_number

# After a value: the next `, key` (a printable non-comma, non-space byte follows, so no strip
# in the general parser can eat that separator) or the end of the line.
_END = rb"(?=, [\x21-\x2b\x2d-\x7e]|,?[ \t\r]*$)"
# One match per line that holds a batch marker, from its first marker to the end of the line.
# Decode (D1-D10, 0.4.9 SWA, forks that keep the body intact): #running-req first, the KV usage
# part, an optional accept len right after it, gen throughput later: the last one, with none of
# the three keys after it (the general parser keeps a key's last value). Groups: running-req,
# 'a' if accept len, gen throughput, the prefill head's [.,]. All four empty: a marker the scan
# cannot read exactly (the caller declines the buffer).
_BATCH = re.compile(
    rb"batch(?:(?<=Decode batch)(?:(?: \[\d+\])?[.,] #running-req: (\d+), "
    rb"#(?:full )?token: (?:\d+|full=\d+, swa=\d+), "
    rb"(?:full )?token usage: (?:[\d.]+|full=[\d.]+, swa=[\d.]+)"
    rb"(?:, mamba num: \d+, mamba usage: [\d.]+|, #swa token: \d+, swa token usage: [\d.]+)?"
    rb"(?:, (a)ccept len: [\d.]+" + _END + rb")?"
    rb"[^\n]*, gen throughput \(token/s\): ([\d.]+)" + _END +
    # three lookaheads, each led by a literal: sre skips to it (an alternation would not)
    rb"(?![^\n]*gen throughput)(?![^\n]*running-req)(?![^\n]*accept len))?"
    # prefill: the general parser prefers a decode marker anywhere in the line
    rb"|(?<=Prefill batch)(?:(?: \[\d+\])?(?:\(mixed #running-req: \d+\))?([.,])(?= |$))?"
    rb"(?![^\n]*Decode batch))[^\n]*",
    re.M,
)
# Every accept len but DSPARK's `block accept len` (another field), with its value; empty when
# the value is not one the scan reads exactly. Literal first: the lookbehind runs only at hits.
_ACCEPT = re.compile(rb"accept len(?<!block accept len)(?:: ([\d.]+)" + _END + rb")?")
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
    out.decode = sum(found.values())
    rrs, specs, gts, _ = zip(*found, strict=True)
    accepts = Counter(_ACCEPT.findall(buf, 0, end))
    if b"" in accepts or accepts.total() != sum(compress(found.values(), specs)):
        return None  # an accept len outside the decode lines' usual slot, or unreadable
    rr_map, rr_bad = _values("running_req", set(rrs))
    gt_map, gt_bad = _values("gen_throughput", set(gts))
    al_map, al_bad = _values("accept_len", set(accepts))
    _add(out.throughput, list(zip(map(bool, specs), map(rr_map.__getitem__, rrs),
                                  map(gt_map.__getitem__, gts), strict=True)), found.values())
    _add(out.accept, list(map(al_map.__getitem__, accepts)), accepts.values())
    if rr_bad or gt_bad:  # rare: Python per distinct line shape
        out.invalid += sum(c * ((rr in rr_bad) + (gt in gt_bad))
                           for (rr, _, gt, _), c in found.items())
    out.invalid += sum(accepts[v] for v in al_bad)
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
