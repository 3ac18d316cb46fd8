"""The one host agent's ops that other tests do not reach: the RECORD probe through a running
agent (the server's interpreter asked only for its sys.path), /proc/PID/stat through
proc_info, a control op and an NVML stream multiplexed with a tail on one process."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from kit.fingerprint import _fake_dist
from kit.paths import TESTS
from kit.tail import Collector

from specmon.hosts.agent_client import AgentClient
from specmon.hosts.local import LocalHost
from specmon.sources.fp_probe import probe
from specmon.sources.gpu_poll import RemoteAgentSource
from specmon.sources.tail import LogTailer, TailSpec

SHIM = TESTS / "nvml_shim"


async def test_probe_op_uses_the_servers_interpreter_path(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    _fake_dist(site, b"patched = True\n", b"original = True\n")
    server_py = tmp_path / "server-python"
    server_py.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} "$@"\n')
    server_py.chmod(0o755)
    async with AgentClient(LocalHost()) as agent:
        res = await probe(agent, str(server_py))
        assert (res["version"], res["method"], res["modified_files"]) == (
            "0.5.9", "RECORD", ["sglang/mod.py"])
        assert res["host"]["kernel"]
        # the agent's own interpreter has no such sglang
        assert (await probe(agent, None))["method"] == "unavailable: sglang not installed"


async def test_probe_by_pid_reads_the_servers_install_and_runs_nothing(tmp_path):
    """probe(pid=...): the agent finds where the user's own server imports from by reading
    (its interpreter prefix's site-packages), never by running its argv[0]."""
    import subprocess

    site = tmp_path / "venv" / "lib" / "python3.99" / "site-packages"
    site.mkdir(parents=True)
    _fake_dist(site, b"patched = True\n", b"original = True\n")
    ran = tmp_path / "ran"
    fake_py = tmp_path / "venv" / "bin" / "python3"
    fake_py.parent.mkdir()
    fake_py.write_text(f"#!/bin/sh\ntouch {ran}\nexec {sys.executable} \"$@\"\n")
    fake_py.chmod(0o755)
    server = subprocess.Popen(["bash", "-c", f"exec -a {fake_py} sleep 60"],
                              start_new_session=True)
    try:
        async with AgentClient(LocalHost()) as agent:
            res = await probe(agent, pid=server.pid)
            assert (res["version"], res["method"], res["modified_files"]) == (
                "0.5.9", "RECORD", ["sglang/mod.py"])
        assert not ran.exists()
    finally:
        server.kill()
        server.wait()


async def test_proc_stat_and_control_ops_share_the_tail_and_gpu_agent(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(SHIM))
    monkeypatch.setenv("SPECMON_FAKE_NVML", json.dumps({"gpus": 1, "state": "idle"}))
    host = LocalHost()
    log = tmp_path / "x.log"
    log.write_text("one\n")
    col = Collector(LogTailer(host, [TailSpec("x", str(log))]))
    try:
        await col.wait_lines(1)
        src = RemoteAgentSource(host, interval=0.05, count=2)
        batches = [b async for b in src]
        assert len(batches) == 2 and batches[0][0].reasons == ("GpuIdle",)
        async with AgentClient(host) as agent:
            info = await agent.request("proc_info", pid=os.getpid(), fds=[], stat=True,
                                       cmdline=True)
            assert info["stat"]["pid"] == os.getpid() and info["stat"]["ppid"] == os.getppid()
            assert info["stat"]["pgid"] == os.getpgid(0) and info["stat"]["state"] in "RS"
            own = Path("/proc/self/cmdline").read_bytes().split(b"\0")[0].decode()
            assert info["cmdline"][0] == own
            # a group that is not ours is refused, nothing signalled
            res = await agent.request("signal", signal="SIGTERM", pid=os.getpid(),
                                      pgid=os.getpgid(0), sid=os.getsid(0), starttime=1,
                                      cmdline=["x"], chain=["x"])
            assert res["signalled"] is False and "start time differs" in res["refused"]
            assert agent.pid == src.hello.raw["pid"]  # the same process served the GPUs
        with open(log, "a") as f:
            f.write("two\n")
        await col.wait_lines(2)  # and the tail went on
    finally:
        await col.close()


def test_an_agent_without_importlib_metadata_probes_in_the_servers_interpreter(tmp_path,
                                                                              monkeypatch):
    """A host whose python3 is 3.6/3.7 (no importlib.metadata) runs the probe in the server's
    newer interpreter instead of answering "unavailable"."""
    from specmon.hostside import procs as agent

    site = tmp_path / "site"
    site.mkdir()
    _fake_dist(site, b"patched = True\n", b"original = True\n")
    server_py = tmp_path / "server-python"
    server_py.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} "$@"\n')
    server_py.chmod(0o755)
    monkeypatch.setattr(agent, "modified_files", lambda name, path=None: (
        None, "unavailable: no importlib.metadata", None))
    res = agent.op_probe({"dist": "sglang", "python": str(server_py)})
    assert (res["version"], res["method"], res["modified_files"]) == (
        "0.5.9", "RECORD", ["sglang/mod.py"])


def test_the_client_takes_the_protocol_from_the_agents_own_module():
    """One truth: the version, message types and tail events the client checks are the
    agent's (hostside/protocol.py); every message type has a check, and the bundle the client
    ships is exactly the modules of that folder, loaded as a package in a bare interpreter."""
    import subprocess

    from specmon.hosts import agent_protocol
    from specmon.hosts.agent_client import agent_source
    from specmon.hostside import protocol

    assert set(agent_protocol._CHECKS) == set(protocol.MESSAGE_TYPES)
    assert agent_protocol.TAIL_EVENTS == frozenset(protocol.TAIL_EVENTS)
    assert agent_protocol.PROTOCOL_VERSION == protocol.PROTOCOL_VERSION
    names = [n for n, _ in json.loads(agent_source())]
    assert names == list(protocol.MODULES)
    folder = {p.stem for p in Path(protocol.__file__).parent.glob("*.py")}
    assert folder - set(names) == {"__init__", "agent"}  # the package file and the run-as-file entry
    code = protocol.one_shot_code(agent_source(), ["probe", "no-such-dist-xyz"])
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True,
                         text=True, timeout=60, check=True)
    assert json.loads(out.stdout)["method"].startswith("unavailable")
