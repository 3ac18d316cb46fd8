"""SGLang server log lines -> typed records.

Pure: no I/O, no clock. Driven by field *names*, never by version or position, because builds from
SGLang's main branch mix the formats of two releases and forks put arbitrary text before the
message (Ray actor prefixes, custom logging formats, a tqdm bar glued in front).
"""

from __future__ import annotations

import ast
import enum
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from operator import attrgetter
from typing import Any, TypeVar

Value = bool | int | float | str | None
Number = bool | int | float | None  # what a printed number reads as

DECODE_MARK = "Decode batch"
PREFILL_MARK = "Prefill batch"

# Canonical record fields; everything else lands in `extra` under its normalised name.
_CANON = {
    "running_req": "running_req",
    "token": "tokens",
    "full_token": "tokens",
    "token_usage": "token_usage",
    "full_token_usage": "token_usage",
    "accept_len": "accept_len",
    "accept_rate": "accept_rate",
    "gen_throughput": "gen_throughput",
    "queue_req": "queue_req",
    "new_seq": "new_seq",
    "new_token": "new_token",
    "cached_token": "cached_token",
    "input_throughput": "input_throughput",
    "pending_token": "pending_token",
    # 0.5.18+ DSPARK / ragged verify (printed only when > 0)
    "cap_len": "cap_len",
    "block_accept_len": "block_accept_len",
    # SGLANG_ENABLE_METRICS_DEVICE_TIMER=1: 0.5.11+ `fwd occupancy`, 0.5.23 `fwd+idle occupancy`
    "fwd_occupancy_pct": "fwd_occupancy_pct",
    "fwd_idle_occupancy_pct": "fwd_idle_occupancy_pct",
    # --enable-mfu-metrics (0.5.10+)
    "est_decode_tflops_s": "est_decode_tflops_s",
    "est_prefill_tflops_s": "est_prefill_tflops_s",
    "est_read_bw": "est_read_bw",
    "est_write_bw": "est_write_bw",
    # 0.5.23 prefill, only when non-zero
    "replay_token": "replay_token",
}
_INT_FIELDS = {"running_req", "tokens", "queue_req", "new_seq", "new_token", "cached_token",
               "pending_token", "replay_token"}
# DSPARK's online ceiling estimate: `est uncap acc len: 3.42 [3.10, 3.74]` (mid [lo, hi])
_UNCAP_KEY = "est_uncap_acc_len"
_RE_UNCAP = re.compile(r"(\S+) \[(\S+), (\S+)\]\Z")
_RE_BRACKET_TAIL = re.compile(r"\s*[+-]?[\d.]+(?:[eE][+-]?\d+)?\]\Z")
_RANK_KEYS = {
    "DP": "dp_rank",
    "PP": "pp_rank",
    "ATTN_CP": "attn_cp_rank",
    "MOE_DP": "moe_dp_rank",
    "TP": "tp_rank",
    "EP": "ep_rank",
}

_RE_DATETIME = re.compile(r"(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:[.,](\d{3})\d*)?")
_RE_CLOCK = re.compile(r"\[(\d{2}:\d{2}:\d{2})(?:[.,](\d{3}))?[\] ]")
_RE_BRACKET = re.compile(r"\[([^\[\]]*)\]")
_RE_RANK_TOKEN = re.compile(r"(ATTN_CP|MOE_DP|DP|PP|TP|EP)(\d+)\Z")
_RE_GPU_TOKEN = re.compile(r"gpu=(\d+)\Z")
_RE_RAY = re.compile(r"\((\w+) pid=(\d+)(?:, ip=[^)]*)?\)")
_RE_LEVEL_PID = re.compile(r"\b(?:INFO|WARNING|DEBUG|ERROR|CRITICAL)\s+(\d+)\s+\[")
_RE_HEAD = re.compile(r"(?: \[(\d+)\])?(?:\(mixed #running-req: (\d+)\))?[.,](?: |$)")
_RE_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\Z")
_RE_INT = re.compile(r"[+-]?\d+\Z")
_RE_NONFINITE = re.compile(r"[+-]?(?:nan|inf(?:inity)?)\Z", re.I)
_RE_SUBVAL = re.compile(r"^(\w+)=(\S+)$")
_RE_NONALNUM = re.compile(r"[^a-z0-9]+")
_RE_UNIT = re.compile(r"\s*\([^)]*\)\s*$")

_KEY_CACHE: dict[str, str] = {}


