"""The built-in demo: a simulated SGLang (or vLLM) host with a baseline and a speculative server.

It runs the real code paths: the servers are `specmon sim server` processes started on this
machine (each in its own session, stopped by that process group only), their logs are followed
by the same resumable tail as `specmon connect local`, and the GPUs come from the simulated
host's NVML-like model. The UI cannot tell it from a real host.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from specmon.control.local import (
    cmdline,
    group_members,
    is_ours,
    kill_child_group_now,
    stop_child_group,
)
from specmon.feeds.common import cancel_all, pump_gpus, pump_tail
from specmon.feeds.probe import run_probe
from specmon.hosts.base import ConnectionState
from specmon.hosts.local import LocalHost
from specmon.session.events import FeedSink, LineItem
from specmon.sim import dist as sim_dist
from specmon.sim.gpu_model import SimGpuHost
from specmon.sources.gpu_poll import SimGpuSource
from specmon.sources.tail import LogTailer, TailSpec

if TYPE_CHECKING:
    from specmon.control.benchmark import BenchResult
    from specmon.control.server import ServerControls

NCCL_TUNING = {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_P2P_LEVEL": "NVL"}
N_GPUS = 16  # two tp-8 servers side by side on one simulated box


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class SimServer:
    name: str
    role: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    log: Path | None = None
    proc: asyncio.subprocess.Process | None = None
    restarting: bool = False
    started_argv: list[str] | None = None  # what `proc` was started with (args may change since)

    def argv(self, sim_dir: Path) -> list[str]:
        assert self.log is not None
        return [sys.executable, "-m", "specmon", "sim", "server", "--name", self.name,
                "--log-file", str(self.log), "--sim-dir", str(sim_dir),
                "--n-gpus", str(N_GPUS), *self.args]


def default_servers(format_version: str | None = None, load_concurrency: int = 1,
                    seed: int = 1, engine: str = "sglang") -> list[SimServer]:
    common = ["--tp-size", "8", "--load-concurrency", str(load_concurrency),
              "--load-output-len", "512", "--startup-s", "2"]
    if format_version:
        common += ["--format-version", format_version]
    if engine == "vllm":
        return _vllm_servers(common, seed)
    env = {**NCCL_TUNING, "SGLANG_ENABLE_METRICS_DEVICE_TIMER": "1"}  # fwd occupancy (0.5.11+)
    return [
        SimServer("baseline", "baseline",
                  [*common, "--port", str(free_port()), "--seed", str(seed)], dict(env)),
        SimServer("speculative", "speculative",
                  [*common, "--port", str(free_port()), "--seed", str(seed + 1),
                   "--base-gpu-id", "8", "--speculative-algorithm", "EAGLE3",
                   "--speculative-draft-model-path", "jamesliu1/sglang-EAGLE3-Llama-3.1-70B",
                   "--speculative-num-steps", "2", "--speculative-eagle-topk", "1",
                   "--speculative-num-draft-tokens", "3"], dict(env)),
    ]


# VLLM_LOG_STATS_INTERVAL (a real vLLM setting, 0.10.1+; default 10 s): 0.5 s gives about the
# pace of SGLang's decode lines (one per 40 steps, ~0.45 s at bs 1), so the scenarios' line
# counts (a baseline needs 30 clean samples) take the same time on both engines
VLLM_STATS_INTERVAL_S = "0.5"
VLLM_SPEC = ('{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B", '
             '"num_speculative_tokens": 2}')


def _vllm_servers(common: list[str], seed: int) -> list[SimServer]:
    """The same pair as `vllm serve`: a baseline and an EAGLE-3 server (k = 2), stats every
    0.5 s (VLLM_LOG_STATS_INTERVAL) so the demo moves at SGLang's pace."""
    common = ["--engine", "vllm", *common]
    env = {**NCCL_TUNING, "VLLM_LOG_STATS_INTERVAL": VLLM_STATS_INTERVAL_S}
    return [
        SimServer("baseline", "baseline",
                  [*common, "--port", str(free_port()), "--seed", str(seed)], dict(env)),
        SimServer("speculative", "speculative",
                  [*common, "--port", str(free_port()), "--seed", str(seed + 1),
                   "--base-gpu-id", "8", "--speculative-config", VLLM_SPEC], dict(env)),
    ]


