"""vLLM server log lines -> the same typed records as SGLang's (`specmon.parse.sglang`).

Pure per line (no I/O; the clock is read only to give a year to vLLM's year-less dates), keyed
on field *names*, never on versions or line numbers: releases 0.8.3 to 0.33 reorder and add parts.

API (what other modules use):

* `parse_vllm_line(line) -> Record | None`: one line. `specmon.parse.sglang.parse_line` calls it
  for every line that carries a vLLM marker, so every front end reads vLLM logs unchanged.
  - `Engine NNN: Avg prompt throughput ...` (and the 0.8.0 / V0 forms) -> `VllmDecodeRecord`,
    `kind "decode"` (a `BatchRecord`: `dp_rank` is the engine index, `gen_throughput`,
    `running_req`, `queue_req` (Waiting, or V0 Pending) keep their SGLang meaning, except that
    vLLM's generation throughput counts every token emitted in the stats interval
    (VLLM_LOG_STATS_INTERVAL, 10 s by default), prefill steps included).
  - `SpecDecoding metrics: ...` (V1 layouts F1 0.8.3-0.8.4, F2a 0.8.5, F2b 0.9.0-0.10.1.1,
    F3 0.10.2-0.33) and V0 `Speculative metrics: ...` -> `VllmEventRecord(kind "spec")`; its
    `data` holds `mean_accept_len` (as printed), `accepted`, `drafted`, `draft_accept_rate_pct`,
    `accepted_throughput`, `drafted_throughput`, `per_position` (None where the layout lacks them;
    `nan` -> None, the field named in `invalid`). V0 prints counts since start
    (`cumulative: True`): kept as `accepted_total`, `drafted_total`, `emitted_total`; the
    per-interval fields are filled by `V0Differ` from two lines (`SpecJoiner` uses it).
  - `Initializing a V1 LLM engine (vX) with config: ...` -> `VllmEventRecord(kind "server_args")`
    with `engine_version`, `model_path`, `speculative_algorithm` (the method),
    `speculative_num_tokens`, `speculative_draft_model_path`, `tp_size`, `pp_size`, `dp_size`;
    `non-default args: {...}` -> `kind "vllm_args"` with the dict (and the spec keys it holds);
    `Starting vLLM API server ... on http://...` -> `kind "ready"` (an idle server prints no
    stats line: this is how it is known to be up).
* `SpecJoiner`: a small stream stage that joins each spec record onto the decode record of its
  engine printed just before it (the spec line has no engine id) and fills in the SGLang-shaped
  `accept_len` (normalised to "bonus included": 0.8.5 prints it without the bonus; detected from
  the per-position rates and corrected, saying so in `accept_len_note`), `accept_rate` (vLLM's
  accepted / drafted) and `accepted_tok_s` (over the engine's measured interval, not the whole
  idle gap as 0.10.2+ prints it after idling). `join_records(records)` is the offline form.
* `engine_of(record) -> "vllm" | "sglang" | None`: which server printed a record;
  `EngineGuard(name).check(record, line_no)` raises `MixedEngines` (a one-line `CliError`) when a
  log mixes the two.
* `sglang_equivalents(server_args_data)`: vLLM's k as SGLang's steps / topk 1 / draft tokens k+1;
  `throughput_label(engine)`: what a server's logged throughput counts, in every front end's
  words; `combine_engines` (DP engines' records -> one server-level record), `same_line`.
* Counters (`/metrics`) are read by `specmon.parse.vllm_metrics`.

Every record's `to_json()` carries `"engine": "vllm"`. Line preprocessing: `\\r` (continuation
lines, tqdm) and ANSI colour are dropped; `VLLM_LOGGING_PREFIX` or a leading container timestamp
(`2026-05-12T08:01:39.331095044Z ...`) may precede the header. A container timestamp, when
present, is the line's time (it has a year); otherwise the year is the latest one that does not
put the line more than a day in the future (logs are read after they are written), which also
handles the Dec -> Jan rollover.
"""

from __future__ import annotations

import ast
import functools
import math
import re
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from specmon.errors import CliError
from specmon.jsonout import too_deep
from specmon.parse.sglang import (
    INVALID,
    MAX_ACCEPT_LEN,
    MAX_INT_DIGITS,
    MAX_THROUGHPUT,
    RE_ANSI,
    BatchRecord,
    EventRecord,
    Record,
    canon_value,
    read_number,
    small_int,
)

ENGINE = "vllm"

# Markers: a line without one of these is not a vLLM line specmon uses.
MARKERS = ("Avg prompt throughput", "SpecDecoding metrics", "Speculative metrics:",
           "LLM engine (v", "non-default args:", "Starting vLLM API server")

_RE_CONTAINER_TS = re.compile(
    r"^\s*(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(?:Z|[+-]\d{2}:?\d{2})?\s")
# The level starts the header proper; the process tag, when there is one, ends just before it
# (searched separately in the short prefix: one optional leading group would be tried at every
# position of the line).
_RE_HEADER = re.compile(
    r"\b(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+(?P<md>\d{2}-\d{2}) "
    r"(?P<hms>\d{2}:\d{2}:\d{2})(?:\.(?P<ms>\d{3})\d*)?\s+\[?(?P<file>[^\]\s]+?):(?P<lineno>\d+)\]\s")
_RE_TAG = re.compile(r"\((?P<proc>[^()]+?) pid=(?P<pid>\d+)\)\s+\Z")

# --- throughput line --------------------------------------------------------------------------
_RE_ENGINE = re.compile(
    r"(?:Engine (?P<engine>\d{1,6})|(?P<n_agg>\d{1,6}) Engines Aggregated): ")
_RE_THROUGHPUT_HEAD = re.compile(
    r"Avg prompt throughput: (?P<prompt>\S+) tokens/s, Avg generation throughput: (?P<gen>\S+) "
    r"tokens/s, Running: (?P<running>\S+) reqs")
_RE_WAITING = re.compile(r"\bWaiting: (\S+) reqs")
_RE_PENDING = re.compile(r"\bPending: (\S+) reqs")
_RE_SWAPPED = re.compile(r"\bSwapped: (\S+) reqs")
_RE_DEFERRED = re.compile(r"\bDeferred: (\S+) reqs")
_RE_CORRUPTED = re.compile(r"\bCorrupted: (\S+) reqs")
_RE_PREEMPT = re.compile(r"\bPreemptions: ([^,\s]+)")
_RE_KV = re.compile(r"(?:^|, )(?P<dev>[A-Z][A-Za-z0-9]*) KV cache usage: (?P<v>[^%,\s]+)%")
_RE_PREFIX = re.compile(r"(?<!External )(?<!external )Prefix cache hit rate: (?:GPU: )?([^%,\s]+)%")
_RE_EXT_PREFIX = re.compile(r"External prefix cache hit rate: ([^%,\s]+)%")
_RE_MM = re.compile(r"MM cache hit rate: ([^%,\s]+)%")
_RE_KV_FETCH = re.compile(
    r"KV fetch: (\d+) waiting to start, (\d+) in progress, (\d+) completed waiting")

