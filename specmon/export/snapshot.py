"""HostState snapshots: one versioned JSON document ("specmon.snapshot/1", optionally gzip).

A snapshot holds what a person needs to look at a tuning session again later: hosts, server
profiles and fingerprints, every parsed decode/prefill record with its receive time, the last N
raw log lines per server, GPU samples (downsampled for long sessions, with the rule written
down), alerts, baselines, benchmark runs and the time range. Replay and the report read it back.

Layout of one server's `lines`: rows `[t, line, record]` in received order (see LINE_COLUMNS).
`t` is the receive time (Unix seconds), `line` the raw text (null for rows older than the last N
kept lines), `record` the parsed record (null for lines specmon does not use). A row is kept when
it has a record or is among the last N lines, so the time series is complete while the raw text
is bounded.

Written atomically (temp file in the same folder, fsync, rename, fsync of the folder): a crash or
kill -9 mid-write leaves the previous file intact. Secrets are redacted in every string by
default (see `specmon.redact`).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import os
import re
import secrets
import stat
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specmon import __version__
from specmon.analysis.fingerprint import Fingerprint, fingerprint_of
from specmon.jsonout import MAX_DEPTH, dumps, too_deep
from specmon.numfmt import MAX_INT, MAX_TIME  # (what a file's numbers and times may be)
from specmon.parse.gpu_sample import GpuSample
from specmon.parse.sglang import BatchRecord, EventRecord, Record, parse_line
from specmon.parse.vllm import VllmDecodeRecord, VllmEventRecord, checked_spec, same_line
from specmon.redact import redact_obj, redact_text
from specmon.session.runs import clean_probe
from specmon.session.state import MAX_LOG_LINES, MAX_PROBE_EVENTS, HostState, ServerState
from specmon.textsafe import cut, json_safe

SCHEMA_NAME = "specmon.snapshot"
SCHEMA_VERSION = 1
SCHEMA = f"{SCHEMA_NAME}/{SCHEMA_VERSION}"
LINE_COLUMNS = ["t", "line", "record"]
# how a server's row times were taken (ServerSnap.line_times): every row's own receive time
# (a record file's, and a live session's since it keeps each line's); a session snapshot of an
# older specmon had decode rows exact and the rest borrowed (still read)
LINE_TIMES_EXACT = "exact"
LINE_TIMES_SESSION = "decode lines exact; other lines take the time of the nearest earlier decode line"
LINE_TIMES = (LINE_TIMES_EXACT, LINE_TIMES_SESSION)
DEFAULT_GPU_MAX_PER_GPU = 2000
GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 1 << 20

# Bounds on what a file may make specmon hold: a 1 MB gzip can expand to gigabytes, a small JSON
# can declare 20k servers. Past a bound, reading stops with an error that names it.
MAX_SNAPSHOT_BYTES = 256 << 20  # decompressed snapshot JSON
MAX_RECORD_BYTES = 512 << 20  # decompressed record JSONL (streamed, never held whole)
MAX_RECORD_LINE = 16 << 20  # one record JSONL line (a 1 MiB log line JSON-escaped fits)
MAX_SERVERS = 256  # servers per snapshot
MAX_ROWS = 2_000_000  # line rows over all servers of a snapshot (and record lines exported)
MAX_GPU_SAMPLES = 2_000_000
MAX_ALERTS = 100_000
MAX_FLOAT = 1e15  # a record's float field past this is damage

REDACTION_RULE = ("values of env vars, arguments and keys whose names contain a secret word "
                  "(token, secret, password, passwd, pwd, credential, auth, cookie, apikey) or end "
                  "in _key/-key; credentials in URLs; bearer/basic auth; hf_, sk-, ghp_, "
                  "github_pat_, xox?-, AKIA, glpat- token shapes anywhere")


class SnapshotError(Exception):
    """A snapshot (or record file) that cannot be read: the message is one line for the user."""


# --- records <-> JSON (lossless, None fields omitted) ---------------------------------------------

_BATCH_FIELDS = {f.name: str(f.type) for f in dataclasses.fields(BatchRecord)}
_VLLM_FIELDS = {f.name: str(f.type) for f in dataclasses.fields(VllmDecodeRecord)}
_BATCH_KINDS = ("decode", "prefill")


def record_to_json(rec: Record) -> dict[str, Any]:
    """Compact, lossless JSON of a parsed record (`record_from_json` inverts it)."""
    if isinstance(rec, BatchRecord):
        out: dict[str, Any] = {}
        vllm = isinstance(rec, VllmDecodeRecord)
        if vllm:
            out["engine"] = "vllm"  # the vLLM line's own fields too (record_from_json)
        for name in _VLLM_FIELDS if vllm else _BATCH_FIELDS:
            if name == "extra":
                continue
            v = getattr(rec, name)
            if v is not None and v != []:
                out[name] = v
        if rec.extra:
            out["extra"] = dict(rec.extra)
        return out
    out = {"kind": rec.kind, "data": dict(rec.data)}
    if rec.timestamp is not None:
        out["timestamp"] = rec.timestamp
    if rec.time_of_day is not None:
        out["time_of_day"] = rec.time_of_day
    if isinstance(rec, VllmEventRecord):  # (the session reads a vLLM run's args only from one)
        out["engine"] = "vllm"
        if rec.process is not None:
            out["process"] = rec.process
        if rec.pid is not None:
            out["pid"] = rec.pid
        if rec.invalid:
            out["invalid"] = list(rec.invalid)
        if rec.date_inferred:
            out["date_inferred"] = True
    return out


def _typed(name: str, type_text: str, v: Any, where: str) -> Any:
    if v is None:
        return None
    if type_text.startswith("bool"):
        ok = isinstance(v, bool)
    elif type_text.startswith("int"):
        ok = isinstance(v, int) and not isinstance(v, bool)
        if ok and abs(v) >= MAX_INT:
            raise SnapshotError(f"{where}: field {name!r} is an integer of {len(str(v))} digits")
    elif type_text.startswith("float"):
        ok = (isinstance(v, int | float) and not isinstance(v, bool)
              and abs(v) <= MAX_FLOAT)  # compares ints of any size without overflow; NaN fails
        if not ok and isinstance(v, int | float) and not isinstance(v, bool):
            raise SnapshotError(f"{where}: field {name!r} is out of range ({_short(v)})")
        v = float(v) if ok else v
    elif type_text.startswith("str"):
        ok = isinstance(v, str)
    else:
        ok = True
    if not ok:
        raise SnapshotError(f"{where}: field {name!r} should be {_type_words(type_text)}, "
                            f"got {_got(v)}")
    return v


def _type_words(type_text: str) -> str:
    """A record field's annotation ("float | None") in words ("a number")."""
    for prefix, words in (("bool", "true or false"), ("int", "an integer"), ("float", "a number"),
                          ("str", "a string")):
        if type_text.startswith(prefix):
            return words
    return type_text


_KIND_WORDS: dict[type, str] = {str: "a string", int: "an integer", float: "a number",
                                bool: "true or false", list: "a list", dict: "an object"}


def _expected(types: type | tuple[type, ...]) -> str:
    """What `_want` asked for, in words: "a string", "a number", "a list or an object"."""
    ts = _as_tuple(types)
    if set(ts) == {int, float}:
        return "a number"
    return " or ".join(_KIND_WORDS.get(t, t.__name__) for t in ts)


