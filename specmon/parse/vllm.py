"""vLLM server log lines -> the same typed records as SGLang's (`specmon.parse.sglang`).

Pure per line (no I/O; the clock is read only to give a year to vLLM's year-less dates), keyed
on field *names*, never on versions or line numbers: releases 0.8.3 to 0.33 reorder and add parts.

API (what other modules use):

* `parse_vllm_line(line) -> Record | None`: one line. `specmon.parse.sglang.parse_line` calls it
  for every line that carries a vLLM marker, so every front end reads vLLM logs unchanged.
  - `Engine NNN: Avg prompt throughput ...` (and the 0.8.0 / V0 forms) -> `VllmDecodeRecord`,
    `kind "decode"` (a `BatchRecord`: `dp_rank` is the engine index, `gen_throughput`,
    `running_req`, `queue_req` (Waiting, or V0 Pending) keep their SGLang meaning, except that
    vLLM's generation throughput counts every token emitted in the ~10 s stats interval, prefill
    steps included).
  - `SpecDecoding metrics: ...` (V1 layouts F1 0.8.3-0.8.4, F2a 0.8.5, F2b 0.9.0-0.10.1.1,
    F3 0.10.2-0.33) and V0 `Speculative metrics: ...` -> `VllmEventRecord(kind "spec")`; its
    `data` holds `mean_accept_len` (as printed), `accepted`, `drafted`, `draft_accept_rate_pct`,
    `accepted_throughput`, `drafted_throughput`, `per_position` (None where the layout lacks them;
    `nan` -> None, the field named in `invalid`). V0 counts are cumulative since start
    (`cumulative: True`); `SpecJoiner` diffs them.
  - `Initializing a V1 LLM engine (vX) with config: ...` -> `VllmEventRecord(kind "server_args")`
    with `engine_version`, `model_path`, `speculative_algorithm` (the method),
    `speculative_num_tokens`, `speculative_draft_model_path`, `tp_size`, `pp_size`, `dp_size`;
    `non-default args: {...}` -> `kind "vllm_args"` with the dict (and the spec keys it holds).
* `SpecJoiner`: a small stream stage that joins each spec record onto the decode record of its
  engine printed just before it (the spec line has no engine id) and fills in the SGLang-shaped
  `accept_len` (normalised to "bonus included": 0.8.5 prints it without the bonus; detected from
  the per-position rates and corrected, saying so in `accept_len_note`) and `accept_rate`.
* `engine_of(record) -> "vllm" | "sglang" | None`: which server printed a record (mixed logs).

Every record's `to_json()` carries `"engine": "vllm"`. Line preprocessing: `\\r` (continuation
lines, tqdm) and ANSI colour are dropped; `VLLM_LOGGING_PREFIX` or a leading container timestamp
(`2026-05-12T08:01:39.331095044Z ...`) may precede the header. A container timestamp, when
present, is the line's time (it has a year); otherwise the year is the latest one that does not
put the line more than a day in the future (logs are read after they are written), which also
handles the Dec -> Jan rollover.
"""

from __future__ import annotations

import ast
import math
import re
import time
from dataclasses import dataclass, field
from typing import Any

from specmon.errors import CliError
from specmon.parse.sglang import (
    INVALID,
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
           "LLM engine (v", "non-default args:")

_RE_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_RE_CONTAINER_TS = re.compile(
    r"^\s*(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(?:Z|[+-]\d{2}:?\d{2})?\s")
_RE_HEADER = re.compile(
    r"(?:\((?P<proc>[^()]+?) pid=(?P<pid>\d+)\)\s+)?"
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+(?P<md>\d{2}-\d{2}) "
    r"(?P<hms>\d{2}:\d{2}:\d{2})(?:\.(?P<ms>\d{3})\d*)?\s+\[?(?P<file>[^\]\s]+?):(?P<lineno>\d+)\]\s")

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
_RE_SPEC_CFG = re.compile(
    r"speculative_config=(?:None|SpeculativeConfig\((?P<body>[^)]*)\))")
