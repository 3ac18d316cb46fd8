"""Helpers that several test modules share (they began in test_discovery.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from specmon.hosts.agent_client import AgentClient
from specmon.hosts.base import Host
from specmon.sources.discovery import (
    LOG_NOT_READABLE,
    discover,
)

FAKE_SERVER = textwrap.dedent("""
    import subprocess, sys, time
    tp = int(sys.argv[sys.argv.index("--tp-size") + 1]) if "--tp-size" in sys.argv else 1
    for i in range(tp):
        subprocess.Popen(["bash", "-c", "exec -a sglang::scheduler_TP%d sleep 120" % i])
    msg = sys.argv[1]
    print(msg, file=sys.stderr, flush=True)
    print("ready", flush=True)
    time.sleep(120)
""")


class FakeServers:
    """Fake `sglang.launch_server` processes, each in its own process group (killed by pgid)."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def start(self, *args: str, log: Path | None = None, msg: str = "hello") -> int:
        out = open(log, "ab") if log else subprocess.PIPE
        p = subprocess.Popen(
            [sys.executable, "-c", FAKE_SERVER, msg, "sglang.launch_server", *args],
            stdout=out, stderr=out, start_new_session=True,
        )
        self.procs.append(p)
        return p.pid

    def wait_ready(self) -> None:
        """Each fake has printed 'ready' (so its workers exist)."""
        for p in self.procs:
            if p.stdout is not None:
                assert p.stdout.readline() == b"ready\n"

    def stop(self) -> None:
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # the group we created, nothing else
            except ProcessLookupError:
                pass
            p.wait(5)


@pytest.fixture
def fakes():
    f = FakeServers()
    yield f
    f.stop()


async def wait_log(path: Path, text: bytes) -> None:
    from kit.wait import until

    await until(lambda: path.exists() and text in path.read_bytes(), what=f"{text!r} in log")


async def run_discovery(host: Host, fakes: FakeServers, tmp_path: Path) -> dict:
    spec_log = tmp_path / "spec.log"
    base_log = tmp_path / "base.log"
    spec_pid = fakes.start("--port", "30001", "--tp-size", "2",
                           "--speculative-algorithm", "EAGLE", log=spec_log)
    base_pid = fakes.start("--port", "30002", log=base_log,
                           msg="Decode batch, #running-req: 1, accept len: 2.50, ")
    pipe_pid = fakes.start("--port", "30003")
    fakes.wait_ready()
    await wait_log(spec_log, b"ready")
    await wait_log(base_log, b"ready")
    agent = AgentClient(host)
    await agent.start()
    try:
        servers = {s.pid: s for s in await discover(agent)}
    finally:
        await agent.close()
    assert {spec_pid, base_pid, pipe_pid} <= set(servers)
    spec, base, pipe = servers[spec_pid], servers[base_pid], servers[pipe_pid]
    assert (spec.port, spec.kind, spec.kind_source) == (30001, "speculative", "args")
    assert spec.spec_args == {"--speculative-algorithm": "EAGLE"}
    assert spec.log_path == str(spec_log) and spec.log_problem is None
    assert [t for _, t in spec.workers] == ["sglang::scheduler_TP0", "sglang::scheduler_TP1"]
    # no spec flags, but the log shows acceptance lengths
    assert (base.port, base.kind, base.kind_source) == (30002, "speculative", "log")
    assert base.log_path == str(base_log)
    assert pipe.log_path is None and pipe.log_problem == LOG_NOT_READABLE
    assert pipe.log_target.startswith("pipe:")
    assert "log not readable; pass --log NAME=PATH" in pipe.describe()
    return servers