def normalise_key(key: str) -> str:
    """`#retracted-req` -> `retracted_req`, `gen throughput (token/s)` -> `gen_throughput`."""
    cached = _KEY_CACHE.get(key)
    if cached is not None:
        return cached
    k = key.strip().lower().replace("#", "")
    k = _RE_UNIT.sub("", k)
    k = _RE_NONALNUM.sub("_", k).strip("_")
    if len(_KEY_CACHE) < 4096:  # bounded: a hostile log cannot grow it forever
        _KEY_CACHE[key] = k
    return k


# Bounds that make a printed number a value rather than garbage. An int of more than 18 digits
# is no count any server can reach (and converting thousands of digits costs seconds); a
# throughput above 1e9 tok/s or below 0 is a corrupted line, not a measurement.
MAX_INT_DIGITS = 18
MAX_THROUGHPUT = 1e9
_THROUGHPUTS = {"gen_throughput", "input_throughput"}
# Tokens accepted per verify step: at most the draft depth + 1 (tens at most); 1000 or more is a
# corrupted line, and a value like 1e300 overflowed the advisor's variance (sqrt of its square)
MAX_ACCEPT_LEN = 1000.0
ACCEPT_LENS = {"accept_len", "block_accept_len", "est_uncap_acc_len"}


class _Invalid(enum.Enum):
    """A number that is printed but cannot be true (non-finite, absurd): the field becomes None
    and the record remembers it in `invalid`. A one-member enum so that `is INVALID` narrows."""

    INVALID = "INVALID"

    def __repr__(self) -> str:
        return "INVALID"


INVALID = _Invalid.INVALID


def read_number(text: str) -> Number | _Invalid:
    """Like `convert_value`, but a non-finite or absurdly long number is INVALID, not None."""
    t = text.strip()
    if t == "True":
        return True
    if t == "False":
        return False
    if _RE_INT.match(t):
        if len(t) - (t[0] in "+-") > MAX_INT_DIGITS:
            return INVALID
        return int(t)
    if _RE_NUMBER.match(t):
        v = float(t)
        return v if math.isfinite(v) else INVALID
    if _RE_NONFINITE.match(t):
        return INVALID
    return None


def convert_value(text: str) -> Number:
    """A field value as SGLang prints it; None when it cannot be read (never a guess), and None
    for numbers that cannot be true (non-finite, more than 18 digits)."""
    v = read_number(text)
    return None if v is INVALID else v


def canon_value(canon: str, value: Number | _Invalid) -> Number | _Invalid:
    """The value of a canonical field as stored, or INVALID (negative, absurd, wrong kind)."""
    if value is INVALID or value is None:
        return value
    if isinstance(value, bool):
        return None
    if canon in _INT_FIELDS:
        if isinstance(value, float):
            if not value.is_integer():
                return None
            value = int(value)
        return value if value >= 0 else INVALID
    value = float(value)
    if value < 0 or (canon in _THROUGHPUTS and value > MAX_THROUGHPUT) \
            or (canon in ACCEPT_LENS and value >= MAX_ACCEPT_LEN):
        return INVALID
    return value


def small_int(digits: str) -> int | None:
    """int() of a regex digit group, None past MAX_INT_DIGITS (never a 4300-digit ValueError)."""
    return int(digits) if len(digits) <= MAX_INT_DIGITS else None


def sample_batch(running_req: int | None, gen_throughput: float | None) -> int | None:
    """The batch size whose throughput a decode line measures, or None: the one rule of what
    counts as a throughput sample in every front end. A line at 0 tok/s (vLLM's idle
    interval) measures none, and neither does one with no request running when it was
    printed: vLLM prints an interval whose requests all finished within it as `Running: 0
    reqs` with the tokens they emitted (batch size 0 made a "speedup at bs 0")."""
    if running_req is None or running_req < 1 or gen_throughput is None or not gen_throughput > 0:
        return None
    return running_req


_R = TypeVar("_R", bound="BatchRecord")


