"""Several hosts in one session: per-host state, multi-node servers, drift alerts, summary rows.

Each host keeps its own `Session` (servers by their local name, GPUs) and its own connection
state; a host that is not connected keeps its last values, marked stale. Everything here is
pure state and pure functions of it: the feeds (`specmon.feeds.fleet`) write into it on one
event loop, and the UI, `specmon record` and the Prometheus collector read it.

A multi-node SGLang server (`--nnodes N --node-rank R --dist-init-addr A:P`) shows up as one
launcher per host; `logical_servers()` groups them by (dist-init address, nnodes) into one server
whose GPUs are those of all its nodes and whose log is node 0's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from specmon.analysis.drift import Alert, DriftMonitor, Estimate, stratum_of
from specmon.analysis.window import DEFAULT_WINDOW_S, current_stats
from specmon.hosts.base import ConnectionState
from specmon.parse.argv import flag_values
from specmon.parse.gpu import decode_reasons
from specmon.session.state import ServerState, Session
from specmon.sources.discovery import DiscoveredServer

#: (host, server, role) -> the recorded baseline to compare that server with, or None.
BaselineLookup = Callable[[str, str, "str | None"], Any]

ALERT_LEVELS = {"info": 1, "warning": 2, "critical": 3}


def _int_flag(flags: dict[str, str | bool], *names: str) -> int | None:
    for n in names:
        v = flags.get(n)
        if isinstance(v, str) and v.isdigit():
            return int(v)
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
        )

    @property
    def gpus_per_node(self) -> int:
        return max(1, (self.tp_size * self.pp_size) // max(1, self.nnodes))

    def gpu_indices(self, samples: Sequence[Any]) -> list[int]:
        """GPUs this server uses on its host: those running its worker processes (NVML
        compute processes) when known, else the range its arguments imply."""
        pids = set(self.worker_pids) | ({self.pid} if self.pid else set())
        by_proc = sorted({g.index for g in samples if g.index is not None and g.processes
                          and any(p.pid in pids for p in g.processes)})
        if by_proc:
            return by_proc
        return list(range(self.base_gpu_id, self.base_gpu_id + self.gpus_per_node))


@dataclass
class HostView:
    """One host of the fleet: its own Session, connection state and discovered servers."""

    name: str
    session: Session
    state: ConnectionState = field(default_factory=lambda: ConnectionState("connecting"))
    infos: dict[str, ServerInfo] = field(default_factory=dict)
    last_update: float | None = None  # wall clock of the last line or GPU sample received

    @property
    def stale(self) -> bool:
        """Not connected: what we show are the last values received."""
        return self.state.state != "connected"


@dataclass(frozen=True)
class LogicalServer:
    """One SGLang server as the user thinks of it, possibly spanning several hosts."""

    host: str  # where its log comes from (node 0); the first member's host if node 0 is unseen
    server: str
    role: str | None
    members: tuple[tuple[str, ServerInfo], ...]  # (host, info) by node rank

    @property
    def key(self) -> str:
        return f"{self.host}/{self.server}"

    @property
    def multi_node(self) -> bool:
        return len(self.members) > 1 or any(i.nnodes > 1 for _, i in self.members)


@dataclass(frozen=True)
class GpuRef:
    host: str
    index: int
    clock_sm: int | None = None
    max_clock_sm: int | None = None
    temp_gpu: float | None = None
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class ServerRow:
    name: str
    role: str | None
    status: str
    running_req: int | None
    tok_s: float | None  # window median of gen throughput at the current #running-req
    accept_len: float | None
    alert_level: str | None  # None | info | warning | critical (active alerts only)


@dataclass(frozen=True)
class HostSummary:
    """The per-host summary row: servers, tok/s, alerts, hottest GPU, slowest clock."""

    host: str
    state: str  # connecting | connected | reconnecting | failed | closed
    state_text: str  # e.g. "reconnecting in 4s", "failed: ..."
    stale: bool
    servers: tuple[ServerRow, ...]
    tok_s: float | None  # sum of the servers' tok/s (None when none has a value)
    alerts: int  # active warning/critical alerts
    hottest_gpu: GpuRef | None
    slowest_clock: GpuRef | None  # lowest SM clock / max among GPUs that are not idle
    age_s: float | None  # seconds since the host last sent anything


class FleetSession:
    """The hosts of one specmon session and what each has sent; mutated on one event loop."""

    def __init__(self, hosts: Iterable[str] = (), *, window_s: float = DEFAULT_WINDOW_S,
                 baselines: BaselineLookup | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.hosts: dict[str, HostView] = {}
        self.window_s = window_s
        self.baselines = baselines
        self.clock = clock
        self.monitors: dict[tuple[str, str], DriftMonitor] = {}
        self.baseline_names: dict[tuple[str, str], str] = {}
        self.alerts: dict[tuple[str, str], Alert] = {}
        self._looked_up: set[tuple[str, str]] = set()
        for h in hosts:
            self.host(h)

    def host(self, name: str) -> HostView:
        hv = self.hosts.get(name)
        if hv is None:
            hv = self.hosts[name] = HostView(name, Session(host=name))
        return hv

    # -- writes (from the feeds) -------------------------------------------------------------
    def set_state(self, host: str, state: ConnectionState) -> None:
        hv = self.host(host)
        hv.state = state
        hv.session.connection = "connected" if state.state == "connected" else \
            f"{host}: {state.describe()}"
        for s in hv.session.servers.values():
            s.stale = hv.stale

    def set_servers(self, host: str, infos: Iterable[ServerInfo]) -> None:
        hv = self.host(host)
        hv.infos = {i.name: i for i in infos}

    def touch(self, host: str) -> None:
        self.host(host).last_update = self.clock()

    # -- multi-node --------------------------------------------------------------------------
    def logical_servers(self) -> list[LogicalServer]:
        """Servers across hosts; multi-node launchers grouped by (dist-init address, nnodes)."""
        groups: dict[tuple[str, int], list[tuple[str, ServerInfo]]] = {}
        out: list[LogicalServer] = []
        seen: set[tuple[str, str]] = set()
        for h, hv in self.hosts.items():
            for info in hv.infos.values():
                seen.add((h, info.name))
                if info.nnodes > 1 and info.dist_init:
                    groups.setdefault((info.dist_init, info.nnodes), []).append((h, info))
                else:
                    st = hv.session.servers.get(info.name)
                    out.append(LogicalServer(h, info.name, (st.role if st else None) or info.role,
                                             ((h, info),)))
            for name, st in hv.session.servers.items():  # --log servers (no discovery info)
                if (h, name) not in seen:
                    out.append(LogicalServer(h, name, st.role, ((h, ServerInfo(name, st.role)),)))
        for members in groups.values():
            members.sort(key=lambda m: (m[1].node_rank, m[0]))
            head_host, head = members[0]
            st = self.hosts[head_host].session.servers.get(head.name)
            out.append(LogicalServer(head_host, head.name, (st.role if st else None) or head.role,
                                     tuple(members)))
        out.sort(key=lambda s: (list(self.hosts).index(s.host), s.server))
        return out

    def server_gpus(self, ls: LogicalServer) -> list[tuple[str, Any]]:
        """(host, GpuSample) for every GPU of a logical server, across its nodes."""
        out: list[tuple[str, Any]] = []
        for h, info in ls.members:
            samples = self.host(h).session.gpus
            idx = set(info.gpu_indices(samples))
            out.extend((h, g) for g in samples if g.index in idx)
        return out

    # -- drift -------------------------------------------------------------------------------
    def monitor(self, host: str, server: str) -> DriftMonitor | None:
        return self.monitors.get((host, server))

    def update_alerts(self, now: float | None = None) -> None:
        """Feed new decode points to each server's drift monitor (idempotent; cheap at 1 Hz)."""
        now = self.clock() if now is None else now
        for h, hv in self.hosts.items():
            for name, st in hv.session.servers.items():
                key = (h, name)
                mon = self.monitors.get(key)
                if mon is None and self.baselines is not None and key not in self._looked_up:
                    self._looked_up.add(key)
                    b = self.baselines(h, name, st.role)
                    if b is not None:
                        mon = self.monitors[key] = DriftMonitor(
                            b.stats, label=getattr(b, "server_label", None) or name)
                        self.baseline_names[key] = getattr(b, "name", "") or ""
                if mon is None:
                    continue
                a = mon.update(st, hv.session.gpus, now)
                if a is None or a.cleared:
                    self.alerts.pop(key, None)
                else:
                    self.alerts[key] = a

    def drift_estimate(self, host: str, server: str) -> Estimate | None:
        """Live vs recorded for the server's current stratum (the active alert's if any)."""
        mon = self.monitors.get((host, server))
        if mon is None:
            return None
        a = self.alerts.get((host, server))
        if a is not None and a.estimate is not None:
            return a.estimate
        st = self.host(host).session.servers.get(server)
        if st is None or st.last_decode is None:
            return None
        stratum = stratum_of(st.last_decode, mon.p)
        key = "*" if mon.baseline.fixed else (stratum.key if stratum else None)
        det = mon.detectors.get(key or "")
        return det.estimate(since_onset=False) if det is not None else None

    def baseline_value(self, host: str, server: str) -> float | None:
        """Recorded baseline tok/s for the server's current stratum (else its best stratum)."""
        est = self.drift_estimate(host, server)
        if est is not None and est.metric == "tok/s":
            return est.base
        mon = self.monitors.get((host, server))
        if mon is None:
            return None
        st = self.host(host).session.servers.get(server)
        b = None
        if st is not None and st.last_decode is not None:
            stratum = stratum_of(st.last_decode, mon.p)
            b = mon.baseline.strata.get("*" if mon.baseline.fixed else (stratum.key if stratum else ""))
        b = b or mon.baseline.best()
        return b.median_thr if b is not None else None

    # -- summary rows ------------------------------------------------------------------------
    def summary(self, now: float | None = None) -> list[HostSummary]:
        now = self.clock() if now is None else now
        return [host_summary(self, h, now) for h in self.hosts]


