"""Start-up progress from SGLang's and vLLM's log lines (pure): weights, KV cache, CUDA graphs, ready.

SGLang prints no percentage while loading, but its start-up lines come in a fixed order, so each
one moves a coarse progress fraction forward; the UI shows the phase text and the fraction.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specmon.parse.sglang import EventRecord, parse_line

# (substring, phase id, fraction, label); checked in order, the first match wins
_MARKS = (
    ("server_args=", "args", 0.05, "server arguments read"),
    ("Load weight begin", "weights", 0.10, "loading weights"),
    ("Loading safetensors checkpoint shards", "weights", 0.15, "loading weights"),
    ("Load weight end", "weights_done", 0.45, "weights loaded"),
    ("KV Cache is allocated", "kv_cache", 0.55, "KV cache allocated"),
    ("Memory pool end", "kv_cache", 0.58, "KV cache allocated"),
    ("max_total_num_tokens=", "graphs_done", 0.85, "memory plan fixed"),
    ("Uvicorn running on", "http", 0.90, "HTTP server up"),
    ("Application startup complete", "http", 0.90, "HTTP server up"),
    ("The server is fired up and ready to roll", "ready_line", 0.95, "ready line seen"),
    # vLLM (V1): API server, EngineCore and worker lines, in start-up order
    ("non-default args:", "args", 0.05, "server arguments read"),
    ("Initializing a V1 LLM engine", "args", 0.08, "engine configured"),
    ("Loading weights took", "weights", 0.40, "loading weights"),
    ("Model loading took", "weights_done", 0.45, "weights loaded"),
    ("GPU KV cache size:", "kv_cache", 0.55, "KV cache allocated"),
    ("Graph capturing finished", "cuda_graphs_done", 0.80, "CUDA graphs captured"),
    ("init engine (profile, create kv cache, warmup model) took", "graphs_done", 0.85,
     "engine initialised"),
    ("Starting vLLM API server", "http", 0.90, "HTTP server up"),
)


@dataclass
class StartProgress:
    """One progress update for the UI (also printed by `specmon server start`)."""

    phase: str  # launching | args | weights | weights_done | kv_cache | cuda_graphs | ...
    label: str
    fraction: float | None = None  # 0..1, coarse
    line: str | None = None  # the log line that moved it
    batch_sizes: list[int] = field(default_factory=list)
    elapsed_s: float | None = None

    def describe(self) -> str:
        pct = f"{self.fraction * 100:3.0f}%" if self.fraction is not None else " N/A"
        extra = ""
        if self.batch_sizes:
            bs = self.batch_sizes
            extra = f" (bs {bs[0]}..{bs[-1]}, {len(bs)} sizes)" if len(bs) > 3 else f" (bs {bs})"
        t = f" [{self.elapsed_s:.1f}s]" if self.elapsed_s is not None else ""
        return f"{pct} {self.label}{extra}{t}"


@dataclass
class ProgressTracker:
    """Feed start-up lines; `update(line)` returns a StartProgress when the line moved it."""

    fraction: float = 0.0
    phase: str = "launching"
    traceback: list[str] = field(default_factory=list)
    in_traceback: bool = False
    ready_line: bool = False

    def update(self, line: str) -> StartProgress | None:
        self._watch_traceback(line)
        rec = parse_line(line)
        if isinstance(rec, EventRecord):
            if rec.kind == "cuda_graph_begin":
                return self._move("cuda_graphs", 0.60, "capturing CUDA graphs", line,
                                  list(rec.data.get("batch_sizes") or []))
            if rec.kind == "cuda_graph_end":
                return self._move("cuda_graphs_done", 0.80, "CUDA graphs captured", line)
            if rec.kind == "ready":
                self.ready_line = True
        for mark, phase, frac, label in _MARKS:
            if mark in line:
                return self._move(phase, frac, label, line)
        return None

    def _move(self, phase: str, frac: float, label: str, line: str,
              batch_sizes: list[int] | None = None) -> StartProgress | None:
        if frac < self.fraction:
            return None
        same = phase == self.phase
        self.fraction, self.phase = frac, phase
        if same:  # another line of the same phase: no news for the UI
            return None
        return StartProgress(phase, label, frac, line.rstrip("\n"), batch_sizes or [])

    def _watch_traceback(self, line: str) -> None:
        text = line.rstrip("\n")
        if "Traceback (most recent call last)" in text:
            self.in_traceback = True
            self.traceback = [text]
            return
        if self.in_traceback:
            self.traceback.append(text)
            # A traceback ends with the exception line: not indented, after the frames.
            if text and not text.startswith((" ", "\t")) and len(self.traceback) > 2:
                self.in_traceback = False
