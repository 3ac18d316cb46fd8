"""What a feed tells the session model, one method per event; the model implements them.

Every live path speaks this one protocol: a host feed (SSH or local), the demo's simulated host
and a snapshot replay call a `FeedSink`; the session model (`FleetSession`) is one, and the
TUI's sink posts a message per call whose handler calls the same method on the same model. So
state changes in exactly one place, whoever shows it. Servers are keyed by (host, server).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from specmon.hosts.base import ConnectionState
from specmon.numfmt import ascii_int
from specmon.parse.argv import flag_values
from specmon.parse.gpu_sample import GpuSample
from specmon.parse.sglang import Record
from specmon.sources.discovery import MAX_PARALLEL, DiscoveredServer


@dataclass(frozen=True, slots=True)
class LineItem:
    """One received log line, its parsed record (None: a line specmon does not use) and when
    specmon received it (wall clock; statistics use SGLang's own timestamps, not this)."""

    text: str
    record: Record | None
    t: float
    skipped: int = 0  # bytes of the log not read right before this line (history after the head)


def _int_flag(flags: dict[str, str | bool], *names: str) -> int | None:
    """A size or rank from the server's command line: ASCII digits, bounded (numfmt)."""
    for n in names:
        v = ascii_int(flags.get(n), 0, MAX_PARALLEL)
        if v is not None:
            return v
    return None


@dataclass(frozen=True)
class ServerInfo:
    """What discovery (or the command line) says about one server process on one host."""

    name: str
    role: str | None = None
    pid: int | None = None
    tp_size: int = 1
    pp_size: int = 1
    nnodes: int = 1
    node_rank: int = 0
    dist_init: str | None = None  # --dist-init-addr HOST:PORT (multi-node rendezvous)
    base_gpu_id: int = 0
    worker_pids: tuple[int, ...] = ()
    foreign_uid: int | None = None  # another user's process (listed with --all-users)

    @classmethod
    def from_discovered(cls, d: DiscoveredServer) -> ServerInfo:
        flags = flag_values(d.argv)
        dist = flags.get("--dist-init-addr") or flags.get("--nccl-init-addr")
        return cls(
            name=d.name, role=d.kind, pid=d.pid, tp_size=d.tp_size or 1,
            pp_size=_int_flag(flags, "--pp-size", "--pipeline-parallel-size") or 1,
            nnodes=_int_flag(flags, "--nnodes") or 1,
            node_rank=_int_flag(flags, "--node-rank") or 0,
            dist_init=dist if isinstance(dist, str) and dist else None,
            base_gpu_id=_int_flag(flags, "--base-gpu-id") or 0,
            worker_pids=tuple(pid for pid, _ in d.workers),
            foreign_uid=None if d.own else d.uid,
        )

    def gpu_indices(self, samples: Sequence[GpuSample]) -> list[int]:
        """GPUs this server uses on its host, by the one ownership rule
        (specmon.session.ownership: its processes, else its arguments)."""
        from specmon.session.ownership import owned_gpus

        pids = set(self.worker_pids) | ({self.pid} if self.pid else set())
        return list(owned_gpus(samples, pids, {
            "tp_size": self.tp_size, "pp_size": self.pp_size, "nnodes": self.nnodes,
            "base_gpu_id": self.base_gpu_id}).indices)


class FeedSink(Protocol):
    """The feed events. `host` names the feed's host; `server` is unique within its host."""

    def declare_server(self, host: str, server: str, role: str | None, path: str | None) -> None:
        """A server the feed will send lines for (role when known, the log it reads)."""

    def lines(self, host: str, server: str, items: Sequence[LineItem]) -> None:
        """A batch of received lines, in order."""

    def tick(self, now: float | None = None) -> object:
        """The model's 1 Hz clock on the feed's own time: a replay ticks at each recorded
        second (as `session.offline.play` does for a report), so its alerts are the report's;
        live feeds leave ticking to their owner's wall clock."""

    def gpus(self, host: str, samples: Sequence[GpuSample], error: str | None = None) -> None:
        """One poll of the host's GPUs (empty with `error` when the source failed)."""

    def server_exited(self, host: str, server: str, code: int | None) -> None: ...

    def notice(self, host: str, server: str, text: str) -> None:
        """Something the user should read about a server (or "*": the host)."""

    def host_state(self, host: str, state: ConnectionState) -> None: ...

    def host_servers(self, host: str, infos: Sequence[ServerInfo]) -> None:
        """What discovery found on the host (multi-node arguments, pids)."""

    def server_pids(self, host: str, server: str, pids: Sequence[int]) -> None: ...

    def tail_missing(self, host: str, server: str, path: str, reason: str) -> None:
        """The server's log cannot be read (yet): the tail keeps waiting for it."""

    def server_probe(self, host: str, server: str, probe: dict[str, Any],
                     running: bool = False, t: float | None = None) -> None:
        """The fingerprint probe of a launch about to start (the next run takes it), or, with
        `running`, of the server process running now (its current run takes it). `t`: when it
        was taken, for a recorded one (a replay pushes many at once); live: now."""

    def request_baseline(self, host: str, server: str) -> None:
        """Record the server's current run as its baseline (a scenario, like pressing `b`)."""

    def watch_recorded(self, host: str, server: str, baseline: dict[str, Any],
                       fingerprint: dict[str, Any] | None) -> None:
        """A baseline recorded earlier, as a snapshot kept it (name, role, created_at, stats)
        with its fingerprint: watched from here on, so a replay or a report compares the
        server against it as the screen did (drift, the speedup vs the recorded baseline)."""


class Feed(Protocol):
    async def run(self, sink: FeedSink) -> None:
        """Produce until cancelled; must clean up everything it started when cancelled."""