@dataclass
class BatchRecord:
    """One `Decode batch` or `Prefill batch` line.

    `gen_throughput` is decode-only (tokens generated since the previous decode line divided by
    the wall time since then, idle time included); it is not a benchmark's end-to-end tok/s.

    No slots: the defaults live on the class, so `blank` makes a record by setting only what a
    line holds (the generated __init__ stores all 42 fields: 0.45 us, twice `blank`), and
    `to_json` builds most rows from a template and the few fields set (0.6 us, was 1.4 us).
    """

    kind: str  # "decode" | "prefill"
    timestamp: str | None = None  # "YYYY-MM-DD HH:MM:SS[.fff]"
    time_of_day: str | None = None  # 0.3.x logs carry only a clock
    tp_rank: int | None = None
    dp_rank: int | None = None
    ep_rank: int | None = None
    pp_rank: int | None = None
    attn_cp_rank: int | None = None
    moe_dp_rank: int | None = None
    gpu: int | None = None
    pid: int | None = None
    ray_actor: str | None = None
    iteration: int | None = None
    mixed_running_req: int | None = None
    running_req: int | None = None
    tokens: int | None = None
    token_usage: float | None = None
    accept_len: float | None = None
    accept_rate: float | None = None
    cuda_graph: bool | None = None
    graph_kind: str | None = None
    gen_throughput: float | None = None
    queue_req: int | None = None
    new_seq: int | None = None
    new_token: int | None = None
    cached_token: int | None = None
    input_throughput: float | None = None
    pending_token: int | None = None
    cap_len: float | None = None  # mean verify window incl. the bonus token (DSPARK, 0.5.18+)
    block_accept_len: float | None = None
    est_uncap_acc_len: float | None = None  # DSPARK estimate if verify were uncapped: mid ...
    est_uncap_acc_len_lo: float | None = None  # ... and its bracket
    est_uncap_acc_len_hi: float | None = None
    fwd_occupancy_pct: float | None = None  # GPU busy share of the interval; `nan%` -> None
    fwd_idle_occupancy_pct: float | None = None
    est_decode_tflops_s: float | None = None  # --enable-mfu-metrics, per GPU
    est_prefill_tflops_s: float | None = None
    est_read_bw: float | None = None  # GB/s per GPU
    est_write_bw: float | None = None
    replay_token: int | None = None
    extra: dict[str, Value] = field(default_factory=dict)
    invalid: list[str] = field(default_factory=list)  # fields printed with an impossible value

    @classmethod
    def blank(cls: type[_R], kind: str) -> _R:
        """A record of `kind` with every other field at its default, for the parser to fill."""
        rec = object.__new__(cls)
        rec.kind = kind
        rec.extra = {}
        rec.invalid = []
        return rec

    @property
    def is_speculative(self) -> bool:
        return self.accept_len is not None

    @property
    def sample_rr(self) -> int | None:
        """The batch size this line's throughput is a sample of (`sample_batch`), or None."""
        return sample_batch(self.running_req, self.gen_throughput)

    @property
    def rank_key(self) -> tuple[int | None, ...]:
        """Series key: with DP attention one file interleaves one stream per rank."""
        return _get_ranks(self)

    def to_json(self) -> dict[str, Any]:
        # (`record` and `parse --json` pay this per line.) Most records set only fields that
        # are always printed: their row is the template of those, in order, updated with what
        # the record set (the instance dict holds just that: `blank`).
        d = self.__dict__
        if _PLAIN_KEYS.issuperset(d) and not d["extra"] and not d["invalid"]:
            plain = _JSON_PLAIN.copy()
            plain.update(d)
            del plain["extra"], plain["invalid"]
            return plain
        out: dict[str, Any] = {
            "kind": self.kind, "timestamp": self.timestamp, "time_of_day": self.time_of_day,
            "tp_rank": self.tp_rank, "dp_rank": self.dp_rank, "ep_rank": self.ep_rank,
            "pp_rank": self.pp_rank, "attn_cp_rank": self.attn_cp_rank,
            "moe_dp_rank": self.moe_dp_rank,
        }
        mid = _get_mid(self)
        if mid != _NO_MID:  # gpu, pid, ray_actor, iteration, mixed_running_req: only when set
            out.update((k, v) for k, v in zip(_JSON_MID, mid, strict=True) if v is not None)
        out.update({
            "running_req": self.running_req, "tokens": self.tokens,
            "token_usage": self.token_usage, "accept_len": self.accept_len,
            "accept_rate": self.accept_rate, "cuda_graph": self.cuda_graph,
            "graph_kind": self.graph_kind, "gen_throughput": self.gen_throughput,
            "queue_req": self.queue_req, "new_seq": self.new_seq, "new_token": self.new_token,
            "cached_token": self.cached_token, "input_throughput": self.input_throughput,
            "pending_token": self.pending_token,
        })
        opt = _get_optional(self)
        if opt != _NO_OPTIONAL:
            out.update((k, v) for k, v in zip(_OPTIONAL_JSON, opt, strict=True) if v is not None)
        if self.invalid:
            out["invalid"] = list(self.invalid)
        for k, v in self.extra.items():
            out.setdefault(k, v)
        return out


