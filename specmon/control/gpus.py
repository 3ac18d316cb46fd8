"""Which processes hold which GPUs on a host (NVML compute processes), for busy-GPU refusal.

`NvmlGpuProbe` runs the GPU agent once through the Host (one sample, processes included);
`SimGpuProbe` asks the simulated host (`specmon sim gpus`) the same question. Both answer
`{gpu index: [pid, ...]}`, or None when the host cannot tell (then nothing is refused on a
guess: the caller says "GPU state unknown").
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from specmon.hosts.base import Host, HostError

if TYPE_CHECKING:
    from specmon.parse.gpu_sample import GpuSample

GpuPids = dict[int, list[int]]


class GpuProbe(Protocol):
    async def compute_pids(self) -> GpuPids | None: ...


class NvmlGpuProbe:
    """One sample (compute processes included) from the host agent's NVML stream."""

    def __init__(self, host: Host, python: str | None = None, timeout: float = 30.0) -> None:
        self.host = host
        self.python = python
        self.timeout = timeout
        self.problem: str | None = None

    async def compute_pids(self) -> GpuPids | None:
        from specmon.sources.gpu_poll import GpuSourceError, RemoteAgentSource

        src = RemoteAgentSource(self.host, interval=0.5, python=self.python, fallback_smi=False,
                                startup_timeout=self.timeout, proc_interval=0.0, count=1)
        it = src.__aiter__()
        try:
            batch = await it.__anext__()
        except (GpuSourceError, StopAsyncIteration, HostError, OSError) as exc:
            self.problem = str(exc) or type(exc).__name__
            return None
        finally:
            await it.aclose()
        out, problem = pids_of(batch)
        if problem is not None:
            self.problem = problem
        return out


def pids_of(batch: Sequence[GpuSample]) -> tuple[GpuPids | None, str | None]:
    """({gpu index: pids}, None) from one sample of every GPU, or (None, why) when a GPU's
    processes or its index are unknown: pids filed under no index would leave that GPU
    looking free."""
    out: GpuPids = {}
    for s in batch:
        if s.index is None:
            return None, "a GPU sample without an index"
        if s.processes is None:
            return None, f"GPU {s.index}: compute processes not readable"
        out[s.index] = [p.pid for p in s.processes]
    return out, None


class SimGpuProbe:
    """The simulated host's GPUs: `python -m specmon sim gpus --sim-dir DIR` on the host."""

    def __init__(self, host: Host, sim_dir: str, python: str | None = None, n_gpus: int = 8) -> None:
        self.host = host
        self.sim_dir = sim_dir
        self.python = python or host.python
        self.n_gpus = n_gpus
        self.problem: str | None = None

    async def compute_pids(self) -> GpuPids | None:
        res = await self.host.run([self.python, "-m", "specmon", "sim", "gpus", "--sim-dir",
                                   self.sim_dir, "--n-gpus", str(self.n_gpus)], timeout=60)
        if res.rc != 0:
            self.problem = (res.stderr.strip().splitlines() or [f"exit {res.rc}"])[-1]
            return None
        out: GpuPids = {}
        for line in res.stdout.splitlines():
            if not line.strip():
                continue
            g = json.loads(line)
            out[int(g["index"])] = [int(p["pid"]) for p in g.get("processes") or []]
        return out
