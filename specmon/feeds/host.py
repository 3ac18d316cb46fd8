"""One feed per real host (SSH or local): `HostFeed`; `HostFeeds` runs several side by side.

A single host is a fleet of one: `connect box`, `connect a b c`, `--prometheus`, `--config` and
`record` all run HostFeeds into the one session model through `FeedSink` (one method per event,
servers keyed by (host, server)).

A host never blocks the others: connecting, discovery and reconnects run per host; a host whose
first connection fails is retried with backoff (unless its key or login was refused: those need
the user), and its last values stay in the session, marked stale.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from specmon.feeds.common import cancel_all, live_gc, pump_gpus, pump_tail
from specmon.hosts.agent_client import AgentClient
from specmon.hosts.base import ConnectionState, Host, HostAuthError, HostError, HostKeyError
from specmon.parse.gpu_sample import GpuSample
from specmon.parse.sglang import EventRecord, Record
from specmon.session.events import FeedSink, ServerInfo
from specmon.sources.discovery import ALL_USERS_NOTE, DiscoveredServer, discover
from specmon.sources.gpu_poll import RemoteAgentSource
from specmon.sources.tail import LogLine, LogTailer, TailSpec

# A relaunch's probe: discovery again after the launch line, until the launcher has as many TP
# workers as it runs (their environment is read once they exist), at these delays (s, summed).
RELAUNCH_DELAYS = (1.0, 2.0, 3.0, 5.0, 8.0, 13.0)
EXIT_POLL_S = 5.0  # how often the probed launchers are checked for having exited
HISTORY_WAIT_S = 30.0  # a probe waits this long at most for its server's history lines


def _roles_from_names(specs: list[TailSpec]) -> dict[str, str]:
    """A --log NAME containing 'base' or 'spec'/'eagle'/'mtp' sets the role (as in connect)."""
    roles = {}
    for spec in specs:
        low = spec.name.lower()
        if "spec" in low or "eagle" in low or "mtp" in low:
            roles[spec.name] = "speculative"
        elif "base" in low:
            roles[spec.name] = "baseline"
    return roles


class HostFeed:
    """One host: connect (retrying), discover or take --log files, tail node-0 logs, poll GPUs."""

    def __init__(self, host: Host, specs: list[TailSpec] | None = None, *,
                 history_lines: int | None = 2000, gpu_interval: float = 1.0,
                 gpu_retry_s: float = 10.0, python: str | None = None,
                 tap: Callable[[str, LogLine, Record | None, bool], None] | None = None,
                 gpu_tap: Callable[[str, list[GpuSample]], None] | None = None,
                 roles: dict[str, str] | None = None,
                 retry_max_s: float = 30.0, all_users: bool = False) -> None:
        self.host = host
        self.specs = list(specs or [])
        self.history_lines = history_lines
        self.gpu_interval = gpu_interval
        self.gpu_retry_s = gpu_retry_s
        self.python = python  # configured ([hosts.NAME] python), never a discovered argv[0]
        self.all_users = all_users
        self.tap = tap
        self.gpu_tap = gpu_tap
        self.retry_max_s = retry_max_s
        self.roles = {**_roles_from_names(self.specs), **(roles or {})}
        self.discovered: list[DiscoveredServer] = []
        self._connecting = False
        self._tailers: list[LogTailer] = []
        self._tail_tasks: list[asyncio.Task[None]] = []
        self._probed: dict[str, DiscoveredServer] = {}  # tailed server -> its process probed
        self._exited: set[str] = set()  # tailed servers whose probed launcher has exited
        self._relaunched: set[str] = set()  # tailed servers whose log printed a launch line
        self._live: set[str] = set()  # tailed servers probed after their history was read
        self._superseded: set[str] = set()  # ... whose probed process a relaunch replaced
        self._relaunch = asyncio.Event()
        self._history_done: set[str] = set()  # tailed servers whose history reached the sink

    async def drain(self, timeout: float) -> None:
        """Stop reading the logs and let every line already received reach the sink and the
        tap (`record` stopping on a signal writes what it got), for at most `timeout` s."""
        for tailer in self._tailers:
            tailer.stop()
        if self._tail_tasks:
            await asyncio.wait(self._tail_tasks, timeout=timeout)

    def lines_received(self) -> int:
        """Log lines its tails have handed over so far."""
        return sum(t.lines_out for t in self._tailers)

    @property
    def name(self) -> str:
        return self.host.name

    def _delay(self, attempt: int) -> float:
        backoff = getattr(self.host, "backoff", None)
        if callable(backoff):
            return float(backoff(attempt))
        return min(self.retry_max_s, 2.0 ** attempt)

    async def _connect(self, sink: FeedSink) -> bool:
        """Connect, retrying transient failures with backoff; False if refused for good."""
        attempt = 0
        self._connecting = True
        try:
            while self.host.state.state != "connected":
                try:
                    await self.host.connect()
                except (HostKeyError, HostAuthError) as exc:
                    sink.host_state(self.name, ConnectionState("failed", reason=str(exc)))
                    return False
                except HostError as exc:
                    delay = self._delay(attempt)
                    attempt += 1
                    sink.host_state(self.name, ConnectionState(
                        "reconnecting", reason=str(exc), next_in_s=delay,
                        retry_at=time.monotonic() + delay, attempt=attempt))
                    await asyncio.sleep(delay)
        finally:
            self._connecting = False
        sink.host_state(self.name, self.host.state)
        return True

    async def _discover(self, sink: FeedSink) -> None:
        """Discovery through the agent, retried while the host is away."""
        attempt = 0
        while True:
            try:
                self.discovered = await self._discover_once(all_users=self.all_users)
                return
            except (HostKeyError, HostAuthError):
                raise
            except HostError as exc:
                if self.host.state.state in ("failed", "closed"):
                    raise
                await asyncio.sleep(min(self._delay(attempt), 5.0))
                attempt += 1
                sink.notice(self.name, "*", f"discovery failed, retrying: {exc}")

    async def _probe_servers(self, sink: FeedSink) -> None:
        """The fingerprint probe of each tailed, discovered server of the user's own, then of
        each relaunch of one (`_follow_relaunches`)."""
        tailed = {spec.name for spec in self.specs}
        for s in self.discovered:
            if s.own and s.name in tailed:
                await self._probe(sink, s.name, s)
        await self._follow_relaunches(sink)

    async def _probe(self, sink: FeedSink, name: str, s: DiscoveredServer) -> None:
        """Probe server process `s` for tailed server `name`: its engine's installed files
        hashed against the wheel's RECORD, read by the host's agent where that process imports
        from (nothing of the server is run), and the environment of its launcher and TP
        workers. Its pids (GPU ownership) and probe join the server's current run, so a patched
        file or a variable the workers lack can be named as a drift cause."""
        from specmon.feeds.probe import probe_pid

        self._probed[name] = s
        self._exited.discard(name)
        self._superseded.discard(name)
        sink.server_pids(self.name, name, [s.pid, *(pid for pid, _ in s.workers)])
        res = await probe_pid(self.host, s.pid, s.engine, s.workers)
        # the process probed writes the log's newest run: once the history's lines are in,
        # that run is the current one (before, the probe would land on no run, or an older one)
        deadline = time.monotonic() + HISTORY_WAIT_S
        while name not in self._history_done and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if res:
            sink.server_probe(self.name, name, res, running=True)
        self._live.add(name)

    def _saw_launch(self, server: str) -> None:
        """A launch line in a tailed log after the probe (the history's launch lines are the
        probed process's own and older runs'): the server was relaunched. Its new processes
        are other ones, whose pids and environment the new run must have (not the old run's),
        and the old process's exit says nothing more (its run ended at this line; reported
        now, it would end the new run)."""
        if server in self._live:
            self._relaunched.add(server)
            self._superseded.add(server)
            self._relaunch.set()

    async def _follow_relaunches(self, sink: FeedSink) -> None:
        """For each launch line of a probed server: discovery again until a launcher of the
        user's own writes that log under another pid with its TP workers up, then its probe.
        One that finds the probed process still writing the log (it printed the line) ends."""
        paths = {spec.name: spec.path for spec in self.specs}
        while True:
            await self._relaunch.wait()
            self._relaunch.clear()
            pending, self._relaunched = self._relaunched, set()
            found: dict[str, DiscoveredServer] = {}
            for delay in RELAUNCH_DELAYS:
                await asyncio.sleep(delay)
                try:
                    servers = await self._discover_once()
                except asyncio.CancelledError:
                    raise
                except Exception:  # noqa: BLE001 - the host is away: try again, then give up
                    continue
                for name in list(pending):
                    writers = [s for s in servers if s.own and s.log_path == paths.get(name)]
                    new = [s for s in writers if s.pid != self._probed[name].pid]
                    if new:
                        found[name] = new[0]
                    elif writers:
                        pending.discard(name)  # the process probed printed it: no relaunch
                        self._superseded.discard(name)
                if set(found) >= pending and all(
                        len(s.workers) >= (s.tp_size or 1) for s in found.values()):
                    break
            for name, s in found.items():
                await self._probe(sink, name, s)

    async def _watch_exits(self, sink: FeedSink) -> None:
        """A probed launcher that is gone (stopped, crashed, killed: a server started by hand
        says nothing to us) ends its server's run: the panel says stopped and the speedup says
        how long ago the run ended, instead of showing its last numbers as live. A launcher is
        alive while a process of the user's own has its pid and command line; one a relaunch
        replaced is not watched (its run ended at the relaunch's launch line)."""
        while True:
            await asyncio.sleep(EXIT_POLL_S)
            if not self._probed or self.host.state.state != "connected":
                continue
            try:
                async with AgentClient(self.host) as agent:
                    rows = await agent.request("procs", all_users=False)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - the host is away: the next poll tries again
                continue
            alive = {(r[0], tuple(r[3])) for r in rows if isinstance(r, list) and len(r) == 4
                     and isinstance(r[3], list)} if isinstance(rows, list) else set()
            for name, s in list(self._probed.items()):  # (a reused pid has another argv)
                if name not in self._exited and name not in self._superseded \
                        and (s.pid, tuple(s.argv)) not in alive:
                    self._exited.add(name)
                    sink.server_exited(self.name, name, None)
                    sink.notice(self.name, name, f"process {s.pid} has exited: its run ended")

    async def _discover_once(self, all_users: bool = False) -> list[DiscoveredServer]:
        await self.host.wait_connected()
        agent = AgentClient(self.host)
        await agent.start()
        try:
            return await discover(agent, all_users=all_users)
        finally:
            await agent.close()

    async def run(self, sink: FeedSink) -> None:
        def on_state(st: ConnectionState) -> None:
            # while _connect retries, it reports "reconnecting in Ns" itself; the host's own
            # connecting/failed flips of each attempt would only be noise
            if not (self._connecting and st.state in ("connecting", "failed")):
                sink.host_state(self.name, st)

        remove = self.host.add_state_listener(on_state)
        sink.host_state(self.name, self.host.state)
        try:
            if not await self._connect(sink):
                return
            infos: list[ServerInfo] = []
            if not self.specs:
                if self.all_users:
                    sink.notice(self.name, "*", ALL_USERS_NOTE)
                await self._discover(sink)
                for s in self.discovered:
                    info = ServerInfo.from_discovered(s)
                    infos.append(info)
                    if info.node_rank > 0:
                        continue  # logs come from node 0; this node adds its GPUs
                    if s.log_path:
                        self.specs.append(TailSpec(s.name, s.log_path))
                        self.roles[s.name] = s.kind
                    else:
                        sink.notice(self.name, s.name, s.describe())
                if not self.specs:
                    sink.notice(self.name, "*", "no SGLang server with a readable log found; "
                                "pass --log NAME=PATH")
            else:
                infos = [ServerInfo(s.name, self.roles.get(s.name)) for s in self.specs]
            sink.host_servers(self.name, infos)
            for spec in self.specs:
                role = self.roles.get(spec.name)
                sink.declare_server(self.name, spec.name,
                                    role if role in ("baseline", "speculative") else None,
                                    spec.path)
            python = self.python  # a discovered server's argv[0] is never run
            gtap = None
            if self.gpu_tap is not None:
                gouter = self.gpu_tap

                def gtap(samples: list[GpuSample]) -> None:
                    gouter(self.name, samples)

            tasks = [asyncio.create_task(pump_gpus(
                RemoteAgentSource(self.host, self.gpu_interval, python=python), self.name, sink,
                retry_s=self.gpu_retry_s, tap=gtap))]
            if self.specs:
                outer, name, saw_launch = self.tap, self.name, self._saw_launch

                def tap(ev: LogLine, rec: Record | None, whole: bool) -> None:
                    if isinstance(rec, EventRecord) and rec.kind == "server_args":
                        saw_launch(ev.server)
                    if outer is not None:
                        outer(name, ev, rec, whole)

                tailer = LogTailer(self.host, self.specs, history_lines=self.history_lines)
                self._tailers.append(tailer)
                self._tail_tasks.append(asyncio.create_task(pump_tail(
                    tailer, self.name, sink, tap=tap, on_history_end=self._history_done.add)))
                tasks.append(self._tail_tasks[-1])
            tasks.append(asyncio.create_task(self._probe_servers(sink)))
            tasks.append(asyncio.create_task(self._watch_exits(sink)))
            try:
                await asyncio.gather(*tasks)
            finally:
                await cancel_all(tasks)
        finally:
            remove()
            with contextlib.suppress(Exception):
                await self.host.close()


class HostFeeds:
    """Runs one HostFeed per host concurrently; a host's failure never stops the others."""

    def __init__(self, feeds: list[HostFeed]) -> None:
        names = [f.name for f in feeds]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"host names must be unique; repeated: {', '.join(sorted(dup))}")
        self.feeds = feeds

    async def _one(self, feed: HostFeed, sink: FeedSink) -> None:
        try:
            await feed.run(sink)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - one host's failure is that host's state
            text = str(exc).strip().splitlines()
            sink.host_state(feed.name, ConnectionState(
                "failed", reason=text[0] if text else type(exc).__name__))

    def lines_received(self) -> int:
        return sum(f.lines_received() for f in self.feeds)

    async def drain(self, timeout: float) -> None:
        """Every host's `HostFeed.drain`, at once."""
        await asyncio.gather(*(f.drain(timeout) for f in self.feeds))

    async def run(self, sink: FeedSink) -> None:
        tasks = [asyncio.create_task(self._one(f, sink)) for f in self.feeds]
        try:
            with live_gc():
                await asyncio.gather(*tasks)
        finally:
            await cancel_all(tasks)
            # Local children (agents, tails) were just sent SIGTERM; let them be reaped before
            # the loop may close, or their transports complain from __del__ afterwards.
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0.2)
