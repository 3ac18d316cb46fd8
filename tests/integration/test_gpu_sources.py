"""GPU sources: the agent as a real subprocess, fallbacks, local NVML, simulator adapter."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kit.paths import ROOT, TESTS
from nvml_shim.fake_nvml import FakeNvml

from specmon.hosts.local import LocalHost
from specmon.hostside.nvml import NvmlCollector
from specmon.parse.gpu_sample import GpuSample
from specmon.sources.gpu_poll import (
    NVML_UNAVAILABLE,
    GpuSourceError,
    NvidiaSmiSource,
    RemoteAgentSource,
    SimGpuSource,
    SubprocessStreamHost,
)

REPO = ROOT
AGENT = REPO / "specmon" / "hostside" / "agent.py"
DATA = TESTS / "data"
SHIM = TESTS / "nvml_shim"

# Makes any Python started by the test host use the fake NVML (the agent does `import pynvml`).
INJECT = (
    f"import sys;sys.path.insert(0,{str(REPO / 'tests' / 'nvml_shim')!r});"
    "from fake_nvml import FakeNvml;sys.modules['pynvml']=FakeNvml(n_gpus=2,"
    "state='load');"
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


async def _wait_gone(pid: int, deadline: float = 10.0) -> bool:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        await asyncio.sleep(0.02)
    return False


# -- the agent program, run for real -----------------------------------------------------------


@pytest.mark.parametrize(
    ("python", "code"),
    [
        (sys.executable, "nvml-init"),  # pynvml installed, no libnvidia-ml.so on this machine
        ("-S", "no-pynvml"),  # no site-packages: pynvml not importable
    ],
)
def test_agent_without_nvml_prints_one_error_line(python: str, code: str):
    argv = [sys.executable, "-S", str(AGENT)] if python == "-S" else [python, str(AGENT)]
    r = subprocess.run(argv + ["gpu", "--interval", "0.1"], capture_output=True, text=True,
                       timeout=60, stdin=subprocess.DEVNULL)
    if code == "nvml-init" and r.stdout.startswith('{"type":"hello"'):
        pytest.fail("this test expects a machine without NVML")
    assert r.returncode == 1
    assert r.stderr == ""  # no traceback
    lines = r.stdout.splitlines()
    assert len(lines) == 1
    rec = json.loads(lines[0])
    assert rec["type"] == "error" and rec["code"] == code
    assert rec["error"].startswith("NVML not available" if code == "nvml-init" else "pynvml")


def test_agent_loop_exits_when_stdin_closes():
    code = INJECT + f"import runpy,sys;sys.argv=['agent.py','gpu','--interval','0.05'];" \
        f"runpy.run_path({str(AGENT)!r},run_name='__main__')"
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        hello = json.loads(proc.stdout.readline())
        assert hello["type"] == "hello" and hello["gpu_count"] == 2
        for _ in range(2):
            rec = json.loads(proc.stdout.readline())
            assert rec["type"] == "sample" and len(rec["gpus"]) == 2
        proc.stdin.close()
        assert proc.wait(timeout=20) == 0
        assert proc.stderr is not None and proc.stderr.read() == ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# -- the collector (per-field probing) ----------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_collector_probes_per_field_and_tiers():
    fake = FakeNvml(n_gpus=2, state="load", missing=["nvmlDeviceGetCurrentClocksEventReasons"])
    clock = _Clock()
    col = NvmlCollector(fake, slow_interval=30.0, proc_interval=5.0, clock=clock)
    samples = []
    for i in range(12):
        clock.t = float(i)
        rec = col.sample()
        samples += [GpuSample.from_agent_json(g, ts=rec["ts"]) for g in rec["gpus"]]
    for s in samples:
        assert s.fan_pct is None  # NotSupported on an H200 ...
        assert s.clock_sm == 1470 and s.temp_mem == 48 and s.power_w == pytest.approx(692.04)
        assert s.reasons == ("SwPowerCap",)  # ... via the older throttle-reasons call
        assert s.app_clock_sm == 1980 and s.temp_slowdown == 89
        assert s.mem_used_mib == 1139.0  # v2 memory info: driver reserve not counted
    assert fake.calls["nvmlDeviceGetFanSpeed"] == 2  # once per GPU, then never again
    assert fake.calls["nvmlDeviceGetApplicationsClock"] == 2 * 3  # slow tier: once in 12 s
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses"] == 2 * 3  # t = 0, 5, 10
    assert fake.calls["nvmlDeviceGetMaxClockInfo"] == 2 * 3  # static: at start only
    assert fake.calls["nvmlDeviceGetClockInfo"] == 12 * 2 * 3


def test_collector_reports_lost_gpu_but_keeps_other_fields():
    fake = FakeNvml(errors={"nvmlDeviceGetClockInfo": 15})
    col = NvmlCollector(fake)
    s = GpuSample.from_agent_json(col.sample()["gpus"][0])
    assert s.error == "GPU is lost"
    assert s.clock_sm is None and s.power_w is not None and s.name == "NVIDIA H200"


# -- remote agent source over a stream host ------------------------------------------------------


@pytest.fixture
def shim(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pythons started from here import tests/nvml_shim/pynvml.py: 2 GPUs under load."""
    monkeypatch.setenv("PYTHONPATH", str(SHIM))
    monkeypatch.setenv("SPECMON_FAKE_NVML", json.dumps({"gpus": 2, "state": "load"}))