_JSON_MID = ("gpu", "pid", "ray_actor", "iteration", "mixed_running_req")  # only when set


_OPTIONAL_JSON = ("cap_len", "block_accept_len", "est_uncap_acc_len", "est_uncap_acc_len_lo",
                  "est_uncap_acc_len_hi", "fwd_occupancy_pct", "fwd_idle_occupancy_pct",
                  "est_decode_tflops_s", "est_prefill_tflops_s", "est_read_bw", "est_write_bw",
                  "replay_token")
# the fields every row prints, in order (to_json's template)
_JSON_PLAIN: dict[str, Any] = dict.fromkeys((
    "kind", "timestamp", "time_of_day", "tp_rank", "dp_rank", "ep_rank", "pp_rank",
    "attn_cp_rank", "moe_dp_rank", "running_req", "tokens", "token_usage", "accept_len",
    "accept_rate", "cuda_graph", "graph_kind", "gen_throughput", "queue_req", "new_seq",
    "new_token", "cached_token", "input_throughput", "pending_token"))
_PLAIN_KEYS = frozenset(_JSON_PLAIN) | {"extra", "invalid"}
_get_mid = attrgetter(*_JSON_MID)
# (rank_key, per decode line live: one C call)
_get_ranks = attrgetter("dp_rank", "pp_rank", "attn_cp_rank", "moe_dp_rank", "tp_rank", "ep_rank")
_get_optional = attrgetter(*_OPTIONAL_JSON)
_NO_MID = (None,) * len(_JSON_MID)
_NO_OPTIONAL = (None,) * len(_OPTIONAL_JSON)


@dataclass(slots=True)
class EventRecord:
    """A non-batch line that still matters: readiness, server args, graph capture, trouble."""

    kind: str  # see EVENT_KINDS
    timestamp: str | None = None
    time_of_day: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "timestamp": self.timestamp, "time_of_day": self.time_of_day,
                **self.data}


EVENT_KINDS = ("ready", "server_args", "max_total_num_tokens", "cuda_graph_begin",
               "cuda_graph_end", "kv_pool_full", "traceback", "nccl_env", "spec_params", "exit",
               "spec_adaptive_init")

Record = BatchRecord | EventRecord


RE_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # terminal control sequences (colours) in a log


def _as_text(line: str | bytes) -> str:
    if isinstance(line, bytes):
        line = line.decode("utf-8", errors="replace")
    if "\x00" in line:
        line = line.replace("\x00", "")
    return line.rstrip("\r\n")


def _parse_prefix(prefix: str, rec: BatchRecord | EventRecord) -> None:
    m = _RE_DATETIME.search(prefix)
    if m:
        date, clock, ms = m.groups()
        rec.timestamp = f"{date} {clock}.{ms}" if ms else f"{date} {clock}"
    else:
        c = _RE_CLOCK.search(prefix)
        if c:
            rec.time_of_day = f"{c.group(1)}.{c.group(2)}" if c.group(2) else c.group(1)
    if not isinstance(rec, BatchRecord):
        return
    for group in _RE_BRACKET.findall(prefix):
        for token in group.split():
            r = _RE_RANK_TOKEN.match(token)
            if r:
                _set_int(rec, _RANK_KEYS[r.group(1)], r.group(2))
                continue
            g = _RE_GPU_TOKEN.match(token)
            if g:
                _set_int(rec, "gpu", g.group(1))
    ray = _RE_RAY.search(prefix)
    if ray:
        rec.ray_actor = ray.group(1)
        _set_int(rec, "pid", ray.group(2))
    else:
        lp = _RE_LEVEL_PID.search(prefix)
        if lp:
            _set_int(rec, "pid", lp.group(1))


def _set_int(rec: BatchRecord, name: str, digits: str) -> None:
    v = small_int(digits)
    if v is None:
        rec.invalid.append(name)
    setattr(rec, name, v)


def _split_body(body: str) -> list[tuple[str, str]]:
    """`key: value` pairs; a `k=v` piece without `: ` continues the previous value (0.4.9 SWA)."""
    body = body.rstrip().rstrip(",").rstrip()
    pairs: list[tuple[str, str]] = []
    for piece in body.split(", "):
        key, sep, value = piece.partition(": ")
        if sep:
            pairs.append((key, value))
        elif pairs and "[" in pairs[-1][1] and _RE_BRACKET_TAIL.match(piece):
            k, v = pairs[-1]  # `est uncap acc len: 3.42 [3.10, 3.74]`: the bracket's 2nd half
            pairs[-1] = (k, f"{v}, {piece}")
        elif pairs and _RE_SUBVAL.match(piece.strip()):
            k, v = pairs[-1]
            pairs[-1] = (k, f"{v}, {piece}")
        # else: garbled fragment (a cut line); dropped rather than misread
    return pairs