# --- spec line --------------------------------------------------------------------------------
SPEC_MARK = "SpecDecoding metrics: "
V0_SPEC_MARK = "Speculative metrics: "
_NUM = r"([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?nan|[+-]?inf)"
_RE_MAL = re.compile(r"Mean acceptance length: " + _NUM)
_RE_RATE_F12 = re.compile(r"(?<!Avg )Draft acceptance rate: " + _NUM + "%")
_RE_RATE_F3 = re.compile(r"Avg Draft acceptance rate: " + _NUM + "%")
_RE_ACC_TPUT = re.compile(r"Accepted throughput: " + _NUM + " tokens/s")
_RE_DRAFT_TPUT = re.compile(r"Drafted throughput: " + _NUM + " tokens/s")
_RE_ACCEPTED = re.compile(r"\bAccepted: (\d+) tokens")
_RE_DRAFTED = re.compile(r"\bDrafted: (\d+) tokens")
_RE_PER_POS = re.compile(
    r"Per-position acceptance rate: ((?:[\d.]+|nan|inf)(?:, (?:[\d.]+|nan|inf))*)")
_RE_V0 = re.compile(
    r"Speculative metrics: Draft acceptance rate: " + _NUM + r", System efficiency: " + _NUM
    + r", Number of speculative tokens: (\d+), Number of accepted tokens: (\d+), "
    r"Number of draft tokens: (\d+), Number of emitted tokens: (\d+)")
MAX_POSITIONS = 64  # k beyond this is no real config; a hostile line cannot grow a list forever

# --- config lines -----------------------------------------------------------------------------
_RE_INIT = re.compile(
    r"Initializing an? (?:V1 )?LLM engine \((?P<ver>[^)\s]{1,80})\) with config: ")
_RE_METHOD = re.compile(r"\bmethod='([^']*)'")
_RE_DRAFT = re.compile(r"\b(?:model|draft_model)=(?:'([^']*)'|None)")
_RE_K = re.compile(r"\bnum_spec_tokens=(\d+)")
_RE_MODEL = re.compile(r"(?:^|[\s,])model='((?:[^'\\]|\\.)*)'")
_RE_SIZES = {
    "tp_size": re.compile(r"\btensor_parallel_size=(\d+)"),
    "pp_size": re.compile(r"\bpipeline_parallel_size=(\d+)"),
    "dp_size": re.compile(r"\bdata_parallel_size=(\d+)"),
}
_ND_MARK = "non-default args: {"
_RE_URL = re.compile(r"\bon (https?://[^\s/:]+(?::(\d{1,5}))?)")
MAX_ARGS_TEXT = 64 * 1024  # a longer dict is not parsed (literal_eval cost is bounded)
# how deep one arg's value may nest (speculative_config, the deepest: an object of lists, 2);
# a deeper one is no config and is left out like an ill-typed one: Python's parser reads ~200
# levels, and a snapshot (servers[].lines[][2].data.args, jsonout.MAX_DEPTH per field) or a
# baseline's fingerprint nests the value further
MAX_ARG_DEPTH = 8
# The `non-default args` kept: what tells runs apart for speculative decoding. Only these, so a
# secret on the command line (`api_key`, `hf_token`, ...) never leaves the parser.
NON_DEFAULT_KEYS = frozenset({
    "model", "served_model_name", "speculative_config", "tensor_parallel_size",
    "pipeline_parallel_size", "data_parallel_size", "data_parallel_size_local",
    "enable_expert_parallel", "max_num_seqs", "max_num_batched_tokens", "max_model_len",
    "enable_prefix_caching", "enable_chunked_prefill", "gpu_memory_utilization", "dtype",
    "kv_cache_dtype", "quantization", "enforce_eager", "async_scheduling", "block_size",
    "num_speculative_tokens_per_batch_size", "disable_by_batch_size", "aggregate_engine_logging",
    "disable_log_stats", "port",
})


@dataclass
class VllmDecodeRecord(BatchRecord):
    """One `Engine NNN: Avg prompt throughput ...` line (kind "decode").

    `gen_throughput` is every token the engine emitted in the stats interval (10 s by default,
    prefill steps and accepted drafts included) over its wall time: not SGLang's
    decode-batch-only figure, and not a benchmark's end-to-end tok/s. `accept_len`/`accept_rate`
    are filled by `SpecJoiner` from the spec line that follows (None on the line itself).
    """

    process: str | None = None  # `APIServer`, `EngineCore_DP0`, ... (the tag before the level)
    engines_aggregated: int | None = None  # `N Engines Aggregated:` (--aggregate-engine-logging)
    prompt_throughput: float | None = None
    kv_cache_usage_pct: float | None = None
    kv_device: str | None = None  # `GPU` (0.30+: `XPU`, `CPU`, ...)
    prefix_cache_hit_pct: float | None = None  # None when not printed (0.31+: no queries)
    # a DP server's interval (`combine_engines`): how its prefix cache hit rate was combined
    prefix_cache_hit_note: str | None = None
    preemptions: int | None = None  # 0.12+, printed only when > 0
    deferred_req: int | None = None  # 0.21+, printed only when > 0
    corrupted_req: int | None = None  # VLLM_COMPUTE_NANS_IN_LOGITS
    external_prefix_cache_hit_pct: float | None = None
    mm_cache_hit_pct: float | None = None
    kv_fetch_waiting: int | None = None  # 0.33 `KV fetch: a waiting to start, b in progress, ...`
    kv_fetch_in_progress: int | None = None
    kv_fetch_completed_waiting: int | None = None
    swapped_req: int | None = None  # V0 only
    cpu_kv_cache_usage_pct: float | None = None  # V0 only
    spec: dict[str, Any] | None = None  # the joined spec line's data (SpecJoiner)
    accept_len_note: str | None = None  # how accept_len was obtained when not as printed
    # accepted draft tokens per second over this engine's stats interval (SpecJoiner): Accepted
    # over the time since the engine's previous line, or over its usual interval after an idle
    # gap (0.10.2+ prints an `Accepted throughput` divided by the whole gap there)
    accepted_tok_s: float | None = None
    accepted_tok_s_note: str | None = None
    date_inferred: bool = False  # the year of `timestamp` was inferred (vLLM prints none)

    @property
    def is_speculative(self) -> bool:
        """Its interval has a spec line (joined: `spec`), accept length or not: 0.8.3/0.8.4
        print none, and an ngram or config-less run's is not known (it was called a
        baseline by `baseline record`, `check` and the panel)."""
        return self.spec is not None or self.accept_len is not None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "engine": ENGINE, "timestamp": self.timestamp,
                               "time_of_day": self.time_of_day}
        for name in ("process", "pid"):
            v = getattr(self, name)
            if v is not None:
                out[name] = v
        for name in ("dp_rank", "gen_throughput", "prompt_throughput", "running_req",
                     "queue_req", "kv_cache_usage_pct", "prefix_cache_hit_pct"):
            out[name] = getattr(self, name)
        for name in _DECODE_OPTIONAL:
            v = getattr(self, name)
            if v is not None:
                out[name] = v
        if self.spec is not None:  # joined (SpecJoiner); parse --json emits lines unjoined
            out["accept_len"] = self.accept_len
            out["accept_rate"] = self.accept_rate
            if self.accept_len_note:
                out["accept_len_note"] = self.accept_len_note
            out["accepted_tok_s"] = self.accepted_tok_s
            if self.accepted_tok_s_note:
                out["accepted_tok_s_note"] = self.accepted_tok_s_note
        if self.invalid:
            out["invalid"] = list(self.invalid)
        return out


