"""Discovery of the simulated SGLang server (`specmon sim server`) behind the test sshd, its
output redirected to a file as users run it under nohup (tests/sshd.py has the sshd)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import sshd
from tailkit import until
from test_ssh import make_host

from specmon.feeds.connect import ConnectFeed
from specmon.hosts.agent_client import AgentClient
from specmon.sources.discovery import discover

sshd_server = sshd.sshd_server
REPO = Path(__file__).resolve().parents[1]


class RecordingSink:
    """A FeedSink that keeps what it is given."""

    def __init__(self) -> None:
        self.declared: list[tuple[str, str | None, str | None]] = []
        self.items: dict[str, list[tuple[str, Any, float]]] = {}
        self.gpu_errors: list[str | None] = []

    def declare_server(self, server: str, role: str | None, path: str | None) -> None:
        self.declared.append((server, role, path))

    def lines(self, server: str, items: list[tuple[str, Any, float]]) -> None:
        self.items.setdefault(server, []).extend(items)

    def texts(self, server: str) -> list[str]:
        return [t for t, _, _ in self.items.get(server, [])]

    def gpus(self, samples: list[Any], error: str | None = None) -> None:
        self.gpu_errors.append(error)

    def server_exited(self, server: str, code: int | None) -> None:
        pass

    def notice(self, server: str, text: str) -> None:
        pass

    def connection(self, text: str) -> None:
        pass


async def test_discovery_finds_the_simulated_server_and_its_log(sshd_server, tmp_path):
    port = sshd.free_port()
    out = tmp_path / "sim.log"
    env = {**os.environ, "SPECMON_SIM_DIR": str(tmp_path / "simdir"), "PYTHONPATH": str(REPO)}
    # the way users run it: output redirected to a file (discovery reads /proc/PID/fd/2)
    with open(out, "ab") as f:
        sim = subprocess.Popen(
            [sys.executable, "-m", "specmon", "sim", "server", "--port", str(port),
             "--startup-s", "0.5", "--speculative-algorithm", "EAGLE", "--tp-size", "2",
             "--load-concurrency", "1", "--decode-log-interval", "10"],
            stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env=env, cwd=tmp_path,
        )
    host = make_host(sshd_server, tmp_path)
    try:
        await until(lambda: b"fired up" in out.read_bytes() or sim.poll() is not None,
                    timeout=60, what="simulated server ready")
        assert sim.poll() is None, out.read_text()[-2000:]
        await host.connect()
        agent = AgentClient(host)
        await agent.start()
        try:
            servers = {s.pid: s for s in await discover(agent)}
        finally:
            await agent.close()
        assert sim.pid in servers, [s.describe() for s in servers.values()]
        s = servers[sim.pid]
        assert s.simulated and s.port == port and s.name == f"sglang-{port}"
        assert (s.kind, s.kind_source, s.tp_size) == ("speculative", "args", 2)
        assert s.log_path == str(out) and s.log_problem is None
        assert len(s.workers) == 2, s.workers
        # `specmon connect` (its feed, without the UI) finds it too and tails that log
        sink = RecordingSink()
        task = asyncio.create_task(ConnectFeed(host, []).run(sink))
        try:
            name = f"sglang-{port}"
            await until(lambda: any("fired up" in t for t in sink.texts(name)) or task.done(),
                        what="connect feed tailing the sim log")
            assert (name, "speculative", str(out)) in sink.declared
            # the decode lines it logs are parsed on the way in
            await until(lambda: any(r is not None and getattr(r, "kind", None) == "decode"
                                    for _, r, _ in sink.items.get(name, [])) or task.done(),
                        what="a parsed decode record")
            assert not task.done()
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    finally:
        await host.close()
        stop_group(sim)


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the group we created (the sim shuts its workers down), then SIGKILL whatever
    of that group is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(5)