def _sub_values(text: str) -> dict[str, Number | _Invalid] | None:
    """`full=1200, swa=800` -> {"full": 1200, "swa": 800}; None if not of that form."""
    out: dict[str, Number | _Invalid] = {}
    for part in text.split(", "):
        m = _RE_SUBVAL.match(part.strip())
        if not m:
            return None
        out[m.group(1)] = read_number(m.group(2))
    return out


def _fill(rec: BatchRecord, pairs: list[tuple[str, str]]) -> None:
    for raw_key, raw_value in pairs:
        key = normalise_key(raw_key)
        if not key:
            continue
        value_text = raw_value.strip()
        if key.endswith("_graph") and key != "_graph":
            v = read_number(value_text)
            rec.cuda_graph = v if isinstance(v, bool) else None
            rec.graph_kind = key[: -len("_graph")]
            continue
        if key == _UNCAP_KEY:
            m = _RE_UNCAP.match(value_text)
            if m:
                for attr, txt in zip(("est_uncap_acc_len", "est_uncap_acc_len_lo",
                                      "est_uncap_acc_len_hi"), m.groups(), strict=True):
                    _set_canon(rec, attr, convert_value(txt))
            else:
                _set_canon(rec, "est_uncap_acc_len", convert_value(value_text))
            continue
        if "=" in value_text:  # 0.4.9 hybrid SWA: `#token: full=1200, swa=800`
            subs = _sub_values(value_text)
            if subs is not None:
                canon = _CANON.get(key)
                if canon and "full" in subs:
                    _set_canon(rec, canon, subs["full"])
                for sub, v in subs.items():
                    if sub != "full" or not canon:
                        _set_extra(rec, f"{sub}_{key}", v)
                continue
        pct = value_text.endswith("%")
        if pct:
            value_text = value_text[:-1]
            key = f"{key}_pct"
        value = read_number(value_text)
        canon = _CANON.get(key)
        if canon is not None:
            _set_canon(rec, canon, value)
        else:
            _set_extra(rec, key, value)


def _set_extra(rec: BatchRecord, key: str, value: Value | _Invalid) -> None:
    if value is INVALID:
        rec.invalid.append(key)
        value = None
    rec.extra[key] = value


def _set_canon(rec: BatchRecord, canon: str, value: Number | _Invalid) -> None:
    value = canon_value(canon, value)
    if value is INVALID:
        rec.invalid.append(canon)
        value = None
    setattr(rec, canon, value)


# --- the known shapes, read in one match ---------------------------------------------------
# Most lines of a real log are a decode or prefill line of one of a few exact shapes. For those,
# one match of the whole line reads every field (about 3x cheaper than the general path, which
# the live path and `parse --json` would pay per line). The pattern is ASCII-only, bounds every
# number the way the general path does (ints of at most 18 digits, throughput below 1e9, plain
# decimals) and covers the whole line, so a match stores exactly what `_parse_prefix` and
# `_fill` store (tests/unit/test_parse_known.py compares both on real and mutated lines);
# anything else takes the general path. A line read this way holds no free text
# (`parse_known`).
_F = r"(\d{1,15}\.\d{1,15})"
_I = r"(\d{1,18})"
_STAMP = r"(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:\.(\d{3}))?"
_TAGS = r"((?: (?:DP|PP|TP|EP)\d{1,18})*)"
_GRAPH = r"(cuda|npu) graph: (True|False)"
_KNOWN_LINE = re.compile(
    # SGLang's prefixes: `[2025-06-01 12:00:00(.123)( DP0)( TP0)( EP0)] `, the logging format of
    # 0.5.x `2025-06-01 12:00:00 INFO 8901 [ DP1 TP1 EP1 scheduler_metrics_mixin.py:222] ` and
    # 0.3.x's clock only `[14:02:11 TP0] `
    rf"(?:\[{_STAMP}{_TAGS}\] |{_STAMP} INFO {_I} \[{_TAGS} [a-z_]{{1,64}}\.py:\d{{1,9}}\] "
    rf"|\[(\d{{2}}:\d{{2}}:\d{{2}}){_TAGS}\] )?"
    rf"(?:Decode batch(?: \[{_I}\])?[.,] "
    rf"#running-req: {_I}, (?:#token: {_I}, token usage: {_F}|#full token: {_I}, "
    rf"full token usage: {_F}, mamba num: {_I}, mamba usage: {_F}), "
    rf"(?:accept len: (\d{{1,3}}\.\d{{1,15}}), )?(?:accept rate: {_F}, )?"  # (< MAX_ACCEPT_LEN)
    rf"(?:pre-allocated usage: {_F}, (?:#prealloc-req: {_I}, #transfer-req: {_I}, )?"
    rf"#retracted-req: {_I}, )?(?:{_GRAPH}, )?"
    rf"gen throughput \(token/s\): (\d{{1,9}}\.\d{{1,15}}), #queue-req: {_I}"
    rf"|Prefill batch(?: \[{_I}\])?(?:\(mixed #running-req: {_I}\))?[.,] "
    rf"#new-seq: {_I}, #new-token: {_I}, #cached-token: {_I}, token usage: {_F}, "
    rf"#running-req: {_I}, #queue-req: {_I}(?:, #pending-token: {_I})?(?:, {_GRAPH})?"
    rf"(?:, input throughput \(token/s\): (\d{{1,9}}\.\d{{1,15}}))?"
    r"),? ?\Z",
    re.ASCII,
)
_TAG_ATTR = {"DP": "dp_rank", "PP": "pp_rank", "TP": "tp_rank", "EP": "ep_rank"}