class _CountingSink:
    """Passes everything through and counts decode lines per server (scenarios wait on them)."""

    def __init__(self, sink: FeedSink) -> None:
        self.sink = sink
        self.decode: dict[str, int] = {}
        self.changed = asyncio.Event()
        self.declare_server = sink.declare_server
        self.gpus = sink.gpus
        self.server_exited = sink.server_exited
        self.notice = sink.notice
        self.tail_missing = sink.tail_missing
        self.host_state = sink.host_state
        self.host_servers = sink.host_servers
        self.server_pids = sink.server_pids
        self.request_baseline = sink.request_baseline
        self.server_probe = sink.server_probe
        self.watch_recorded = sink.watch_recorded
        self.tick = sink.tick

    def lines(self, host: str, server: str, items: Sequence[LineItem]) -> None:
        n = sum(1 for it in items if getattr(it.record, "kind", None) == "decode")
        if n:
            self.decode[server] = self.decode.get(server, 0) + n
            self.changed.set()
        self.sink.lines(host, server, items)


class DemoFeed:
    """Starts the simulated servers, tails their logs, samples their GPUs; stops what it started.

    `scenario="phantom-baseline"` replays the seed incidents on the baseline server: a baseline
    recorded with NCCL tuning (~88.8 tok/s), a restart whose workers lack the NCCL variables
    (~62.9), then tuning back but a power cap and a patched engine file (~82.2): SGLang's
    `sglang/srt/layers/communicator.py`, or vLLM's `vllm/distributed/communication_op.py`.
    """

    def __init__(self, servers: list[SimServer] | None = None, workdir: Path | None = None,
                 gpu_interval: float = 1.0, scenario: str | None = None,
                 record_after: int = 40, phase_lines: int = 60, host: str = "demo",
                 settle_lines: int | None = None) -> None:
        self.host = host
        self.servers = servers if servers is not None else default_servers()
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="specmon-demo-"))
        self.sim_dir = self.workdir / "host"
        self.gpu_interval = gpu_interval
        if scenario not in (None, "default", "phantom-baseline"):
            raise ValueError(f"unknown scenario {scenario!r}; known: default, phantom-baseline")
        self.scenario = scenario if scenario != "default" else None
        self.record_after = record_after
        self.phase_lines = phase_lines
        # baseline lines after the recording before the first incident: the verdict against
        # the new recording needs DriftParams.min_live clean ones first
        self.settle_lines = record_after // 2 if settle_lines is None else settle_lines
        self.phase = "running"
        self._sink: FeedSink | None = None
        self._tasks: list[asyncio.Task[None]] = []
        if self.scenario == "phantom-baseline":
            for srv in self.servers:
                srv.env["NCCL_DEBUG"] = "INFO"  # per-rank "set by environment" lines: evidence
        self.engine = "vllm" if any("--engine" in s.args and "vllm" in s.args
                                    for s in self.servers) else "sglang"

    async def start_server(self, srv: SimServer) -> None:
        self.sim_dir.mkdir(parents=True, exist_ok=True)
        # the host's engine install (dist-info + RECORD): SGLang's, or vLLM's for vLLM servers
        site = sim_dist.install(self.sim_dir, engine=self.engine)
        srv.log = srv.log or self.workdir / f"{srv.name}.log"
        srv.log.touch()
        pythonpath = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)
        await self._probe(srv, pythonpath)
        argv = srv.argv(self.sim_dir)
        err = open(srv.log, "ab")  # noqa: SIM115 - a crash before logging starts lands here
        try:
            srv.proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL, stderr=err, start_new_session=True,
                env={**os.environ, **srv.env, "SPECMON_SIM_DIR": str(self.sim_dir),
                     "PYTHONPATH": pythonpath},
                preexec_fn=_die_with_parent,
            )
            srv.started_argv = argv
        finally:
            err.close()

    async def _probe(self, srv: SimServer, pythonpath: str) -> None:
        """The fingerprint probe for the launch about to start, as on a real host: the host's
        agent reads the server's PYTHONPATH, the engine's files hashed against the wheel's RECORD."""
        sink = self._sink
        if sink is None:
            return
        probe = await run_probe(LocalHost(self.host), pythonpath=pythonpath, dist=self.engine)
        if probe:
            sink.server_probe(self.host, srv.name, probe)

    async def run(self, sink: FeedSink) -> None:
        tasks: list[asyncio.Task[None]] = []
        counting = _CountingSink(sink)
        sink = counting
        self._sink = sink
        self._tasks = tasks
        try:
            sink.host_state(self.host, ConnectionState("connected"))  # this machine
            for srv in self.servers:
                srv.log = srv.log or self.workdir / f"{srv.name}.log"
                sink.declare_server(self.host, srv.name, srv.role, str(srv.log))
                await self.start_server(srv)
            specs = [TailSpec(s.name, str(s.log)) for s in self.servers]
            tasks.append(asyncio.create_task(pump_tail(
                LogTailer(LocalHost(self.host), specs, history_lines=2000), self.host, sink)))
            tasks.append(asyncio.create_task(pump_gpus(
                SimGpuSource(SimGpuHost(self.sim_dir, n_gpus=N_GPUS), interval=self.gpu_interval),
                self.host, sink)))
            tasks.extend(asyncio.create_task(self._watch(s, sink)) for s in self.servers)
            tasks.append(asyncio.create_task(self._report_pids(sink)))
            if self.scenario == "phantom-baseline":
                tasks.append(asyncio.create_task(self._phantom_baseline(counting)))
            await asyncio.gather(*tasks)
        finally:
            await cancel_all(tasks)
            await self.stop_all()

    async def _watch(self, srv: SimServer, sink: FeedSink) -> None:
        while True:
            proc = srv.proc
            assert proc is not None
            code = await proc.wait()
            while srv.restarting and srv.proc is proc:
                await asyncio.sleep(0.05)
            if srv.proc is proc or srv.proc is None:  # not a restart: the server is gone
                sink.server_exited(self.host, srv.name, code)
                return

    async def _report_pids(self, sink: FeedSink, every: float = 2.0) -> None:
        """Which processes are each server's (for its GPUs), as the host would tell us."""
        while True:
            for srv in self.servers:
                if srv.proc is not None and srv.proc.returncode is None:
                    sink.server_pids(self.host, srv.name, group_members(srv.proc.pid))
            await asyncio.sleep(every)

    async def restart_server(self, srv: SimServer, sink: FeedSink) -> None:
        srv.restarting = True
        try:
            await self.stop_server(srv)
            await self.start_server(srv)
        finally:
            srv.restarting = False

    async def _wait_decode(self, sink: _CountingSink, server: str, n: int) -> None:
        start = sink.decode.get(server, 0)
        while sink.decode.get(server, 0) - start < n:
            sink.changed.clear()
            await sink.changed.wait()

    async def _phantom_baseline(self, sink: _CountingSink) -> None:
        base = next(s for s in self.servers if s.role == "baseline")
        self.phase = "recording"
        await self._wait_decode(sink, base.name, self.record_after)
        sink.request_baseline(self.host, base.name)
        sink.notice(self.host, base.name, "scenario: recording the baseline with NCCL tuning "
                               "(NCCL_PROTO, NCCL_ALGO, NCCL_P2P_LEVEL in the workers)")
        await self._wait_decode(sink, base.name, self.settle_lines)
        # incident 1: restarted from a shell that lacks the tuning variables
        self.phase = "no-nccl-tuning"
        for var in NCCL_TUNING:
            base.env.pop(var, None)
        sink.notice(self.host, base.name, "scenario: restarting the baseline WITHOUT the NCCL variables")
        await self.restart_server(base, sink)
        await self._wait_decode(sink, base.name, self.phase_lines)
        # incident 2: tuning back, but a patched engine file and a power cap
        self.phase = "patched-and-capped"
        base.env.update(NCCL_TUNING)
        gpus = SimGpuHost(self.sim_dir, n_gpus=N_GPUS)
        for i in range(8):
            gpus.set_power_limit(i, 330.0)
        base.args += ["--patch-overhead", "0.07"]
        sim_dist.patch_file(self.sim_dir, engine=self.engine)  # the edit the RECORD probe finds
        label = "vLLM" if self.engine == "vllm" else "SGLang"
        sink.notice(self.host, base.name, "scenario: NCCL tuning restored; restarting with a "
                    f"patched {label} file and a 330 W power cap on GPUs 0-7")
        await self.restart_server(base, sink)
        self.phase = "steady"
        await asyncio.Event().wait()

    async def stop_server(self, srv: SimServer, grace: float = 5.0) -> None:
        """SIGTERM the process group we started, then SIGKILL what is left of it.

        Ours is checked against the command line the process was started with: the scenario
        changes the arguments of the next launch before it stops this one.
        """
        if srv.proc is None:
            return
        argv = srv.started_argv or srv.argv(self.sim_dir)
        if srv.proc.returncode is None and cmdline(srv.proc.pid) and not is_ours(srv.proc.pid, argv):
            raise RuntimeError(f"{srv.name}: pid {srv.proc.pid} no longer runs the command we "
                               "started; not stopping it")
        await stop_child_group(srv.proc, argv, grace)

    async def stop_all(self) -> None:
        await asyncio.gather(*(self.stop_server(s) for s in self.servers))

    def stop_all_sync(self) -> None:
        """Last resort after the event loop is gone (the app crashed): kill our groups."""
        for s in self.servers:
            if s.proc is not None:
                kill_child_group_now(s.proc, s.started_argv or s.argv(self.sim_dir))


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it when the demo dies, however it dies (Linux)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class DemoActions:
    """The keyboard's server actions on a demo server: `ServerControls`, like
    ServerController."""

    def __init__(self, feed: DemoFeed, srv: SimServer) -> None:
        self.feed = feed
        self.srv = srv
        self.name = srv.name

    @property
    def running(self) -> bool:
        """Its process is alive (a swap to it would stop the other server for nothing)."""
        return self.srv.proc is not None and self.srv.proc.returncode is None

    def _progress(self, progress: object, label: str) -> None:
        if callable(progress):
            from specmon.control.progress import StartProgress

            progress(StartProgress("launching", label))

    async def start(self, progress: object = None) -> None:
        srv, feed = self.srv, self.feed
        if self.running:
            raise RuntimeError(f"{srv.name} is already running (pid {srv.proc.pid if srv.proc else '?'})")
        self._progress(progress, f"starting {srv.name}")
        await feed.start_server(srv)
        if feed._sink is not None:
            feed._tasks.append(asyncio.create_task(feed._watch(srv, feed._sink)))

    async def stop(self) -> None:
        await self.feed.stop_server(self.srv)

    async def restart(self, progress: object = None) -> None:
        self._progress(progress, f"restarting {self.srv.name}")
        if self.srv.proc is None or self.srv.proc.returncode is not None:
            await self.start(progress)
            return
        assert self.feed._sink is not None
        await self.feed.restart_server(self.srv, self.feed._sink)

    async def benchmark(self) -> BenchResult:
        from specmon.control.benchmark import BenchConfig, run_builtin

        port = self.srv.args[self.srv.args.index("--port") + 1]
        return await run_builtin(f"http://127.0.0.1:{port}", self.srv.name,
                                 BenchConfig(num_prompts=4, output_len=64))


def demo_actions(feed: DemoFeed) -> dict[tuple[str, str], ServerControls]:
    """The control keys' actions, keyed like every server: (host, server); typed as the
    protocol so that mypy checks DemoActions against it."""
    return {(feed.host, s.name): DemoActions(feed, s) for s in feed.servers}
