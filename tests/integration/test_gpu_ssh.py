"""GPU telemetry over a real sshd (tests/sshd.py) on a host without a GPU (issue 5)."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest
from kit import sshd
from kit.paths import TESTS
from kit.ssh_faults import session_process
from kit.ssh_host import make_host
from kit.wait import until

from specmon.parse.gpu_sample import GpuSample
from specmon.sources.gpu_poll import NVML_UNAVAILABLE, GpuSourceError, RemoteAgentSource

sshd_server = sshd.sshd_server
SHIM = TESTS / "nvml_shim"


def remote_leftovers(server: sshd.Sshd) -> list[str]:
    """Command lines of everything under the test sshd that is not an sshd process."""
    out = []
    for pid, raw in sshd.descendant_cmdlines(server.proc.pid).items():
        cmd = raw.replace(b"\0", b" ").decode()
        if cmd and not cmd.startswith("sshd"):
            out.append(f"{pid}: {cmd[:120]}")
    return out


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


async def first_error(src: RemoteAgentSource) -> str:
    with pytest.raises(GpuSourceError) as info:
        async for _ in src:
            pass
    msg = str(info.value)
    assert "\n" not in msg and "Traceback" not in msg
    return msg


async def test_no_nvml_over_ssh_says_so_after_trying_nvidia_smi(sshd_server, tmp_path):
    """Our interpreter has pynvml but this host has no driver: "NVML not available", after
    the nvidia-smi fallback was tried and found absent; nothing is left running."""
    host = make_host(sshd_server, tmp_path)
    await host.connect()
    try:
        src = RemoteAgentSource(host, interval=0.1, python=sys.executable)
        msg = await first_error(src)
        if src.kind == "nvml-agent":
            pytest.fail("this test expects a host without an NVIDIA driver")
        assert msg.startswith(f"{NVML_UNAVAILABLE}: "), msg
        assert src.kind == "nvidia-smi"  # the fallback was attempted
        assert len(src.attempts) == 1 and "NVML not available" in src.attempts[0]
        # without pynvml at all (python -S), then the host's python3: still one clear line
        nopy = script(tmp_path / "nopynvml", f'exec {sys.executable} -S "$@"\n')
        src = RemoteAgentSource(host, interval=0.1, python=nopy)
        msg = await first_error(src)
        assert src.attempts[0].startswith(f"{nopy}: pynvml not importable"), src.attempts
        assert (msg == "no Python with pynvml (nvidia-ml-py) on the host and nvidia-smi not "
                "found" or msg.startswith(f"{NVML_UNAVAILABLE}: ")), msg  # python3 with pynvml
        # an interpreter that does not exist on the host is one more attempt, not a crash
        src = RemoteAgentSource(host, interval=0.1, python="/nonexistent/python3")
        await first_error(src)
        assert src.attempts[0].startswith("/nonexistent/python3: "), src.attempts
        assert "No such file or directory" in src.attempts[0] or "not found" in src.attempts[0]
        await until(lambda: not remote_leftovers(sshd_server), what="remote processes to end")
    finally:
        await host.close()


async def test_agent_over_ssh_leaves_no_process_after_close_or_disconnect(sshd_server,
                                                                          tmp_path):
    """With a fake pynvml on the host the agent streams; closing the source, or killing the
    sshd process serving the connection, ends the remote agent."""
    cfg = json.dumps({"gpus": 2, "state": "load"})
    fakepy = script(
        tmp_path / "fakepy",
        f"export PYTHONPATH={SHIM} SPECMON_FAKE_NVML='{cfg}'\nexec {sys.executable} \"$@\"\n",
    )
    host = make_host(sshd_server, tmp_path, reconnect_base=0.05, python=fakepy)
    await host.connect()
    try:
        # 1. the consumer stops: the channel closes and the agent exits
        src = RemoteAgentSource(host, interval=0.05)
        it = src.__aiter__()
        batch = await it.__anext__()
        assert [s.index for s in batch] == [0, 1] and isinstance(batch[0], GpuSample)
        assert batch[0].reasons == ("SwPowerCap",) and batch[0].fan_pct is None
        assert src.kind == "nvml-agent" and src.hello is not None
        pid = int(src.hello.raw["pid"])
        assert alive(pid) and pid in sshd.descendants(sshd_server.proc.pid)
        await it.aclose()
        await until(lambda: not alive(pid), what="agent exit after close")

        # 2. the connection dies under it: the source ends with a clear error, agent gone
        src = RemoteAgentSource(host, interval=0.05)
        it = src.__aiter__()
        await it.__anext__()
        assert src.hello is not None
        pid = int(src.hello.raw["pid"])
        os.kill(session_process(sshd_server, pid), signal.SIGKILL)
        with pytest.raises(GpuSourceError, match="GPU agent exited"):
            while True:
                await it.__anext__()
        await until(lambda: not alive(pid), what="agent exit after disconnect")
        await until(lambda: not remote_leftovers(sshd_server), what="no remote leftovers")
    finally:
        await host.close()