@lru_cache(maxsize=256)
def _tag_fields(tags: str) -> dict[str, int]:
    """The rank fields of a prefix's tags (` DP0 TP0 EP0`: a log prints a handful of distinct
    ones), for one `__dict__.update` per line: setting them tag by tag was a quarter of a known
    line's cost (2.7 of 10 us)."""
    return {_TAG_ATTR[tag[:2]]: int(tag[2:]) for tag in tags.split()}


def _known_line(text: str) -> BatchRecord | None:
    """The record of a line of a known shape (see `_KNOWN_LINE`), else None."""
    m = _KNOWN_LINE.match(text)
    if m is None:
        return None
    (stamp, ms, tags, stamp2, ms2, pid, tags2, clock, tags3,
     it, rr, tok, usage, ftok, fusage, mnum, musage, acc, rate, pre, prealloc, transfer,
     retracted, graph, cuda, gt, queue,
     pit, mixed, seqs, new, cached, pusage, prr, pqueue, pending, pgraph, pcuda, thr) = m.groups()
    rec = BatchRecord.blank("decode" if rr is not None else "prefill")
    if stamp2 is not None:
        stamp, ms, tags = stamp2, ms2, tags2
        rec.pid = int(pid)
    elif clock is not None:
        stamp, tags = None, tags3
        rec.time_of_day = clock
    if stamp is not None:
        rec.timestamp = f"{stamp}.{ms}" if ms else stamp
    if tags:
        rec.__dict__.update(_tag_fields(tags))
    if rr is not None:
        if it is not None:
            rec.iteration = int(it)
        rec.running_req = int(rr)
        if tok is not None:
            rec.tokens = int(tok)
            rec.token_usage = float(usage)
        else:
            rec.tokens = int(ftok)
            rec.token_usage = float(fusage)
            rec.extra["mamba_num"] = int(mnum)
            rec.extra["mamba_usage"] = float(musage)
        if acc is not None:
            rec.accept_len = float(acc)
        if rate is not None:
            rec.accept_rate = float(rate)
        if pre is not None:
            rec.extra["pre_allocated_usage"] = float(pre)
            if prealloc is not None:
                rec.extra["prealloc_req"] = int(prealloc)
                rec.extra["transfer_req"] = int(transfer)
            rec.extra["retracted_req"] = int(retracted)
        rec.gen_throughput = float(gt)
        rec.queue_req = int(queue)
    else:
        if pit is not None:
            rec.iteration = int(pit)
        if mixed is not None:
            rec.mixed_running_req = int(mixed)
        rec.new_seq = int(seqs)
        rec.new_token = int(new)
        rec.cached_token = int(cached)
        rec.token_usage = float(pusage)
        rec.running_req = int(prr)
        rec.queue_req = int(pqueue)
        if pending is not None:
            rec.pending_token = int(pending)
        graph, cuda = pgraph, pcuda
        if thr is not None:
            rec.input_throughput = float(thr)
    if graph is not None:
        rec.cuda_graph = cuda == "True"
        rec.graph_kind = graph
    return rec