_DECODE_OPTIONAL = ("engines_aggregated", "kv_device", "prefix_cache_hit_note", "preemptions",
                    "deferred_req", "corrupted_req", "external_prefix_cache_hit_pct",
                    "mm_cache_hit_pct",
                    "kv_fetch_waiting", "kv_fetch_in_progress", "kv_fetch_completed_waiting",
                    "swapped_req", "cpu_kv_cache_usage_pct")


@dataclass(slots=True)
class VllmEventRecord(EventRecord):
    """A vLLM spec line (kind "spec"), config line ("server_args") or `non-default args` line
    ("vllm_args"). `invalid` names the fields printed as nan/inf (read as None)."""

    process: str | None = None
    pid: int | None = None
    invalid: list[str] = field(default_factory=list)
    date_inferred: bool = False
    # a spec line: the accept length of the engine interval it joined (SpecJoiner), for display
    joined_accept_len: float | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "engine": ENGINE, "timestamp": self.timestamp,
                               "time_of_day": self.time_of_day}
        if self.process is not None:
            out["process"] = self.process
        if self.pid is not None:
            out["pid"] = self.pid
        out.update((k, v) for k, v in self.data.items() if not k.startswith("_"))
        if self.invalid:
            out["invalid"] = list(self.invalid)
        return out


def engine_of(rec: Record | None) -> str | None:
    """"vllm" / "sglang" for records only one engine prints; None for neutral events."""
    if type(rec) is BatchRecord:  # (most lines: checked per line, live and in parse --json)
        return "sglang"
    if isinstance(rec, (VllmDecodeRecord, VllmEventRecord)):
        return ENGINE
    if isinstance(rec, BatchRecord):
        return "sglang"
    if isinstance(rec, EventRecord) and rec.kind in ("server_args", "ready",
                                                     "max_total_num_tokens"):
        return "sglang"
    return None


# --- preprocessing ----------------------------------------------------------------------------

def clean(line: str | bytes) -> str:
    """Text of one physical line: decoded, without NULs, ANSI colour or `\\r` segments before
    the last one that holds text (tqdm bars and `\\r\\n` continuation lines)."""
    if isinstance(line, bytes):
        line = line.decode("utf-8", errors="replace")
    if "\x00" in line:
        line = line.replace("\x00", "")
    if "\x1b" in line:
        line = RE_ANSI.sub("", line)
    line = line.rstrip("\r\n")
    if "\r" in line:
        parts = [p for p in line.split("\r") if p.strip()]
        line = parts[-1] if parts else ""
    return line