_RE_METHOD = re.compile(r"\bmethod='([^']*)'")
_RE_DRAFT = re.compile(r"\b(?:model|draft_model)=(?:'([^']*)'|None)")
_RE_K = re.compile(r"\bnum_spec_tokens=(\d+)")
_RE_MODEL = re.compile(r"(?:^|[\s,])model='((?:[^'\\]|\\.)*)'")
_RE_SIZES = {
    "tp_size": re.compile(r"\btensor_parallel_size=(\d+)"),
    "pp_size": re.compile(r"\bpipeline_parallel_size=(\d+)"),
    "dp_size": re.compile(r"\bdata_parallel_size=(\d+)"),
}
_RE_NON_DEFAULT = re.compile(r"non-default args: (\{.*\})\s*$")
MAX_ARGS_TEXT = 64 * 1024  # a longer dict is not parsed (literal_eval cost is bounded)


@dataclass(slots=True)
class VllmDecodeRecord(BatchRecord):
    """One `Engine NNN: Avg prompt throughput ...` line (kind "decode").

    `gen_throughput` is every token the engine emitted in the stats interval (~10 s, prefill
    steps and accepted drafts included) over its wall time: not SGLang's decode-batch-only figure,
    and not a benchmark's end-to-end tok/s. `accept_len`/`accept_rate` are filled by `SpecJoiner`
    from the spec line that follows (None on the line itself).
    """

    process: str | None = None  # `APIServer`, `EngineCore_DP0`, ... (the tag before the level)
    engines_aggregated: int | None = None  # `N Engines Aggregated:` (--aggregate-engine-logging)
    prompt_throughput: float | None = None
    kv_cache_usage_pct: float | None = None
    kv_device: str | None = None  # `GPU` (0.30+: `XPU`, `CPU`, ...)
    prefix_cache_hit_pct: float | None = None  # None when not printed (0.31+: no queries)
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
    date_inferred: bool = False  # the year of `timestamp` was inferred (vLLM prints none)

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
        if self.invalid:
            out["invalid"] = list(self.invalid)
        return out


_DECODE_OPTIONAL = ("engines_aggregated", "kv_device", "preemptions", "deferred_req",
                    "corrupted_req", "external_prefix_cache_hit_pct", "mm_cache_hit_pct",
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

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "engine": ENGINE, "timestamp": self.timestamp,
                               "time_of_day": self.time_of_day}
        if self.process is not None:
            out["process"] = self.process
        if self.pid is not None:
            out["pid"] = self.pid
        out.update(self.data)
        if self.invalid:
            out["invalid"] = list(self.invalid)
        return out


def engine_of(rec: Record | None) -> str | None:
    """"vllm" / "sglang" for records only one engine prints; None for neutral events."""
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
        line = _RE_ANSI.sub("", line)
    line = line.rstrip("\r\n")
    if "\r" in line:
        parts = [p for p in line.split("\r") if p.strip()]
        line = parts[-1] if parts else ""
    return line


def infer_year(month: int, day: int, now: float | None = None) -> int:
    """The latest year that does not put MM-DD more than a day after `now` (default: the clock)."""
    now = time.time() if now is None else now
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
    proc = m.group("proc")
    pid = small_int(m.group("pid")) if m.group("pid") else None
    return _Head(text[m.end():], ts, None if ts else m.group("hms"), proc, pid, inferred)


# --- numbers ----------------------------------------------------------------------------------

