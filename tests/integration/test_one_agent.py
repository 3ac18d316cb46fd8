"""One host agent process per host connection (issue 13), counted on a real sshd.

Tailing two logs, streaming (simulated) GPU samples and running discovery at the same time
must run exactly one specmon agent process on the host; closing everything leaves none.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

from kit import sshd
from kit.discovery import FAKE_SERVER
from kit.paths import TESTS
from kit.ssh_host import make_host
from kit.tail import Collector
from kit.wait import until

from specmon.hosts.agent_client import AgentClient
from specmon.sources.discovery import discover
from specmon.sources.gpu_poll import RemoteAgentSource
from specmon.sources.tail import LogTailer, TailSpec

sshd_server = sshd.sshd_server
SHIM = TESTS / "nvml_shim"


def agent_pids(server: sshd.Sshd) -> list[int]:
    """Processes under the test sshd running the specmon agent bootstrap."""
    return [pid for pid, cmd in sshd.descendant_cmdlines(server.proc.pid).items()
            if b"specmon-agent" in cmd]


async def test_one_agent_for_tails_gpus_and_discovery(sshd_server, tmp_path):
    fakepy = tmp_path / "fakepy"
    cfg = json.dumps({"gpus": 2, "state": "load"})
    fakepy.write_text(f"#!/bin/sh\nexport PYTHONPATH={SHIM} SPECMON_FAKE_NVML='{cfg}'\n"
                      f"exec {sys.executable} \"$@\"\n")
    fakepy.chmod(0o755)
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    for i, p in enumerate(logs):
        p.write_text(f"first line of {i}\n")
    server = subprocess.Popen([sys.executable, "-c", FAKE_SERVER, "hello", "sglang.launch_server",
                               "--port", "30077"], stdout=open(logs[0], "ab"),
                              stderr=subprocess.STDOUT, start_new_session=True)
    host = make_host(sshd_server, tmp_path, python=str(fakepy))
    await host.connect()
    gpu_batches: list = []
    try:
        tailer = LogTailer(host, [TailSpec("a", str(logs[0])), TailSpec("b", str(logs[1]))])
        col = Collector(tailer)

        async def gpus() -> None:
            async for batch in RemoteAgentSource(host, interval=0.05):
                gpu_batches.append(batch)

        gpu_task = asyncio.create_task(gpus())
        await col.wait_lines(2)
        await until(lambda: len(gpu_batches) >= 3, what="GPU samples")
        async with AgentClient(host) as agent:
            servers = await discover(agent)
        assert any(s.pid == server.pid for s in servers)
        assert [p.name for p in servers if p.pid == server.pid] == ["sglang-30077"]
        with open(logs[1], "a") as f:
            f.write("while everything runs\n")
        await until(lambda: "while everything runs" in col.texts("b"), what="live line")
        # everything at once: exactly one agent process serves this host
        assert len(agent_pids(sshd_server)) == 1, agent_pids(sshd_server)
        assert gpu_batches[-1][0].reasons == ("SwPowerCap",)
        gpu_task.cancel()
        done, _ = await asyncio.wait({gpu_task}, timeout=20)  # a failure, never a hang
        assert gpu_task in done, "the cancelled GPU source kept running"
        await col.close()
        assert not col.task.cancelled(), "the tailer did not stop within col.close()'s bound"
        await until(lambda: not agent_pids(sshd_server), what="the agent to exit")
    finally:
        await host.close()
        import os
        import signal

        os.killpg(server.pid, signal.SIGKILL)  # the group we started, nothing else
        server.wait(5)