def _got(v: Any) -> str:
    """A JSON value a field should not hold, in words with a short (redacted) view of it:
    "an integer (5)", "a string ('s')", "a list of 3 items", "true"."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return f"an integer ({_short(v)})"
    if isinstance(v, float):
        return f"a number ({_short(v)})"
    if isinstance(v, str):
        return f"a string ({_short(redact_text(v))})"
    if isinstance(v, list):
        return f"a list of {len(v)} item{'' if len(v) == 1 else 's'}"
    if isinstance(v, dict):
        return "an object"
    return type(v).__name__


def _short(v: Any) -> str:
    return cut(repr(v) if not isinstance(v, int) or v.bit_length() < 200
               else f"{v.bit_length()}-bit int", 40)


def _time(v: Any, where: str) -> float:
    """A time field: a finite number of Unix seconds within MAX_TIME; else a SnapshotError."""
    if v is None:
        raise SnapshotError(f"{where} missing")
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise SnapshotError(f"{where} is not a number")
    if not abs(v) <= MAX_TIME:  # NaN fails this too
        raise SnapshotError(f"{where} is out of range for Unix seconds ({_short(v)})")
    return float(v)


def record_from_json(d: Any, where: str = "record") -> Record:
    if not isinstance(d, dict) or not isinstance(d.get("kind"), str):
        raise SnapshotError(f"{where}: not a record object with a 'kind'")
    if d["kind"] in _BATCH_KINDS:
        kw: dict[str, Any] = {}
        vllm = d.get("engine") == "vllm"
        fields = _VLLM_FIELDS if vllm else _BATCH_FIELDS
        for name, v in d.items():
            if name == "engine" and vllm:
                continue
            if name == "spec" and vllm:
                if v is None:
                    continue
                if not isinstance(v, dict):
                    raise SnapshotError(f"{where}: 'spec' must be an object")
                _shallow(v, f"{where}: spec")
                try:
                    kw["spec"] = checked_spec(v)
                except ValueError as exc:
                    raise SnapshotError(f"{where}: {exc}") from None
                continue
            if name == "extra":
                if not isinstance(v, dict):
                    raise SnapshotError(f"{where}: 'extra' must be an object")
                kw["extra"] = dict(_shallow(v, f"{where}: extra"))
                continue
            if name == "invalid":
                if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                    raise SnapshotError(f"{where}: 'invalid' must be a list of field names")
                kw["invalid"] = list(v)
                continue
            t = fields.get(name)
            if t is None:
                raise SnapshotError(f"{where}: unknown record field {name!r}")
            kw[name] = _typed(name, t, v, where)
        cls = VllmDecodeRecord if vllm else BatchRecord
        rec = cls.blank(kw.pop("kind"))
        # a null stays the class's default, not a key of its own (a loaded snapshot's records
        # take the memory and the `to_json` of parsed ones)
        vars(rec).update((k, v) for k, v in kw.items() if v is not None or getattr(cls, k) is not None)
        return rec
    data = d.get("data", {})
    if not isinstance(data, dict):
        raise SnapshotError(f"{where}: event 'data' must be an object")
    _shallow(data, f"{where}: data")
    stamps = {"timestamp": _opt_str(d, "timestamp", where),
              "time_of_day": _opt_str(d, "time_of_day", where)}
    if d.get("engine") != "vllm":
        return EventRecord(kind=d["kind"], **stamps, data=dict(data))
    if d["kind"] == "spec":  # (the joiner reads its counts)
        try:
            data = checked_spec(data)
        except ValueError as exc:
            raise SnapshotError(f"{where}: {exc}") from None
    invalid = d.get("invalid", [])
    if not isinstance(invalid, list) or not all(isinstance(x, str) for x in invalid):
        raise SnapshotError(f"{where}: 'invalid' must be a list of field names")
    return VllmEventRecord(kind=d["kind"], timestamp=stamps["timestamp"],
                           time_of_day=stamps["time_of_day"], data=dict(data),
                           process=_opt_str(d, "process", where),
                           pid=_typed("pid", "int | None", d.get("pid"), where),
                           invalid=list(invalid),
                           date_inferred=_typed("date_inferred", "bool", d.get("date_inferred",
                                                                              False), where))


def _shallow(v: Any, where: str) -> Any:
    """`v`, a value read from a file, when it nests lists and objects at most MAX_DEPTH levels;
    else a SnapshotError naming where it goes deeper (every later walker of it recurses)."""
    path = too_deep(v)
    if path is not None:
        raise SnapshotError(f"{where}{path}: nested more than {MAX_DEPTH} levels deep "
                            "(specmon.jsonout.MAX_DEPTH)")
    return v


def _opt_str(d: Mapping[str, Any], key: str, where: str) -> str | None:
    v = d.get(key)
    if v is None or isinstance(v, str):
        return v
    raise SnapshotError(f"{where}: {key!r} should be a string, got {_got(v)}")


# --- the in-memory snapshot ---------------------------------------------------------------------


@dataclass(slots=True)
class Entry:
    t: float
    line: str | None
    record: Record | None
    skipped: int = 0  # bytes of the log not read right before this line (history after the head)


@dataclass
class ServerSnap:
    name: str
    role: str | None = None
    role_source: str | None = None  # "session" | "log" | "inferred: ..." (how the role is known)
    status: str = "unknown"
    path: str | None = None
    args: dict[str, Any] = field(default_factory=dict)
    fingerprint: dict[str, Any] | None = None  # launch args, versions, worker env (when known)
    exit_code: int | None = None
    traceback: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # in the source: lines, decode, prefill
    log_limit: int = MAX_LOG_LINES
    line_times: str = LINE_TIMES_EXACT
    entries: list[Entry] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)  # launcher and workers (GPU ownership)
    # host probes as they came: (receive time, of the running process?, probe)
    probes: list[tuple[float, bool, dict[str, Any]]] = field(default_factory=list)

    def decode_entries(self) -> list[Entry]:
        return [e for e in self.entries
                if isinstance(e.record, BatchRecord) and e.record.kind == "decode"]

    def seed_args(self, st: ServerState) -> None:
        """Give the server's state, before its lines are played, the args the snapshot kept,
        where they are known to belong (replay and report both start so: one rule).

        `args` are the live state's when the snapshot was written: its current run's. A live
        snapshot keeps only its last lines and may have lost that run's launch line: when no
        line kept is a launch line, the one run the lines make is the current run, and it
        starts with them. Otherwise each launch line says its own run's args, and a run before
        the first of them (a previous launch, cut) stays unknown: the current run's args are
        never lent to it."""
        if self.args and not any(getattr(e.record, "kind", None) == "server_args"
                                 for e in self.entries):
            st.args = dict(self.args)


@dataclass
class Snapshot:
    host: str = "unknown"
    hosts: list[str] = field(default_factory=list)
    created_at: float = field(default_factory=time.time)
    specmon_version: str = __version__
    source: dict[str, Any] = field(default_factory=dict)
    time_range: tuple[float, float] | None = None
    servers: list[ServerSnap] = field(default_factory=list)
    gpu_samples: list[GpuSample] = field(default_factory=list)
    gpu_downsampling: dict[str, Any] = field(default_factory=dict)
    alerts: list[dict[str, Any]] = field(default_factory=list)
    baselines: list[Any] = field(default_factory=list)
    benchmarks: list[Any] = field(default_factory=list)
    redaction: dict[str, Any] = field(default_factory=dict)

    def server(self, name: str) -> ServerSnap | None:
        return next((s for s in self.servers if s.name == name), None)

    def by_role(self, role: str) -> ServerSnap | None:
        return next((s for s in self.servers if s.role == role), None)

    def compute_time_range(self) -> tuple[float, float] | None:
        ts = [e.t for s in self.servers for e in s.entries]
        ts += [g.ts for g in self.gpu_samples if g.ts is not None]
        ts += [a["t"] for a in self.alerts if isinstance(a.get("t"), int | float)]
        return (min(ts), max(ts)) if ts else None


# --- document <-> snapshot ----------------------------------------------------------------------


def _jsonable(obj: Any) -> Any:
    """Plain JSON for whatever the session holds (dataclasses, objects with to_json, deques)."""
    if obj is None or isinstance(obj, bool | int | str):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if hasattr(obj, "to_json") and callable(obj.to_json):
        return _jsonable(obj.to_json())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, Iterable) and not isinstance(obj, bytes | bytearray):
        return [_jsonable(x) for x in obj]
    return str(obj)


def to_doc(snap: Snapshot) -> dict[str, Any]:
    tr = snap.time_range if snap.time_range is not None else snap.compute_time_range()
    return {
        "schema": SCHEMA,
        "specmon_version": snap.specmon_version,
        "created_at": snap.created_at,
        "host": snap.host,
        "hosts": list(snap.hosts or [snap.host]),
        "source": _jsonable(snap.source),
        "time_range": {"start": tr[0], "end": tr[1]} if tr else None,
        "redaction": _jsonable(snap.redaction),
        "servers": [
            {
                "name": s.name, "role": s.role, "role_source": s.role_source,
                "status": s.status, "path": s.path,
                "args": _jsonable(s.args), "fingerprint": _jsonable(s.fingerprint),
                "exit_code": s.exit_code, "traceback": list(s.traceback),
                "notices": list(s.notices), "counts": dict(s.counts), "log_limit": s.log_limit,
                "line_times": s.line_times, "pids": sorted(s.pids),
                "probes": [[t, running, _jsonable(p)] for t, running, p in s.probes],
                "line_columns": LINE_COLUMNS,
                "lines": [[e.t, e.line, record_to_json(e.record) if e.record is not None else None]
                          for e in s.entries],
                # [row index, bytes of the log not read before that row] (history after the
                # start-up lines): the run holding it is partial
                **({"gaps": gaps} if (gaps := [[i, e.skipped] for i, e in enumerate(s.entries)
                                               if e.skipped]) else {}),
            }
            for s in snap.servers
        ],
        "gpu": {"samples": [g.to_json() for g in snap.gpu_samples],
                "downsampling": _jsonable(snap.gpu_downsampling)},
        "alerts": _jsonable(snap.alerts),
        "baselines": _jsonable(snap.baselines),
        "benchmarks": _jsonable(snap.benchmarks),
    }


def _want(d: Mapping[str, Any], key: str, types: type | tuple[type, ...], where: str,
          default: Any = ...) -> Any:
    if key not in d or d[key] is None:
        if default is ...:
            raise SnapshotError(f"{where}: missing {key!r}")
        return default
    v = d[key]
    if not isinstance(v, types) or (isinstance(v, bool) and bool not in _as_tuple(types)):
        raise SnapshotError(f"{where}: {key!r} should be {_expected(types)}, got {_got(v)}")
    return v


def _as_tuple(t: type | tuple[type, ...]) -> tuple[type, ...]:
    return t if isinstance(t, tuple) else (t,)


_RE_VERSION = re.compile(r"[0-9]{1,9}")


def check_schema(doc: Any, where: str) -> None:
    if not isinstance(doc, dict):
        raise SnapshotError(f"{where}: not a specmon snapshot (top level is not a JSON object)")
    schema = doc.get("schema")
    if not isinstance(schema, str) or not schema.startswith(SCHEMA_NAME + "/"):
        raise SnapshotError(f"{where}: not a specmon snapshot (schema is "
                            f"{_short(redact_text(schema) if isinstance(schema, str) else schema)}"
                            f", expected {SCHEMA!r})")
    ver = schema[len(SCHEMA_NAME) + 1:]
    # ASCII digits only, and few: str.isdigit() takes '²' (int() refuses it) and '١' (int()
    # reads 1), and int() of 5000 digits passes Python's limit
    if _RE_VERSION.fullmatch(ver) is None:
        raise SnapshotError(f"{where}: unreadable schema version {_short(redact_text(schema))}")
    if int(ver) > SCHEMA_VERSION:
        raise SnapshotError(f"{where}: schema {schema} is newer than this specmon "
                            f"({__version__}) reads ({SCHEMA}); upgrade specmon to open it")
    if int(ver) < SCHEMA_VERSION:
        raise SnapshotError(f"{where}: schema {schema} is older than {SCHEMA} and not supported")


def _fingerprint(sd: dict[str, Any], w: str) -> dict[str, Any] | None:
    """The server's fingerprint object; its known fields must have their types (a string
    where the NCCL config files' map is crashed `report`), other keys (a probe's) are text."""
    d = _shallow(_want(sd, "fingerprint", dict, w, None), f"{w}.fingerprint")
    if d:
        known = set(Fingerprint.__dataclass_fields__)
        try:
            fingerprint_of({k: v for k, v in d.items() if k in known}, "fingerprint")
        except ValueError as exc:
            raise SnapshotError(f"{w}.{exc}") from None
    return d


def from_doc(doc: Any, where: str = "snapshot") -> Snapshot:
    """Validate and load a document; every problem is a one-line SnapshotError naming the spot."""
    check_schema(doc, where)
    num = (int, float)
    snap = Snapshot(
        host=_want(doc, "host", str, where, "unknown"),
        hosts=[str(h) for h in _want(doc, "hosts", list, where, [])],
        created_at=_time(_want(doc, "created_at", num, where, 0.0), f"{where}: created_at"),
        specmon_version=_want(doc, "specmon_version", str, where, "unknown"),
        source=_shallow(_want(doc, "source", dict, where, {}), f"{where}: source"),
        redaction=_shallow(_want(doc, "redaction", dict, where, {}), f"{where}: redaction"),
        alerts=[],
        baselines=_shallow(_want(doc, "baselines", list, where, []), f"{where}: baselines"),
        benchmarks=_shallow(_want(doc, "benchmarks", list, where, []), f"{where}: benchmarks"),
    )
    tr = _want(doc, "time_range", dict, where, None)
    if tr is not None:
        start = _time(_want(tr, "start", num, f"{where}: time_range"), f"{where}: time_range.start")
        end = _time(_want(tr, "end", num, f"{where}: time_range"), f"{where}: time_range.end")
        if end < start:
            raise SnapshotError(f"{where}: time_range ends before it starts")
        snap.time_range = (start, end)
    servers = _want(doc, "servers", list, where)
    if len(servers) > MAX_SERVERS:
        raise SnapshotError(f"{where}: {len(servers):,} servers; a snapshot may hold at most "
                            f"{MAX_SERVERS} (specmon.export.snapshot.MAX_SERVERS)")
    n_rows = 0
    for i, sd in enumerate(servers):
        w = f"{where}: servers[{i}]"
        if not isinstance(sd, dict):
            raise SnapshotError(f"{w}: not an object")
        s = ServerSnap(
            name=_want(sd, "name", str, w), role=_want(sd, "role", str, w, None),
            role_source=_want(sd, "role_source", str, w, None),
            status=_want(sd, "status", str, w, "unknown"), path=_want(sd, "path", str, w, None),
            args=_shallow(_want(sd, "args", dict, w, {}), f"{w}.args"),
            fingerprint=_fingerprint(sd, w),
            exit_code=_small(_want(sd, "exit_code", int, w, None), f"{w}: exit_code"),
            traceback=[str(x) for x in _want(sd, "traceback", list, w, [])],
            notices=[str(x) for x in _want(sd, "notices", list, w, [])],
            counts={str(k): int(v) for k, v in _want(sd, "counts", dict, w, {}).items()
                    if isinstance(v, int) and not isinstance(v, bool) and abs(v) < MAX_INT},
            log_limit=_log_limit(_want(sd, "log_limit", int, w, MAX_LOG_LINES), w),
            line_times=_line_times(_want(sd, "line_times", str, w, LINE_TIMES_EXACT), w),
            pids=_pids(_want(sd, "pids", list, w, []), f"{w}: pids"),
            probes=_probes(_want(sd, "probes", list, w, []), f"{w}: probes"),
        )
        cols = _want(sd, "line_columns", list, w, LINE_COLUMNS)
        if cols != LINE_COLUMNS:
            raise SnapshotError(f"{w}: line_columns {cols} not supported (expected {LINE_COLUMNS})")
        rows = _want(sd, "lines", list, w, [])
        n_rows += len(rows)
        if n_rows > MAX_ROWS:
            raise SnapshotError(f"{w}: more than {MAX_ROWS:,} line rows in this snapshot "
                                "(specmon.export.snapshot.MAX_ROWS)")
        for j, row in enumerate(rows):
            wr = f"{w}.lines[{j}]"
            if not isinstance(row, list) or len(row) != 3:
                raise SnapshotError(f"{wr}: expected [t, line, record]")
            t, line, rec = row
            t = _time(t, f"{wr}: time")
            if line is not None and not isinstance(line, str):
                raise SnapshotError(f"{wr}: line is not a string")
            s.entries.append(Entry(float(t), line,
                                   record_from_json(rec, wr) if rec is not None else None))
        for j, gap in enumerate(_want(sd, "gaps", list, w, [])[:MAX_ROWS]):
            wg = f"{w}.gaps[{j}]"
            if not (isinstance(gap, list) and len(gap) == 2 and isinstance(gap[0], int)
                    and not isinstance(gap[0], bool) and 0 <= gap[0] < len(s.entries)):
                raise SnapshotError(f"{wg}: expected [row index, bytes] of a row of its lines")
            s.entries[gap[0]].skipped = _skipped(gap[1], f"{wg}: bytes")
        snap.servers.append(s)
    gpu = _want(doc, "gpu", dict, where, {})
    samples = _want(gpu, "samples", list, f"{where}: gpu", [])
    if len(samples) > MAX_GPU_SAMPLES:
        raise SnapshotError(f"{where}: {len(samples):,} GPU samples; at most {MAX_GPU_SAMPLES:,} "
                            "(specmon.export.snapshot.MAX_GPU_SAMPLES)")
    for j, g in enumerate(samples):
        # (a value out of range, MAX_TIME for ts and MAX_INT for the rest, is None: N/A, as
        # when `export` read it from a record file)
        snap.gpu_samples.append(_gpu_sample(g, None, f"{where}: gpu.samples[{j}]"))
    snap.gpu_downsampling = _shallow(_want(gpu, "downsampling", dict, f"{where}: gpu", {}),
                                     f"{where}: gpu.downsampling")
    alerts = _want(doc, "alerts", list, where, [])
    if len(alerts) > MAX_ALERTS:
        raise SnapshotError(f"{where}: {len(alerts):,} alerts; at most {MAX_ALERTS:,} "
                            "(specmon.export.snapshot.MAX_ALERTS)")
    for j, a in enumerate(alerts):
        if not isinstance(a, dict):
            raise SnapshotError(f"{where}: alerts[{j}]: not an object")
        _shallow(a, f"{where}: alerts[{j}]")
        if a.get("t") is not None:
            _time(a["t"], f"{where}: alerts[{j}].t")
        snap.alerts.append(a)
    return snap


def _gpu_sample(g: Any, ts: float | None, where: str) -> GpuSample:
    """One GPU sample in agent JSON, from a snapshot or a record file: the one reader
    (`GpuSample.from_agent_json`: a value ill-typed or out of range is None)."""
    try:
        return GpuSample.from_agent_json(g, ts=ts)
    except (ValueError, TypeError) as exc:
        raise SnapshotError(f"{where}: {exc}") from None


def _pids(v: list[Any], where: str) -> list[int]:
    if len(v) > 65_536 or not all(isinstance(p, int) and not isinstance(p, bool)
                                  and 0 < p < 2 ** 32 for p in v):
        raise SnapshotError(f"{where}: expected at most 65536 process ids (positive integers)")
    return [int(p) for p in v]


def _log_limit(v: int, where: str) -> int:
    if not 0 <= v < MAX_INT:
        raise SnapshotError(f"{where}: 'log_limit' should be a non-negative integer, "
                            f"got {_short(v)}")
    return v


def _line_times(v: str, where: str) -> str:
    if v not in LINE_TIMES:
        raise SnapshotError(f"{where}: 'line_times' should be {LINE_TIMES_EXACT!r} (a record "
                            f"file's) or {LINE_TIMES_SESSION!r} (a live session's), got {_got(v)}")
    return v


def _small(v: Any, where: str) -> Any:
    if isinstance(v, int) and abs(v) >= MAX_INT:
        raise SnapshotError(f"{where} is out of range ({_short(v)})")
    return v


# --- writing and reading files ------------------------------------------------------------------


def encode(snap: Snapshot, *, redact: bool = True, compress: bool = False) -> bytes:
    doc = to_doc(snap)
    if redact:
        doc = redact_obj(doc)
        doc["redaction"] = {"enabled": True, "rule": REDACTION_RULE}
    else:
        doc["redaction"] = {"enabled": False}
    # json_safe: `zcat` of a snapshot sends no C1 control or bidi override to a terminal
    data = json_safe(dumps(doc, ensure_ascii=False, separators=(",", ":"))).encode()
    if compress:
        data = gzip.compress(data, compresslevel=6, mtime=0)
    return data


def _write_chunks(f: Any, data: bytes) -> None:
    """Written in pieces so a kill can land mid-file (the atomicity test relies on that)."""
    for i in range(0, len(data), _CHUNK):
        f.write(data[i:i + _CHUNK])


_RE_TMP = re.compile(r"\.(.+\.(?:json|gz|md|html|svg|jsonl|txt))\.tmp-(\d+)(?:-[0-9a-f]{8})?\Z")
# a temp file is always a new file of ours: never an existing name, never through a symlink
# another user planted under the name we would pick
_TMP_FLAGS = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
              | getattr(os, "O_CLOEXEC", 0))


def open_temp(folder: Path, name: str) -> tuple[Path, int]:
    """A new temp file `.NAME.tmp-PID` (or `.NAME.tmp-PID-RANDOM` when that name is taken)
    in `folder`, created with O_EXCL | O_NOFOLLOW: (its path, an open descriptor)."""
    base = f".{name}.tmp-{os.getpid()}"
    for attempt in range(16):
        tmp = folder / (base if attempt == 0 else f"{base}-{secrets.token_hex(4)}")
        try:
            return tmp, os.open(tmp, _TMP_FLAGS, 0o666)
        except FileExistsError:
            continue
    raise FileExistsError(f"cannot create a temp file for {name} in {folder}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


def clean_stale_temps(folder: Path) -> list[Path]:
    """Remove `.NAME.tmp-PID` files that a killed writer (PID no longer alive) left in
    `folder`; only names this module writes, never a live writer's file. Returns what went."""
    removed: list[Path] = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        m = _RE_TMP.match(name)
        if m is None:
            continue
        pid = int(m.group(2))
        if pid == os.getpid() or _pid_alive(pid):
            continue
        try:  # only a plain file of this user's: never another user's, nor through a link
            st = os.lstat(folder / name)
            if st.st_uid != os.getuid() or not stat.S_ISREG(st.st_mode):
                continue
            (folder / name).unlink()
            removed.append(folder / name)
        except OSError:
            pass
    return removed