def _server_row(fleet: FleetSession, host: str, st: ServerState, now: float) -> ServerRow:
    ws = current_stats(st, now, fleet.window_s)
    a = fleet.alerts.get((host, st.name))
    return ServerRow(
        name=st.name, role=st.role, status=st.status,
        running_req=st.last_decode.running_req if st.last_decode else None,
        tok_s=ws.median if ws else None, accept_len=ws.accept_len if ws else None,
        alert_level=a.level if a is not None and not a.cleared else None,
    )


def gpu_ref(host: str, g: Any) -> GpuRef:
    return GpuRef(host, g.index, g.clock_sm, g.max_clock_sm, g.temp_gpu,
                  decode_reasons(g.clocks_event_reasons))


def hottest_gpu(host: str, samples: Sequence[Any]) -> GpuRef | None:
    hot = [g for g in samples if g.temp_gpu is not None and g.index is not None]
    return gpu_ref(host, max(hot, key=lambda g: g.temp_gpu)) if hot else None


def slowest_clock(host: str, samples: Sequence[Any]) -> GpuRef | None:
    """The GPU furthest below its max SM clock, ignoring idle GPUs (idle clocks are low on
    purpose and say nothing about throttling)."""
    busy = [g for g in samples if g.clock_sm is not None and g.index is not None
            and "GpuIdle" not in decode_reasons(g.clocks_event_reasons)]
    if not busy:
        return None
    g = min(busy, key=lambda g: (g.clock_sm / g.max_clock_sm if g.max_clock_sm else 1.0, g.clock_sm))
    return gpu_ref(host, g)


def host_summary(fleet: FleetSession, host: str, now: float) -> HostSummary:
    """Pure: the summary row of one host from the fleet's state."""
    hv = fleet.host(host)
    rows = tuple(_server_row(fleet, host, st, now) for st in hv.session.servers.values())
    toks = [r.tok_s for r in rows if r.tok_s is not None]
    gpus = hv.session.gpus
    return HostSummary(
        host=host, state=hv.state.state, state_text=hv.state.describe(), stale=hv.stale,
        servers=rows, tok_s=sum(toks) if toks else None,
        alerts=sum(1 for r in rows if r.alert_level in ("warning", "critical")),
        hottest_gpu=hottest_gpu(host, gpus), slowest_clock=slowest_clock(host, gpus),
        age_s=None if hv.last_update is None else max(0.0, now - hv.last_update),
    )
