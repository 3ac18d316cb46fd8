"""Server fingerprints (what a baseline was measured under) and the diff that names a cause.

The core is pure: `env_from_environ` reads an already-fetched `/proc/PID/environ`, `diff`
compares two fingerprints, `gpu_evidence` compares live GPU samples with the recording, and
`causes_for_alert` orders everything most specific first. `collect` (async) gathers the raw
data through the host agent (`proc_info` with `environ_prefixes`, `read`) and a one-shot probe.

/proc facts that shape this (telemetry-and-drift.md 6.2): a worker retitled by setproctitle has
an all-NUL environ, which is "unreadable", never "variable missing"; values set in-process after
exec never show; NCCL's own "X set by environment to Y" lines (NCCL_DEBUG=INFO) are what the
rank really used, so they win over everything else.

But NCCL prints such a line only when its code reads the variable, so a *missing* line means
"not set" only where a real capture proved NCCL prints it in that configuration (NCCL_REPORTED,
from tests/data/nccl-h200*: with 1 rank NCCL 2.28.9 never prints NCCL_PROTO/NCCL_ALGO), or where
the recording itself printed it under the same NCCL version and rank count. Otherwise the cause
says the variable was not visible in NCCL's log and what /proc environ says instead.
"""

from __future__ import annotations

import hashlib
import re
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from functools import cache
from typing import Any

from specmon.analysis.drift import json_kind
from specmon.analysis.runargs import arg_changes, is_identity_flag
from specmon.analysis.stats import median
from specmon.numfmt import ascii_int, num
from specmon.parse.argv import flag_values
from specmon.parse.gpu_sample import GpuSample, decode_reasons, reasons_explanation
from specmon.redact import MASK, is_secret_name, redact_text
from specmon.textsafe import SHOWN, cut, visible

