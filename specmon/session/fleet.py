"""The session model: 1..N hosts (a single host is a fleet of one), what each has sent, drift.

Each host keeps its own `HostState` (servers by their local name, GPUs) and its connection state;
a host that is not connected keeps its last values, marked stale. `FleetSession` implements the
feed events (`specmon.session.events.FeedSink`): the feeds call it headless, the TUI's message
handlers call the same methods, replay calls them too. It owns the drift monitors: each watched
server's monitor is fed every record as it is applied (a record listener), and `tick()` (1 Hz)
refreshes alerts and their causes. The UI, `specmon record` and the Prometheus collector read it.

A multi-node SGLang server (`--nnodes N --node-rank R --dist-init-addr A:P`) shows up as one
launcher per host; `logical_servers()` groups them by (dist-init address, nnodes) into one server
whose GPUs are those of all its nodes and whose log is node 0's.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from specmon.analysis.drift import (
    Alert,
    BaselineStats,
    DriftMonitor,
    DriftParams,
    Estimate,
    StratumDetector,
    stratum_of,
)
from specmon.analysis.fingerprint import fingerprint_of, make_explainer
from specmon.hosts.base import ConnectionState
from specmon.numfmt import unix_time
from specmon.parse.gpu_sample import GpuSample, decode_reasons
from specmon.session.baselines import Baseline
from specmon.session.drift_watch import live_fingerprint, record_baseline, server_gpus
from specmon.session.events import LineItem, ServerInfo
from specmon.session.pays import KIND as PAYS_KIND
from specmon.session.pays import PaysWatcher
from specmon.session.state import HostState, Run, ServerState
from specmon.session.window import DEFAULT_WINDOW_S, current_stats

__all__ = ["ALERT_LEVELS", "FleetSession", "HostView", "LogicalServer", "ServerInfo"]

#: (host, server, role) -> the recorded baseline to compare that server with, or None.
BaselineLookup = Callable[[str, str, "str | None"], Any]
#: called with every applied line (record listeners: drift monitors, headless writers)
RecordListener = Callable[[str, str, LineItem], None]
#: called when a server's alert changes (raised, level/causes changed, cleared)
AlertListener = Callable[[str, str, Alert], None]
#: called with every notice (host, server or "*", text): the UI's status line shows them
NoticeListener = Callable[[str, str, str], None]

ALERT_LEVELS = {"info": 1, "warning": 2, "critical": 3}
NO_SGLANG_S = 30.0  # a tailed file without one SGLang line this long is said so on its panel


class BaselineSaver(Protocol):
    def save(self, baseline: Baseline) -> Any: ...


@dataclass
class Watch:
    """One server watched against one recorded baseline."""

    baseline: Baseline
    monitor: DriftMonitor
    last: Alert | None = None
    history: list[Alert] = field(default_factory=list)
    raised: int = 0  # alerts raised so far (a clear ends one; refreshed causes do not start one)
    notified: int = 0  # of those, how many were notified
    cleared_notified: int = 0
    run: int | None = None  # the server's run whose records the monitor was fed last
    epoch: int = 0  # ... and its stretch of log time (`Run.epoch`: a step back starts one)

    def verdict(self, state: ServerState) -> DriftVerdict:
        """The server against its recorded baseline on its *current* run's own evidence: the
        clean samples of that run in its current stratum (never n 0, never the run before a
        restart: the monitor has not seen this run yet), and OK only when the detector sees
        nothing either (a window that already crossed the threshold, or an alert whose interval
        does not support it, is a change being confirmed, not OK)."""
        mon = self.monitor
        need = mon.p.min_live
        run = state.runs[-1] if state.runs else None
        if run is None or run.last is None or not self.watches(run):
            return DriftVerdict("checking", 0, need)
        det = self._detector(run.last)
        n = len(det.live) if det is not None else 0
        alert = self.last
        if alert is not None and not alert.cleared:
            return DriftVerdict("improved" if alert.level == "info" else "drift", n, need,
                                alert=alert)
        confirming = det is not None and (det.level is not None or det.down_hits > 0
                                          or det.up_hits > 0 or det.crit_hits > 0)
        if n < need or confirming:
            return DriftVerdict("checking", n, need, confirming=confirming and n >= need)
        return DriftVerdict("ok", n, need)

    def watches(self, run: Run) -> bool:
        """Whether the monitor was fed this run's current stretch of log time (a restart, or
        log time stepping back, starts its own verdict: no detector window spans either)."""
        return self.run == run.index and self.epoch == run.epoch

    def _detector(self, rec: Any) -> StratumDetector | None:
        """The monitor's detector for the stratum of record `rec` (the run's newest)."""
        mon = self.monitor
        stratum = stratum_of(rec, mon.p)
        key = "*" if mon.baseline.fixed else (stratum.key if stratum is not None else None)
        return mon.detectors.get(key) if key is not None else None


VERDICTS = ("checking", "ok", "drift", "improved")


@dataclass(frozen=True)
class DriftVerdict:
    """What a drift watch says of a server now: the headline's badge and /metrics' drift
    state read this one verdict."""

    state: str  # "checking" (too few samples of this run, or confirming) | "ok" | "drift" | "improved"
    n: int  # clean samples of the current run in its current stratum
    need: int  # the n a verdict needs
    confirming: bool = False  # n reached, but the detector sees a change not yet raised
    alert: Alert | None = None  # the active alert (drift / improved) of this run


# what the panel of another user's server says (`--all-users` lists them; nothing is tailed)
FOREIGN_TEXT = "another user's process (uid {uid}), listed by --all-users: its log is not tailed"


@dataclass
class HostView:
    """One host of the fleet: its own HostState, connection state and discovered servers."""

    name: str
    session: HostState
    state: ConnectionState = field(default_factory=lambda: ConnectionState("connecting"))
    infos: dict[str, ServerInfo] = field(default_factory=dict)
    last_update: float | None = None  # wall clock of the last line or GPU sample received
    notices: deque[str] = field(default_factory=lambda: deque(maxlen=50))  # about the host

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
                 baselines: BaselineLookup | None = None, store: BaselineSaver | None = None,
                 params: DriftParams | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.hosts: dict[str, HostView] = {}
        self.window_s = window_s
        self.baselines = baselines
        self.store = store
        self.params = params
        self.clock = clock
        self.watches: dict[tuple[str, str], Watch] = {}
        self.baseline_names: dict[tuple[str, str], str] = {}
        self.alerts: dict[tuple[str, str], Alert] = {}  # active (not cleared) drift alerts
        self.pays_alerts: dict[tuple[str, str], Alert] = {}  # active "no longer pays" alerts
        self._pays: dict[str, PaysWatcher] = {}  # per host
        self.record_listeners: list[RecordListener] = []
        self.alert_listeners: list[AlertListener] = []
        self.notice_listeners: list[NoticeListener] = []
        # what a requested baseline goes through before it is stored (the UI redacts secrets)
        self.prepare_baseline: Callable[[Baseline], None] | None = None
        self.read_only = False  # a replay: a requested baseline is refused, nothing is stored
        self._looked_up: set[tuple[str, str]] = set()
        self._declared_at: dict[tuple[str, str], float] = {}
        self._sglang_seen: set[tuple[str, str]] = set()
        for h in hosts:
            self.host(h)

    @classmethod
    def of(cls, session: HostState, **kw: Any) -> FleetSession:
        """A fleet of one around an existing HostState (tests, replay): shown as connected."""
        fleet = cls(**kw)
        fleet.hosts[session.host] = HostView(session.host, session, ConnectionState("connected"))
        return fleet

    def host(self, name: str) -> HostView:
        hv = self.hosts.get(name)
        if hv is None:
            hv = self.hosts[name] = HostView(name, HostState(host=name))
        return hv

    def server(self, host: str, server: str) -> ServerState:
        return self.host(host).session.server(server)

    def servers(self) -> list[tuple[str, ServerState]]:
        """(host, server) of every server, hosts in their order."""
        return [(h, s) for h, hv in self.hosts.items() for s in hv.session.servers.values()]

    # -- the feed events (specmon.session.events.FeedSink) ------------------------------------
    def declare_server(self, host: str, server: str, role: str | None, path: str | None) -> None:
        s = self.server(host, server)
        if role:
            s.role = role
        s.path = path
        s.stale = self.host(host).stale
        if s.status == "unknown":
            s.status = "starting"
        self._declared_at.setdefault((host, server), self.clock())
        self._lookup_baseline(host, server)

    def lines(self, host: str, server: str, items: Sequence[LineItem]) -> None:
        """Apply each line once, in order; every listener sees each applied line."""
        if not items:
            return
        hv = self.host(host)
        s = hv.session.server(server)
        key = (host, server)
        if key not in self._looked_up:
            self._lookup_baseline(host, server)
        w = self.watches.get(key)
        for it in items:
            s.apply(it.text, it.record, it.t, it.skipped)
            if it.record is not None:
                if w is not None:
                    cur = s.runs[-1] if s.runs else None
                    run, epoch = (cur.index, cur.epoch) if cur is not None else (None, 0)
                    if w.run is not None and (run != w.run or epoch != w.epoch):
                        w.monitor.restart()  # every run earns its own verdict (any boundary),
                    w.run, w.epoch = run, epoch  # and so does a step back of log time
                    # vLLM: the engine line once joined with its spec line
                    for rec, t in s.last_released:
                        w.monitor.observe(rec, t)
                self._sglang_seen.add(key)
            for fn in self.record_listeners:
                fn(host, server, it)
        hv.last_update = now = self.clock()
        s.tail_status = self._silent_text(host, server, now)  # lines came: not missing now
        s.stale = hv.stale

    def gpus(self, host: str, samples: Sequence[GpuSample], error: str | None = None) -> None:
        hv = self.host(host)
        if samples:
            hv.session.set_gpus(list(samples))
            hv.last_update = self.clock()
        hv.session.gpu_error = error

    def server_exited(self, host: str, server: str, code: int | None) -> None:
        self.server(host, server).process_exited(code)

    def notice(self, host: str, server: str, text: str) -> None:
        if server == "*":  # about the host, not one server
            self.host(host).notices.append(text)
        else:
            self.server(host, server).notices.append(text)
        for fn in self.notice_listeners:
            fn(host, server, text)

    def tail_missing(self, host: str, server: str, path: str, reason: str) -> None:
        then = "waiting for it to appear" if reason == "no such file" else "retrying"
        self.server(host, server).tail_status = f"{reason}: {path} ({then})"

    def server_probe(self, host: str, server: str, probe: dict[str, Any],
                     running: bool = False, t: float | None = None) -> None:
        self.server(host, server).set_probe(probe, running, self.clock() if t is None else t)

    def server_pids(self, host: str, server: str, pids: Sequence[int]) -> None:
        self.server(host, server).pids = set(pids)

    def host_state(self, host: str, state: ConnectionState) -> None:
        hv = self.host(host)
        hv.state = state
        for s in hv.session.servers.values():
            s.stale = hv.stale

    def host_servers(self, host: str, infos: Iterable[ServerInfo]) -> None:
        self.host(host).infos = {i.name: i for i in infos}
        for i in self.host(host).infos.values():
            if i.foreign_uid is not None:  # said on its panel for as long as it is shown
                self.server(host, i.name).tail_status = FOREIGN_TEXT.format(uid=i.foreign_uid)

    def request_baseline(self, host: str, server: str) -> None:
        """Record and watch (a feed's scenario, or the `b` key); the result is a notice on the
        server, a failure too (one line)."""
        if self.read_only:
            self.notice(host, server, "read-only (a replay): no baseline recorded")
            return
        try:
            b = self.record_baseline(host, server, prepare=self.prepare_baseline)
        except Exception as exc:  # noqa: BLE001 - too few samples, a store error: one line
            self.notice(host, server, f"baseline not recorded: {exc}")
            return
        best = b.stats.best()
        what = (f" ({best.median_thr:.1f} tok/s, n={best.n}, {best.stratum.describe()})"
                if best is not None and best.median_thr is not None else "")
        self.notice(host, server, f"baseline recorded: {b.name}{what}")

    def reset_host(self, host: str, fresh: HostState) -> None:
        """Start the host over from `fresh` (a replay seeking backwards): its servers, GPUs and
        drift state; the HostState object is kept (the UI holds it)."""
        session = self.host(host).session
        session.servers.clear()
        session.servers.update(fresh.servers)
        session.gpus = []
        session.gpu_history.clear()
        session.gpu_error = None
        for key in [k for k in self.watches if k[0] == host]:
            del self.watches[key]
            self.alerts.pop(key, None)
        self._looked_up = {k for k in self._looked_up if k[0] != host}
        self._sglang_seen = {k for k in self._sglang_seen if k[0] != host}

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

    # -- drift: one owner ---------------------------------------------------------------------
    def monitor(self, host: str, server: str) -> DriftMonitor | None:
        w = self.watches.get((host, server))
        return w.monitor if w is not None else None

    def _lookup_baseline(self, host: str, server: str) -> None:
        key = (host, server)
        if self.baselines is None or key in self._looked_up or key in self.watches:
            return
        self._looked_up.add(key)
        b = self.baselines(host, server, self.server(host, server).role)
        if b is not None:
            self.watch(host, server, b)

    def watch(self, host: str, server: str, baseline: Baseline) -> None:
        """Compare what the server sends from now on with `baseline`; alerts get causes from
        the recorded vs the live fingerprint."""
        session = self.host(host).session
        state = session.server(server)
        explain = make_explainer(baseline.fingerprint, lambda: live_fingerprint(session, state))
        mon = DriftMonitor(baseline.stats, self.params, label=baseline.server_label,
                           explain=explain)
        self.watches[(host, server)] = Watch(baseline, mon)
        # the old baseline's alert ends with it: /metrics and the summary read `alerts`, and
        # kept it (with its estimate, under the new name) until the new watch alerted itself
        self.alerts.pop((host, server), None)
        self._looked_up.add((host, server))
        self.baseline_names[(host, server)] = baseline.name
        state.fingerprint = baseline.fingerprint
        best = baseline.stats.best()
        session.baselines.append({
            "name": baseline.name, "server": server, "host": baseline.host,
            "role": baseline.role, "created_at": baseline.created_at,
            "median_tok_s": best.median_thr if best else None, "n": best.n if best else None,
            "stratum": best.stratum.describe() if best else None,
            "stats": baseline.stats.to_json(),  # a snapshot's replay watches it again
        })

    def watch_recorded(self, host: str, server: str, baseline: dict[str, Any],
                       fingerprint: dict[str, Any] | None) -> None:
        """A snapshot's recorded baseline (its `baselines` entry): watched as when it was
        recorded. Its stats are file input: an entry without them, or with bad ones, is left
        (an older snapshot kept only the median)."""
        try:
            stats = BaselineStats.from_json(baseline.get("stats"), self.params)
        except ValueError:
            return
        if not stats.strata:
            return
        try:
            fp = fingerprint_of(fingerprint)
        except ValueError:
            fp = None
        role = baseline.get("role")
        created = unix_time(baseline.get("created_at"))  # (10**400: no OverflowError)
        self.watch(host, server, Baseline(
            str(baseline.get("name") or "recorded")[:200], stats, fp, host=host, server=server,
            role=role if role in ("baseline", "speculative") else None,
            created_at=created if created is not None else 0.0))

    def record_baseline(self, host: str, server: str, name: str | None = None,
                        prepare: Callable[[Baseline], None] | None = None) -> Baseline:
        """The server's current run as its baseline: stored (when there is a store), watched.

        `prepare` sees it before it is stored (the UI redacts its fingerprint there). Raises
        NotEnoughSamples, or the store's error (OSError, sqlite3.Error, BaselineExists).
        """
        session = self.host(host).session
        b = record_baseline(session, session.server(server), name, self.params, self.clock())
        if prepare is not None:
            prepare(b)
        if self.store is not None:
            self.store.save(b)
        self.watch(host, server, b)
        return b

    def tick(self, now: float | None = None) -> list[tuple[str, str, Alert]]:
        """1 Hz: refresh every watched server's drift alert (and causes) and each host's
        "speculation no longer pays" rule (specmon.session.pays); the alerts that changed.

        Each change is also appended to the host's `session.alerts` (snapshots carry them) and
        passed to the alert listeners. Only the owner's clock ticks it (the UI, `record`,
        replay); a /metrics scrape reads the alerts and changes nothing.
        """
        now = self.clock() if now is None else now
        changed: list[tuple[str, str, Alert]] = []
        for h, hv in self.hosts.items():  # vLLM: an engine line whose spec line never came
            for name, st in hv.session.servers.items():
                w0 = self.watches.get((h, name))
                if st.release_stale(now) and w0 is not None:
                    for rec, t in st.last_released:
                        w0.monitor.observe(rec, t)
        for (h, name), w in self.watches.items():
            session = self.host(h).session
            state = session.server(name)
            alert = w.monitor.update(server_gpus(session, state), now)
            if alert is None:
                continue
            if alert.cleared:
                self.alerts.pop((h, name), None)
            else:
                self.alerts[(h, name)] = alert
            prev = w.last
            if not alert.cleared and (prev is None or prev.cleared):
                w.raised += 1
            w.last = alert
            if prev is not None and (prev.level, prev.cleared, prev.kind, prev.causes) == (
                    alert.level, alert.cleared, alert.kind, alert.causes):
                continue
            w.history.append(alert)
            changed.append((h, name, alert))
            session.alerts.append({
                "t": now, "server": name, "level": alert.level, "kind": alert.kind,
                "text": alert.text, "causes": list(alert.causes),
                "cause": "; ".join(alert.causes) or None, "cleared": alert.cleared,
            })
            for fn in self.alert_listeners:
                fn(h, name, alert)
        for h, hv in self.hosts.items():
            pw = self._pays.setdefault(h, PaysWatcher())
            for d in pw.tick(hv.session, now, self.window_s):
                alert = Alert(level=d["level"], text=d["text"], causes=tuple(d["causes"]),
                              started_at=now, cleared=d["cleared"], kind=PAYS_KIND)
                key = (h, d["server"])
                if alert.cleared:
                    self.pays_alerts.pop(key, None)
                else:
                    self.pays_alerts[key] = alert
                hv.session.alerts.append(d)
                changed.append((h, d["server"], alert))
                for fn in self.alert_listeners:
                    fn(h, d["server"], alert)
        self._check_silent_tails(now)
        return changed

    def should_notify(self, host: str, server: str, alert: Alert) -> bool:
        """True once per alert raised (and once when it clears): a change of level or causes
        of an active alert updates the banner, not another notification."""
        if alert.kind == PAYS_KIND:  # the rule reports only raises and clears
            return True
        w = self.watches.get((host, server))
        if w is None:
            return False
        if alert.cleared:
            if w.cleared_notified < w.raised:
                w.cleared_notified = w.raised
                return True
            return False
        if w.notified < w.raised:
            w.notified = w.raised
            return True
        return False

    def active_alerts(self) -> list[tuple[str, str, Alert]]:
        """Every active alert of every (host, server): drift and "no longer pays"."""
        return [(h, s, a) for (h, s), a in self.alerts.items()] + \
            [(h, s, a) for (h, s), a in self.pays_alerts.items()]

    def _silent_text(self, host: str, server: str, now: float) -> str | None:
        """Said on the panel of a tailed file that gave no SGLang line for NO_SGLANG_S."""
        key = (host, server)
        t0 = self._declared_at.get(key)
        st = self.server(host, server)
        if key in self._sglang_seen or t0 is None or now - t0 < NO_SGLANG_S or not st.path:
            return None
        return (f"no SGLang or vLLM line from {st.path} in {NO_SGLANG_S:.0f} s (an idle server, "
                "or not its log?)")

    def _check_silent_tails(self, now: float) -> None:
        for h, name in self._declared_at:
            st = self.server(h, name)
            if st.tail_status is None:
                st.tail_status = self._silent_text(h, name, now)

    def drift_estimate(self, host: str, server: str) -> Estimate | None:
        """Live vs recorded for the server's current stratum (the active alert's if any)."""
        mon = self.monitor(host, server)
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
        mon = self.monitor(host, server)
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
