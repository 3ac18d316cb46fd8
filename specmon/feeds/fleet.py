"""Several hosts at once: one `HostFeed` per host (one connection each), run by a `FleetFeed`.

The interface to whoever shows the data is `FleetSink`: `host(name)` hands out an ordinary
`FeedSink` for that host (servers keep their local names: tabs per host need nothing new), plus
two host-level calls, the connection state and the servers discovery found (with their
multi-node arguments). `FleetSession.sink()`-style headless use is `SessionFleetSink` below; the
TUI can implement the same three methods by posting messages.

A host never blocks the others: connecting, discovery and reconnects run per host; a host whose
first connection fails is retried with backoff (unless its key or login was refused: those need
the user), and its last values stay in the session, marked stale.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any, Protocol

from specmon.feed import FeedSink, LineItem
from specmon.feeds.common import cancel_all, pump_gpus, pump_tail
from specmon.hosts.agent_client import AgentClient
from specmon.hosts.base import ConnectionState, Host, HostAuthError, HostError, HostKeyError
from specmon.session.fleet import FleetSession, ServerInfo
from specmon.sources.discovery import DiscoveredServer, discover
from specmon.sources.gpu import RemoteAgentSource
from specmon.sources.tail import LogLine, LogTailer, TailSpec


class FleetSink(Protocol):
    def host(self, name: str) -> FeedSink:
        """The FeedSink for one host's servers, GPUs and notices (same object on every call)."""
        ...

    def host_state(self, name: str, state: ConnectionState) -> None: ...

    def host_servers(self, name: str, servers: list[ServerInfo]) -> None: ...


class SessionSink:
    """A FeedSink that writes straight into one host's state of a FleetSession (headless)."""

    def __init__(self, fleet: FleetSession, host: str) -> None:
        self.fleet = fleet
        self.name = host
        self.session = fleet.host(host).session

    def declare_server(self, server: str, role: str | None, path: str | None) -> None:
        s = self.session.server(server)
        if role:
            s.role = role
        s.path = path
        if s.status == "unknown":
            s.status = "starting"

    def lines(self, server: str, items: list[LineItem]) -> None:
        s = self.session.server(server)
        for text, rec, t in items:
            s.apply(text, rec, t)
        s.stale = self.fleet.host(self.name).stale
        if items:
            self.fleet.touch(self.name)

    def gpus(self, samples: list[Any], error: str | None = None) -> None:
        if samples:
            self.session.set_gpus(samples)
            self.fleet.touch(self.name)
        self.session.gpu_error = error

    def server_exited(self, server: str, code: int | None) -> None:
        self.session.server(server).process_exited(code)

    def notice(self, server: str, text: str) -> None:
        self.session.server(server).notices.append(text)

    def connection(self, text: str) -> None:
        pass  # host_state carries the structured state


class SessionFleetSink:
    """FleetSink over a FleetSession; `log` (optional) receives one line per state change."""

    def __init__(self, fleet: FleetSession, log: Callable[[str], None] | None = None) -> None:
        self.fleet = fleet
        self.log = log
        self._sinks: dict[str, SessionSink] = {}

    def host(self, name: str) -> FeedSink:
        sink = self._sinks.get(name)
        if sink is None:
            sink = self._sinks[name] = SessionSink(self.fleet, name)
        return sink

    def host_state(self, name: str, state: ConnectionState) -> None:
        prev = self.fleet.host(name).state
        self.fleet.set_state(name, state)
        if self.log is not None and (prev.state, prev.reason) != (state.state, state.reason):
            self.log(f"{name}: {state.describe()}")

    def host_servers(self, name: str, servers: list[ServerInfo]) -> None:
        self.fleet.set_servers(name, servers)


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
                 tap: Callable[[str, LogLine], None] | None = None,
                 retry_max_s: float = 30.0) -> None:
        self.host = host
        self.specs = list(specs or [])
        self.history_lines = history_lines
        self.gpu_interval = gpu_interval
        self.gpu_retry_s = gpu_retry_s
        self.python = python
        self.tap = tap
        self.retry_max_s = retry_max_s
        self.roles = _roles_from_names(self.specs)
        self.discovered: list[DiscoveredServer] = []
        self._connecting = False

    @property
    def name(self) -> str:
        return self.host.name

    def _delay(self, attempt: int) -> float:
        backoff = getattr(self.host, "backoff", None)
        if callable(backoff):
            return float(backoff(attempt))
        return min(self.retry_max_s, 2.0 ** attempt)

    async def _connect(self, sink: FleetSink) -> bool:
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

    async def _discover(self, sink: FleetSink) -> None:
        """Discovery through the agent, retried while the host is away."""
        attempt = 0
        while True:
            try:
                await self.host.wait_connected()
                agent = AgentClient(self.host)
                await agent.start()
                try:
                    self.discovered = await discover(agent)
                finally:
                    await agent.close()
                return
            except (HostKeyError, HostAuthError):
                raise
            except HostError as exc:
                if self.host.state.state in ("failed", "closed"):
                    raise
                await asyncio.sleep(min(self._delay(attempt), 5.0))
                attempt += 1
                sink.host(self.name).notice("*", f"discovery failed, retrying: {exc}")

    async def run(self, sink: FleetSink) -> None:
        hsink = sink.host(self.name)
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
                        hsink.notice(s.name, s.describe())
            else:
                infos = [ServerInfo(s.name, self.roles.get(s.name)) for s in self.specs]
            sink.host_servers(self.name, infos)
            for spec in self.specs:
                role = self.roles.get(spec.name)
                hsink.declare_server(spec.name, role if role in ("baseline", "speculative") else None,
                                     spec.path)
            python = self.python or next(
                (s.argv[0] for s in self.discovered
                 if s.argv and "python" in s.argv[0].rsplit("/", 1)[-1]), None)
            tasks = [asyncio.create_task(pump_gpus(
                RemoteAgentSource(self.host, self.gpu_interval, python=python), hsink,
                retry_s=self.gpu_retry_s))]
            if self.specs:
                tap = None
                if self.tap is not None:
                    outer = self.tap

                    def tap(ev: LogLine) -> None:
                        outer(self.name, ev)

                tasks.append(asyncio.create_task(pump_tail(
                    LogTailer(self.host, self.specs, history_lines=self.history_lines), hsink,
                    tap=tap)))
            try:
                await asyncio.gather(*tasks)
            finally:
                await cancel_all(tasks)
        finally:
            remove()
            with contextlib.suppress(Exception):
                await self.host.close()