def _num(text: str, name: str, invalid: list[str], *, pct: bool = False,
         integer: bool = False) -> float | int | None:
    """A printed value; nan/inf/negative/absurd -> None with `name` added to `invalid`."""
    v = read_number(text)
    if v is None:
        return None
    if v is INVALID or isinstance(v, bool):
        invalid.append(name)
        return None
    if integer:
        c = canon_value("running_req", v)  # the int rules of SGLang's counts
    else:
        c = canon_value("gen_throughput" if name.endswith("throughput") else "token_usage", v)
    if c is INVALID or c is None or isinstance(c, bool):
        invalid.append(name)
        return None
    if pct and isinstance(c, float) and c > 100.0 + 1e-9:
        invalid.append(name)
        return None
    return c


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
    w = _RE_WAITING.search(rest) or _RE_PENDING.search(rest)
    if w:
        rec.queue_req = _int(w.group(1), "queue_req", inv)
    for rx, name in ((_RE_SWAPPED, "swapped_req"), (_RE_DEFERRED, "deferred_req"),
                     (_RE_CORRUPTED, "corrupted_req"), (_RE_PREEMPT, "preemptions")):
        m = rx.search(rest)
        if m:
            setattr(rec, name, _int(m.group(1), name, inv))
    for m in _RE_KV.finditer(rest):
        if m.group("dev") == "CPU" and rec.kv_cache_usage_pct is not None:
            rec.cpu_kv_cache_usage_pct = _float(m.group("v"), "cpu_kv_cache_usage_pct", inv, True)
        elif rec.kv_cache_usage_pct is None:
            rec.kv_device = m.group("dev")
            rec.kv_cache_usage_pct = _float(m.group("v"), "kv_cache_usage_pct", inv, True)
    for rx, name in ((_RE_PREFIX, "prefix_cache_hit_pct"),
                     (_RE_EXT_PREFIX, "external_prefix_cache_hit_pct"),
                     (_RE_MM, "mm_cache_hit_pct")):
        m = rx.search(rest)
        if m:
            setattr(rec, name, _float(m.group(1), name, inv, True))
    f = _RE_KV_FETCH.search(rest)
    if f:
        rec.kv_fetch_waiting = small_int(f.group(1))
        rec.kv_fetch_in_progress = small_int(f.group(2))
        rec.kv_fetch_completed_waiting = small_int(f.group(3))
    return rec


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
        "layout": layout,
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
    rate = _float(m.group(1), "draft_accept_rate_pct", inv)
    ev.data = {
        "layout": "V0",
        "cumulative": True,  # counts since the server started: SpecJoiner diffs them
        "mean_accept_len": None,
        "accepted": _int(m.group(4), "accepted", inv),
        "drafted": _int(m.group(5), "drafted", inv),
        "draft_accept_rate_pct": None if rate is None else round(rate * 100.0, 6),
        "accepted_throughput": None,
        "drafted_throughput": None,
        "per_position": None,
        "emitted": _int(m.group(6), "emitted", inv),
        "num_spec_tokens": _int(m.group(3), "num_spec_tokens", inv),
        "system_efficiency": _float(m.group(2), "system_efficiency", inv),
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
    sc = _RE_SPEC_CFG.search(cfg)
    method = draft = k = None
    if sc is not None and sc.group("body") is not None:
        b = sc.group("body")
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
    for key, rx in _RE_SIZES.items():
        s = rx.search(cfg)
        data[key] = small_int(s.group(1)) if s else None
    return VllmEventRecord("server_args", head.timestamp, head.time_of_day, data=data,
                           process=head.process, pid=head.pid, date_inferred=head.date_inferred)


def _non_default(head: _Head, msg: str) -> VllmEventRecord | None:
    m = _RE_NON_DEFAULT.search(msg)
    if m is None or len(m.group(1)) > MAX_ARGS_TEXT:
        return None
    try:
        args = ast.literal_eval(m.group(1))
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None
    if not isinstance(args, dict):
        return None
    safe = {str(k): v for k, v in args.items()
            if isinstance(v, (str, int, float, bool, type(None), list, dict))
            and not (isinstance(v, float) and not math.isfinite(v))}
    return VllmEventRecord("vllm_args", head.timestamp, head.time_of_day, data={"args": safe},
                           process=head.process, pid=head.pid, date_inferred=head.date_inferred)


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
        return None
    except Exception:  # noqa: BLE001 - a log line must never take the monitor down
        return None


# --- joining the spec line onto its engine's line ---------------------------------------------

BONUS_TOL = 0.006  # printed %.2f (0.005) + slack; plus 0.0005 per printed %.3f position


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
            return mal + 1.0, "vLLM 0.8.5 prints the mean acceptance length without the bonus " \
                              "token: 1 added"
    return mal, None


def _v0_interval(prev: dict[str, Any] | None, cur: dict[str, Any]) -> dict[str, Any]:
    """Per-interval counts of a V0 line from two cumulative ones (None for the first one, or
    after the counters went back: a restart)."""
    out = dict(cur)
    out["accepted_total"], out["drafted_total"] = cur.get("accepted"), cur.get("drafted")
    out["accepted"] = out["drafted"] = out["emitted_interval"] = None
    out["mean_accept_len"] = None
    if prev is None:
        return out
    keys = ("accepted", "drafted", "emitted")
    pv = [prev.get(k + "_total" if k != "emitted" else k) for k in keys]
    cv = [cur.get(k) for k in keys]
    pi = [x for x in pv if isinstance(x, int)]
    ci = [x for x in cv if isinstance(x, int)]
    if len(pi) != 3 or len(ci) != 3:
        return out
    d = [c - p for c, p in zip(ci, pi, strict=True)]
    if any(x < 0 for x in d):
        return out
    out["accepted"], out["drafted"], out["emitted_interval"] = d
    k = cur.get("num_spec_tokens")
    if isinstance(k, int) and k > 0 and d[1] > 0:
        # V0 always drafts k per step: steps = drafted / k; emitted counts accepted + bonus
        out["mean_accept_len"] = d[2] * k / d[1]
    return out


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
        self._v0_prev: dict[tuple[str | None, int | None], dict[str, Any]] = {}

    def push(self, rec: Record | None) -> list[Record]:
        if rec is None:
            return []
        out: list[Record] = []
        if isinstance(rec, VllmEventRecord) and rec.kind == "spec":
            if rec.data.get("cumulative"):
                key = (rec.process, rec.pid)
                rec.data = _v0_interval(self._v0_prev.get(key), rec.data)
                self._v0_prev[key] = rec.data
            target = self._held or self._last
            if target is not None and target.spec is None and _same_process(target, rec):
                attach(target, rec.data)
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
            if self.hold:
                self._held = rec
                return out
        elif isinstance(rec, VllmEventRecord) and rec.kind == "server_args":
            self._v0_prev.clear()
            self._last = None
        out.append(rec)
        return out

    def flush(self) -> list[Record]:
        held, self._held = self._held, None
        return [held] if held is not None else []


def _same_process(dec: VllmDecodeRecord, spec: VllmEventRecord) -> bool:
    if dec.pid is not None and spec.pid is not None:
        return dec.pid == spec.pid
    return True


def attach(dec: VllmDecodeRecord, spec: dict[str, Any]) -> None:
    """Fill the decode record's SGLang-shaped acceptance fields from its interval's spec data."""
    dec.spec = spec
    acc, dra = spec.get("accepted"), spec.get("drafted")
    if isinstance(acc, int) and isinstance(dra, int) and dra > 0:
        dec.accept_rate = acc / dra
    if spec.get("layout") == "V0":
        mal = spec.get("mean_accept_len")
        dec.accept_len = mal if isinstance(mal, float) else None
        if dec.accept_len is not None:
            dec.accept_len_note = ("V0: emitted tokens per verify step, steps = drafted / k "
                                   "(differences of the cumulative counts)")
        return
    dec.accept_len, dec.accept_len_note = normalised_accept_len(spec)


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
    fresh parse except for what the spec line added)."""
    if a == b:
        return True
    if not (isinstance(a, VllmDecodeRecord) and isinstance(b, VllmDecodeRecord)):
        return False
    keep = ("spec", "accept_len", "accept_rate", "accept_len_note")
    return all(getattr(a, f) == getattr(b, f) for f in a.__dataclass_fields__ if f not in keep)


def sglang_equivalents(data: dict[str, Any]) -> dict[str, int]:
    """vLLM's config in SGLang's argument names where they mean the same: vLLM drafts chains of
    k tokens (`num_spec_tokens`), which SGLang calls steps k, topk 1, draft tokens k + 1."""
    k = data.get("speculative_num_tokens")
    if not data.get("speculative_algorithm") or not isinstance(k, int) or isinstance(k, bool) \
            or k <= 0:
        return {}
    return {"speculative_num_steps": k, "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": k + 1}
