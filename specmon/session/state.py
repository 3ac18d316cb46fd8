"""Live session state: servers, their bounded time series, GPUs, alerts.

Mutated only on the UI event loop (or a single headless task); widgets read it on a timer. It
never parses: the pipeline hands it records that `specmon.parse` already produced.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from specmon.parse.sglang import BatchRecord, EventRecord, Record

MAX_DECODE_POINTS = 20_000  # ~9 days of 40-step intervals at bs 1; older points are dropped
MAX_LOG_LINES = 5_000


@dataclass(slots=True)
class DecodePoint:
    t: float  # when specmon received the line (wall clock, seconds)
    rec: BatchRecord


@dataclass
class StartupProgress:
    """What the start-up lines said so far; shown while a server loads."""

    server_args: bool = False
    kv_allocated: bool = False
    graph_capture: str | None = None  # "capturing" | "done"
    graph_batch_sizes: list[int] = field(default_factory=list)
    ready: bool = False


@dataclass
class ServerState:
    name: str
    role: str | None = None  # "baseline" | "speculative"; None until known
    status: str = "unknown"  # starting | ready | stopped | crashed | unknown
    path: str | None = None
    args: dict[str, Any] = field(default_factory=dict)
    decode: deque[DecodePoint] = field(default_factory=lambda: deque(maxlen=MAX_DECODE_POINTS))
    last_decode: BatchRecord | None = None
    last_prefill: BatchRecord | None = None
    last_prefill_t: float | None = None
    lines_total: int = 0
    decode_total: int = 0
    prefill_total: int = 0
    log: deque[str] = field(default_factory=lambda: deque(maxlen=MAX_LOG_LINES))
    traceback: list[str] = field(default_factory=list)
    in_traceback: bool = False
    startup: StartupProgress = field(default_factory=StartupProgress)
    exit_code: int | None = None
    stale: bool = False
    notices: deque[str] = field(default_factory=lambda: deque(maxlen=50))
    last_line_t: float | None = None
    nccl_lines: list[str] = field(default_factory=list)  # NCCL_DEBUG "set by environment" lines
    pids: set[int] = field(default_factory=set)  # launcher and workers, when the feed knows them
    fingerprint: Any = None  # the fingerprint of the baseline recorded on this server, if any
    control_text: str | None = None  # progress/result of the last start/stop/... from the UI
    env_audit: Any = None  # what the workers' /proc/PID/environ really held after our start
    last_bench: Any = None  # the last benchmark run (end-to-end numbers)
    tail_status: str | None = None  # why no line arrives: "no such file: ...", silent file

    @property
    def is_speculative(self) -> bool:
        if self.role is not None:
            return self.role == "speculative"
        return self.last_decode is not None and self.last_decode.accept_len is not None

    @property
    def num_draft_tokens(self) -> int | None:
        v = self.args.get("speculative_num_draft_tokens")
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    def apply(self, text: str, rec: Record | None, t: float) -> None:
        """One received log line and its parsed record (None if it was not one specmon uses)."""
        self.lines_total += 1
        self.last_line_t = t
        self.log.append(text)
        if self.in_traceback:
            if text.strip() and not text.startswith((" ", "\t", "Traceback")) and rec is not None:
                self.in_traceback = False
            else:
                self.traceback.append(text)
                if len(self.traceback) > 200:
                    del self.traceback[:-200]
                if (text and not text.startswith((" ", "\t")) and ":" in text
                        and not text.startswith("Traceback")):
                    self.in_traceback = False  # "SomeError: message" ends it
        if rec is None:
            return
        if isinstance(rec, BatchRecord):
            if rec.kind == "decode":
                self.decode_total += 1
                self.decode.append(DecodePoint(t, rec))
                self.last_decode = rec
                if self.role is None and rec.accept_len is not None:
                    self.role = "speculative"
            else:
                self.prefill_total += 1
                self.last_prefill = rec
                self.last_prefill_t = t
            if self.status in ("unknown", "starting", "stopped"):
                self.status = "ready"
            return
        self._apply_event(rec)

    def _apply_event(self, ev: EventRecord) -> None:
        if ev.kind == "server_args":
            self.args = dict(ev.data)  # a restart replaces the previous run's arguments
            self.nccl_lines = []
            self.startup = StartupProgress(server_args=True)
            self.status = "starting"
            self.traceback.clear()
            self.exit_code = None
            if self.role is None:
                self.role = "speculative" if ev.data.get("speculative_algorithm") else "baseline"
        elif ev.kind == "max_total_num_tokens":
            self.args.update(ev.data)
            self.startup.kv_allocated = True
        elif ev.kind == "cuda_graph_begin":
            self.startup.graph_capture = "capturing"
            if ev.data.get("batch_sizes"):
                self.startup.graph_batch_sizes = ev.data["batch_sizes"]
        elif ev.kind == "cuda_graph_end":
            self.startup.graph_capture = "done"
        elif ev.kind == "ready":
            self.startup.ready = True
            self.status = "ready"
        elif ev.kind == "nccl_env":
            if self.log:
                self.nccl_lines.append(self.log[-1])
        elif ev.kind == "traceback":
            self.in_traceback = True
            self.traceback = [self.log[-1]] if self.log else []

    def process_exited(self, code: int | None) -> None:
        """The server process we started has exited (signal or crash)."""
        self.exit_code = code
        self.status = "stopped" if code in (0, -15, 143, None) and not self.traceback else "crashed"


@dataclass
class Session:
    host: str = "local"
    servers: dict[str, ServerState] = field(default_factory=dict)
    gpus: list[Any] = field(default_factory=list)  # latest GpuSample per GPU
    gpu_history: dict[int, deque[Any]] = field(default_factory=dict)
    gpu_error: str | None = None
    started_at: float = field(default_factory=time.time)
    alerts: list[dict[str, Any]] = field(default_factory=list)  # every alert raised or cleared
    baselines: list[dict[str, Any]] = field(default_factory=list)  # baselines used, summarised
    benchmarks: list[dict[str, Any]] = field(default_factory=list)

    def server(self, name: str) -> ServerState:
        s = self.servers.get(name)
        if s is None:
            s = self.servers[name] = ServerState(name)
        return s

    def by_role(self, role: str) -> ServerState | None:
        for s in self.servers.values():
            if s.role == role:
                return s
        return None

    def set_gpus(self, samples: list[Any], keep: int = 120) -> None:
        self.gpus = list(samples)
        for g in samples:
            idx = getattr(g, "index", None)
            if idx is None:
                continue
            self.gpu_history.setdefault(idx, deque(maxlen=keep)).append(g)