class SymlinkOutputError(OSError):
    """An output path that is a symbolic link, refused: another user may have planted it where
    the file goes, and replacing it would silently drop what the link pointed at."""


_FORCE_HINT = "; name the file itself, or --force"


def _symlink_text(path: str | Path) -> str | None:
    try:
        target = os.readlink(path)
    except OSError:  # not a link (EINVAL), or not there
        return None
    return f"{path} is a symbolic link (to {target}): not writing through it"


def symlink_refusal(path: str | Path, what: str = "") -> str | None:
    """The one line a command refuses to write at `path` with when it is a symbolic link
    (`what` names the option, "--out "); None when it is not one. `record --out`'s words."""
    text = _symlink_text(path)
    return None if text is None else f"{what}{text}{_FORCE_HINT}"


def atomic_write_bytes(path: Path, data: bytes, *, force: bool = False) -> Path:
    """Replace `path` with `data` so that readers see the old file or the new one, never a mix.
    Temp files of writers killed before their rename are removed first. A symbolic link at
    `path` is refused (`SymlinkOutputError`, nothing written) unless `force`, which replaces
    the link itself: the write never goes through it."""
    path = Path(path)
    if not force:
        refusal = _symlink_text(path)
        if refusal is not None:
            raise SymlinkOutputError(refusal)
    folder = path.parent if str(path.parent) else Path(".")
    clean_stale_temps(folder)
    tmp, fd = open_temp(folder, path.name)
    try:
        with open(fd, "wb") as f:
            _write_chunks(f, data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    try:
        dfd = os.open(folder, os.O_RDONLY)
    except OSError:
        return path
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)
    return path