ENV_PREFIXES = ("NCCL_", "CUDA_", "SGLANG_", "TORCH_", "NVSHMEM_")
NCCL_CONF_PATHS = ("$NCCL_CONF_FILE", "~/.nccl.conf", "/etc/nccl.conf")
# NCCL's verification channel, and NCCL_VERSION: a label CUDA/PyTorch images set, which NCCL never
# reads (the H200 image said 2.28.3-1 while torch loaded 2.28.9); not knobs NCCL applies.
NCCL_SILENT = frozenset({"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "NCCL_VERSION"})
UNREADABLE = "unreadable"

_RE_NCCL_LINE = re.compile(
    r"(?P<host>[\w.-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<rank>\d+)\] NCCL INFO "
    r"(?P<var>\w+) set by environment to (?P<value>\S*)")
_RE_NCCL_LOOSE = re.compile(r"\b(NCCL_\w+|NVSHMEM_\w+) set by environment to (\S*)")
_RE_NCCL_INFO = re.compile(r"[\w.-]+:\d+:\d+ \[(\d+)\] NCCL INFO ")
_RE_NCCL_VERSION = re.compile(r"NCCL INFO NCCL version (\d+\.\d+\.\d+)")
# "ncclCommInitRankConfig comm 0x.. rank 0 nranks 1 ..", "comm 0x.. rank 0 nRanks 1 nNodes 1 .."
_RE_NCCL_NRANKS = re.compile(r"NCCL INFO .*\bcomm 0x[0-9a-fA-F]+ rank \d+ n[Rr]anks (\d+)")

# What real NCCL_DEBUG=INFO captures proved NCCL prints a "set by environment" line for when the
# variable is set, per (NCCL version, rank count of the communicator), with the debug subsystem
# the line needs: only these (and what the recording itself printed under the same version and
# ranks) make a missing line mean "not set". Source: tests/data/nccl-h200-launcher (NCCL 2.28.9,
# 1 rank; NCCL_DEBUG_SUBSYS=INIT,ENV, ALL, unset, and INIT alone: then only P2P_LEVEL's line came).
NCCL_REPORTED: dict[tuple[str, int], dict[str, str]] = {
    ("2.28.9", 1): {"NCCL_CUMEM_ENABLE": "ENV", "NCCL_NVLS_ENABLE": "ENV", "NCCL_BUFFSIZE": "ENV",
                    "NCCL_P2P_LEVEL": "INIT"},
}
# An integer parameter's line ends with "." and needs ENV; version and communicator lines are INIT.
_RE_NCCL_PARAM_LINE = re.compile(r"NCCL INFO NCCL_\w+ set by environment to -?\d+\.\s*$")
# Read (and printed) only by NCCL's tuning model, which a 1-rank communicator never runs: the same
# captures set both and no line of the log named them, not even with NCCL_DEBUG_SUBSYS=ALL.
NCCL_TUNING_MODEL_VARS = frozenset({"NCCL_PROTO", "NCCL_ALGO"})


def _hash(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8", "replace")).hexdigest()[:12]


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------


@dataclass
class EnvSnapshot:
    """One process's exec-time environment: filtered variables kept, the others hashed."""

    pid: int | None
    title: str  # "launcher" or the process title, e.g. "sglang::scheduler_TP0"
    status: str  # "ok" | "unreadable" (empty / all NUL: setproctitle) | "error: ..."
    vars: dict[str, str] = field(default_factory=dict)
    hashed: dict[str, str] = field(default_factory=dict)  # name -> sha256(value)[:12]

    @property
    def readable(self) -> bool:
        return self.status == "ok"


def env_from_environ(raw: bytes | None, pid: int | None, title: str, error: str | None = None,
                     prefixes: Sequence[str] = ENV_PREFIXES) -> EnvSnapshot:
    """Pure core of environment collection from `/proc/PID/environ` bytes."""
    if error is not None or raw is None:
        return EnvSnapshot(pid, title, f"error: {error or 'not read'}")
    if not raw.strip(b"\0"):
        return EnvSnapshot(pid, title, UNREADABLE)
    keep: dict[str, str] = {}
    hashed: dict[str, str] = {}
    for item in raw.split(b"\0"):
        if not item:
            continue
        k, sep, v = item.decode("utf-8", "replace").partition("=")
        if not sep or not k:
            continue
        if k.startswith(tuple(prefixes)):
            keep[k] = v
        else:
            hashed[k] = _hash(v)
    return EnvSnapshot(pid, title, "ok", dict(sorted(keep.items())), dict(sorted(hashed.items())))


def env_snapshots(d: Any) -> tuple[EnvSnapshot | None, list[EnvSnapshot]]:
    """(launcher, workers) from a probe's "env" (`feeds.probe.probe_pid`; a snapshot may carry
    it back, so each entry is checked): an entry that is no EnvSnapshot is left out."""
    def one(x: Any) -> EnvSnapshot | None:
        if not isinstance(x, Mapping):
            return None
        try:
            env = EnvSnapshot(**x)
            check_shape(env, EnvSnapshot, "env")
        except (TypeError, ValueError):
            return None
        return env

    if not isinstance(d, Mapping):
        return None, []
    workers = d.get("workers")
    return one(d.get("launcher")), [w for w in map(one, workers if isinstance(workers, list)
                                                    else []) if w is not None]


def env_from_mapping(env: Mapping[str, str] | None, pid: int | None, title: str,
                     status: str | None = None) -> EnvSnapshot:
    """Same as `env_from_environ` for an agent's decoded dict (None/"empty" -> unreadable)."""
    if status is not None and status not in ("ok",):
        return EnvSnapshot(pid, title, UNREADABLE if status == "empty" else f"error: {status}")
    if env is None:
        return EnvSnapshot(pid, title, "error: not read")
    raw = b"\0".join(f"{k}={v}".encode() for k, v in env.items())
    return env_from_environ(raw, pid, title)


def parse_conf(text: str) -> dict[str, str]:
    """`KEY=VALUE` lines of an NCCL config file (comments and blanks skipped)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        k, _, v = line.partition("=")
        out[k.strip()] = v.strip()
    return out


def nccl_debug_env(lines: Iterable[str]) -> dict[str, dict[str, str]]:
    """Per-rank variables from NCCL_DEBUG=INFO lines: {"rank 0 (pid 123)": {var: value}}."""
    out: dict[str, dict[str, str]] = {}
    for line in lines:
        if "set by environment to" not in line:
            info = _RE_NCCL_INFO.search(line)
            if info:  # NCCL_DEBUG=INFO was on for this rank: no "set by" line means not set
                out.setdefault(f"rank {info.group(1)}", {})
            continue
        m = _RE_NCCL_LINE.search(line)
        if m:
            key = f"rank {m.group('rank')}"
            out.setdefault(key, {})[m.group("var")] = m.group("value").rstrip(".")
            continue
        m2 = _RE_NCCL_LOOSE.search(line)
        if m2:
            out.setdefault("rank ?", {})[m2.group(1)] = m2.group(2).rstrip(".")
    return out


def nccl_debug_subsystems(lines: Iterable[str]) -> list[str]:
    """NCCL debug subsystems the lines prove were on: INIT (version or communicator lines), ENV
    (an integer parameter's "... set by environment to 0." line). NCCL never prints its
    NCCL_DEBUG_SUBSYS, and P2P_LEVEL's line comes with INIT alone, so it proves nothing about ENV."""
    subs: set[str] = set()
    for line in lines:
        if "NCCL INFO" not in line:
            continue
        if _RE_NCCL_PARAM_LINE.search(line):
            subs.add("ENV")
        elif _RE_NCCL_VERSION.search(line) or _RE_NCCL_NRANKS.search(line):
            subs.add("INIT")
    return sorted(subs)


def nccl_debug_meta(lines: Iterable[str]) -> tuple[str | None, int | None]:
    """(NCCL version, largest communicator rank count) from NCCL_DEBUG=INFO lines, None if unseen.

    Rank 0 prints the version; the INIT subsystem prints each communicator's rank count.
    """
    version: str | None = None
    nranks: int | None = None
    for line in lines:
        if "NCCL INFO" not in line:
            continue
        m = _RE_NCCL_VERSION.search(line)
        if m:
            version = m.group(1)
            continue
        m = _RE_NCCL_NRANKS.search(line)
        if m:
            nranks = max(nranks or 0, int(m.group(1)))
    return version, nranks


@dataclass
class GpuState:
    """A GPU during the recording: medians over the window, reasons seen, static settings."""

    index: int | None
    name: str | None = None
    driver: str | None = None
    clock_sm: float | None = None  # median over busy samples
    max_clock_sm: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    persistence: bool | None = None
    reasons: list[str] = field(default_factory=list)
    processes: list[int] | None = None


def gpu_states(samples: Iterable[GpuSample], persistence: Mapping[int, bool] | None = None
               ) -> list[GpuState]:
    """Summarise GPU samples (one or many per GPU) into one GpuState per GPU."""
    by: dict[int | None, list[GpuSample]] = {}
    for s in samples:
        if s.error is None:
            by.setdefault(s.index, []).append(s)
    out = []
    for idx, ss in sorted(by.items(), key=lambda kv: -1 if kv[0] is None else kv[0]):
        busy = [s for s in ss if not (s.clocks_event_reasons or 0) & 0x1]
        clocks = [float(s.clock_sm) for s in (busy or ss) if s.clock_sm is not None]
        power = [s.power_w for s in ss if s.power_w is not None]
        reasons: list[str] = []
        for s in ss:
            for r in decode_reasons(s.clocks_event_reasons):
                if r not in reasons and r != "GpuIdle":
                    reasons.append(r)
        last = ss[-1]
        procs = sorted({p.pid for s in ss for p in (s.processes or ())}) if any(
            s.processes is not None for s in ss) else None
        out.append(GpuState(idx, last.name, last.driver_version, median(clocks) if clocks else None,
                            last.max_clock_sm, median(power) if power else None, last.power_limit_w,
                            (persistence or {}).get(idx) if idx is not None else None, reasons, procs))
    return out


@dataclass
class Fingerprint:
    """Everything a baseline was measured under; None/empty means "not known", never "absent"."""

    collected_at: float | None = None
    argv: list[str] | None = None
    server_args: dict[str, Any] = field(default_factory=dict)
    version: str | None = None
    model: str | None = None
    tp_size: int | None = None
    spec: dict[str, Any] = field(default_factory=dict)
    server_pids: list[int] = field(default_factory=list)
    launcher: EnvSnapshot | None = None
    workers: list[EnvSnapshot] = field(default_factory=list)
    nccl_conf: dict[str, dict[str, str] | None] = field(default_factory=dict)  # None: no file
    nccl_debug: dict[str, dict[str, str]] = field(default_factory=dict)
    nccl_version: str | None = None  # from the NCCL_DEBUG lines ("2.28.9"), None: not in the log
    nccl_nranks: int | None = None  # largest communicator seen in them
    nccl_subsys: list[str] = field(default_factory=list)  # debug subsystems the lines prove on
    modified_files: list[str] | None = None
    modified_method: str | None = None  # "RECORD" | "git" | why it could not be checked
    modified_dist: str | None = None  # whose files the probe hashed: "sglang" | "vllm"
    gpus: list[GpuState] = field(default_factory=list)
    host: dict[str, str | None] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> Fingerprint | None:
        if not d:
            return None
        kw = dict(d)
        kw["launcher"] = EnvSnapshot(**kw["launcher"]) if kw.get("launcher") else None
        kw["workers"] = [EnvSnapshot(**w) for w in kw.get("workers") or []]
        kw["gpus"] = [GpuState(**g) for g in kw.get("gpus") or []]
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in kw.items() if k in known})

    @property
    def engine_label(self) -> str:
        """The engine's name for people ("SGLang" | "vLLM"): the probe's, else the log's (a
        vLLM config line gives `engine_version`)."""
        return dist_label(self.modified_dist
                          or ("vllm" if self.server_args.get("engine_version") else None))

    def summary(self) -> list[str]:
        """Human lines for `baseline show` and reports. Each value is cut (`_v`): a hostile
        launch line or environment may hold a megabyte in one of them."""
        out = []
        if self.version or self.model:
            out.append(f"{self.engine_label} {_v(self.version or 'N/A', 40)}, "
                       f"model {_v(self.model or 'N/A')}, tp {self.tp_size or 'N/A'}")
        if self.spec:
            out.append("spec: " + ", ".join(f"{k}={_v(v)}" for k, v in sorted(self.spec.items())))
        if self.argv:
            out.append("launch: " + " ".join(_v(a, 400) for a in self.argv))
        if self.launcher is not None:
            out.append(f"launcher env ({self.launcher.status}): " + (
                " ".join(f"{k}={_v(v)}" for k, v in self.launcher.vars.items()) or "no tracked variables"))
        for w in self.workers:
            out.append(f"{w.title} env ({w.status}): " + (
                " ".join(f"{k}={_v(v)}" for k, v in w.vars.items()) if w.readable else "-"))
        if self.nccl_version or self.nccl_nranks:
            out.append(f"NCCL {self.nccl_version or 'N/A'}, {self.nccl_nranks or 'N/A'} ranks "
                       "(NCCL_DEBUG lines)")
        for rank, env in sorted(self.nccl_debug.items()):
            out.append(f"NCCL_DEBUG {rank}: " + " ".join(f"{k}={_v(v)}" for k, v in sorted(env.items())))
        for path, conf in self.nccl_conf.items():
            out.append(f"{path}: " + ("absent" if conf is None else " ".join(
                f"{k}={_v(v)}" for k, v in conf.items()) or "empty"))
        if self.modified_method:
            files = self.modified_files
            out.append(f"modified {self.engine_label} files ({self.modified_method}): " + (
                "N/A" if files is None else ", ".join(files) or "none"))
        for g in self.gpus:
            out.append(f"GPU {g.index}: {g.name or ''} driver {g.driver or 'N/A'}, SM "
                       f"{_num(g.clock_sm)}/{_num(g.max_clock_sm)} MHz, power limit "
                       f"{_num(g.power_limit_w)} W, reasons {','.join(g.reasons) or 'none'}")
        if self.host:
            out.append("host: " + ", ".join(f"{k} {v}" for k, v in self.host.items() if v))
        return out


def _v(value: object, limit: int = SHOWN) -> str:
    return cut(str(value), limit)


def _num(x: float | None) -> str:
    return num(x, "{:.0f}")


def fingerprint_from(*, server_args: Mapping[str, Any] | None = None, argv: Sequence[str] | None = None,
                     version: str | None = None, nccl_lines: Iterable[str] = (),
                     launcher: EnvSnapshot | None = None, workers: Sequence[EnvSnapshot] = (),
                     nccl_conf: Mapping[str, dict[str, str] | None] | None = None,
                     modified_files: list[str] | None = None, modified_method: str | None = None,
                     modified_dist: str | None = None, gpus: Sequence[GpuState] = (),
                     host: Mapping[str, str | None] | None = None,
                     server_pids: Sequence[int] = (), collected_at: float | None = None) -> Fingerprint:
    """Assemble a fingerprint from already-read pieces (pure)."""
    nccl_lines = list(nccl_lines)
    nccl_version, nccl_nranks = nccl_debug_meta(nccl_lines)
    args = dict(server_args or {})
    version = version or _str(args.get("version")) or _str(args.get("engine_version"))
    spec = {k: v for k, v in args.items() if k.startswith("speculative_") and v is not None}
    if argv:
        flags = flag_values(argv)
        for k, v in flags.items():
            if k.startswith("--speculative-"):
                spec.setdefault(k[2:].replace("-", "_"), v)
    model = _str(args.get("model_path")) or (_str(flag_values(argv).get("--model-path")) if argv else None)
    tp = args.get("tp_size")
    if tp is None and argv:
        t = flag_values(argv).get("--tp-size") or flag_values(argv).get("--tp")
        tp = ascii_int(t, 1, 1 << 16)  # (a command line's text: int() raised on '²')
    return Fingerprint(
        collected_at=collected_at, argv=list(argv) if argv else None, server_args=args,
        version=version, model=model, tp_size=tp if isinstance(tp, int) else None, spec=spec,
        server_pids=list(server_pids), launcher=launcher, workers=list(workers),
        nccl_conf=dict(nccl_conf or {}), nccl_debug=nccl_debug_env(nccl_lines),
        nccl_version=nccl_version, nccl_nranks=nccl_nranks, nccl_subsys=nccl_debug_subsystems(nccl_lines),
        modified_files=modified_files, modified_method=modified_method,
        modified_dist=modified_dist, gpus=list(gpus),
        host=dict(host or {}))


def dist_label(dist: str | None) -> str:
    """A distribution's name as people write it: "vLLM" for vllm, else "SGLang" (the
    default the probe looks at)."""
    return "vLLM" if dist == "vllm" else "SGLang"


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None




# --------------------------------------------------------------------------------------------
# Diff -> causes
# --------------------------------------------------------------------------------------------


def worker_nccl_env(fp: Fingerprint) -> tuple[dict[str, dict[str, str]] | None, str]:
    """Effective NCCL_* of each TP worker and where it came from; None when nothing says.

    Order of trust: NCCL_DEBUG lines (what NCCL applied) > the worker's own readable environ >
    the launcher's environ plus NCCL config files (spawned workers inherit it; conf values only
    fill gaps, as NCCL's setenv(..., 0) does).
    """
    if fp.nccl_debug:
        return ({r: {k: v for k, v in env.items() if k not in NCCL_SILENT}
                 for r, env in fp.nccl_debug.items()}, "NCCL_DEBUG lines")
    readable = [w for w in fp.workers if w.readable]
    if readable:
        return ({_worker_label(w): {k: v for k, v in w.vars.items()
                                    if k.startswith("NCCL_") and k not in NCCL_SILENT}
                 for w in readable}, "worker environ")
    env = _launcher_nccl(fp)
    if env is not None:
        src = "launcher environ" + (" + NCCL config files" if any(fp.nccl_conf.values()) else "")
        return {"all": env}, src
    return None, "unreadable"


def _launcher_nccl(fp: Fingerprint) -> dict[str, str] | None:
    """The launcher's NCCL_* (exec-time environ), gaps filled from NCCL config files as NCCL's
    setenv(..., 0) does; None when its environ is unreadable."""
    if fp.launcher is None or not fp.launcher.readable:
        return None
    env = {k: v for k, v in fp.launcher.vars.items() if k.startswith("NCCL_") and k not in NCCL_SILENT}
    for conf in fp.nccl_conf.values():
        for k, v in (conf or {}).items():
            if k not in NCCL_SILENT:
                env.setdefault(k, v)
    return env


def _worker_label(w: EnvSnapshot) -> str:
    m = re.search(r"TP(\d+)", w.title)
    return f"rank {m.group(1)}" if m else f"pid {w.pid}"


def _fmt_vars(items: Iterable[tuple[str, str]]) -> str:
    return ", ".join(f"{k}={_shown(k, v)}" for k, v in items)


def _who(ranks: set[str], all_ranks: set[str]) -> str:
    if ranks == all_ranks or ranks == {"all"} or len(all_ranks) <= 1:
        return "TP workers"
    nums = sorted(r.split()[-1] for r in ranks)
    return "TP workers " + ", ".join(nums)


def _environ_nccl(fp: Fingerprint) -> tuple[dict[str, str] | None, str]:
    """NCCL_* from /proc environ: the readable workers' (union), else the launcher's plus conf files.

    The launcher's is exec-time: values it set in os.environ later (before the spawn: they reach
    the workers; after it: they do not) never show there, so it is weaker evidence.
    """
    readable = [w for w in fp.workers if w.readable]
    if readable:
        env: dict[str, str] = {}
        for w in readable:
            env.update({k: v for k, v in w.vars.items() if k.startswith("NCCL_") and k not in NCCL_SILENT})
        return env, "worker"
    launcher = _launcher_nccl(fp)
    return (launcher, "launcher") if launcher is not None else (None, "unreadable")


def _subsystems(fp: Fingerprint) -> set[str]:
    """NCCL debug subsystems known to be on: proven by the lines, or NCCL_DEBUG_SUBSYS in a readable
    environ (unset: NCCL's default INIT,BOOTSTRAP,ENV, as the unset-capture showed)."""
    subs = set(fp.nccl_subsys)
    for snap in [w for w in fp.workers if w.readable] + ([fp.launcher] if fp.launcher else []):
        if snap.readable:
            sub = snap.vars.get("NCCL_DEBUG_SUBSYS")
            if sub is None:
                return subs | {"INIT", "ENV"}
            parts = {p.strip().upper() for p in sub.lstrip("^").split(",")}
            for name in ("INIT", "ENV"):
                if (name not in parts) if sub.startswith("^") else (name in parts or "ALL" in parts):
                    subs.add(name)
            break
    return subs


def _subsys_value(fp: Fingerprint) -> str:
    for snap in [w for w in fp.workers if w.readable] + ([fp.launcher] if fp.launcher else []):
        if snap.readable:
            return snap.vars.get("NCCL_DEBUG_SUBSYS", "unset")
    return "not known"


def nccl_log_proves_unset(fp: Fingerprint, var: str, ref: Fingerprint | None = None) -> bool:
    """Whether the absence of `var`'s "set by environment" line in fp's NCCL log means "not set".

    True only where a real capture showed NCCL prints it in fp's configuration (NCCL_REPORTED by
    NCCL version and rank count) with the debug subsystem that line needs on, or where `ref` (the
    other run) printed it under the same version and rank count and fp had at least ref's
    subsystems on (ENV among them).
    """
    if not fp.nccl_debug or fp.nccl_version is None or fp.nccl_nranks is None:
        return False
    subs = _subsystems(fp)
    table = NCCL_REPORTED.get((fp.nccl_version, fp.nccl_nranks), {})
    if var in table:
        return table[var] in subs
    if ref is None or ref.nccl_version != fp.nccl_version or ref.nccl_nranks != fp.nccl_nranks:
        return False
    ref_subs = _subsystems(ref)
    return ("ENV" in subs and ref_subs <= subs and any(var in env for env in ref.nccl_debug.values()))


def nccl_invisible_reason(fp: Fingerprint, var: str) -> str:
    """Why fp's NCCL log cannot say whether `var` was set: "NCCL reports VAR only when ..."."""
    ver, n = fp.nccl_version, fp.nccl_nranks
    need = NCCL_REPORTED.get((ver or "", n or 0), {}).get(var, "ENV")
    if need not in _subsystems(fp) and not (var in NCCL_TUNING_MODEL_VARS and n == 1):
        return (f"NCCL reports {var} only with its {need} debug subsystem on, and nothing shows it was "
                f"(NCCL_DEBUG_SUBSYS {_subsys_value(fp)})")
    if var in NCCL_TUNING_MODEL_VARS:
        if n == 1:
            return (f"NCCL reports {var} only when a communicator of 2+ ranks runs its tuning model; "
                    "this run's communicators have 1 rank")
        return (f"NCCL reports {var} only when a communicator of 2+ ranks runs its tuning model; no "
                f"real log of NCCL {ver or 'N/A'} with {n or 'N/A'} ranks has shown it yet")
    if ver is None or n is None:
        return (f"NCCL reports {var} only when its code reads it, and this log shows no NCCL version "
                "or rank count to tell (NCCL_DEBUG_SUBSYS without INIT?)")
    return (f"NCCL reports {var} only when its code reads it; no real log of NCCL {ver} with {n} "
            f"rank{'s' if n != 1 else ''} has shown it")


def _proc_evidence(fp: Fingerprint, var: str, want: str) -> str | None:
    """What /proc environ says about `var` for the comparison with `want`; None: it agrees."""
    env, where = _environ_nccl(fp)
    if env is None:
        return ("nothing (TP workers unreadable: setproctitle wipes it, launch with SPT_NOENV=1; "
                "launcher environ not read)")
    have = env.get(var)
    if where == "worker":
        if have == want:
            return None
        return "the TP workers lack it" if have is None else f"the TP workers have {var}={have}"
    if have == want:
        return None  # the launcher exec'd with it: spawned workers inherit it
    if have is None:
        return ("the launcher's exec-time environ lacks it (set later in its os.environ, it shows "
                "nowhere: before the spawn it still reaches the workers, after it it does not)")
    return f"the launcher has {var}={have}"


def diff_nccl(rec: Fingerprint, live: Fingerprint) -> tuple[list[str], str | None]:
    """Causes from the workers' effective NCCL env; second item: what was checked (or None).

    A variable of the recording missing from the live NCCL log is "lacking" only where the log
    proves it (`nccl_log_proves_unset`); otherwise the cause says it was not visible there and
    what /proc environ says. Variables the recording's own log could not show come from its
    /proc environ.
    """
    r_env, r_src = worker_nccl_env(rec)
    l_env, l_src = worker_nccl_env(live)
    if r_env is None or l_env is None:
        return [], None
    # The recorded run's variables: the union over its ranks (ranks should agree).
    r_all: dict[str, str] = {}
    for env in r_env.values():
        r_all.update(env)
    if r_src == "NCCL_DEBUG lines":
        proc, _ = _environ_nccl(rec)
        for k, v in (proc or {}).items():
            if k not in r_all and not nccl_log_proves_unset(rec, k, live):
                r_all[k] = v  # set, but NCCL's log in that configuration does not say so
    from_log = l_src == "NCCL_DEBUG lines"
    lost: dict[tuple[str, str], set[str]] = {}
    unseen: dict[tuple[str, str], set[str]] = {}
    changed: dict[tuple[str, str, str], set[str]] = {}
    added: dict[tuple[str, str], set[str]] = {}
    for rank, env in l_env.items():
        for k, v in r_all.items():
            if k in env:
                if env[k] != v:
                    changed.setdefault((k, v, env[k]), set()).add(rank)
            elif not from_log or nccl_log_proves_unset(live, k, rec):
                lost.setdefault((k, v), set()).add(rank)
            else:
                unseen.setdefault((k, v), set()).add(rank)
        for k, v in env.items():
            if k not in r_all:
                added.setdefault((k, v), set()).add(rank)
    ranks = set(l_env)
    out: list[str] = []
    src = "" if from_log else f" (from {l_src})"
    by_who: dict[str, list[tuple[str, str]]] = {}
    for (k, v), rs in lost.items():
        by_who.setdefault(_who(rs, ranks), []).append((k, v))
    for who, items in by_who.items():
        out.append(f"{who} lack {_fmt_vars(sorted(items))} that the recorded run had{src}")
    for (k, v), rs in sorted(unseen.items()):
        evidence = _proc_evidence(live, k, v)
        if evidence is not None:
            out.append(f"{_who(rs, ranks)}: {k}={_shown(k, v)} of the recorded run not visible in NCCL's log "
                       f"({nccl_invisible_reason(live, k)}); /proc environ says {evidence}")
    for (k, old, new), rs in sorted(changed.items()):
        out.append(f"{_who(rs, ranks)} use {k}={_shown(k, new)} where the recorded run had "
                   f"{_shown(k, old)}{src}")
    by_who = {}
    unproven: dict[str, list[tuple[str, str]]] = {}
    for (k, v), rs in added.items():
        if r_src == "NCCL_DEBUG lines" and not nccl_log_proves_unset(rec, k, live):
            unproven.setdefault(_who(rs, ranks), []).append((k, v))
        else:
            by_who.setdefault(_who(rs, ranks), []).append((k, v))
    for who, items in by_who.items():
        out.append(f"{who} have {_fmt_vars(sorted(items))} that the recorded run did not{src}")
    for who, items in unproven.items():
        out.append(f"{who} have {_fmt_vars(sorted(items))}, which the recorded run's NCCL log does not "
                   f"show (it could not: {nccl_invisible_reason(rec, items[0][0])})")
    if rec.nccl_version and live.nccl_version and rec.nccl_version != live.nccl_version:
        out.append(f"NCCL {rec.nccl_version} -> {live.nccl_version} (NCCL_DEBUG lines)")
    checked = f"TP worker NCCL env ({l_src}" + (f" vs {r_src})" if r_src != l_src else ")")
    return out, checked


MAX_CAUSE = 4 * SHOWN  # characters of one cause
OTHER_ENV = "other launcher env variables differ (values hashed): "


def _shown(name: str, value: Any) -> Any:
    """A value as a cause shows it: masked under a secret name (`--api-key X`, NCCL_IB_PASSWORD),
    else with any secret in it masked, then cut (a hostile launch line's model path may be a
    megabyte; masked first, as a cut URL would lose the `@` that tells its password)."""
    if value is None or isinstance(value, bool) or value == "":
        return value
    if is_secret_name(name):
        return MASK
    return cut(redact_text(str(value)))


def _dict_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[list[str], list[str], list[str]]:
    removed = [f"{k}={_shown(k, old[k])}" for k in sorted(old) if k not in new]
    added = [f"{k}={_shown(k, new[k])}" for k in sorted(new) if k not in old]
    changed = [f"{k} {_shown(k, old[k])} -> {_shown(k, new[k])}" for k in sorted(old)
               if k in new and new[k] != old[k]]
    return removed, added, changed


def _flags_diff(old: Sequence[str], new: Sequence[str]) -> list[str]:
    a, b = flag_values(old), flag_values(new)
    parts = []
    for k in sorted(set(a) | set(b)):
        if is_identity_flag(k):
            continue  # (where it listens or logs: `analysis.runargs`)
        if k not in b:
            parts.append(f"removed {k}" + ("" if a[k] is True else f" {_shown(k, a[k])}"))
        elif k not in a:
            parts.append(f"added {k}" + ("" if b[k] is True else f" {_shown(k, b[k])}"))
        elif a[k] != b[k]:
            parts.append(f"{k} {_shown(k, a[k])} -> {_shown(k, b[k])}")
    return parts


def diff(rec: Fingerprint | None, live: Fingerprint | None) -> tuple[list[str], list[str]]:
    """(causes, what was checked) between the recorded and the live fingerprint, most specific first."""
    causes: list[str] = []
    checked: list[str] = []
    if rec is None or live is None:
        return causes, checked
    # 1. what the TP workers really use
    nccl, what = diff_nccl(rec, live)
    causes += nccl
    if what:
        checked.append(what)
    elif live.workers and not any(w.readable for w in live.workers) and not live.nccl_debug:
        checked.append("TP worker env: unreadable (setproctitle wipes it; launch with SPT_NOENV=1 "
                       "or NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV)")
    # 2. the launcher's other tracked variables, then config files
    if rec.launcher and live.launcher and rec.launcher.readable and live.launcher.readable:
        checked.append("launcher env")
        # NCCL knobs were compared above, through the best evidence there was (the workers' own
        # when known: a value set in the launcher's os.environ before the spawn reaches them
        # without ever showing in the launcher's /proc environ)
        def knob(k: str) -> bool:
            return bool(what) and k.startswith("NCCL_") and k not in NCCL_SILENT

        old = {k: v for k, v in rec.launcher.vars.items() if not knob(k)}
        new = {k: v for k, v in live.launcher.vars.items() if not knob(k)}
        removed, added, changed = _dict_diff(old, new)
        if removed:
            causes.append(f"launcher env lacks {', '.join(removed)} that the recorded run had")
        if changed:
            causes.append(f"launcher env changed: {'; '.join(changed)}")
        if added:
            causes.append(f"launcher env has {', '.join(added)} that the recorded run did not")
    if rec.nccl_conf and live.nccl_conf:
        checked.append("NCCL config files")
        for path in sorted(set(rec.nccl_conf) | set(live.nccl_conf)):
            a, b = rec.nccl_conf.get(path), live.nccl_conf.get(path)
            if a == b:
                continue
            removed, added, changed = _dict_diff(a or {}, b or {})
            what_changed = "; ".join([f"removed {x}" for x in removed] + [f"added {x}" for x in added]
                                     + changed) or ("created" if a is None else "removed")
            causes.append(f"NCCL config {path} changed since the recording: {what_changed}")
    # 3. the engine's files and version
    eng = live.engine_label
    if rec.modified_files is not None and live.modified_files is not None:
        checked.append(f"{eng} files ({live.modified_method or 'RECORD'})")
        new_files = [f for f in live.modified_files if f not in set(rec.modified_files)]
        if new_files:
            more = f" (+{len(new_files) - 3} more)" if len(new_files) > 3 else ""
            causes.append(f"{eng} files modified since the recording: {', '.join(new_files[:3])}{more}")
    if rec.version and live.version:
        checked.append(f"{eng} version")
        if rec.version != live.version:
            causes.append(f"{eng} version {rec.version} -> {live.version}")
    # 4. launch args / server args
    if rec.argv and live.argv:
        checked.append("launch args")
        parts = _flags_diff(rec.argv, live.argv)
        if parts:
            causes.append("launch args changed: " + "; ".join(parts))
    elif rec.server_args and live.server_args:
        checked.append("server args")
        changed = [f"{k} {_shown(k, a)} -> {_shown(k, b)}"
                   for k, a, b in arg_changes(rec.server_args, live.server_args, speculation=True)]
        if changed:
            causes.append("server args changed: " + "; ".join(changed))
    # 5. other environment (hashed values)
    if rec.launcher and live.launcher and rec.launcher.readable and live.launcher.readable:
        a, b = rec.launcher.hashed, live.launcher.hashed
        diffs = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k) and not _volatile(k))
        if diffs:
            more = f" (+{len(diffs) - 5} more)" if len(diffs) > 5 else ""
            causes.append(OTHER_ENV + ", ".join(diffs[:5]) + more)
    # 6. GPU settings and host
    if rec.gpus and live.gpus:
        checked.append("GPU driver and persistence mode")
        rg = {g.index: g for g in rec.gpus}
        drivers = {(rg[g.index].driver, g.driver) for g in live.gpus if g.index in rg
                   and rg[g.index].driver and g.driver and rg[g.index].driver != g.driver}
        for was, now_ in sorted((str(a), str(b)) for a, b in drivers):
            causes.append(f"GPU driver {was} -> {now_}")
        off = [g.index for g in live.gpus if g.index in rg and rg[g.index].persistence and
               g.persistence is False]
        if off:
            causes.append(f"persistence mode off on GPU {_idx(off)} (was on)")
    if rec.host and live.host:
        checked.append("host")
        for key in ("kernel", "cpu_governor"):
            a2, b2 = rec.host.get(key), live.host.get(key)
            if a2 and b2 and a2 != b2:
                causes.append(f"{key.replace('_', ' ')} {a2} -> {b2}")
    return causes, checked