async def test_remote_agent_source_end_to_end_and_cleanup(shim):
    host = LocalHost()
    src = RemoteAgentSource(host, interval=0.05, python="/nonexistent/python3")
    polls = []
    it = src.__aiter__()
    try:
        async for batch in it:
            polls.append(batch)
            if len(polls) == 3:
                break
    finally:
        await it.aclose()
    assert src.kind == "nvml-agent"
    assert src.attempts == []  # the agent's own interpreter has pynvml: `python` not needed
    assert src.hello is not None and src.hello.gpu_count == 2
    assert all(len(b) == 2 and b[0].reasons == ("SwPowerCap",) for b in polls)
    assert [s.index for s in polls[0]] == [0, 1]
    pid = src.hello.raw["pid"]
    assert await _wait_gone(pid), "agent outlived its stream"


def _script(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


@pytest.fixture
def fake_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PATH holding only our fakes: `python3` without pynvml (no site-packages),
    optionally `nvidia-smi`."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _script(bindir / "python3", f'exec {sys.executable} -S "$@"\n')
    monkeypatch.setenv("PATH", str(bindir))
    return bindir


def nopynvml_host(bindir: Path) -> LocalHost:
    return LocalHost(python=str(bindir / "python3"))


def _fake_smi(bindir: Path, stream_lines: list[str]) -> None:
    help_file = DATA / "nvidia_smi_help_query_gpu_580.txt"
    body = (
        f'if [ "$1" = "--help-query-gpu" ]; then exec /bin/cat {help_file}; fi\n'
        "while :; do\n"
        + "".join(f"  echo '{ln}'\n" for ln in stream_lines)
        + "  /bin/sleep 0.05 || exit 0\ndone\n"
    )
    _script(bindir / "nvidia-smi", body)


async def test_falls_back_to_nvidia_smi(fake_bin: Path):
    line = (DATA / "nvidia_smi_stream_h200.csv").read_text().splitlines()[0]
    second = line.replace("0, 580.159.04", "1, 580.159.04", 1)
    _fake_smi(fake_bin, [line, second])
    src = RemoteAgentSource(nopynvml_host(fake_bin), interval=0.05)
    polls = []
    it = src.__aiter__()
    try:
        async for batch in it:
            polls.append(batch)
            if len(polls) == 3:
                break
    finally:
        await it.aclose()
    assert src.kind == "nvidia-smi"
    assert [[s.index for s in b] for b in polls] == [[0, 1]] * 3
    s = polls[0][0]
    assert s.source == "nvidia-smi" and s.reasons == ("GpuIdle",) and s.fan_pct is None


async def _first_error(src: object) -> str:
    with pytest.raises(GpuSourceError) as ei:
        async for _ in src:  # type: ignore[attr-defined]
            pass
    msg = str(ei.value)
    assert "\n" not in msg
    return msg


async def test_no_pynvml_and_no_nvidia_smi(fake_bin: Path):
    src = RemoteAgentSource(nopynvml_host(fake_bin), interval=0.05)
    msg = await _first_error(src)
    assert msg == "no Python with pynvml (nvidia-ml-py) on the host and nvidia-smi not found"
    assert src.attempts[0].startswith(f"{fake_bin / 'python3'}: pynvml not importable")


async def test_nvml_init_failure_is_reported_as_nvml_unavailable(fake_bin: Path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(SHIM))
    monkeypatch.setenv("SPECMON_FAKE_NVML", json.dumps({"init_error": 12}))
    msg = await _first_error(RemoteAgentSource(LocalHost(), interval=0.05))
    assert msg == f"{NVML_UNAVAILABLE}: NVML Shared Library Not Found"


async def test_nvidia_smi_driver_failure(fake_bin: Path):
    _script(fake_bin / "nvidia-smi",
            "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
            'driver. Make sure that the latest NVIDIA driver is installed and running."\n'
            "exit 9\n")
    msg = await _first_error(NvidiaSmiSource(SubprocessStreamHost(), interval=0.05))
    assert msg.startswith(NVML_UNAVAILABLE)


async def test_nvidia_smi_not_found(fake_bin: Path):
    assert await _first_error(NvidiaSmiSource(SubprocessStreamHost())) == "nvidia-smi not found"


async def test_stream_host_kills_what_it_started_on_close(tmp_path: Path):
    pidfile = tmp_path / "pid"
    host = SubprocessStreamHost(term_grace=0.5)
    # ignores SIGTERM and never reads stdin: only SIGKILL ends it
    gen = host.stream(["/bin/sh", "-c", f"trap '' TERM; echo $$ > {pidfile}; echo up; "
                       "while :; do /bin/sleep 0.05; done"], stdin=b"")
    assert await gen.__anext__() == "up"
    pid = int(pidfile.read_text())
    await gen.aclose()
    assert await _wait_gone(pid)


# -- the simulator -------------------------------------------------------------


class TinySimHost:
    """Same shape as specmon.sim.gpu_model.SimGpuHost.snapshot()."""

    def __init__(self, n: int = 2) -> None:
        self.n = n
        self.seen_now: list[float | None] = []

    def snapshot(self, now: float | None = None) -> list[dict]:
        self.seen_now.append(now)
        return [
            {
                "index": i, "name": "NVIDIA H200", "uuid": f"GPU-sim-{i}",
                "driver_version": "580.159.04", "clock_sm": 1455, "max_clock_sm": 1980,
                "clock_graphics": 1455, "max_clock_graphics": 1980, "clock_mem": 3201,
                "max_clock_mem": 3201, "app_clock_sm": 1980, "app_clock_mem": 3201,
                "clocks_event_reasons": 0x4, "temp_gpu": 61, "temp_mem": 48,
                "temp_slowdown": 89, "power_w": 691.5, "power_limit_w": 700.0,
                "util_gpu": 100, "util_mem": 25, "mem_used_mib": 70000, "mem_total_mib": 143771,
                "pstate": 0, "processes": [{"pid": 100 + i, "used_mib": 70000}],
                "fan_pct": None,
            }
            for i in range(self.n)
        ]


async def test_sim_source_adapter():
    model = TinySimHost()
    src = SimGpuSource(model, interval=0.01, clock=lambda: 1000.0)
    it = src.__aiter__()
    try:
        batch = await it.__anext__()
    finally:
        await it.aclose()
    assert model.seen_now == [1000.0]
    a, b = batch
    assert (a.index, b.index, a.ts, a.source) == (0, 1, 1000.0, "sim")
    assert a.reasons == ("SwPowerCap",) and a.processes is not None
    assert a.processes[0].pid == 100 and a.app_clock_graphics is None and a.fan_pct is None
    assert await _first_error(SimGpuSource(TinySimHost(0), interval=0.01)) == "no GPUs"


def test_bench_runs_without_gpu():
    r = subprocess.run([sys.executable, str(REPO / "bench" / "gpu_poll_cost.py"), "--mode",
                        "fake", "--samples", "30", "--gpus", "2"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("mode: fake-nvml")
    assert "ratio agent/reference:" in r.stdout
