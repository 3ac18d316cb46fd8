"""`specmon connect`: a host (SSH or local), its servers' logs, its GPUs, into the UI."""

from __future__ import annotations

import asyncio
import contextlib

from specmon.feed import FeedSink
from specmon.feeds.common import cancel_all, pump_gpus, pump_tail
from specmon.hosts import Host, HostError
from specmon.hosts.agent_client import AgentClient
from specmon.sources.discovery import DiscoveredServer, discover
from specmon.sources.gpu import RemoteAgentSource
from specmon.sources.tail import LogTailer, TailSpec


class ConnectFeed:
    """Tails the given logs (or discovers the servers) and polls GPUs, over one connection."""

    def __init__(self, host: Host, specs: list[TailSpec], *, history_lines: int | None = 2000,
                 gpu_interval: float = 1.0, roles: dict[str, str] | None = None) -> None:
        self.host = host
        self.specs = specs
        self.history_lines = history_lines
        self.gpu_interval = gpu_interval
        self.roles = dict(roles or {})
        self.discovered: list[DiscoveredServer] = []

    async def _discover(self, sink: FeedSink) -> None:
        agent = AgentClient(self.host)
        await agent.start()
        try:
            self.discovered = await discover(agent)
        finally:
            await agent.close()
        for s in self.discovered:
            if s.log_path:
                self.specs.append(TailSpec(s.name, s.log_path))
                self.roles[s.name] = s.kind
            else:
                sink.notice(s.name, s.describe())
        if not self.specs:
            sink.connection(f"{self.host.name}: no SGLang server with a readable log found; "
                            "pass --log NAME=PATH")

    def _say(self, sink: FeedSink) -> None:
        st = self.host.state
        text = "connected" if st.state == "connected" else f"{self.host.name}: {st.describe()}"
        if st.state == "reconnecting" and st.reason:
            text += f" ({st.reason}; last values kept, marked stale)"
        sink.connection(text)

    async def _countdown(self, sink: FeedSink) -> None:
        """A live 'reconnecting in Ns' while the host is away."""
        while True:
            await asyncio.sleep(1.0)
            if self.host.state.state == "reconnecting":
                self._say(sink)

    async def run(self, sink: FeedSink) -> None:
        remove = self.host.add_state_listener(lambda _st: self._say(sink))
        ticker = asyncio.create_task(self._countdown(sink))
        try:
            try:
                if self.host.state.state != "connected":
                    await self.host.connect()
            except HostError as exc:
                sink.connection(f"{self.host.name}: {exc}")
                return
            if not self.specs:
                await self._discover(sink)
            for spec in self.specs:
                role = self.roles.get(spec.name)
                sink.declare_server(spec.name, role if role in ("baseline", "speculative") else None,
                                    spec.path)
            python = next((s.argv[0] for s in self.discovered
                           if s.argv and "python" in s.argv[0].rsplit("/", 1)[-1]), None)
            tasks = [asyncio.create_task(pump_gpus(
                RemoteAgentSource(self.host, self.gpu_interval, python=python), sink))]
            if self.specs:
                tasks.append(asyncio.create_task(pump_tail(
                    LogTailer(self.host, self.specs, history_lines=self.history_lines), sink)))
            try:
                await asyncio.gather(*tasks)
            finally:
                await cancel_all(tasks)
        finally:
            remove()
            ticker.cancel()
            with contextlib.suppress(Exception):
                await self.host.close()