def _parse_batch(text: str, idx: int, kind: str) -> BatchRecord | None:
    """Parse the batch line `text` whose marker starts at `idx`; None if it is not one."""
    rest = text[idx + (len(DECODE_MARK) if kind == "decode" else len(PREFILL_MARK)):]
    head = _RE_HEAD.match(rest)
    if head is None:  # "Decode batches are great" in a request body is not a stats line
        return None
    rec = BatchRecord.blank(kind)
    if idx:
        _parse_prefix(text[:idx], rec)
    if head.group(1):
        _set_int(rec, "iteration", head.group(1))
    if head.group(2):
        _set_int(rec, "mixed_running_req", head.group(2))
    _fill(rec, _split_body(rest[head.end():]))
    return rec


def _find_batch(text: str) -> BatchRecord | None:
    for mark, kind in ((DECODE_MARK, "decode"), (PREFILL_MARK, "prefill")):
        idx = text.find(mark)
        while idx >= 0:
            rec = _parse_batch(text, idx, kind)
            if rec is not None:
                return rec
            idx = text.find(mark, idx + 1)
    return None


# --- events -----------------------------------------------------------------------------------

# Every `key=value` (ServerArgs repr) or `'key': value` (dict repr, 0.5.20+) of the server_args
# line: conditions are compared over all of them (analysis.conditions). A value is a quoted
# string, a flat list, or a bare token; nested structures keep their first token only.
_RE_SERVER_ARGS_KV = re.compile(
    r"[({,]\s*'?([A-Za-z_]\w{0,63})'?\s*[=:]\s*"
    r"('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|\[[^\[\]]{0,4096}\]|[^,)}\s]+)"
)
MAX_SERVER_ARGS = 512  # keys kept from one server_args line (a hostile line stays bounded)
_RE_MAX_TOTAL = re.compile(r"max_total_num_tokens=(\d+)")
_RE_KV_LINE = re.compile(r"(\w+)=([\d.]+)")
_RE_BS_LIST = re.compile(r"bs[=:]?\s*\[([\d,\s]*)\]")
_RE_NCCL_ENV = re.compile(r"\b(NCCL_\w+|CUDA_\w+|TORCH_\w+|NVSHMEM_\w+) set by environment to (\S*)")
# NCCL's version and communicator-size lines: what tells whether a missing "set by" line is evidence
_RE_NCCL_META = re.compile(r"NCCL INFO (?:NCCL version |.*\bcomm 0x[0-9a-fA-F]+ rank \d+ n[Rr]anks \d)")
_RE_RETRACT = re.compile(r"#retracted_reqs: (\d+)")
# --speculative-adaptive (speculative/adaptive_spec_params.py): the run's step count changes
# mid-run. `Adaptive spec params updated: steps 3 -> 1 (ema_accept_len=0.42)`; forks add a
# `(confidence)` tag or more fields inside the parentheses. ema_accept_len counts correct
# drafts only (no bonus token).
_RE_ADAPTIVE = re.compile(r"Adaptive spec params updated(?: \((\w+)\))?: steps (\d+) -> (\d+)")
_RE_EMA = re.compile(r"ema_accept_len=([\d.]+)")
# uvicorn's last line at a graceful stop (SIGTERM, Ctrl-C): SGLang's and vLLM's HTTP server both
# print it, under SGLang's `[time] ` prefix or vLLM's `(APIServer pid=N) ` tag (<= 0.30, maybe
# coloured). The whole line must be it: a prompt logged with these words (--log-requests) is no exit.
_RE_EXIT = re.compile(r"(?:\[[^\]\n]{1,64}\] |\(APIServer\w{0,16} pid=\d{1,10}\) )?"
                      r"INFO: +Finished server process \[(\d{1,10})\]\s*")
_RE_ADAPTIVE_INIT = re.compile(
    r"AdaptiveSpeculativeParams initialized: steps=(\d+), candidate_steps=\[([\d,\s]*)\]")


def _literal(text: str) -> Value:
    if text[:1] in "'\"":
        try:
            v = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return text.strip("'\"")
        return v if isinstance(v, str) else None
    if text == "None":
        return None
    return convert_value(text) if convert_value(text) is not None else text