def _volatile(name: str) -> bool:
    """Variables that differ between any two shells, logins or terminals and explain nothing."""
    return name in {"OLDPWD", "SHLVL", "_", "SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY", "TERM",
                    "XDG_SESSION_ID", "SSH_AUTH_SOCK", "TMUX", "TMUX_PANE", "WINDOWID", "DISPLAY",
                    "LS_COLORS", "PWD", "STY", "INVOCATION_ID", "JOURNAL_STREAM", "SSH_AGENT_PID",
                    "DBUS_SESSION_BUS_ADDRESS", "KRB5CCNAME", "GPG_AGENT_INFO", "COLORTERM",
                    "TERM_PROGRAM", "TERM_PROGRAM_VERSION", "TERM_SESSION_ID", "LC_TERMINAL",
                    "LC_TERMINAL_VERSION", "MOTD_SHOWN", "GIT_ASKPASS", "SYSTEMD_EXEC_PID"} \
        or name.startswith(("VSCODE_", "ITERM_", "KITTY_", "WEZTERM_", "ZELLIJ", "CURSOR_"))


def _idx(xs: Sequence[int | None]) -> str:
    vals = sorted(x for x in xs if x is not None)
    if len(vals) > 2 and vals == list(range(vals[0], vals[-1] + 1)):
        return f"{vals[0]}-{vals[-1]}"
    return ", ".join(str(x) for x in vals)


