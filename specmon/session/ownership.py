"""Which GPUs a server owns: the one rule every front end uses (panel groups, drift causes,
per-run GPU samples, report charts, /metrics).

Fallback order, first that answers wins:
1. "pids": the GPUs whose NVML compute-process list holds one of the server's processes
   (launcher or workers, when the feed knows them);
2. "args": `tp_size x pp_size / nnodes` GPUs from `base_gpu_id` (SGLang's own server
   arguments, or the command line discovery read);
3. "unknown": no GPU. Never "all GPUs": a drift cause or a chart must not read another
   server's GPUs as this one's.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MAX_GPU_INDEX = 4096  # arguments past this are damage, not a GPU range


@dataclass(frozen=True)
class Ownership:
    """The GPU indices a server owns on one host and the rule that said so."""

    indices: tuple[int, ...]  # empty when unknown
    rule: str  # "pids" | "args" | "unknown"

    def text(self) -> str:
        """`GPUs 0-7 (by process)` / `GPUs 8-15 (from tp x pp / nnodes at base_gpu_id)`."""
        if not self.indices:
            return "GPUs unknown (no process list and no tp_size argument)"
        how = "by process" if self.rule == "pids" else "from tp x pp / nnodes at base_gpu_id"
        return f"GPUs {_ranges(self.indices)} ({how})"


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def gpus_from_args(args: Mapping[str, Any]) -> tuple[int, ...] | None:
    """The GPU range the server arguments imply on one node; None when tp_size is unknown."""
    tp = _int(args.get("tp_size"))
    if tp is None or not 0 < tp <= MAX_GPU_INDEX:
        return None
    pp = _int(args.get("pp_size")) or 1
    nnodes = _int(args.get("nnodes")) or 1
    base = _int(args.get("base_gpu_id")) or 0
    if not (0 < pp <= MAX_GPU_INDEX and 0 < nnodes <= MAX_GPU_INDEX and 0 <= base < MAX_GPU_INDEX):
        return None
    per_node = max(1, (tp * pp) // nnodes)
    return tuple(range(base, min(base + per_node, MAX_GPU_INDEX)))


def owned_gpus(samples: Sequence[Any], pids: Collection[int],
               args: Mapping[str, Any]) -> Ownership:
    """The server's GPUs by the documented fallback order (pids, then args, then unknown).

    `samples`: GPU samples of the host (`GpuSample`, read by attribute); `pids`: the server's
    launcher and worker pids; `args`: its server arguments (tp_size, pp_size, nnodes,
    base_gpu_id)."""
    if pids:
        by_proc = sorted({idx for g in samples
                          if isinstance(idx := getattr(g, "index", None), int)
                          and any(getattr(p, "pid", None) in pids
                                  for p in (getattr(g, "processes", None) or ()))})
        if by_proc:
            return Ownership(tuple(by_proc), "pids")
    rng = gpus_from_args(args)
    if rng:
        return Ownership(rng, "args")
    return Ownership((), "unknown")


def _ranges(xs: Sequence[int]) -> str:
    """`0-7,12` for (0, 1, ..., 7, 12)."""
    spans: list[list[int]] = []
    for x in sorted(xs):
        if spans and x == spans[-1][1] + 1:
            spans[-1][1] = x
        else:
            spans.append([x, x])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)