def write_snapshot(snap: Snapshot, path: str | Path, *, redact: bool = True,
                   compress: bool | None = None, force: bool = False) -> Path:
    """Atomic write; gzip when asked or when the name ends in .gz. Redaction is on by default.
    A symbolic link at `path` is refused unless `force` (`atomic_write_bytes`)."""
    p = Path(path)
    return atomic_write_bytes(p, encode(snap, redact=redact, compress=gzip_for(p, compress)),
                              force=force)


def gzip_for(path: Path, compress: bool | None) -> bool:
    """Whether a snapshot written to `path` is gzipped: as asked, else by its `.gz` name."""
    return path.name.endswith(".gz") if compress is None else compress


def read_snapshot(path: str | Path) -> Snapshot:
    p = Path(path)
    try:
        with open(p, "rb") as f:
            raw = f.read(MAX_SNAPSHOT_BYTES + 1)
    except OSError as exc:
        raise SnapshotError(f"{p}: cannot read ({exc.strerror or exc})") from None
    if len(raw) > MAX_SNAPSHOT_BYTES:
        raise SnapshotError(f"{p}: larger than {MAX_SNAPSHOT_BYTES >> 20} MiB, the limit for a "
                            "snapshot (specmon.export.snapshot.MAX_SNAPSHOT_BYTES)")
    return decode(raw, str(p))