def gpu_evidence(recorded: Sequence[GpuState], live: Sequence[GpuSample],
                 server_pids: Sequence[int] = (), clock_drop: float = 0.03) -> tuple[list[str], list[str]]:
    """(causes, checked) from the live GPU samples: lower clocks/power limit, other processes."""
    causes: list[str] = []
    checked: list[str] = []
    samples = [g for g in live if g.error is None]
    if not samples:
        return causes, checked
    rg = {g.index: g for g in recorded}
    if rg:
        checked.append("GPU clocks and power limit")
        slow: list[tuple[int | None, float, float, tuple[str, ...]]] = []
        caps: list[tuple[int | None, float, float]] = []
        for s in samples:
            r = rg.get(s.index)
            if r is None:
                continue
            idle = bool((s.clocks_event_reasons or 0) & 0x1)
            if (r.clock_sm and s.clock_sm is not None and not idle
                    and s.clock_sm < (1 - clock_drop) * r.clock_sm):
                slow.append((s.index, float(s.clock_sm), r.clock_sm, s.reasons))
            if r.power_limit_w and s.power_limit_w and s.power_limit_w < r.power_limit_w - 1:
                caps.append((s.index, s.power_limit_w, r.power_limit_w))
        if slow:
            now = median([x[1] for x in slow]) or 0.0
            then = median([x[2] for x in slow]) or 1.0
            reasons: list[str] = []
            for x in slow:
                reasons += [r for r in x[3] if r not in reasons and r != "GpuIdle"]
            why = (f": {', '.join(reasons)} ({reasons_explanation(reasons)})" if reasons
                   else ": no clock-event reason reported")
            causes.append(f"GPU {_idx([x[0] for x in slow])} SM clock {now:.0f} MHz vs {then:.0f} recorded "
                          f"({100 * (now / then - 1):+.0f}%){why}")
        if caps:
            causes.append(f"GPU {_idx([c[0] for c in caps])} power limit {caps[0][1]:.0f} W vs "
                          f"{caps[0][2]:.0f} W recorded")
    procs = [(s.index, p) for s in samples for p in (s.processes or ())]
    if any(s.processes is not None for s in samples):
        checked.append("GPU processes")
        if server_pids:
            others = [(i, p) for i, p in procs if p.pid not in set(server_pids)]
        else:  # no pid list: compare with what each GPU ran during the recording
            others = []
            for s in samples:
                r = rg.get(s.index)
                if r is not None and r.processes is not None and s.processes is not None:
                    known = set(r.processes)
                    others += [(s.index, p) for p in s.processes if p.pid not in known] if len(
                        s.processes) > len(r.processes) else []
        if others:
            desc = []
            for i, p in others[:4]:
                mem = f", {p.used_mib / 1024:.1f} GiB" if p.used_mib else ""
                desc.append(f"pid {p.pid} on GPU {i}{mem}")
            more = f" (+{len(others) - 4} more)" if len(others) > 4 else ""
            causes.append("other GPU processes present: " + "; ".join(desc) + more)
    return causes, checked


