"""GPU telemetry records and pure parsers (NVML agent JSON lines, nvidia-smi CSV, reason masks).

Every GPU source (remote NVML agent, nvidia-smi fallback, in-process NVML, simulator) produces the
same `GpuSample`, so the session, the UI and the drift explainer never care where a number came
from. A field the source could not read is `None` ("N/A"); nothing here invents a value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from specmon.numfmt import MAX_INT, unix_time

#: Version of the agent's JSON-lines protocol that this parser understands.
AGENT_SCHEMA = 1

# --------------------------------------------------------------------------------------------
# Clock-event ("throttle") reasons
# --------------------------------------------------------------------------------------------

#: Bit -> name, in bit order. Values are identical for nvmlClocksEventReason* and the older
#: nvmlClocksThrottleReason* constants (fixtures/nvml-h200/nvml_constants.json). 0x200/0x400 exist
#: only in newer bindings; an unknown bit is reported as its hex value rather than dropped.
REASON_BITS: dict[int, str] = {
    0x001: "GpuIdle",
    0x002: "ApplicationsClocksSetting",
    0x004: "SwPowerCap",
    0x008: "HwSlowdown",
    0x010: "SyncBoost",
    0x020: "SwThermalSlowdown",
    0x040: "HwThermalSlowdown",
    0x080: "HwPowerBrakeSlowdown",
    0x100: "DisplayClockSetting",
    0x200: "BoardLimit",
    0x400: "Reliability",
}

_REASON_TEXT: dict[str, str] = {
    "GpuIdle": "idle (nothing running)",
    "ApplicationsClocksSetting": "clocks pinned by application-clock setting",
    "SwPowerCap": "at the software power limit",
    "HwSlowdown": "hardware slowdown (thermal or power brake)",
    "SyncBoost": "held to the slowest GPU of its sync-boost group",
    "SwThermalSlowdown": "software thermal slowdown (too hot)",
    "HwThermalSlowdown": "hardware thermal slowdown (too hot)",
    "HwPowerBrakeSlowdown": "external power brake",
    "DisplayClockSetting": "limited by display clock setting",
    "BoardLimit": "board limit",
    "Reliability": "reliability limit",
}

#: Reasons that always deserve an alert (the GPU is being slowed by hardware/thermal limits).
SEVERE_REASONS = frozenset(
    {"HwSlowdown", "SwThermalSlowdown", "HwThermalSlowdown", "HwPowerBrakeSlowdown"}
)


def decode_reasons(mask: int | None) -> tuple[str, ...]:
    """Names of the set bits of a clock-event reason mask, lowest bit first; () for 0 or None."""
    if mask is None or mask <= 0:
        return ()
    names: list[str] = []
    bit = 1
    while bit <= mask:
        if mask & bit:
            names.append(REASON_BITS.get(bit, f"0x{bit:x}"))
        bit <<= 1
    return tuple(names)


def encode_reasons(names: Iterable[str]) -> int:
    """Inverse of `decode_reasons` (unknown names raise ValueError)."""
    by_name = {v: k for k, v in REASON_BITS.items()}
    mask = 0
    for n in names:
        if n in by_name:
            mask |= by_name[n]
        elif n.startswith("0x"):
            mask |= int(n, 16)
        else:
            raise ValueError(f"unknown clock-event reason {n!r}")
    return mask


def reasons_explanation(names: Sequence[str]) -> str:
    """Short human text for a set of reason names (for a status line or an alert's cause)."""
    if not names:
        return "no clock limit (running at requested clocks)"
    return "; ".join(_REASON_TEXT.get(n, f"reason {n}") for n in names)


# --------------------------------------------------------------------------------------------
# The sample record
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuProcess:
    """One compute process on a GPU; `used_mib` is None where the driver hides it."""

    pid: int
    used_mib: float | None = None


@dataclass(frozen=True)
class GpuSample:
    """One GPU at one instant. Units: MHz, °C, W, %, MiB; `ts` is Unix seconds (float).

    `processes` is None when not read (nvidia-smi fallback, unsupported), () when none run.
    `error` carries a per-GPU "needs attention" condition (GPU lost, driver mismatch).
    """

    ts: float | None = None
    index: int | None = None
    name: str | None = None
    uuid: str | None = None
    driver_version: str | None = None
    clock_sm: int | None = None
    max_clock_sm: int | None = None
    clock_graphics: int | None = None
    max_clock_graphics: int | None = None
    clock_mem: int | None = None
    max_clock_mem: int | None = None
    app_clock_sm: int | None = None
    app_clock_graphics: int | None = None
    app_clock_mem: int | None = None
    clocks_event_reasons: int | None = None
    temp_gpu: float | None = None
    temp_mem: float | None = None
    temp_slowdown: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    util_gpu: float | None = None
    util_mem: float | None = None
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None
    pstate: int | None = None
    fan_pct: float | None = None
    processes: tuple[GpuProcess, ...] | None = None
    source: str | None = None
    error: str | None = None

    @property
    def reasons(self) -> tuple[str, ...]:
        """Decoded clock-event reason names (() when unknown or none)."""
        return decode_reasons(self.clocks_event_reasons)

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON dict; `from_agent_json(s.to_json()) == s`."""
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "processes" and v is not None:
                v = [{"pid": p.pid, "used_mib": p.used_mib} for p in v]
            out[f.name] = v
        return out

    @classmethod
    def from_agent_json(cls, d: Mapping[str, Any], ts: float | None = None) -> GpuSample:
        """Build from one per-GPU object of the agent (or a `to_json` dict, or a simulator dict).

        Lenient by design: unknown keys are ignored, a missing or ill-typed value becomes None,
        so a newer agent or one unsupported field never loses the rest of the sample. So does a
        value out of range (`ts` past numfmt.MAX_TIME, any other number past numfmt.MAX_INT):
        the bounds the snapshot reader holds every number to, so what `export` reads from a
        record file, `report` reads back.
        """
        if not isinstance(d, Mapping):
            raise ValueError(f"GPU record must be a JSON object, got {type(d).__name__}")
        kw: dict[str, Any] = {}
        for name, conv in _CONVERTERS.items():
            kw[name] = conv(d.get(name))
        if kw["ts"] is None:
            kw["ts"] = unix_time(ts)
        return cls(**kw)


_MAX_INT_TEXT = 24  # characters of an int given as text (2**63 is 19 digits; "0x" and a sign)


def _to_int(v: Any) -> int | None:
    """An int within MAX_INT, else None (a float is rounded; text is read as Python reads an
    int literal, when short: int() of 5000 digits passes Python's limit)."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, float):
        v = round(v) if abs(v) <= MAX_INT else None  # (NaN fails the comparison)
    elif isinstance(v, str):
        try:
            v = int(v, 0) if len(v) <= _MAX_INT_TEXT else None
        except ValueError:
            return None
    return v if isinstance(v, int) and abs(v) <= MAX_INT else None


def _to_float(v: Any) -> float | None:
    """A finite number within MAX_INT as a float, else None (an int of any size is compared,
    never converted: float(10**400) raised OverflowError)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if abs(v) <= MAX_INT else None  # (NaN and infinities fail the comparison)


def _to_str(v: Any) -> str | None:
    return v if isinstance(v, str) and v != "" else None


_RE_PSTATE = re.compile(r"\s*P?([0-9]{1,4})\s*")  # P0-P15 (P32: unknown); ASCII digits


def _to_pstate(v: Any) -> int | None:
    if isinstance(v, str):
        m = _RE_PSTATE.fullmatch(v)
        return int(m.group(1)) if m else None
    return _to_int(v)


def _to_processes(v: Any) -> tuple[GpuProcess, ...] | None:
    if not isinstance(v, list):
        return None
    out: list[GpuProcess] = []
    for p in v:
        if isinstance(p, Mapping):
            pid = _to_int(p.get("pid"))
            if pid is not None:
                out.append(GpuProcess(pid=pid, used_mib=_to_float(p.get("used_mib"))))
    return tuple(out)


_INT_FIELDS = (
    "index clock_sm max_clock_sm clock_graphics max_clock_graphics clock_mem max_clock_mem "
    "app_clock_sm app_clock_graphics app_clock_mem clocks_event_reasons"
).split()
_FLOAT_FIELDS = (
    "temp_gpu temp_mem temp_slowdown power_w power_limit_w util_gpu util_mem "
    "mem_used_mib mem_total_mib fan_pct"
).split()
_STR_FIELDS = "name uuid driver_version source error".split()
_CONVERTERS: dict[str, Any] = {
    **{n: _to_int for n in _INT_FIELDS},
    **{n: _to_float for n in _FLOAT_FIELDS},
    "ts": unix_time,  # (Unix seconds within MAX_TIME)
    **{n: _to_str for n in _STR_FIELDS},
    "pstate": _to_pstate,
    "processes": _to_processes,
}
assert set(_CONVERTERS) == {f.name for f in fields(GpuSample)}


def is_clock_limited(sample: GpuSample, threshold: float = 0.9) -> bool:
    """True when the SM clock is below `threshold` of its max while the GPU is not idle.

    "Not idle" means the GpuIdle reason is not set (and, where known, utilisation > 0): an idle
    H200 sits at 345 MHz with reason GpuIdle, which is not a problem. False when data is missing.
    """
    if sample.clock_sm is None or not sample.max_clock_sm:
        return False
    if sample.clocks_event_reasons is not None and sample.clocks_event_reasons & 0x1:
        return False
    if sample.clocks_event_reasons is None and not sample.util_gpu:
        return False  # no reasons and no load reading: cannot tell idle from limited
    return sample.clock_sm < threshold * sample.max_clock_sm


# --------------------------------------------------------------------------------------------
# Agent JSON lines
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AgentHello:
    """The agent's first line: versions and GPU count."""

    schema: int | None
    gpu_count: int | None
    driver: str | None = None
    nvml_version: str | None = None
    pynvml_version: str | None = None
    python: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class AgentError:
    """A one-line error record from the agent (`code` says which, e.g. "no-pynvml")."""

    message: str
    code: str | None = None


AgentRecord = AgentHello | AgentError | tuple[GpuSample, ...]


def parse_agent_line(line: str) -> AgentRecord:
    """Parse one agent output line into a hello, an error or one poll's samples.

    Raises ValueError (one line, quoting the start of the input) for anything else.
    """
    text = line.strip()
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"GPU agent: not a JSON line ({exc.msg}): {text[:120]!r}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"GPU agent: expected a JSON object: {text[:120]!r}")
    kind = obj.get("type")
    if kind == "error" or (kind is None and "error" in obj):
        return AgentError(message=str(obj.get("error") or "unknown error"), code=obj.get("code"))
    if kind == "hello":
        return AgentHello(
            schema=_to_int(obj.get("schema")),
            gpu_count=_to_int(obj.get("gpu_count")),
            driver=_to_str(obj.get("driver")),
            nvml_version=_to_str(obj.get("nvml_version")),
            pynvml_version=_to_str(obj.get("pynvml_version")),
            python=_to_str(obj.get("python")),
            raw=obj,
        )
    if kind == "sample":
        gpus = obj.get("gpus")
        if not isinstance(gpus, list):
            raise ValueError(f"GPU agent: sample without a 'gpus' list: {text[:120]!r}")
        ts = unix_time(obj.get("ts"))
        return tuple(GpuSample.from_agent_json(g, ts=ts) for g in gpus if isinstance(g, dict))
    raise ValueError(f"GPU agent: unknown record type {kind!r}: {text[:120]!r}")


def sample_from_probe(d: Mapping[str, Any], ts: float | None = None) -> GpuSample:
    """Map one line of fixtures/nvml-h200/nvml_samples.jsonl (probe.py's key names) to a sample.

    The probe records raw NVML units (mW, bytes, nested util/mem); this documents the mapping the
    agent implements and lets tests check it against real numbers.
    """
    u, m = d.get("util"), d.get("mem")
    util: Mapping[str, Any] = u if isinstance(u, Mapping) else {}
    mem: Mapping[str, Any] = m if isinstance(m, Mapping) else {}
    reasons = d.get("clocks_event_reasons", d.get("clocks_throttle_reasons"))
    procs = d.get("compute_procs")

    def mw(v: Any) -> float | None:
        f = _to_float(v)
        return None if f is None else f / 1000.0

    def mib(v: Any) -> float | None:
        f = _to_float(v)
        return None if f is None else f / (1024 * 1024)

    return GpuSample(
        ts=unix_time(ts if ts is not None else d.get("t")),
        clock_sm=_to_int(d.get("clock_sm")),
        max_clock_sm=_to_int(d.get("max_clock_sm")),
        clock_graphics=_to_int(d.get("clock_graphics")),
        max_clock_graphics=_to_int(d.get("max_clock_graphics")),
        clock_mem=_to_int(d.get("clock_mem")),
        max_clock_mem=_to_int(d.get("max_clock_mem")),
        app_clock_sm=_to_int(d.get("app_clock_sm")),
        app_clock_graphics=_to_int(d.get("app_clock_graphics")),
        app_clock_mem=_to_int(d.get("app_clock_mem")),
        clocks_event_reasons=_to_int(reasons),
        temp_gpu=_to_float(d.get("temp_gpu")),
        temp_slowdown=_to_float(d.get("nvml_temperature_threshold_slowdown")),
        power_w=mw(d.get("power_mw")),
        power_limit_w=mw(d.get("power_limit_mw")),
        util_gpu=_to_float(util.get("gpu")),
        util_mem=_to_float(util.get("memory")),
        mem_used_mib=mib(mem.get("used")),
        mem_total_mib=mib(mem.get("total")),
        pstate=_to_pstate(d.get("pstate")),
        fan_pct=_to_float(d.get("fan")),
        processes=(
            tuple(GpuProcess(int(p[0]), mib(p[1])) for p in procs)
            if isinstance(procs, list)
            else None
        ),
        source="nvml",
    )


# --------------------------------------------------------------------------------------------
# nvidia-smi --query-gpu CSV
# --------------------------------------------------------------------------------------------

#: The fields the fallback asks for, in order. Each entry lists accepted spellings, preferred
#: first; `choose_smi_fields` keeps the first one the driver's `--help-query-gpu` lists.
#: uuid and name go last so a name containing ", " cannot shift the other columns.
SMI_WANTED: tuple[tuple[str, ...], ...] = (
    ("timestamp",),
    ("index",),
    ("driver_version",),
    ("pstate",),
    ("clocks.current.sm", "clocks.sm"),
    ("clocks.max.sm",),
    ("clocks.current.graphics", "clocks.gr"),
    ("clocks.max.graphics", "clocks.max.gr"),
    ("clocks.current.memory", "clocks.mem"),
    ("clocks.max.memory", "clocks.max.mem"),
    ("clocks.applications.graphics", "clocks.applications.gr"),
    ("clocks.applications.memory", "clocks.applications.mem"),
    ("clocks_event_reasons.active", "clocks_throttle_reasons.active"),
    ("temperature.gpu",),
    ("temperature.memory",),
    ("power.draw",),
    ("enforced.power.limit", "power.limit"),
    ("utilization.gpu",),
    ("utilization.memory",),
    ("memory.used",),
    ("memory.total",),
    ("fan.speed",),
    ("uuid",),
    ("name", "gpu_name"),
)

#: Used when `--help-query-gpu` could not be read: throttle spellings, accepted by old drivers
#: and (as aliases) by new ones.
SMI_DEFAULT_FIELDS: tuple[str, ...] = tuple(
    next((s for s in alts if s.startswith("clocks_throttle")), alts[0]) for alts in SMI_WANTED
)

_SMI_COLUMN: dict[str, str] = {
    "timestamp": "ts",
    "index": "index",
    "name": "name",
    "gpu_name": "name",
    "uuid": "uuid",
    "gpu_uuid": "uuid",
    "driver_version": "driver_version",
    "pstate": "pstate",
    "clocks.current.sm": "clock_sm",
    "clocks.sm": "clock_sm",
    "clocks.max.sm": "max_clock_sm",
    "clocks.current.graphics": "clock_graphics",
    "clocks.gr": "clock_graphics",
    "clocks.max.graphics": "max_clock_graphics",
    "clocks.max.gr": "max_clock_graphics",
    "clocks.current.memory": "clock_mem",
    "clocks.mem": "clock_mem",
    "clocks.max.memory": "max_clock_mem",
    "clocks.max.mem": "max_clock_mem",
    "clocks.applications.graphics": "app_clock_graphics",
    "clocks.applications.gr": "app_clock_graphics",
    "clocks.applications.memory": "app_clock_mem",
    "clocks.applications.mem": "app_clock_mem",
    "temperature.gpu": "temp_gpu",
    "temperature.memory": "temp_mem",
    "power.draw": "power_w",
    "enforced.power.limit": "power_limit_w",
    "power.limit": "power_limit_w",
    "utilization.gpu": "util_gpu",
    "utilization.memory": "util_mem",
    "memory.used": "mem_used_mib",
    "memory.total": "mem_total_mib",
    "fan.speed": "fan_pct",
}

#: nvidia-smi boolean reason columns (both spellings) -> bit.
_SMI_REASON_BOOL: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}
_REASON_PREFIXES = ("clocks_event_reasons.", "clocks_throttle_reasons.")
_NUM_RE = re.compile(r"\s*([-+]?\d+(?:\.\d+)?)")


def canonical_smi_field(header: str) -> str:
    """`'clocks.current.sm [MHz]'` -> `'clocks.current.sm'` (header text or query name)."""
    return header.split("[", 1)[0].strip().lower()


def choose_smi_fields(help_text: str) -> tuple[str, ...]:
    """Pick, for each wanted field, the first spelling listed by `nvidia-smi --help-query-gpu`.

    Fields the driver does not know are left out (asking for one makes nvidia-smi refuse the
    whole query). Falls back to `SMI_DEFAULT_FIELDS` if the text lists none of them.
    """
    known = set(re.findall(r'"([a-z0-9_.]+)"', help_text))
    chosen = tuple(next((s for s in alts if s in known), "") for alts in SMI_WANTED)
    chosen = tuple(c for c in chosen if c)
    return chosen if "index" in chosen else SMI_DEFAULT_FIELDS


def _missing(v: str) -> bool:
    s = v.strip()
    return s == "" or (s.startswith("[") and s.endswith("]")) or s.upper() in {"N/A", "NA"}


def _smi_number(v: str) -> float | None:
    if _missing(v):
        return None
    m = _NUM_RE.match(v)
    return float(m.group(1)) if m else None


def _smi_timestamp(v: str) -> float | None:
    """nvidia-smi's `2026/11/29 06:27:35.952` is the host's local time; read as our local time."""
    if _missing(v):
        return None
    for fmt in ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S"):
        try:
            return datetime.strptime(v.strip(), fmt).timestamp()
        except ValueError:
            continue
    return None


def parse_smi_values(
    columns: Sequence[str], values: Sequence[str], ts: float | None = None
) -> GpuSample:
    """Build a sample from nvidia-smi column names (query names or header text) and cell texts.

    Units in cells ("375 MHz", "114.29 W") are accepted, so `--format=csv` and
    `csv,nounits` both work. Bracketed placeholders ("[N/A]", "[Not Supported]") become None.
    `ts`, when given, replaces the `timestamp` column (remote clocks and time zones differ).
    """
    kw: dict[str, Any] = {"source": "nvidia-smi"}
    bool_mask = 0
    bool_seen = False
    for col, raw in zip(columns, values, strict=False):
        name = canonical_smi_field(col)
        v = raw.strip()
        if name.startswith(_REASON_PREFIXES):
            sub = name.split(".", 1)[1]
            if sub == "active":
                kw["clocks_event_reasons"] = None if _missing(v) else _to_int(v)
            elif sub in _SMI_REASON_BOOL and not _missing(v):
                bool_seen = True
                if v.lower() == "active":
                    bool_mask |= _SMI_REASON_BOOL[sub]
            continue
        target = _SMI_COLUMN.get(name)
        if target is None:
            continue
        if target == "ts":
            kw["ts"] = _smi_timestamp(v)
        elif target in ("name", "uuid", "driver_version"):
            kw[target] = None if _missing(v) else v
        elif target == "pstate":
            kw[target] = None if _missing(v) else _to_pstate(v)
        elif target in _INT_FIELDS:
            kw[target] = _to_int(_smi_number(v))  # (bounded: "9"*400 reads as inf)
        else:
            kw[target] = _to_float(_smi_number(v))
    if kw.get("clocks_event_reasons") is None and bool_seen:
        kw["clocks_event_reasons"] = bool_mask
    if ts is not None:
        kw["ts"] = ts
    return GpuSample(**kw)


def split_smi_line(line: str, n_columns: int) -> list[str]:
    """Split a CSV row on ", "; surplus cells are re-joined into the last column (a name)."""
    cells = [c.strip() for c in line.rstrip("\r\n").split(",")]
    if len(cells) > n_columns > 0:
        cells = cells[: n_columns - 1] + [", ".join(cells[n_columns - 1 :])]
    return cells


def parse_smi_line(line: str, columns: Sequence[str], ts: float | None = None) -> GpuSample:
    """Parse one `--format=csv,noheader[,nounits]` row for the given requested columns.

    Raises ValueError when the cell count does not match (an error message, a truncated line).
    """
    cells = split_smi_line(line, len(columns))
    if len(cells) != len(columns):
        raise ValueError(
            f"nvidia-smi: expected {len(columns)} columns, got {len(cells)}: {line.strip()[:120]!r}"
        )
    return parse_smi_values(columns, cells, ts=ts)


def parse_smi_csv(text: str) -> list[GpuSample]:
    """Parse a whole `--format=csv` capture whose first line is the header."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    columns = [c.strip() for c in lines[0].split(",")]
    return [parse_smi_line(ln, columns) for ln in lines[1:]]


class SmiBatcher:
    """Groups streamed per-GPU rows into one list per poll.

    `nvidia-smi -lms` prints one row per GPU per poll with no separator. A poll ends when a GPU
    index repeats; once the GPU count is known, a poll is emitted as soon as it is complete.
    """

    def __init__(self, n_gpus: int | None = None) -> None:
        self.n_gpus = n_gpus
        self._batch: list[GpuSample] = []

    def feed(self, sample: GpuSample) -> list[GpuSample] | None:
        """Add one row; returns a finished poll or None."""
        out: list[GpuSample] | None = None
        if any(s.index == sample.index for s in self._batch):
            out = self._batch
            if self.n_gpus is None:
                self.n_gpus = len(out)
            self._batch = []
        self._batch.append(sample)
        if out is None and self.n_gpus is not None and len(self._batch) >= self.n_gpus:
            out, self._batch = self._batch, []
        return out

    def flush(self) -> list[GpuSample] | None:
        """The partial poll at end of stream, if any."""
        out, self._batch = self._batch, []
        return out or None


def classify_smi_failure(lines: Sequence[str]) -> str:
    """One-line reason from nvidia-smi's own output when it produced no data."""
    text = " ".join(ln.strip() for ln in lines if ln.strip())
    low = text.lower()
    if not text:
        return "nvidia-smi not found (or it printed nothing)"
    if "not found" in low and "nvidia-smi" in low:
        return "nvidia-smi not found"
    if "couldn't communicate with the nvidia driver" in low or "driver not loaded" in low:
        return "NVML not available (driver not loaded?): nvidia-smi cannot talk to the driver"
    if "no devices were found" in low:
        return "no GPUs"
    return f"nvidia-smi failed: {text[:160]}"