def _gunzip_bounded(raw: bytes, limit: int, where: str) -> bytes:
    """gzip.decompress that stops past `limit` output bytes (a bomb costs `limit`, no more)."""
    out: list[bytes] = []
    size = 0
    data = raw
    try:
        while data:
            d = zlib.decompressobj(wbits=31)
            while True:
                chunk = d.decompress(data, _CHUNK)
                size += len(chunk)
                if size > limit:
                    raise SnapshotError(f"{where}: decompresses to more than {limit >> 20} MiB, "
                                        "the limit for a snapshot "
                                        "(specmon.export.snapshot.MAX_SNAPSHOT_BYTES)")
                out.append(chunk)
                data = d.unconsumed_tail
                if d.eof or not data:
                    break
            if not d.eof:
                raise EOFError("compressed file ended before the end-of-stream marker")
            data = d.unused_data  # a next gzip member, as gzip.decompress reads it
            if data and not data.startswith(GZIP_MAGIC):
                break  # trailing garbage after the member: gzip ignores zero padding too
    except (OSError, EOFError, zlib.error) as exc:
        raise SnapshotError(f"{where}: corrupt gzip data ({exc})") from None
    return b"".join(out)


def _no_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def decode(raw: bytes, where: str = "snapshot") -> Snapshot:
    if raw.startswith(GZIP_MAGIC):
        raw = _gunzip_bounded(raw, MAX_SNAPSHOT_BYTES, where)
    elif len(raw) > MAX_SNAPSHOT_BYTES:
        raise SnapshotError(f"{where}: larger than {MAX_SNAPSHOT_BYTES >> 20} MiB, the limit for "
                            "a snapshot (specmon.export.snapshot.MAX_SNAPSHOT_BYTES)")
    if not raw.strip():
        raise SnapshotError(f"{where}: empty file, not a specmon snapshot")
    try:
        doc = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError:
        raise SnapshotError(f"{where}: not a specmon snapshot (not UTF-8 text)") from None
    except json.JSONDecodeError as exc:
        raise SnapshotError(f"{where}: not a valid snapshot: JSON error at line {exc.lineno} "
                            f"column {exc.colno} ({exc.msg}); the file is damaged or truncated"
                            ) from None
    except RecursionError:
        raise SnapshotError(f"{where}: not a valid snapshot: nested too deeply") from None
    except ValueError as exc:  # NaN/Infinity constants, ints past Python's 4300-digit limit
        raise SnapshotError(f"{where}: not a valid snapshot: {str(exc).split(';')[0]}") from None
    return from_doc(doc, where)


# --- building a snapshot ------------------------------------------------------------------------