def parse_event(text: str) -> EventRecord | None:
    ev: EventRecord | None = None
    if "The server is fired up and ready to roll" in text:
        ev = EventRecord("ready")
    elif "server_args=" in text:
        data: dict[str, Value] = {}
        for kv in _RE_SERVER_ARGS_KV.finditer(text, text.index("server_args=")):
            if len(data) >= MAX_SERVER_ARGS:
                break
            data.setdefault(kv.group(1), _literal(kv.group(2)))
        ev = EventRecord("server_args", data=dict(data))
    elif "max_total_num_tokens=" in text:
        ev = EventRecord("max_total_num_tokens", data={
            k: convert_value(v) for k, v in _RE_KV_LINE.findall(text)})
    elif "Capture" in text and ("cuda graph" in text.lower()):
        low = text.lower()
        phase = "begin" if " begin" in low else "end" if " end" in low else None
        if phase is None and _RE_BS_LIST.search(text):
            phase = "begin"
        if phase is None:
            return None
        graph: dict[str, bool | list[int | None]] = {"draft": "draft" in low}
        bs = _RE_BS_LIST.search(text)
        if bs:
            graph["batch_sizes"] = [small_int(x) for x in bs.group(1).replace(",", " ").split()]
        ev = EventRecord(f"cuda_graph_{phase}", data=graph)
    elif "KV cache pool is full" in text or "Decode out of memory happened" in text:
        m = _RE_RETRACT.search(text)
        ev = EventRecord("kv_pool_full",
                         data={"retracted_reqs": small_int(m.group(1)) if m else None})
    elif "Adaptive spec params updated" in text:
        m = _RE_ADAPTIVE.search(text)
        if m is None:
            return None
        ema = _RE_EMA.search(text[m.end():])
        ev = EventRecord("spec_params", data={
            "old_steps": small_int(m.group(2)), "new_steps": small_int(m.group(3)),
            "ema_accept_len": convert_value(ema.group(1)) if ema else None,
            "policy": m.group(1)})
    elif "AdaptiveSpeculativeParams initialized" in text:
        m = _RE_ADAPTIVE_INIT.search(text)
        if m is None:
            return None
        ev = EventRecord("spec_adaptive_init", data={
            "steps": small_int(m.group(1)),
            "candidate_steps": [small_int(x) for x in m.group(2).replace(",", " ").split()]})
    elif "Traceback (most recent call last)" in text:
        ev = EventRecord("traceback")
    elif "Finished server process [" in text:
        m = _RE_EXIT.fullmatch(RE_ANSI.sub("", text) if "\x1b" in text else text)
        if m is None:
            return None
        ev = EventRecord("exit", data={"pid": int(m.group(1))})
    else:
        # the regex starts with \b (no literal for sre to skip to): only where its literal is
        m = _RE_NCCL_ENV.search(text) if " set by environment to " in text else None
        if m:
            # NCCL's integer params end with "." ("NCCL_CUMEM_ENABLE set by environment to 0.")
            ev = EventRecord("nccl_env", data={"var": m.group(1), "value": m.group(2).rstrip(".")})
        elif "NCCL INFO" in text and _RE_NCCL_META.search(text):
            ev = EventRecord("nccl_env", data={})
    if ev is not None:
        head = text[:64]
        m = _RE_DATETIME.search(head)
        if m:
            date, clock, ms = m.groups()
            ev.timestamp = f"{date} {clock}.{ms}" if ms else f"{date} {clock}"
        else:
            c = _RE_CLOCK.search(head)
            if c:
                ev.time_of_day = c.group(1)
    return ev


def parse_line(line: str | bytes) -> Record | None:
    """Parse one log line; None for lines specmon does not use. Never raises on any input."""
    return parse_known(line)[0]


def parse_known(line: str | bytes, *, known: bool = True) -> tuple[Record | None, bool]:
    """`parse_line`, and whether the line is one of the known stats shapes read whole: every
    byte a known key, a number or a fixed word, so it holds no free text (no secret can be in
    it: `specmon record` writes it without running the redaction rules)."""
    try:
        text = _as_text(line)
        if "batch" in text:
            if known:
                rec = _known_line(text)
                if rec is not None:
                    return rec, True
            rec = _find_batch(text)
            if rec is not None:
                from specmon.parse.vllm import vllm_owns

                if not vllm_owns(text):  # (a vLLM stats line quoting "Prefill batch." is vLLM's)
                    return rec, False
        if ("throughput" in text or "metrics" in text or "LLM engine (v" in text
                or "non-default args:" in text or "vLLM API server" in text):
            # maybe vLLM's line: the same record model (parse/vllm.py)
            from specmon.parse.vllm import parse_vllm_line

            vrec = parse_vllm_line(text)
            if vrec is not None:
                return vrec, False
        return parse_event(text), False
    except Exception:  # noqa: BLE001 - a log line must never take the monitor down
        return None, False