def causes_for_alert(alert: Any, monitor: Any, recorded: Fingerprint | None, live: Fingerprint | None,
                     gpus: Sequence[GpuSample] = ()) -> list[str]:
    """The cause list shown with an alert, most specific first; never empty for an active alert.

    Order: fingerprint diff (worker NCCL env, launcher env, config files), SGLang files and
    version, launch args, GPU evidence (clocks with the reason, power limit, other processes),
    other launcher variables that differ (hashed), then the speculative cycle-time split. With
    nothing found: "no cause found in: ..." (what was checked), or "cause unknown: nothing to
    compare" when nothing could be.
    """
    causes: list[str] = []
    checked: list[str] = []
    if getattr(alert, "kind", None) != "acceptance":
        c, k = diff(recorded, live)
        causes += c
        checked += k
        g, k2 = gpu_evidence(recorded.gpus if recorded else [], gpus,
                             live.server_pids if live else ())
        # a hashed variable that differs is the weakest lead (a terminal's session variables
        # differ between any two logins): after what the GPUs show, never before it
        weak = [x for x in causes if x.startswith(OTHER_ENV)]
        causes = [x for x in causes if not x.startswith(OTHER_ENV)] + g + weak
        checked += k2
    else:  # acceptance: only what changes the workload or the draft explains it
        if recorded and live:
            c, k = diff(recorded, live)
            causes += [x for x in c if "args" in x or "version" in x or "files" in x]
            checked += [x for x in k if "args" in x or "version" in x or "files" in x]
    split = monitor.spec_split() if monitor is not None else None
    if not causes:
        causes.append(f"no cause found in: {', '.join(checked)}" if checked else
                      "cause unknown: nothing to compare (no fingerprint or GPU data)")
    if split:
        causes.append(split)
    # every front end shows these (UI, check, report, record): values from the host are masked
    # once here (`NAME=value` pairs, URL credentials, token shapes), and a cause stays a line
    # whatever a host's names and values hold (each value is cut where it is written, too)
    return [cut(redact_text(c), MAX_CAUSE) for c in causes]