def downsample_gpu(samples: list[GpuSample], max_per_gpu: int = DEFAULT_GPU_MAX_PER_GPU
                   ) -> tuple[list[GpuSample], dict[str, Any]]:
    """At most ~2 x max_per_gpu samples per GPU, keeping clock dips; returns the rule applied."""
    by_gpu: dict[int | None, list[GpuSample]] = {}
    for g in samples:
        by_gpu.setdefault(g.index, []).append(g)
    rule: dict[str, Any] = {"input_samples": len(samples), "max_per_gpu": max_per_gpu}
    if all(len(v) <= max_per_gpu for v in by_gpu.values()):
        rule.update(applied=False, rule="none: every sample kept", kept_samples=len(samples))
        return list(samples), rule
    kept: list[GpuSample] = []
    bucket_s: dict[str, float] = {}
    for idx, gs in by_gpu.items():
        if len(gs) <= max_per_gpu:
            kept.extend(gs)
            continue
        ts = [g.ts for g in gs if g.ts is not None]
        if not ts or max(ts) <= min(ts):
            step = math.ceil(len(gs) / max_per_gpu)
            kept.extend(gs[::step])
            continue
        lo, hi = min(ts), max(ts)
        width = (hi - lo) / max_per_gpu
        bucket_s[str(idx)] = width
        buckets: dict[int, list[GpuSample]] = {}
        for g in gs:
            b = min(int(((g.ts if g.ts is not None else lo) - lo) / width), max_per_gpu - 1)
            buckets.setdefault(b, []).append(g)
        for b in sorted(buckets):
            group = buckets[b]
            first = group[0]
            kept.append(first)
            clocked = [g for g in group if g.clock_sm is not None]
            low = min(clocked, key=lambda g: g.clock_sm or 0) if clocked else first
            if low is not first:
                kept.append(low)
    kept.sort(key=lambda g: (g.ts if g.ts is not None else -math.inf,
                             g.index if g.index is not None else -1))
    rule.update(applied=True, kept_samples=len(kept), bucket_s=bucket_s,
                rule=f"per GPU with more than {max_per_gpu} samples: time range split into "
                     f"{max_per_gpu} equal buckets; kept the first sample of each bucket and "
                     "the one with the lowest SM clock (so throttling dips survive)")
    return kept, rule


def _probes(rows: list[Any], where: str) -> list[tuple[float, bool, dict[str, Any]]]:
    """[[time, running, probe], ...]: at most MAX_PROBE_EVENTS, each checked."""
    if len(rows) > MAX_PROBE_EVENTS:
        raise SnapshotError(f"{where}: {len(rows):,} probes; at most {MAX_PROBE_EVENTS} "
                            "(specmon.session.state.MAX_PROBE_EVENTS)")
    out = []
    for j, row in enumerate(rows):
        if not (isinstance(row, list) and len(row) == 3 and isinstance(row[1], bool)):
            raise SnapshotError(f"{where}[{j}]: expected [time, running, probe]")
        probe = clean_probe(_shallow(row[2], f"{where}[{j}]"))
        if probe is None:
            raise SnapshotError(f"{where}[{j}]: the probe is not an object")
        out.append((float(_time(row[0], f"{where}[{j}]: time")), row[1], probe))
    return out


def _server_snap_from_state(state: ServerState, entries: list[Entry], log_limit: int,
                            line_times: str, counts: dict[str, int], role_source: str) -> ServerSnap:
    role = state.role
    if role is None and state.decode_total:
        # no server_args line and no declared role: say what the decode lines show, and how
        role = "speculative" if any(
            isinstance(e.record, BatchRecord) and e.record.accept_len is not None
            for e in entries) else "baseline"
        role_source = "inferred: decode lines " + (
            "carry accept len" if role == "speculative" else "carry no accept len")
    return ServerSnap(
        name=state.name, role=role, role_source=role_source if role else None,
        status=state.status, path=state.path,
        args=dict(state.args), fingerprint=_jsonable(getattr(state, "fingerprint", None)),
        exit_code=state.exit_code, traceback=list(state.traceback), notices=list(state.notices),
        counts=counts, log_limit=log_limit, line_times=line_times, entries=entries,
        pids=sorted(state.pids), probes=list(state.probe_events),
    )


def _session_entries(state: ServerState, log_limit: int) -> list[Entry]:
    """Rebuild one server's rows from live state.

    The session keeps decode records with times (a long suffix) and raw lines with their
    receive times (a shorter suffix). Decode lines in the raw suffix are matched back to their
    records from the end (a joined vLLM record is the one the session counted); the records
    before the raw suffix come first, without text.
    """
    points = list(state.decode)
    first = state.decode_total - len(points)  # the index of points[0] among all decode lines
    gaps = state.gap_points
    n = min(len(state.log), log_limit) if log_limit > 0 else 0
    log = list(state.log)[len(state.log) - n:]
    times = list(state.log_times)[len(state.log_times) - n:]  # (in step with `log`)
    j = len(points) - 1
    rows: list[tuple[float, str, Record | None, int]] = []
    for text, t in zip(reversed(log), reversed(times), strict=True):
        rec = parse_line(text)
        if (isinstance(rec, BatchRecord) and rec.kind == "decode" and j >= 0
                and same_line(points[j].rec, rec)):
            rows.append((_received(points[j]), text, points[j].rec, gaps.get(first + j, 0)))
            j -= 1
        else:
            rows.append((t, text, rec, 0))
    rows.reverse()
    entries = [Entry(_received(p), None, p.rec, gaps.get(first + k, 0))
               for k, p in enumerate(points[: j + 1])]
    entries.extend(Entry(t, text, rec, gap) for t, text, rec, gap in rows)
    return entries


def _received(p: Any) -> float:
    """A snapshot keeps receive times (replay derives log times from the lines again)."""
    return p.received if p.received is not None else p.t


def snapshot_from_session(session: HostState, *, log_lines: int = MAX_LOG_LINES,
                          gpu_max_per_gpu: int = DEFAULT_GPU_MAX_PER_GPU,
                          source: Mapping[str, Any] | None = None) -> Snapshot:
    """What the live session holds now (bounded by its ring buffers) as a snapshot."""
    servers = []
    for state in session.servers.values():
        entries = _session_entries(state, log_lines)
        counts = {"lines": state.lines_total, "decode": state.decode_total,
                  "prefill": state.prefill_total}
        servers.append(_server_snap_from_state(state, entries, log_lines, LINE_TIMES_EXACT,
                                               counts, "session"))
    history = [g for dq in session.gpu_history.values() for g in dq]
    if not history:
        history = list(session.gpus)
    history.sort(key=lambda g: (g.ts if g.ts is not None else -math.inf,
                                g.index if g.index is not None else -1))
    gpus, rule = downsample_gpu(history, gpu_max_per_gpu)
    snap = Snapshot(
        host=session.host, hosts=[session.host],
        source=dict(source or {"kind": "session", "started_at": session.started_at}),
        servers=servers, gpu_samples=gpus, gpu_downsampling=rule,
        alerts=[a if isinstance(a, dict) else _jsonable(a)
                for a in (getattr(session, "alerts", None) or [])],
        baselines=list(_jsonable(getattr(session, "baselines", None) or [])),
        benchmarks=list(_jsonable(getattr(session, "benchmarks", None) or [])),
    )
    snap.time_range = snap.compute_time_range()
    return snap


