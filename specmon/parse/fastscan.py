"""A fast path for summarising whole log buffers in the common formats.

`specmon parse` (summary mode) must keep up with multi-gigabyte logs. Per-line Python costs
~1 µs; these few C-level passes over the buffer cost a fraction of that. The scan validates
itself against marker counts and returns None whenever the buffer holds anything it might read
differently from the general parser, so results always agree exactly with `parse_line`.
"""

from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache

from specmon.parse.sglang import INVALID, canon_value, read_number

# Decode line in the common layouts (D1-D10 and forks that keep the body intact): running-req
# first, the KV usage part, an optional accept len right after it, gen throughput anywhere later.
_DECODE_FAST = re.compile(
    rb"Decode batch(?: \[\d+\])?[.,] #running-req: (\d+), "
    rb"(?:#token|#full token): \d+, (?:token usage|full token usage): [\d.]+, "
    rb"(?:mamba num: \d+, mamba usage: [\d.]+, |#swa token: \d+, swa token usage: [\d.]+, )?"
    rb"(?:(a)ccept len: )?[^\n]*gen throughput \(token/s\): ([\d.]+)(?=,|[ \t\r]*$)",
    re.M,
)
_PREFILL_HEAD = re.compile(rb"Prefill batch(?: \[\d+\])?(?:\(mixed #running-req: \d+\))?[.,](?= |$)", re.M)
# `block accept len` (DSPARK, 0.5.18+) is another field: not the line's accept len.
_ACCEPT = re.compile(rb"(?<!block )accept len: ([\d.]+)(?=,|[ \t\r]*$)", re.M)

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


def scan_buffer(buf: bytes) -> FastCounts | None:
    """Counts for a buffer of whole lines, or None when the general parser must be used."""
    n_decode = buf.count(b"Decode batch")
    matches = _DECODE_FAST.findall(buf)
    if len(matches) != n_decode:
        return None
    accepts = _ACCEPT.findall(buf) if b"accept len: " in buf else []
    raw = Counter(matches)
    n_spec = sum(c for (_, acc, _), c in raw.items() if acc)
    n_accept_marks = buf.count(b"accept len") - buf.count(b"block accept len")
    if n_spec != len(accepts) or n_accept_marks != len(accepts):
        return None  # accept len outside the usual position, or in a non-decode line
    out = FastCounts()
    out.decode = n_decode
    n_prefill_marks = buf.count(b"Prefill batch")
    if n_prefill_marks:
        out.prefill = len(_PREFILL_HEAD.findall(buf))
        if out.prefill != n_prefill_marks:
            return None  # "Prefill batch" inside some other text
    tp = out.throughput
    for (rr, acc, gt), c in raw.items():
        rr_v, bad_rr = _canon_count("running_req", rr)
        gt_v, bad_gt = _canon("gen_throughput", gt)
        tp[(bool(acc), rr_v, gt_v)] += c
        out.invalid += (bad_rr + bad_gt) * c
    for al, c in Counter(accepts).items():
        al_v, bad = _canon("accept_len", al)
        out.accept[al_v] += c
        out.invalid += bad * c
    return out


@lru_cache(maxsize=1 << 16)
def _canon(field: str, raw: bytes) -> tuple[int | float | None, int]:
    """(value as the general parser stores it, 1 if it counts as an invalid value)."""
    v = canon_value(field, read_number(raw.decode("ascii")))
    if v is INVALID:
        return None, 1
    return v, 0


def _canon_count(field: str, raw: bytes) -> tuple[int | None, int]:
    """`_canon` of an integer field, which canon_value only ever stores as an int or None."""
    v, bad = _canon(field, raw)
    return (v if isinstance(v, int) else None), bad