def make_explainer(recorded: Fingerprint | None, live_fp: Any) -> Any:
    """An `explain` callback for DriftMonitor; `live_fp` is a Fingerprint or a callable returning one."""

    def explain(alert: Any, gpus: Sequence[GpuSample], monitor: Any = None) -> list[str]:
        live = live_fp() if callable(live_fp) else live_fp
        return causes_for_alert(alert, monitor, recorded, live, gpus)

    return explain


# --- a fingerprint read back from JSON (the baseline store, a snapshot): every field checked -----

@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _brief(x: Any, width: int = 60) -> str:
    text = visible(repr(x))
    return text if len(text) <= width else text[:width - 3] + "..."


def check_shape(value: Any, tp: Any, where: str) -> None:
    """ValueError naming `where` when `value` (decoded JSON, or a dataclass built from it) does
    not have the annotated type `tp`: str, int, float, bool, None, unions, list[...],
    dict[str, ...], dataclasses (each field). Any and other types are not checked."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return
    if origin in (typing.Union, types.UnionType):
        errors = []
        for arg in typing.get_args(tp):
            try:
                check_shape(value, arg, where)
                return
            except ValueError as exc:
                errors.append(str(exc))
        if len(errors) == 1:
            raise ValueError(errors[0])
        names = " or ".join(_type_name(a) for a in typing.get_args(tp))
        raise ValueError(f"{where}: expected {names}, got {json_kind(value)}")
    ok = True
    if tp is type(None):
        ok = value is None
    elif tp is str:
        ok = isinstance(value, str)
    elif tp is bool:
        ok = isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif origin is list:
        if not isinstance(value, list):
            raise ValueError(f"{where}: expected a list, got {json_kind(value)}")
        (arg,) = typing.get_args(tp) or (Any,)
        for i, v in enumerate(value):
            check_shape(v, arg, f"{where}[{i}]")
        return
    elif origin is dict:
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected an object, got {json_kind(value)}")
        args = typing.get_args(tp) or (Any, Any)
        for k, v in value.items():
            check_shape(v, args[1], f"{where}.{_brief(k, 30)}")
        return
    elif isinstance(tp, type) and is_dataclass(tp):
        if not isinstance(value, tp):
            raise ValueError(f"{where}: expected an object, got {json_kind(value)}")
        hints = _hints(tp)
        for f in fields(tp):
            check_shape(getattr(value, f.name), hints.get(f.name, Any), f"{where}.{f.name}")
        return
    if not ok:
        raise ValueError(f"{where}: expected {_type_name(tp)}, got {json_kind(value)}")


def _type_name(tp: Any) -> str:
    """An annotation in the words of `json_kind`."""
    names = {type(None): "null", str: "a string", int: "a whole number", float: "a number",
             bool: "a boolean", list: "a list", dict: "an object"}
    return names.get(typing.get_origin(tp) or tp, "an object")


def fingerprint_of(d: Any, where: str = "fingerprint") -> Fingerprint | None:
    """A Fingerprint from its JSON, every field of the annotated type, or ValueError naming the
    field (a damaged store row or snapshot must be one line, not a crash in whoever reads it)."""
    if d is not None and not isinstance(d, dict):
        raise ValueError(f"{where}: expected an object, got {json_kind(d)}")
    try:
        fp = Fingerprint.from_json(d)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise ValueError(f"{where}: {exc}") from None
    if fp is not None:
        check_shape(fp, Fingerprint, where)
    return fp