def file_label(host: str) -> str:
    """The host's part of an output file's name (snapshots, screenshots): redacted (a file
    name is a way out too), plain characters only, at most 64 of them."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", redact_text(host))[:64].strip("._") or "host"


def snapshot_path(host: str, folder: str | Path, *, compress: bool = True,
                  now: float | None = None) -> Path:
    """`folder/specmon-HOST-YYYYmmdd-HHMMSS.json[.gz]` (local time); creates the folder."""
    d = Path(folder).expanduser()
    d.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if now is None else now))
    return d / (f"specmon-{file_label(host)}-{stamp}.json" + (".gz" if compress else ""))


def export_session(session: HostState, folder: str | Path, *, compress: bool = True,
                   now: float | None = None) -> Path:
    """The UI's export key: snapshot of `session` into `folder`, named by host and local time.

    Must run where the session is mutated (the UI loop). A UI that wants to keep painting can
    call `snapshot_from_session` there and `write_snapshot` in a thread (encoding + gzip of two
    full 20k-point servers takes about a second).
    """
    path = snapshot_path(session.host, folder, compress=compress, now=now)
    return write_snapshot(snapshot_from_session(session), path, compress=compress)


# --- record files (`specmon record --out FILE.jsonl`) -------------------------------------------


@dataclass
class RecordLine:
    server: str
    path: str | None
    offset: int | None
    line: str
    received_at: float
    skipped: int = 0
    host: str | None = None  # the host `record` tailed it on


@dataclass(frozen=True)
class RecordEvent:
    """A feed event `record` wrote between the lines: a host probe of a server ("probe":
    (running, probe)), its process exit ("exit": the code or None) or its pids ("pids")."""

    server: str
    kind: str
    payload: Any
    received_at: float


RECORD_EVENTS = ("probe", "exit", "pids")


def iter_record_file(path: str | Path, on_torn: Callable[[int], None] | None = None,
                     on_damage: Callable[[str], None] | None = None
                     ) -> Iterator[RecordLine | RecordEvent | tuple[float, list[GpuSample]]]:
    """Lines of a record file: {"server","path","offset","line","received_at","record"}.

    Also accepts `{"gpus": [sample, ...], "received_at": t}` rows (GPU samples in agent JSON)
    and event rows `{"probe": {...}, "running": bool | "exit": code | null | "pids": [...],
    "server", "received_at"}` (`RecordEvent`).
    "\n", "\r\n" and a lone "\r" (CR-only line endings) each end a row. A final row without
    its line end that does not parse but starts like one (`{`: the recorder was killed
    mid-write) is torn: skipped, and `on_torn` is called with its line number; any other bad
    row is an error naming the file and line number. A read error part-way (a truncated or
    corrupt .gz) ends the rows there: `on_damage` gets its one line (without it: SnapshotError).
    """
    p = Path(path)
    for n, bline, ended in _record_lines(p, on_damage):
        if not bline.strip():
            continue
        where = f"{p}:{n}"
        try:
            obj = json.loads(bline, parse_constant=_no_constant)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            # (JSONDecodeError is a ValueError; RecursionError: nested past the parser's depth)
            if not ended and bline.lstrip().startswith(b"{"):
                if on_torn is not None:
                    on_torn(n)
                return  # truncated tail of a killed recorder
            why = ("nested too deeply" if isinstance(exc, RecursionError)
                   else str(exc).split(";")[0])
            raise SnapshotError(f"{where}: not a JSON record line ({why})") from None
        if not isinstance(obj, dict):
            raise SnapshotError(f"{where}: not a JSON object")
        t = _time(obj.get("received_at"), f"{where}: 'received_at'")
        if "gpus" in obj:
            gs = obj["gpus"]
            if not isinstance(gs, list):
                raise SnapshotError(f"{where}: 'gpus' must be a list")
            yield float(t), [_gpu_sample(g, t, f"{where}: gpus[{k}]") for k, g in enumerate(gs)]
            continue
        server, text = obj.get("server"), obj.get("line")
        if not isinstance(server, str) or not server:
            raise SnapshotError(f"{where}: 'server' missing or not a string")
        kind = next((k for k in RECORD_EVENTS if k in obj), None)
        if kind is not None and "line" not in obj:
            yield RecordEvent(server, kind, _record_event(kind, obj, where), float(t))
            continue
        if not isinstance(text, str):
            raise SnapshotError(f"{where}: 'line' missing or not a string")
        fpath, off = obj.get("path"), obj.get("offset")
        if fpath is not None and not isinstance(fpath, str):
            raise SnapshotError(f"{where}: 'path' is not a string")
        if off is not None and (isinstance(off, bool) or not isinstance(off, int)):
            raise SnapshotError(f"{where}: 'offset' is not an integer")
        skipped = _skipped(obj.get("skipped", 0), f"{where}: 'skipped'")
        host = obj.get("host")
        if host is not None and (not isinstance(host, str) or not 0 < len(host) <= 255):
            raise SnapshotError(f"{where}: 'host' is not a host name ({_short(host)})")
        yield RecordLine(server, fpath, off, text, float(t), skipped, host)


def _skipped(v: Any, where: str) -> int:
    """Bytes of a log not read before a line: a count (0 when absent)."""
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < MAX_INT:
        raise SnapshotError(f"{where} is not a byte count ({_short(v)})")
    return v


def _record_event(kind: str, obj: dict[str, Any], where: str) -> Any:
    """An event row's payload, checked."""
    v = obj[kind]
    if kind == "probe":
        probe = clean_probe(_shallow(v, f"{where}: probe"))
        if probe is None or not isinstance(obj.get("running"), bool):
            raise SnapshotError(f"{where}: a probe row needs a 'probe' object and 'running'")
        return obj["running"], probe
    if kind == "exit":
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise SnapshotError(f"{where}: 'exit' is not an integer or null ({_short(v)})")
        return _small(v, f"{where}: exit")
    if not isinstance(v, list):
        raise SnapshotError(f"{where}: 'pids' is not a list")
    return _pids(v, f"{where}: pids")


_EOL = re.compile(rb"\r\n|\r|\n")