def infer_year(month: int, day: int, now: float | None = None) -> int:
    """The latest year that does not put MM-DD more than a day after `now` (default: the clock)."""
    if now is None:  # per line: the answer changes at most once an hour matters, so cache it
        return _year_now(month, day, int(time.time() // 600))
    return _infer_year(month, day, now)


@functools.lru_cache(maxsize=512)
def _year_now(month: int, day: int, bucket: int) -> int:
    return _infer_year(month, day, bucket * 600.0)


def _infer_year(month: int, day: int, now: float) -> int:
    today, tomorrow = time.localtime(now), time.localtime(now + 86_400)
    if (month, day) == (tomorrow.tm_mon, tomorrow.tm_mday):  # clock skew, time zones
        return tomorrow.tm_year
    return today.tm_year - 1 if (month, day) > (today.tm_mon, today.tm_mday) else today.tm_year


@dataclass(slots=True)
class _Head:
    msg: str
    timestamp: str | None
    time_of_day: str | None
    process: str | None
    pid: int | None
    date_inferred: bool


def _head(text: str) -> _Head | None:
    m = _RE_HEADER.search(text)
    if m is None:
        return None
    ts: str | None = None
    inferred = False
    c = _RE_CONTAINER_TS.match(text)
    if c:
        date, clock, frac = c.groups()
        ts = f"{date} {clock}.{frac[:3].ljust(3, '0')}" if frac else f"{date} {clock}"
    else:
        mo, dd = int(m.group("md")[:2]), int(m.group("md")[3:])
        if 1 <= mo <= 12 and 1 <= dd <= 31:
            ts = f"{infer_year(mo, dd):04d}-{m.group('md')} {m.group('hms')}"
            if m.group("ms"):
                ts += f".{m.group('ms')}"
            inferred = True
    tag = _RE_TAG.search(text, max(0, m.start() - 200), m.start())
    proc = tag.group("proc") if tag else None
    pid = small_int(tag.group("pid")) if tag else None
    return _Head(text[m.end():], ts, None if ts else m.group("hms"), proc, pid, inferred)


# --- numbers ----------------------------------------------------------------------------------

def _num(text: str, name: str, invalid: list[str], *, pct: bool = False,
         integer: bool = False) -> float | int | None:
    """A printed value; nan/inf/negative/absurd -> None with `name` added to `invalid`."""
    # the common case, fast (isascii: '²'.isdigit() holds and int() raised, losing the line)
    if text.isascii() and text.isdigit() and len(text) <= MAX_INT_DIGITS:
        return int(text) if integer else _bounded(float(text), name, invalid, pct)
    if not integer and _RE_PLAIN_FLOAT.match(text):
        return _bounded(float(text), name, invalid, pct)
    v = read_number(text)
    if v is None:
        return None
    if v is INVALID or isinstance(v, bool):
        invalid.append(name)
        return None
    if integer:
        c = canon_value("running_req", v)  # the int rules of SGLang's counts
    else:
        c = canon_value("gen_throughput" if name.endswith("throughput") else
                        "accept_len" if name == "mean_accept_len" else "token_usage", v)
    if c is INVALID or c is None or isinstance(c, bool):
        invalid.append(name)
        return None
    if pct and isinstance(c, float) and c > 100.0 + 1e-9:
        invalid.append(name)
        return None
    return c


_RE_PLAIN_FLOAT = re.compile(r"\d{1,15}\.\d{1,6}\Z")


def _bounded(v: float, name: str, invalid: list[str], pct: bool) -> float | None:
    if (pct and v > 100.0 + 1e-9) or (name.endswith("throughput") and v > MAX_THROUGHPUT) \
            or (name == "mean_accept_len" and v >= MAX_ACCEPT_LEN):
        invalid.append(name)
        return None
    return v


def _float(text: str, name: str, invalid: list[str], pct: bool = False) -> float | None:
    v = _num(text, name, invalid, pct=pct)
    return None if v is None else float(v)


def _int(text: str, name: str, invalid: list[str]) -> int | None:
    v = _num(text, name, invalid, integer=True)
    return v if isinstance(v, int) else None


# --- the three line kinds ---------------------------------------------------------------------

def _decode(head: _Head, msg: str) -> VllmDecodeRecord | None:
    body = _RE_THROUGHPUT_HEAD.search(msg)
    if body is None:
        return None
    rec = VllmDecodeRecord(kind="decode", timestamp=head.timestamp, time_of_day=head.time_of_day,
                           pid=head.pid, process=head.process, date_inferred=head.date_inferred)
    inv = rec.invalid
    eng = _RE_ENGINE.search(msg, 0, body.start() + 1)
    if eng is not None and eng.end() == body.start():
        if eng.group("engine") is not None:
            rec.dp_rank = small_int(eng.group("engine"))
        else:
            rec.engines_aggregated = small_int(eng.group("n_agg"))
    elif head.process and head.process.startswith("EngineCore_"):
        pass  # 0.8.0 prints no engine id; never guess it from the process tag
    rec.prompt_throughput = _float(body.group("prompt"), "prompt_throughput", inv)
    rec.gen_throughput = _float(body.group("gen"), "gen_throughput", inv)
    rec.running_req = _int(body.group("running"), "running_req", inv)
    rest = msg[body.end():]
    w = _RE_WAITING.search(rest) or ("Pending" in rest and _RE_PENDING.search(rest)) or None
    if w:
        rec.queue_req = _int(w.group(1), "queue_req", inv)
    for rx, name, mark in _OPTIONAL_COUNTS:
        m = rx.search(rest) if mark in rest else None  # the substring test is ~20x cheaper
        if m:
            setattr(rec, name, _int(m.group(1), name, inv))
    for m in _RE_KV.finditer(rest):
        if m.group("dev") == "CPU" and rec.kv_cache_usage_pct is not None:
            rec.cpu_kv_cache_usage_pct = _float(m.group("v"), "cpu_kv_cache_usage_pct", inv, True)
        elif rec.kv_cache_usage_pct is None:
            rec.kv_device = m.group("dev")
            rec.kv_cache_usage_pct = _float(m.group("v"), "kv_cache_usage_pct", inv, True)
    for rx, name, mark in _OPTIONAL_RATES:
        m = rx.search(rest) if mark in rest else None
        if m:
            setattr(rec, name, _float(m.group(1), name, inv, True))
    f = _RE_KV_FETCH.search(rest) if "KV fetch" in rest else None
    if f:
        rec.kv_fetch_waiting = small_int(f.group(1))
        rec.kv_fetch_in_progress = small_int(f.group(2))
        rec.kv_fetch_completed_waiting = small_int(f.group(3))
    return rec


_OPTIONAL_COUNTS = ((_RE_SWAPPED, "swapped_req", "Swapped"), (_RE_DEFERRED, "deferred_req", "Deferred"),
                    (_RE_CORRUPTED, "corrupted_req", "Corrupted"),
                    (_RE_PREEMPT, "preemptions", "Preemptions"))
_OPTIONAL_RATES = ((_RE_PREFIX, "prefix_cache_hit_pct", "refix cache hit rate"),
                   (_RE_EXT_PREFIX, "external_prefix_cache_hit_pct", "External prefix"),
                   (_RE_MM, "mm_cache_hit_pct", "MM cache"))


def _per_position(text: str, inv: list[str]) -> list[float | None]:
    out: list[float | None] = []
    for i, part in enumerate(text.split(", ")[:MAX_POSITIONS]):
        v = _float(part, f"per_position[{i}]", inv)
        if v is not None and v > 1.0 + 1e-9:
            inv.append(f"per_position[{i}]")
            v = None
        out.append(v)
    return out


def _spec(head: _Head, msg: str) -> VllmEventRecord | None:
    idx = msg.find(SPEC_MARK)
    if idx < 0:
        return None
    body = msg[idx + len(SPEC_MARK):]
    ev = VllmEventRecord("spec", head.timestamp, head.time_of_day, process=head.process,
                         pid=head.pid, date_inferred=head.date_inferred)
    inv = ev.invalid
    acc, dra = _RE_ACCEPTED.search(body), _RE_DRAFTED.search(body)
    if acc is None or dra is None:
        return None  # not a spec stats line (a quoted fragment)
    mal = _RE_MAL.search(body)
    rate = _RE_RATE_F3.search(body) or _RE_RATE_F12.search(body)
    at, dt = _RE_ACC_TPUT.search(body), _RE_DRAFT_TPUT.search(body)
    pp = _RE_PER_POS.search(body)
    if at:
        layout = "F3"
    elif pp:
        layout = "F2"
    else:
        layout = "F1"
    ev.data = {
        "_layout": layout,
        "mean_accept_len": _float(mal.group(1), "mean_accept_len", inv) if mal else None,
        "accepted": _int(acc.group(1), "accepted", inv),
        "drafted": _int(dra.group(1), "drafted", inv),
        "draft_accept_rate_pct": (_float(rate.group(1), "draft_accept_rate_pct", inv, True)
                                  if rate else None),
        "accepted_throughput": _float(at.group(1), "accepted_throughput", inv) if at else None,
        "drafted_throughput": _float(dt.group(1), "drafted_throughput", inv) if dt else None,
        "per_position": _per_position(pp.group(1), inv) if pp else None,
    }
    return ev


def _spec_v0(head: _Head, msg: str) -> VllmEventRecord | None:
    m = _RE_V0.search(msg)
    if m is None:
        return None
    ev = VllmEventRecord("spec", head.timestamp, head.time_of_day, process=head.process,
                         pid=head.pid, date_inferred=head.date_inferred)
    inv = ev.invalid
    rate = _float(m.group(1), "draft_accept_rate_pct_total", inv)
    ev.data = {
        "_layout": "V0",
        # V0 prints counts since the server started (`*_total`); the per-interval fields are
        # None on the line itself and filled from two lines by `V0Differ` (parse --json, joins)
        "cumulative": True,
        "mean_accept_len": None,
        "accepted": None,
        "drafted": None,
        "draft_accept_rate_pct": None,
        "accepted_throughput": None,
        "drafted_throughput": None,
        "per_position": None,
        "emitted": None,
        "accepted_total": _int(m.group(4), "accepted_total", inv),
        "drafted_total": _int(m.group(5), "drafted_total", inv),
        "emitted_total": _int(m.group(6), "emitted_total", inv),
        "draft_accept_rate_pct_total": None if rate is None else round(rate * 100.0, 6),
        "system_efficiency_total": _float(m.group(2), "system_efficiency_total", inv),
        "num_spec_tokens": _int(m.group(3), "num_spec_tokens", inv),
    }
    return ev


def _config(head: _Head, msg: str) -> VllmEventRecord | None:
    m = _RE_INIT.search(msg)
    if m is None:
        return None
    cfg = msg[m.end():]
    data: dict[str, Any] = {"engine_version": m.group("ver").lstrip("v")}
    mm = _RE_MODEL.search(cfg)
    data["model_path"] = mm.group(1) if mm else None
    b = _spec_config_body(cfg)
    method = draft = k = None
    if b is not None:
        me, dr, kk = _RE_METHOD.search(b), _RE_DRAFT.search(b), _RE_K.search(b)
        method = me.group(1) if me else None
        draft = dr.group(1) if dr else None
        k = small_int(kk.group(1)) if kk else None
        if method is None and draft is not None:  # V0 repr: draft_model='...' | '[ngram]'
            method = "ngram" if draft == "[ngram]" else "draft_model"
            draft = None if draft == "[ngram]" else draft
    data["speculative_algorithm"] = method
    data["speculative_num_tokens"] = k
    data["speculative_draft_model_path"] = draft
    for key, rx in _RE_SIZES.items():  # only what the line prints: a size one vLLM release
        s = rx.search(cfg)  # leaves out (0.8.x prints no data_parallel_size) is not known,
        if s:  # and an unknown is no difference ("dp_size: 1 vs None", compare and advise)
            data[key] = small_int(s.group(1))
    return VllmEventRecord("server_args", head.timestamp, head.time_of_day, data=data,
                           process=head.process, pid=head.pid, date_inferred=head.date_inferred)


_SPEC_CFG = "speculative_config="
_SPEC_CLASS = "SpeculativeConfig("


def _spec_config_body(cfg: str) -> str | None:
    """The text inside the first `speculative_config=SpeculativeConfig(...)`, None for
    `speculative_config=None` or none. With str.find, not a regex searched from every
    `speculative_config=` to the line's end for a ')' (quadratic: a 0.5 MB line took 27 s)."""
    pos = 0
    while (i := cfg.find(_SPEC_CFG, pos)) >= 0:
        j = i + len(_SPEC_CFG)
        if cfg.startswith("None", j):
            return None
        if cfg.startswith(_SPEC_CLASS, j):
            k = cfg.find(")", j + len(_SPEC_CLASS))
            return cfg[j + len(_SPEC_CLASS):k] if k >= 0 else None
        pos = j
    return None


def _non_default(head: _Head, msg: str) -> VllmEventRecord | None:
    # the dict runs from the first marker to the line's end (str.find: a regex `\{.*\}\s*$`
    # searched from every marker was quadratic, 33 s for a 1 MiB line in parse and record)
    i = msg.find(_ND_MARK)
    text = msg[i + len(_ND_MARK) - 1:].rstrip() if i >= 0 else ""
    if not text.endswith("}") or len(text) > MAX_ARGS_TEXT:
        return None
    try:
        args = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None
    if not isinstance(args, dict):
        return None
    safe = {str(k): v for k, v in args.items()
            if str(k) in NON_DEFAULT_KEYS
            and isinstance(v, (str, int, float, bool, type(None), list, dict))
            and not (isinstance(v, float) and not math.isfinite(v))
            and too_deep(v, MAX_ARG_DEPTH) is None}
    return VllmEventRecord("vllm_args", head.timestamp, head.time_of_day, data={"args": safe},
                           process=head.process, pid=head.pid, date_inferred=head.date_inferred)


def vllm_owns(text: str) -> bool:
    """Whether `text` is one of vLLM's own stats or config lines (its logger's head, then one
    of MARKERS): what else it quotes, an SGLang batch marker included, is its free text."""
    if not any(mark in text for mark in MARKERS):
        return False
    head = _head(text)
    return head is not None and any(mark in head.msg for mark in MARKERS)


def parse_vllm_line(line: str | bytes) -> Record | None:
    """One vLLM log line -> a record, or None for lines specmon does not use. Never raises."""
    try:
        text = clean(line)
        if not any(mark in text for mark in MARKERS):
            return None
        head = _head(text)
        if head is None:
            return None
        msg = head.msg
        if "Avg prompt throughput" in msg:
            return _decode(head, msg)
        if SPEC_MARK in msg:
            return _spec(head, msg)
        if V0_SPEC_MARK in msg:
            return _spec_v0(head, msg)
        if "LLM engine (v" in msg:
            return _config(head, msg)
        if "non-default args:" in msg:
            return _non_default(head, msg)
        if msg.startswith("Starting vLLM API server"):  # `... [0 ]on http://HOST:PORT`
            url = _RE_URL.search(msg)
            port = small_int(url.group(2)) if url and url.group(2) else None
            return VllmEventRecord("ready", head.timestamp, head.time_of_day,
                                   data={"url": url.group(1) if url else None, "port": port},
                                   process=head.process, pid=head.pid,
                                   date_inferred=head.date_inferred)
        return None
    except Exception:  # noqa: BLE001 - a log line must never take the monitor down
        return None


# --- joining the spec line onto its engine's line ---------------------------------------------

BONUS_TOL = 0.006  # printed %.2f (0.005) + slack; plus 0.0005 per printed %.3f position
BONUS_NOTE = "vLLM 0.8.5 prints the mean acceptance length without the bonus token: 1 added"


def normalised_accept_len(spec: dict[str, Any]) -> tuple[float | None, str | None]:
    """Accept length with the bonus token included (SGLang's `accept len`) and a note when it is
    not the printed value. 0.8.5 printed `Mean acceptance length` without the bonus: when the
    printed value equals the sum of the per-position rates (= accepted / drafts) rather than
    1 + that sum, 1 is added and the note says so."""
    mal = spec.get("mean_accept_len")
    pp = spec.get("per_position")
    if not isinstance(mal, float):
        return None, None
    if isinstance(pp, list) and pp and all(isinstance(x, float) for x in pp):
        s = float(sum(pp))
        tol = BONUS_TOL + 0.0005 * len(pp)
        if abs(mal - s) <= tol and abs(mal - (1.0 + s)) > tol:
            return mal + 1.0, BONUS_NOTE
    return mal, None


class V0Differ:
    """Fills a V0 spec line's per-interval fields from the previous V0 line of the same process
    (V0 prints cumulative counts): accepted, drafted, emitted, the rate and the accept length
    (emitted tokens per verify step; V0 drafts k per step, so steps = drafted / k). The first
    line of a process, or one whose counts went back (a restart), keeps them None."""

    def __init__(self) -> None:
        self._prev: dict[tuple[str | None, int | None], dict[str, Any]] = {}

    def apply(self, rec: VllmEventRecord) -> None:
        d = rec.data
        if not d.get("cumulative"):
            return
        key = (rec.process, rec.pid)
        prev = self._prev.get(key)
        if len(self._prev) >= 256 and key not in self._prev:
            self._prev.clear()  # bounded
        self._prev[key] = d
        if prev is None:
            return
        names = ("accepted_total", "drafted_total", "emitted_total")
        pv, cv = [prev.get(n) for n in names], [d.get(n) for n in names]
        pi = [x for x in pv if isinstance(x, int)]
        ci = [x for x in cv if isinstance(x, int)]
        if len(pi) != 3 or len(ci) != 3:
            return
        acc, dra, emi = (c - p for c, p in zip(ci, pi, strict=True))
        if acc < 0 or dra < 0 or emi < 0:
            return
        d["accepted"], d["drafted"], d["emitted"] = acc, dra, emi
        if dra > 0:
            d["draft_accept_rate_pct"] = round(100.0 * acc / dra, 6)
        k = d.get("num_spec_tokens")
        if isinstance(k, int) and k > 0 and dra > 0:
            d["mean_accept_len"] = emi * k / dra

    def clear(self) -> None:
        self._prev.clear()


class SpecJoiner:
    """Joins each vLLM spec record onto the decode record of its engine printed just before it.

    `push(rec)` returns the records ready to use, in order; a vLLM decode record is held back
    until the next record (its spec line, which vLLM prints right after it, or anything else),
    so a consumer sees the engine's interval once, complete. `flush()` returns what is held (at
    the end of a log). Spec records are passed on too (after their decode record), so nothing
    received is lost. When `hold` is False a decode record is passed on at once and a later spec
    line fills in the same (already delivered) record object.
    """

    def __init__(self, hold: bool = True) -> None:
        self.hold = hold
        self._held: VllmDecodeRecord | None = None
        self._last: VllmDecodeRecord | None = None
        # several API servers in one file (`(APIServer_DP1 pid=N)`, external DP load balancing):
        # a spec line belongs to the last engine line of its own process
        self._last_by_pid: dict[int, VllmDecodeRecord] = {}
        self._v0 = V0Differ()
        self._clock = IntervalClock()
        self._k: int | None = None  # the run's k and method (its config line), for F1 lines
        self._method: str | None = None

    def push(self, rec: Record | None) -> list[Record]:
        if rec is None:
            return []
        out: list[Record] = []
        if isinstance(rec, VllmEventRecord) and rec.kind == "spec":
            self._v0.apply(rec)
            target = self._held or self._last
            if target is not None and not _same_process(target, rec) and rec.pid is not None:
                target = self._last_by_pid.get(rec.pid)
            if target is not None and target.spec is None and _same_process(target, rec):
                attach(target, rec.data, self._k, self._method)
                self._clock.accepted_rate(target)
                # shown on the spec line (compact log): the engine line may be drawn before
                # its spec line arrives, and the length is this line's figure
                rec.joined_accept_len = target.accept_len
            if self._held is not None:
                out.append(self._held)
                self._held = None
            out.append(rec)
            return out
        if self._held is not None:
            out.append(self._held)
            self._held = None
        if isinstance(rec, VllmDecodeRecord):
            self._last = rec
            if rec.pid is not None:
                if len(self._last_by_pid) >= 256 and rec.pid not in self._last_by_pid:
                    self._last_by_pid.clear()  # bounded: a hostile log cannot grow it
                self._last_by_pid[rec.pid] = rec
            self._clock.see(rec)
            if self.hold:
                self._held = rec
                return out
        elif isinstance(rec, VllmEventRecord) and rec.kind == "server_args":
            self.use_config(rec.data)
            self._v0.clear()
            self._last = None
            self._last_by_pid.clear()
            self._clock = IntervalClock()
        out.append(rec)
        return out

    def flush(self) -> list[Record]:
        held, self._held = self._held, None
        return [held] if held is not None else []

    def use_config(self, data: dict[str, Any]) -> None:
        """The run's k and method from its config line's data (`server_args`): what F1 lines'
        accept length needs. A reader that hands the joiner only the stats lines (the summary)
        gives them here."""
        k = data.get("speculative_num_tokens")
        self._k = k if isinstance(k, int) and not isinstance(k, bool) and k > 0 else None
        m = data.get("speculative_algorithm")
        self._method = m if isinstance(m, str) else None

    @property
    def holding(self) -> bool:
        return self._held is not None


DEFAULT_INTERVAL_S = 10.0  # VLLM_LOG_STATS_INTERVAL's default
IDLE_FACTOR = 1.5  # a gap this many usual intervals long held idle intervals (nothing printed)


def _seconds(ts: str | None) -> float | None:
    if not ts:
        return None
    try:
        return datetime.fromisoformat(ts).timestamp()
    except (ValueError, OverflowError, OSError):
        return None


def measured_interval(gaps: dict[float, int]) -> float | None:
    """vLLM's stats interval as a log shows it, from the gaps between each engine's consecutive
    lines (gap -> how many): their mean, leaving out the gaps over IDLE_FACTOR times the median
    (at least 1 s) that held idle intervals (nothing printed). The mean, not the median: vLLM
    stamps whole seconds, so at VLLM_LOG_STATS_INTERVAL=0.5 the gaps read 0 and 1 s."""
    n = sum(gaps.values())
    if n <= 0:
        return None
    seen = 0
    med = 0.0
    for g in sorted(gaps):
        seen += gaps[g]
        if 2 * seen >= n:
            med = g
            break
    limit = IDLE_FACTOR * max(med, 1.0)
    kept = [(g, c) for g, c in gaps.items() if g <= limit]
    total = sum(c for _, c in kept)
    mean = sum(g * c for g, c in kept) / total if total else 0.0
    return mean if mean > 0 else None  # (all in one second: below what the stamps resolve)


class IntervalClock:
    """Each engine's stats interval from the times its lines were printed, for an accepted
    tok/s that does not inherit 0.10.2+'s idle-gap error. vLLM stamps whole seconds: one gap
    does not resolve a sub-second or even a 10 s interval well (9, 10, 11 s), so an interval is
    the recent gaps' mean (`measured_interval`, idle gaps left out), and where vLLM printed its
    own accepted throughput over its own timer (0.10.2+), that figure, except after an idle
    stretch (where it divides by the whole gap)."""

    def __init__(self) -> None:
        self._prev: dict[tuple[int | None, int | None], float] = {}
        self._gap: dict[int, float] = {}  # id(record) -> seconds since its engine's previous line
        self._recent: deque[float] = deque(maxlen=64)  # recent gaps, 0 s ones included

    def see(self, rec: VllmDecodeRecord) -> None:
        t = _seconds(rec.timestamp)
        if t is None:
            return
        key = (rec.pid, rec.dp_rank)
        prev = self._prev.get(key)
        self._prev[key] = t
        if prev is not None and t >= prev:
            gap = t - prev
            self._gap[id(rec)] = gap
            if len(self._gap) > 64:
                self._gap.pop(next(iter(self._gap)))
            self._recent.append(gap)

    def usual(self) -> float | None:
        """The engines' stats interval as their recent lines show it (None: not yet)."""
        return measured_interval(Counter(self._recent)) if self._recent else None

    def accepted_rate(self, rec: VllmDecodeRecord) -> None:
        acc = rec.spec.get("accepted") if rec.spec else None
        if not isinstance(acc, int) or rec.spec is None or rec.spec.get("_layout") == "V0":
            return
        gap = self._gap.pop(id(rec), None)
        usual = self.usual()
        idle = gap is not None and gap > IDLE_FACTOR * max(usual or DEFAULT_INTERVAL_S, 1.0)
        if gap is not None and not idle:
            printed = rec.spec.get("accepted_throughput")
            if isinstance(printed, float) and math.isfinite(printed):
                rec.accepted_tok_s = printed  # vLLM's own, over its own interval
                return
            if usual is not None:
                rec.accepted_tok_s = acc / usual
                return
        rec.accepted_tok_s = acc / (usual or DEFAULT_INTERVAL_S)
        basis = (f"the engines' stats interval ({usual:.1f} s, measured)" if usual is not None
                 else f"vLLM's default stats interval ({DEFAULT_INTERVAL_S:.0f} s, assumed)")
        if gap is None:
            rec.accepted_tok_s_note = f"first line of the engine: over {basis}"
        elif idle:
            rec.accepted_tok_s_note = (f"after {gap:.0f} s without a line (idle): over {basis}, "
                                       "not the whole gap as vLLM 0.10.2+ prints it")
        else:
            rec.accepted_tok_s_note = f"over {basis}"


def _same_process(dec: VllmDecodeRecord, spec: VllmEventRecord) -> bool:
    if dec.pid is not None and spec.pid is not None:
        return dec.pid == spec.pid
    return True


def attach(dec: VllmDecodeRecord, spec: dict[str, Any], k: int | None = None,
           method: str | None = None) -> None:
    """Fill the decode record's SGLang-shaped acceptance fields from its interval's spec data
    (`k`, `method`: the run's config, when its config line was seen)."""
    dec.spec = spec
    acc, dra = spec.get("accepted"), spec.get("drafted")
    if isinstance(acc, int) and isinstance(dra, int) and dra > 0:
        dec.accept_rate = acc / dra
    if spec.get("_layout") == "V0":
        mal = spec.get("mean_accept_len")
        dec.accept_len = mal if isinstance(mal, float) else None
        if dec.accept_len is not None:
            dec.accept_len_note = ("V0: emitted tokens per verify step, steps = drafted / k "
                                   "(differences of the cumulative counts)")
        return
    dec.accept_len, dec.accept_len_note = normalised_accept_len(spec)
    if (dec.accept_len is None and spec.get("_layout") == "F1" and k and method
            and method not in SHORT_DRAFT_METHODS and isinstance(acc, int)
            and isinstance(dra, int) and dra > 0):
        # F1 prints no mean length and no per-position rates; a method that always drafts k
        # tokens per step made Drafted / k drafts, so the length follows from the counts
        dec.accept_len = 1.0 + acc * k / dra
        dec.accept_len_note = (f"F1 (vLLM 0.8.3-0.8.4) prints no mean length: 1 + Accepted x k "
                               f"/ Drafted, k = {k} from the config ({method} drafts k tokens "
                               "per step)")


# methods whose drafts can be shorter than k (no draft, or a short match): Drafted / k is no count
SHORT_DRAFT_METHODS = frozenset({"ngram", "ngram_gpu", "suffix", "[ngram]"})


def repeats_config(args: dict[str, Any], config: dict[str, Any]) -> bool:
    """Whether a vLLM config line repeats the run's own (the next DP engine's copy, <= 0.11):
    the same launch, not a new run (the session's and `parse`'s run rule)."""
    return all(args.get(k) == v for k, v in config.items())


def join_records(records: Any) -> list[Record]:
    """A whole log's records (None allowed) with every spec line joined (offline helper)."""
    j = SpecJoiner()
    out: list[Record] = []
    for rec in records:
        out.extend(j.push(rec))
    out.extend(j.flush())
    return out


class MixedEngines(CliError):
    """A log holding both SGLang's and vLLM's stats lines: one server prints one engine's."""


class EngineGuard:
    """Remembers which engine a log's records came from; a second engine is an error naming
    both lines (concatenated logs of two servers would mix their intervals into one series)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.engine: str | None = None
        self.first_line: int | None = None

    def check(self, rec: Record | None, line_no: int | None = None) -> None:
        eng = engine_of(rec)
        if eng is None:
            return
        if self.engine is None:
            self.engine, self.first_line = eng, line_no
        elif eng != self.engine:
            where = f"line {line_no}" if line_no is not None else "a line"
            since = f" (since line {self.first_line})" if self.first_line is not None else ""
            raise MixedEngines(
                f"{self.name}: {where} is a {_LABEL[eng]} line in a {_LABEL[self.engine]} log"
                f"{since}: a log that mixes engines cannot be read as one server; split it")


_LABEL = {"vllm": "vLLM", "sglang": "SGLang"}


def same_line(a: BatchRecord, b: BatchRecord) -> bool:
    """Whether two records came from the same line (a joined vLLM record equals its line's
    fresh parse except for what joining added: `JOINED`)."""
    if a == b:
        return True
    if not (isinstance(a, VllmDecodeRecord) and isinstance(b, VllmDecodeRecord)):
        return False
    return all(getattr(a, f) == getattr(b, f) for f in a.__dataclass_fields__ if f not in JOINED)


# What joining sets on an engine line's record (`attach`, `IntervalClock.accepted_rate`): the
# rest is its line's own. tests/unit/test_parse_vllm.py checks it against a real join.
JOINED = frozenset({"spec", "accept_len", "accept_rate", "accept_len_note", "accepted_tok_s",
                    "accepted_tok_s_note"})


def sglang_equivalents(data: dict[str, Any]) -> dict[str, int]:
    """vLLM's config in SGLang's argument names where they mean the same: vLLM drafts chains of
    k tokens (`num_spec_tokens`), which SGLang calls steps k, topk 1, draft tokens k + 1."""
    k = data.get("speculative_num_tokens")
    if not data.get("speculative_algorithm") or not isinstance(k, int) or isinstance(k, bool) \
            or k <= 0:
        return {}
    return {"speculative_num_steps": k, "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": k + 1}


def throughput_label(engine: str | None) -> str:
    """What a server's logged throughput is, in the words every front end uses."""
    if engine == ENGINE:
        return "vLLM gen throughput: all tokens emitted per stats interval, prefill steps incl."
    return "decode-only"


def combine_engines(recs: list[VllmDecodeRecord], server: BatchRecord) -> VllmDecodeRecord:
    """The server-level record of one interval of a DP server from its engines' records:
    `server` holds what SGLang's DP sum computes (throughput, Running, Waiting summed, accept len
    weighted by throughput); the vLLM parts are added here: prompt tok/s and accepted tok/s
    summed, KV usage the mean (as vLLM's own aggregated line), the acceptance counts summed and
    the rate and per-position rates from those sums.

    The prefix cache hit rate cannot be combined as vLLM's aggregated line does (`N Engines
    Aggregated`: one CachingMetrics fed every engine's queries and hits, so their pooled hits /
    queries): the engine lines print rates, not the query counts that would weight them. It is
    the plain mean of the rates the engines printed, and `prefix_cache_hit_note` says so (0.31+
    prints no rate for an engine whose cache saw no queries: it adds none to vLLM's pool either,
    and is left out)."""
    out = VllmDecodeRecord(kind="decode")
    for f in BatchRecord.__dataclass_fields__:
        setattr(out, f, getattr(server, f))

    def total(name: str) -> float | None:
        vals = [getattr(r, name) for r in recs]
        return None if any(v is None for v in vals) else float(sum(vals))

    out.prompt_throughput = total("prompt_throughput")
    out.accepted_tok_s = total("accepted_tok_s")
    kv = [r.kv_cache_usage_pct for r in recs if r.kv_cache_usage_pct is not None]
    out.kv_cache_usage_pct = sum(kv) / len(kv) if len(kv) == len(recs) else None
    hits = [r.prefix_cache_hit_pct for r in recs if r.prefix_cache_hit_pct is not None]
    if hits:
        out.prefix_cache_hit_pct = sum(hits) / len(hits)
        if len(hits) == len(recs):
            note = f"mean of {len(recs)} engines, unweighted"
        elif len(hits) > 1:
            note = f"mean of the {len(hits)} of {len(recs)} engines that print it, unweighted"
        else:
            note = f"1 of {len(recs)} engines prints it"
        out.prefix_cache_hit_note = note
    out.kv_device = recs[0].kv_device
    out.process, out.pid = recs[0].process, recs[0].pid
    specs = [r.spec for r in recs]
    if all(s is not None for s in specs):
        acc = [s.get("accepted") if s else None for s in specs]
        dra = [s.get("drafted") if s else None for s in specs]
        if all(isinstance(x, int) for x in acc + dra):
            a, d = sum(x for x in acc if isinstance(x, int)), sum(x for x in dra if isinstance(x, int))
            spec: dict[str, Any] = {"accepted": a, "drafted": d, "engines": len(recs)}
            out.accept_rate = a / d if d > 0 else None
            pps = [s.get("per_position") if s else None for s in specs]
            if all(isinstance(p, list) and p and all(isinstance(x, float) for x in p)
                   and len(p) == len(pps[0] or []) for p in pps) and d > 0:
                # drafts per engine = drafted / k (chains of k): weights for the rates
                spec["per_position"] = [
                    sum((p or [])[i] * (x or 0) for p, x in zip(pps, dra, strict=True)) / d
                    for i in range(len(pps[0] or []))]
            out.spec = spec
    notes = {r.accept_len_note for r in recs if r.accept_len_note}
    out.accept_len_note = "; ".join(sorted(notes)) if notes else None
    return out


_SPEC_INTS = ("accepted", "drafted", "accepted_total", "drafted_total", "emitted",
              "emitted_total", "num_spec_tokens", "engines")
_SPEC_FLOATS = ("mean_accept_len", "draft_accept_rate_pct", "accepted_throughput",
                "drafted_throughput", "draft_accept_rate_pct_total", "system_efficiency_total")


def checked_spec(d: dict[str, Any]) -> dict[str, Any]:
    """A spec dict read back from a file (a snapshot), with every field of the type the parser
    gives it; ValueError naming the first field that is not. Unknown fields are dropped."""
    out: dict[str, Any] = {}
    for k in _SPEC_INTS:
        v = d.get(k)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0
                              or v >= 10 ** MAX_INT_DIGITS):
            raise ValueError(f"spec field {k!r} is not a count")
        if k in d:
            out[k] = v
    for k in _SPEC_FLOATS:
        v = d.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                              or not math.isfinite(v) or v < 0):
            raise ValueError(f"spec field {k!r} is not a finite number")
        if k in d:
            out[k] = None if v is None else float(v)
    pp = d.get("per_position")
    if pp is None and "per_position" in d:
        out["per_position"] = None
    elif pp is not None:
        if not isinstance(pp, list) or len(pp) > MAX_POSITIONS or not all(
                x is None or (isinstance(x, (int, float)) and not isinstance(x, bool)
                              and math.isfinite(x) and 0 <= x <= 1) for x in pp):
            raise ValueError("spec field 'per_position' is not a list of rates")
        out["per_position"] = [None if x is None else float(x) for x in pp]
    for k in ("_layout",):
        if isinstance(d.get(k), str):
            out[k] = d[k][:8]
    if d.get("cumulative") is True:
        out["cumulative"] = True
    return out