class FleetFeed:
    """Runs one HostFeed per host concurrently; a host's failure never stops the others."""

    def __init__(self, feeds: list[HostFeed]) -> None:
        names = [f.name for f in feeds]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"host names must be unique; repeated: {', '.join(sorted(dup))}")
        self.feeds = feeds

    async def _one(self, feed: HostFeed, sink: FleetSink) -> None:
        try:
            await feed.run(sink)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - one host's failure is that host's state
            text = str(exc).strip().splitlines()
            sink.host_state(feed.name, ConnectionState(
                "failed", reason=text[0] if text else type(exc).__name__))

    async def run(self, sink: FleetSink) -> None:
        tasks = [asyncio.create_task(self._one(f, sink)) for f in self.feeds]
        try:
            await asyncio.gather(*tasks)
        finally:
            await cancel_all(tasks)
            # Local children (agents, tails) were just sent SIGTERM; let them be reaped before
            # the loop may close, or their transports complain from __del__ afterwards.
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0.2)


class _PrefixedHostSink:
    """One host's calls, into the FleetSession and, with `host/server` names, a plain FeedSink."""

    def __init__(self, owner: SingleViewFeed, host: str, inner: FeedSink) -> None:
        self.owner = owner
        self.host = host
        self.inner = inner
        self.ui = owner.ui

    def _n(self, server: str) -> str:
        return f"{self.host}/{server}" if self.owner.prefix else server

    def declare_server(self, server: str, role: str | None, path: str | None) -> None:
        self.inner.declare_server(server, role, path)
        self.ui.declare_server(self._n(server), role, path)

    def lines(self, server: str, items: list[LineItem]) -> None:
        self.inner.lines(server, items)
        self.ui.lines(self._n(server), items)

    def gpus(self, samples: list[Any], error: str | None = None) -> None:
        self.inner.gpus(samples, error)
        self.owner.host_gpus(self.host, samples, error)

    def server_exited(self, server: str, code: int | None) -> None:
        self.inner.server_exited(server, code)
        self.ui.server_exited(self._n(server), code)

    def notice(self, server: str, text: str) -> None:
        self.inner.notice(server, text)
        self.ui.notice(self._n(server), text)

    def connection(self, text: str) -> None:
        self.inner.connection(text)


class SingleViewFeed:
    """Interim adapter until the UI has a tab per host: runs a FleetFeed into a FleetSession
    (read by the Prometheus exporter) and into the existing single-host UI through a plain
    FeedSink, servers named `host/server` (when `prefix`), GPUs of all hosts in one list with
    `host:` in their names and renumbered in host order, connection text naming the hosts
    that are not connected."""

    def __init__(self, feed: FleetFeed, fleet: FleetSession, prefix: bool = True) -> None:
        self.feed = feed
        self.fleet = fleet
        self.prefix = prefix
        self.inner = SessionFleetSink(fleet)
        self.ui: FeedSink = _NullSink()
        self._gpus: dict[str, list[Any]] = {}
        self._errors: dict[str, str] = {}
        self._sinks: dict[str, _PrefixedHostSink] = {}

    def host(self, name: str) -> FeedSink:
        s = self._sinks.get(name)
        if s is None:
            s = self._sinks[name] = _PrefixedHostSink(self, name, self.inner.host(name))
        return s

    def host_state(self, name: str, state: ConnectionState) -> None:
        self.inner.host_state(name, state)
        down = [f"{h}: {hv.state.describe()}" for h, hv in self.fleet.hosts.items() if hv.stale]
        self.ui.connection("; ".join(down) if down else "connected")

    def host_servers(self, name: str, servers: list[ServerInfo]) -> None:
        self.inner.host_servers(name, servers)

    def host_gpus(self, host: str, samples: list[Any], error: str | None) -> None:
        from dataclasses import replace

        if samples:
            self._gpus[host] = samples
        if error:
            self._errors[host] = error
        else:
            self._errors.pop(host, None)
        merged: list[Any] = []
        for h in self.fleet.hosts:
            for g in self._gpus.get(h, []):
                merged.append(replace(g, index=len(merged),
                                      name=f"{h}:{g.index} {g.name or ''}".strip())
                              if self.prefix else g)
        err = "; ".join(f"{h}: {e}" for h, e in self._errors.items()) or None
        self.ui.gpus(merged, err)

    async def run(self, sink: FeedSink) -> None:
        self.ui = sink
        await self.feed.run(self)


class _NullSink:
    def declare_server(self, server: str, role: str | None, path: str | None) -> None: ...

    def lines(self, server: str, items: list[LineItem]) -> None: ...

    def gpus(self, samples: list[Any], error: str | None = None) -> None: ...

    def server_exited(self, server: str, code: int | None) -> None: ...

    def notice(self, server: str, text: str) -> None: ...

    def connection(self, text: str) -> None: ...