def _record_lines(p: Path, on_damage: Callable[[str], None] | None = None
                  ) -> Iterator[tuple[int, bytes, bool]]:
    """(line number, line without its end, did it have an end) of a record file, plain or
    gzip, streamed: "\n", "\r\n" and a lone "\r" each end a line. Memory is one line and one
    read; a bomb stops at MAX_RECORD_BYTES decompressed or MAX_RECORD_LINE a line."""
    try:
        raw = open(p, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise SnapshotError(f"{p}: cannot read ({exc.strerror or exc})") from None
    with raw:
        fh: Any = raw
        n = 0
        try:
            if raw.read(2) == GZIP_MAGIC:
                raw.seek(0)
                fh = gzip.GzipFile(fileobj=raw)
            else:
                raw.seek(0)
            total = 0
            head = b""  # the start of a line whose end is not read yet
            while True:
                chunk = fh.read1(_CHUNK)  # (one inflate step: damage loses no row before it)
                total += len(chunk)
                if total > MAX_RECORD_BYTES:
                    raise SnapshotError(f"{p}: more than {MAX_RECORD_BYTES >> 20} MiB of records "
                                        "(decompressed), the limit for a record file "
                                        "(specmon.export.snapshot.MAX_RECORD_BYTES)")
                eof = not chunk
                buf = head + chunk if head else chunk
                if b"\r" not in buf:  # the usual file: split in C
                    lines = buf.split(b"\n")
                    head = lines.pop()
                    for line in lines:
                        n += 1
                        _check_line_length(p, n, len(line))
                        yield n, line, True
                else:
                    # a CR that ends the read may be the first half of a CRLF: wait for the next
                    stop = len(buf) - 1 if not eof and buf.endswith(b"\r") else len(buf)
                    begin = 0
                    for m in _EOL.finditer(buf, max(0, len(head) - 1), stop):
                        n += 1
                        _check_line_length(p, n, m.start() - begin)
                        yield n, buf[begin:m.start()], True
                        begin = m.end()
                    head = buf[begin:]
                _check_line_length(p, n + 1, len(head) - (1 if head.endswith(b"\r") else 0))
                if eof:
                    if head:
                        n += 1
                        yield n, head, False
                    return
        except (OSError, EOFError, zlib.error) as exc:
            why = f"{p}: read error after {n:,} lines ({exc or type(exc).__name__})"
            if on_damage is None:
                raise SnapshotError(why) from None
            on_damage(why)  # the rows before it stand


def _check_line_length(p: Path, n: int, size: int) -> None:
    if size > MAX_RECORD_LINE:
        raise SnapshotError(f"{p}:{n}: line longer than {MAX_RECORD_LINE >> 20} MiB, "
                            "the limit for a record line (specmon.export.snapshot.MAX_RECORD_LINE)")


def _apply_record_event(state: ServerState, ev: RecordEvent) -> None:
    """A recorded feed event on the server's state, as the live session applied it."""
    if ev.kind == "probe":
        running, probe = ev.payload
        state.set_probe(probe, running, ev.received_at)
    elif ev.kind == "exit":
        state.process_exited(ev.payload)
    else:
        state.pids = set(ev.payload)


def snapshot_from_record(path: str | Path, *, host: str | None = None,
                         log_lines: int = MAX_LOG_LINES,
                         gpu_max_per_gpu: int = DEFAULT_GPU_MAX_PER_GPU,
                         warn: Callable[[str], None] | None = None) -> Snapshot:
    """A record file as a snapshot: every line re-parsed with this specmon's parser (the raw line
    is the truth; the file's `record` field may come from an older parser or be null).

    Lines seen twice (same server, file, byte offset and text: `record --append` re-reading its
    history) are kept once. A torn last row (the recorder was killed mid-write) is left out and
    `warn` gets one line saying so (the snapshot's source keeps its line number); a file with no
    row to show (empty, blank, or only a torn row) is a SnapshotError.
    """
    p = Path(path)
    per_server: dict[str, list[RecordLine | RecordEvent]] = {}
    seen: set[tuple[str, str | None, int, str]] = set()
    dups = 0
    gpus: list[GpuSample] = []
    rows = 0
    read = 0  # rows read whole: log lines and GPU rows, duplicates too
    torn: list[int] = []
    damage: list[str] = []
    hosts: set[str | None] = set()  # the hosts the lines were tailed on (`record` names them)
    for item in iter_record_file(p, on_torn=torn.append, on_damage=damage.append):
        read += 1
        if isinstance(item, RecordLine) and len(hosts) < 2:
            hosts.add(item.host)
        if isinstance(item, tuple):
            gpus.extend(item[1])
            if len(gpus) > MAX_GPU_SAMPLES * 4:
                raise SnapshotError(f"{path}: more than {MAX_GPU_SAMPLES * 4:,} GPU samples, the "
                                    "limit for a record file (specmon.export.snapshot."
                                    "MAX_GPU_SAMPLES x 4, before downsampling)")
            continue
        rows += 1  # a line or an event row (pids, probe, exit): both count to the limit
        if rows > MAX_ROWS:
            raise SnapshotError(f"{path}: more than {MAX_ROWS:,} record lines, the limit for one "
                                "snapshot (specmon.export.snapshot.MAX_ROWS)")
        if item.server not in per_server and len(per_server) >= MAX_SERVERS:
            raise SnapshotError(f"{path}: more than {MAX_SERVERS} servers, the limit for one "
                                "snapshot (specmon.export.snapshot.MAX_SERVERS)")
        if isinstance(item, RecordLine) and item.offset is not None:
            key = (item.server, item.path, item.offset, item.line)
            if key in seen:
                dups += 1
                continue
            seen.add(key)
        per_server.setdefault(item.server, []).append(item)
    if not per_server and not gpus:
        if torn and not read:
            why = f"its only row (line {torn[0]}) is torn"
        elif read:
            why = (f"{read:,} row{'' if read == 1 else 's'} but no log line or GPU sample in them"
                   + (f"; the last row (line {torn[0]}) is torn" if torn else ""))
        else:
            why = "empty file, no rows"
        if damage:
            raise SnapshotError(f"{damage[0]}; nothing to export before it")
        raise SnapshotError(f"{p}: nothing to export: {why}")
    if damage and warn is not None:
        warn(f"{damage[0]}; the {read:,} row{'' if read == 1 else 's'} before it are exported")
    if torn and warn is not None:
        warn(f"{p}: last row (line {torn[0]}) is torn, ignored; "
             f"{read:,} row{'' if read == 1 else 's'} read")
    if host is None and len(hosts) == 1:  # one host, named in the rows (--host overrides)
        host = next(iter(hosts))
    session = HostState(host=host or "unknown")
    servers = []
    for name, items in per_server.items():
        state = session.server(name)
        lines = [it for it in items if isinstance(it, RecordLine)]
        state.path = lines[-1].path if lines else None
        keep_text_from = len(lines) - log_lines if log_lines > 0 else len(lines)
        entries: list[Entry] = []
        i = -1
        gap = 0  # bytes not read before a line not kept: said on the next entry kept
        for it in items:
            if isinstance(it, RecordEvent):  # in the order the live session got it
                _apply_record_event(state, it)
                continue
            i += 1
            rec = parse_line(it.line)
            state.apply(it.line, rec, it.received_at, it.skipped)
            gap += it.skipped
            if rec is not None or i >= keep_text_from:
                entries.append(Entry(it.received_at, it.line if i >= keep_text_from else None,
                                     rec, gap))
                gap = 0
        state.flush()  # a vLLM engine line still waiting for its spec line (the entries hold it)
        counts = {"lines": state.lines_total, "decode": state.decode_total,
                  "prefill": state.prefill_total}
        servers.append(_server_snap_from_state(state, entries, log_lines, LINE_TIMES_EXACT,
                                               counts, "log"))
    gpus.sort(key=lambda g: (g.ts if g.ts is not None else -math.inf,
                             g.index if g.index is not None else -1))
    kept, rule = downsample_gpu(gpus, gpu_max_per_gpu)
    snap = Snapshot(
        host=session.host, hosts=[session.host],
        source={"kind": "record", "file": p.name, "duplicate_lines_dropped": dups,
                **({"torn_last_row": torn[0]} if torn else {}),
                **({"read_error": redact_text(damage[0][len(str(p)) + 2:])} if damage else {})},
        servers=servers, gpu_samples=kept, gpu_downsampling=rule,
    )
    snap.time_range = snap.compute_time_range()
    return snap
