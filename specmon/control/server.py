"""Start, stop, restart and swap SGLang servers from profiles, through a Host.

Everything runs on the host through `hosts/`: the launch (`setsid env K=V ... ARGV`, output
appended to the log, a 0600 pidfile in the run dir with pid, pgid, sid, start time and command
line), the checks before any signal (the host agent's inspect/signal ops, specmon/hostside/control.py:
the recorded group only, leader start time and command line verified in the same host process
that sends the signal), the
start-up progress (log lines read through the host agent), readiness (`/health` through a port
forward, httpx), the GPU check (NVML compute processes) and the worker-environment audit
(`/proc/PID/environ` of the launcher and every worker: `sglang::scheduler*`, vLLM's
`VLLM::EngineCore*`/`VLLM::Worker*`, via the agent). A profile with engine = "vllm" starts
`python -m vllm.entrypoints.openai.api_server` (or the simulated one) under the same rules.

Nothing here signals by name: no pkill, no killall.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, NoReturn, Protocol

import httpx

from specmon.config import HostProfile, ServerProfile
from specmon.control.benchmark import (
    BenchConfig,
    BenchResult,
    has_bench_serving,
    run_bench_serving,
    run_builtin,
)
from specmon.control.gpus import GpuPids, GpuProbe, NvmlGpuProbe, SimGpuProbe
from specmon.control.progress import ProgressTracker, StartProgress
from specmon.hosts.agent_client import AgentClient, AgentError
from specmon.hosts.base import Host, HostError, PortForward
from specmon.sources.discovery import is_worker_title, worker_order

AUDIT_PREFIXES = ("NCCL_", "CUDA_", "SGLANG_", "TORCH_")
WORKER_PREFIX = "sglang::scheduler"  # kept for callers; titles are matched by is_worker_title
AUDIT_PREFIXES_VLLM = ("VLLM_",)
LOG_TAIL_LINES = 40
POLL_S = 0.25

ProgressCb = Callable[[StartProgress], None]
State = Literal["stopped", "starting", "ready", "exited", "stale"]


# -- errors ---------------------------------------------------------------------------------------
class ControlError(Exception):
    """A control action could not be done; the message is for the user (one line)."""


class AlreadyRunning(ControlError):
    pass


class NotOurs(ControlError):
    """The pidfile points at a process specmon did not start: nothing was signalled."""


@dataclass
class GpuOwner:
    gpu: int
    pid: int
    title: str | None  # the holder's argv[0] (a worker's process title)
    leader: str | None  # its process group leader's command line
    server: str | None  # the specmon server whose group it is, if any

    def describe(self) -> str:
        who = f"specmon server {self.server!r}" if self.server else (self.leader or "unknown")
        return f"GPU {self.gpu} used by pid {self.pid} ({self.title or '?'}) of {who}"


class GpuBusy(ControlError):
    """The server's GPUs run other compute processes; `owners` names them (offer a swap)."""

    def __init__(self, server: str, owners: list[GpuOwner]) -> None:
        self.server = server
        self.owners = owners
        servers = sorted({o.server for o in owners if o.server})
        hint = f"; swap with {servers[0]!r}?" if servers else ""
        super().__init__(f"cannot start {server}: " + "; ".join(o.describe() for o in owners[:4])
                         + hint)


class StartFailed(ControlError):
    """The server exited (or never became ready); the log's last lines and traceback say why."""

    def __init__(self, message: str, last_lines: list[str], traceback: list[str],
                 exit_state: str | None = None) -> None:
        self.last_lines = last_lines
        self.traceback = traceback
        self.exit_state = exit_state
        super().__init__(message)


class StartTimeout(StartFailed):
    """Not ready within the timeout; the server is left running (stop it explicitly)."""


class SwapFailed(ControlError):
    """A swap stopped one server and could not start the other. The stopped one was started
    again (`restarted` holds its StartResult) or is DOWN (its name in `down`, and the
    message says so in capitals: nothing of this pair serves now)."""

    def __init__(self, message: str, cause: BaseException, restarted: Any = None,
                 down: tuple[str, ...] = ()) -> None:
        self.cause = cause
        self.restarted = restarted
        self.down = down
        self.last_lines: list[str] = list(getattr(cause, "last_lines", None) or [])
        super().__init__(message)


# -- results --------------------------------------------------------------------------------------
@dataclass
class ProcEnv:
    pid: int
    title: str
    role: Literal["launcher", "worker"]
    status: Literal["ok", "unreadable"]
    reason: str | None = None  # why unreadable (e.g. setproctitle wiped it, permission)
    env: dict[str, str] | None = None  # NCCL_* / CUDA_* / SGLANG_* / TORCH_* + profile vars
    missing: list[str] = field(default_factory=list)  # profile vars absent (only when readable)
    differs: dict[str, tuple[str, str]] = field(default_factory=dict)  # var -> (profile, actual)


@dataclass
class EnvAudit:
    server: str
    expected: dict[str, str]
    processes: list[ProcEnv]

    @property
    def workers(self) -> list[ProcEnv]:
        return [p for p in self.processes if p.role == "worker"]

    def problems(self) -> list[str]:
        """One line per process that lacks or changes a profile variable, or is unreadable."""
        out = []
        for p in self.processes:
            if p.status == "unreadable":
                out.append(f"{p.title} (pid {p.pid}): environment unreadable ({p.reason})")
                continue
            if p.missing:
                out.append(f"{p.title} (pid {p.pid}): missing in {p.role}: "
                           + ", ".join(f"{k}={self.expected[k]}" for k in p.missing))
            for k, (want, got) in p.differs.items():
                out.append(f"{p.title} (pid {p.pid}): {k}={got} but the profile sets {want}")
        return out

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ServerStatus:
    name: str
    state: State
    pid: int | None = None
    members: list[tuple[int, str]] = field(default_factory=list)  # (pid, title)
    port: int | None = None
    healthy: bool | None = None
    log: str | None = None
    detail: str | None = None

    def describe(self) -> str:
        bits = [f"{self.name}: {self.state}"]
        if self.pid is not None:
            bits.append(f"pid {self.pid}")
        if self.members:
            bits.append(f"{len(self.members)} processes")
        if self.port is not None:
            bits.append(f"port {self.port}")
        if self.healthy is not None:
            bits.append("healthy" if self.healthy else "not healthy")
        if self.log:
            bits.append(f"log {self.log}")
        if self.detail:
            bits.append(self.detail)
        return ", ".join(bits)


@dataclass
class StartResult:
    name: str
    pid: int
    elapsed_s: float
    log: str
    audit: EnvAudit | None
    gpu_note: str | None = None  # e.g. "GPU state unknown: ..." when the check could not run


@dataclass
class StopResult:
    name: str
    was_running: bool
    signals: list[str] = field(default_factory=list)  # "SIGTERM", "SIGKILL"
    remaining: list[int] = field(default_factory=list)  # pids of the group still alive
    gpus_free: bool | None = None  # None: could not be checked
    gpu_holders: dict[int, list[int]] = field(default_factory=dict)
    detail: str | None = None

    @property
    def ok(self) -> bool:
        return not self.remaining and self.gpus_free is not False


# -- the controller -------------------------------------------------------------------------------
class ServerController:
    """One server profile on one host. Use `async with` (or call close()) to release the agent
    channel and port forward it opens lazily."""

    def __init__(self, host: Host, profile: ServerProfile, host_profile: HostProfile | None = None,
                 *, gpu_probe: GpuProbe | None = None, run_dir: str | None = None) -> None:
        self.host = host
        self.profile = profile
        self.host_profile = host_profile or HostProfile(host.name)
        self.python = self.host_profile.python or host.python
        self._run_dir = run_dir or self.host_profile.run_dir
        if gpu_probe is None:
            if self.host_profile.sim_dir:
                gpu_probe = SimGpuProbe(host, self.host_profile.sim_dir, self.python,
                                        self.host_profile.n_gpus)
            else:
                gpu_probe = NvmlGpuProbe(host, self.python)
        self.gpu_probe = gpu_probe
        self._agent: AgentClient | None = None
        self._forward: PortForward | None = None
        self._home: str | None = None
        self.benchmarks: list[BenchResult] = []  # every run of this session, in order

    @property
    def name(self) -> str:
        return self.profile.name

    @property
    def running(self) -> bool | None:
        """Not known here: `status()` asks the host (a swap checks before it stops anything)."""
        return None

    async def __aenter__(self) -> ServerController:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._forward is not None:
            self._forward.close()
            self._forward = None
        if self._agent is not None:
            with contextlib.suppress(Exception):
                await self._agent.close()
            self._agent = None

    # -- plumbing ---------------------------------------------------------------------------------
    async def _expand(self, path: str) -> str:
        if not path.startswith("~"):
            return path
        if self._home is None:
            res = await self.host.run(["sh", "-c", 'printf %s "$HOME"'], timeout=30)
            self._home = res.stdout.strip() or "/tmp"
        return self._home + path[1:] if path.startswith("~/") or path == "~" else path

    async def run_dir(self) -> str:
        return await self._expand(self._run_dir)

    async def pidfile(self) -> str:
        return f"{await self.run_dir()}/{self.name}.pid.json"

    async def log_path(self) -> str:
        if self.profile.log:
            return await self._expand(self.profile.log)
        return f"{await self.run_dir()}/{self.name}.log"

    async def agent(self) -> AgentClient:
        if self._agent is None or self._agent.closed.is_set():
            if self._agent is not None:
                await self._agent.close()
            self._agent = AgentClient(self.host)
            await self._agent.start()
        return self._agent

    async def agent_op(self, req: dict[str, Any], timeout: float = 60.0) -> Any:
        """One control op (owners, inspect, signal, write, remove, launch) in the host's agent."""
        args = dict(req)
        op = args.pop("op")
        try:
            agent = await self.agent()
            out = await agent.request(op, timeout=timeout, **args)
        except (HostError, asyncio.TimeoutError) as exc:
            raise ControlError(f"{self.host.name}: {op} failed: {exc}") from None
        if isinstance(out, dict) and set(out) == {"error"}:
            raise ControlError(f"{self.host.name}: {out['error']}")
        return out

    async def base_url(self) -> str:
        """http://127.0.0.1:PORT reaching the server (through an SSH forward when remote)."""
        if self._forward is None:
            self._forward = await self.host.forward_port(self.profile.port,
                                                         self.profile.listen_host)
        return f"http://127.0.0.1:{self._forward.local_port}"

    async def read_record(self) -> dict[str, Any] | None:
        path = await self.pidfile()
        try:
            data = await self.host.read_file(path)
        except HostError:
            return None
        try:
            rec = json.loads(data)
        except ValueError:
            return None
        return rec if isinstance(rec, dict) and isinstance(rec.get("pid"), int) else None

    async def _inspect(self, rec: dict[str, Any]) -> dict[str, Any]:
        problem = record_problem(rec)
        if problem is not None:  # never even asked about on the host: it proves nothing
            return {"ours": False, "reason": problem, "leader": None, "members": []}
        return await self.agent_op({"op": "inspect", **_ident(rec)})

    async def health(self, timeout: float = 2.0) -> bool:
        try:
            url = await self.base_url()
            async with httpx.AsyncClient(base_url=url) as c:
                r = await c.get("/health", timeout=timeout)
            return r.status_code == 200
        except (httpx.HTTPError, HostError, OSError):
            return False

    # -- status -----------------------------------------------------------------------------------
    async def status(self, check_health: bool = True) -> ServerStatus:
        rec = await self.read_record()
        if rec is None:
            return ServerStatus(self.name, "stopped", port=self.profile.port)
        ins = await self._inspect(rec)
        st = ServerStatus(self.name, "stopped", pid=rec["pid"], port=self.profile.port,
                          log=rec.get("log"),
                          members=[(m["pid"], _title(m["argv"])) for m in ins["members"]])
        if not ins["ours"]:
            st.state, st.detail, st.members = "stale", ins["reason"], []
        elif not ins["members"]:
            st.state, st.detail = "exited", "the server's processes are gone"
        else:
            st.healthy = await self.health() if check_health else None
            st.state = "ready" if st.healthy else "starting"
        return st

    # -- GPUs -------------------------------------------------------------------------------------
    async def gpu_holders(self) -> GpuPids | None:
        """{gpu: pids} for this profile's GPUs (only GPUs with processes); None if unknown."""
        pids = await self.gpu_probe.compute_pids()
        if pids is None:
            return None
        return {g: pids[g] for g in self.profile.gpus if pids.get(g)}

    async def owners(self, holders: GpuPids) -> list[GpuOwner]:
        flat = sorted({p for ps in holders.values() for p in ps})
        info = await self.agent_op({"op": "owners", "pids": flat, "run_dir": await self.run_dir()})
        by_pid = {int(i["pid"]): i for i in info}
        out = []
        for g, ps in sorted(holders.items()):
            for p in ps:
                i = by_pid.get(p, {})
                out.append(GpuOwner(g, p, _title(i.get("argv") or []) or None,
                                    " ".join(i.get("leader_argv") or [])[:200] or None,
                                    i.get("server")))
        return out

    async def wait_gpus_free(self, timeout: float = 60.0) -> tuple[bool | None, GpuPids]:
        """Poll until this profile's GPUs run no compute process; (free?, last holders)."""
        if not self.profile.gpus:
            return None, {}
        deadline = time.monotonic() + timeout
        while True:
            holders = await self.gpu_holders()
            if holders is None:
                return None, {}
            if not holders:
                return True, {}
            if time.monotonic() > deadline:
                return False, holders
            await asyncio.sleep(0.3)

    # -- start ------------------------------------------------------------------------------------
    async def start(self, progress: ProgressCb | None = None, timeout: float | None = None,
                    check_gpus: bool = True) -> StartResult:
        """Launch, follow the start-up lines, wait for /health, then audit the workers' env.

        Raises AlreadyRunning, GpuBusy, StartFailed (crash: last log lines + traceback) or
        StartTimeout (left running).
        """
        t0 = time.monotonic()
        emit = progress or (lambda p: None)
        rec = await self.read_record()
        if rec is not None:
            ins = await self._inspect(rec)
            if ins["ours"] and ins["members"]:
                raise AlreadyRunning(f"{self.name} is already running (pid {rec['pid']})")
            await self.agent_op({"op": "remove", "path": await self.pidfile()})
        gpu_note = None
        if check_gpus and self.profile.gpus:
            emit(StartProgress("gpu_check", "checking GPUs", 0.0))
            holders = await self.gpu_holders()
            if holders is None:
                gpu_note = "GPU state unknown: " + (getattr(self.gpu_probe, "problem", None)
                                                     or "no answer")
                emit(StartProgress("gpu_check", gpu_note, 0.0))
            elif holders:
                raise GpuBusy(self.name, await self.owners(holders))
        log = await self.log_path()
        workdir = await self._expand(self.profile.workdir) if self.profile.workdir else None
        argv = self.profile.launch_argv(self.python)
        out = await self.agent_op({
            "op": "launch", "name": self.name, "argv": argv, "env": self.profile.launch_env(),
            "run_dir": await self.run_dir(), "pidfile": await self.pidfile(), "log": log,
            "workdir": workdir, "port": self.profile.port, "gpus": self.profile.gpus,
        })
        if "record" not in out:
            lines = await self._log_tail(log, int(out.get("offset") or 0))
            raise StartFailed(f"{self.name}: {out.get('error')}", lines, _traceback(lines))
        rec = out["record"]
        emit(StartProgress("launching", f"launched pid {rec['pid']}", 0.02,
                           elapsed_s=time.monotonic() - t0))
        await self._wait_ready(rec, emit, t0, timeout or self.profile.ready_timeout)
        # Record the command line the leader really runs now (after exec chains like env -u).
        ins = await self._inspect(rec)
        if ins.get("leader"):
            rec["cmdline"] = ins["leader"]["argv"]
            await self.agent_op({"op": "write", "path": await self.pidfile(),
                                "text": json.dumps(rec) + "\n"})
        emit(StartProgress("audit", "reading the workers' environment", 0.98,
                           elapsed_s=time.monotonic() - t0))
        audit = await self.audit_env(rec)
        emit(StartProgress("ready", "ready", 1.0, elapsed_s=time.monotonic() - t0))
        return StartResult(self.name, rec["pid"], time.monotonic() - t0, log, audit, gpu_note)

    async def _wait_ready(self, rec: dict[str, Any], emit: ProgressCb, t0: float,
                          timeout: float) -> None:
        agent = await self.agent()
        tracker = ProgressTracker()
        path, offset = rec["log"], int(rec.get("log_offset") or 0)
        buf = b""
        lines: list[str] = []
        deadline = time.monotonic() + timeout
        next_health = 0.0
        while True:
            data, offset = await self._read_from(agent, path, offset)
            buf += data
            *complete, buf = buf.split(b"\n")
            for raw in complete:
                text = raw.decode("utf-8", "replace")
                lines.append(text)
                p = tracker.update(text)
                if p is not None:
                    p.elapsed_s = time.monotonic() - t0
                    emit(p)
            del lines[:-LOG_TAIL_LINES * 5]
            alive = await self._leader_alive(agent, rec["pid"])
            if not alive:
                data, offset = await self._read_from(agent, path, offset)
                tail = (b"\n".join(ln.encode() for ln in lines) + b"\n" + buf + data).decode(
                    "utf-8", "replace").splitlines()
                tail = [ln for ln in tail if ln.strip()][-LOG_TAIL_LINES:]
                tb = _traceback(tail) or tracker.traceback
                last = tb[-1] if tb else (tail[-1] if tail else "no output")
                raise StartFailed(f"{self.name} exited during start-up: {last}", tail, tb, "exited")
            now = time.monotonic()
            if now >= next_health:
                next_health = now + 0.5
                if await self.health():
                    # the lines written while /health was answering (vLLM binds its port early
                    # and answers only when up, so one poll can span the rest of the start-up)
                    data, offset = await self._read_from(agent, path, offset)
                    for raw in (buf + data).split(b"\n")[:-1]:
                        p = tracker.update(raw.decode("utf-8", "replace"))
                        if p is not None:
                            p.elapsed_s = time.monotonic() - t0
                            emit(p)
                    return
            if now > deadline:
                tail = [ln for ln in lines if ln.strip()][-LOG_TAIL_LINES:]
                raise StartTimeout(f"{self.name} not ready after {timeout:g} s (last phase: "
                                   f"{tracker.phase}); it is still running: stop it or wait",
                                   tail, tracker.traceback)
            await asyncio.sleep(POLL_S)

    async def _read_from(self, agent: AgentClient, path: str, offset: int) -> tuple[bytes, int]:
        try:
            res = await agent.request("read", path=path, offset=offset, size=1 << 20)
        except AgentError:
            return b"", offset
        data = base64.b64decode(res["b64"])
        if res.get("size", 0) < offset:  # truncated underneath us: start again
            return b"", 0
        return data, offset + len(data)

    async def _leader_alive(self, agent: AgentClient, pid: int) -> bool:
        try:
            res = await agent.request("proc_info", pid=pid, fds=[], stat=True)
        except AgentError:
            return False
        st = res.get("stat") if isinstance(res, dict) else None
        return isinstance(st, dict) and st.get("state") not in ("Z", "X", None)

    async def _log_tail(self, path: str, offset: int) -> list[str]:
        try:
            data = await self.host.read_file(path, offset)
        except HostError:
            return []
        return [ln for ln in data.decode("utf-8", "replace").splitlines() if ln.strip()][
            -LOG_TAIL_LINES:]

    # -- environment audit ------------------------------------------------------------------------
    async def audit_env(self, rec: dict[str, Any] | None = None) -> EnvAudit | None:
        """The launcher's and every scheduler worker's NCCL_/CUDA_/SGLANG_/TORCH_ variables, with
        the profile's variables that a readable process lacks. None when not running."""
        rec = rec or await self.read_record()
        if rec is None:
            return None
        agent = await self.agent()
        rows = await agent.request("procs")
        kids: dict[int, list[tuple[int, list[str]]]] = {}
        argv_of: dict[int, list[str]] = {}
        for pid, ppid, _uid, argv in rows:
            kids.setdefault(int(ppid), []).append((int(pid), list(argv)))
            argv_of[int(pid)] = list(argv)
        leader = int(rec["pid"])
        if leader not in argv_of:
            return None
        workers: list[tuple[int, str, Literal["launcher", "worker"]]] = []
        todo = [leader]
        while todo:
            for pid, argv in kids.get(todo.pop(), []):
                todo.append(pid)
                if argv and is_worker_title(argv[0]):
                    workers.append((pid, argv[0].split()[0], "worker"))
        workers.sort(key=lambda w: worker_order(w[1], w[0]))
        targets: list[tuple[int, str, Literal["launcher", "worker"]]] = [
            (leader, _title(argv_of[leader]), "launcher"), *workers]
        expected = self.profile.launch_env()
        audit = AUDIT_PREFIXES + (AUDIT_PREFIXES_VLLM if self.profile.engine == "vllm" else ())
        prefixes = sorted(set(audit) | set(expected))
        procs = []
        for pid, title, role in targets:
            try:
                info = await agent.request("proc_info", pid=pid, fds=[], environ_prefixes=prefixes)
            except AgentError as exc:
                procs.append(ProcEnv(pid, title, role, "unreadable", str(exc)))
                continue
            env = info.get("environ")
            status = info.get("environ_status") or "unreadable"
            if env is None or status != "ok":
                reason = ("empty: process title set without SPT_NOENV=1 (setproctitle wiped it)"
                          if status == "empty" else status)
                procs.append(ProcEnv(pid, title, role, "unreadable", reason))
                continue
            shown = {k: v for k, v in env.items() if k in expected or k.startswith(audit)}
            missing = [k for k in expected if k not in env]
            differs = {k: (v, env[k]) for k, v in expected.items() if k in env and env[k] != v}
            procs.append(ProcEnv(pid, title, role, "ok", None, dict(sorted(shown.items())),
                                 missing, differs))
        return EnvAudit(self.name, expected, procs)

    # -- stop -------------------------------------------------------------------------------------
    async def stop(self, grace: float = 30.0, gpu_timeout: float = 60.0) -> StopResult:
        """SIGTERM the recorded process group, wait, SIGKILL what is left, then check that no
        process of the group remains and the GPUs are free. Raises NotOurs (nothing signalled)
        when the pidfile points at a process specmon did not start."""
        rec = await self.read_record()
        if rec is None:
            return StopResult(self.name, False, detail="not running (no pidfile)")
        problem = record_problem(rec)
        if problem is not None:
            raise NotOurs(f"{self.name}: not stopping pid {rec['pid']}: {problem}")
        ident = _ident(rec)
        res = await self.agent_op({"op": "signal", "signal": "SIGTERM", **ident})
        if res.get("refused"):
            raise NotOurs(f"{self.name}: not stopping pid {rec['pid']}: {res['refused']}")
        out = StopResult(self.name, bool(res["members"]))
        if res["signalled"]:
            out.signals.append("SIGTERM")
            members = await self._wait_group_gone(rec, grace)
            if members:
                res = await self.agent_op({"op": "signal", "signal": "SIGKILL", **ident})
                if res.get("refused"):
                    raise NotOurs(f"{self.name}: not killing pid {rec['pid']}: {res['refused']}")
                if res["signalled"]:
                    out.signals.append("SIGKILL")
                members = await self._wait_group_gone(rec, 10.0)
            out.remaining = [m["pid"] for m in members]
        if not out.remaining:
            await self.agent_op({"op": "remove", "path": await self.pidfile()})
            out.gpus_free, out.gpu_holders = await self.wait_gpus_free(gpu_timeout)
        return out

    async def _wait_group_gone(self, rec: dict[str, Any], timeout: float) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while True:
            ins = await self._inspect(rec)
            if not ins["members"] or time.monotonic() > deadline:
                return list(ins["members"])
            await asyncio.sleep(0.2)

    async def check_can_start(self, freed_by: ServerController | None = None) -> None:
        """Every precondition of `start`, checked without changing anything: not running, the
        profile builds a command line, and its GPUs are free or held only by `freed_by`'s
        group (the server a swap will stop). Raises AlreadyRunning, ControlError or GpuBusy."""
        rec = await self.read_record()
        if rec is not None:
            ins = await self._inspect(rec)
            if ins["ours"] and ins["members"]:
                raise AlreadyRunning(f"{self.name} is already running (pid {rec['pid']})")
        try:
            self.profile.launch_argv(self.python)
            self.profile.launch_env()
        except Exception as exc:  # noqa: BLE001 - any config problem is one line
            raise ControlError(f"{self.name}: its profile cannot be launched: {exc}") from None
        if not self.profile.gpus:
            return
        holders = await self.gpu_holders()
        if not holders:
            return
        owners = await self.owners(holders)
        others = [o for o in owners if freed_by is None or o.server != freed_by.name]
        if others:
            raise GpuBusy(self.name, others)

    async def restart(self, progress: ProgressCb | None = None,
                      timeout: float | None = None) -> StartResult:
        stopped = await self.stop()
        if stopped.remaining:
            raise ControlError(f"{self.name}: processes {stopped.remaining} survived SIGKILL")
        return await self.start(progress, timeout)

    # -- benchmark --------------------------------------------------------------------------------
    async def benchmark(self, cfg: BenchConfig | None = None) -> BenchResult:
        """bench_serving on the host when it exists (unless disabled), else the built-in client.
        Every result is also kept in `self.benchmarks`."""
        cfg = cfg or BenchConfig()
        use = cfg.use_bench_serving
        py = self.profile.python or self.python
        if use is None:
            use = await has_bench_serving(self.host, py)
        if use:
            res = await run_bench_serving(self.host, py, self.name, self.profile.port, cfg,
                                          self.profile.listen_host)
        else:
            res = await run_builtin(await self.base_url(), self.name, cfg)
        self.benchmarks.append(res)
        return res


@dataclass
class SwapResult:
    stopped: StopResult | None  # None: the demo's controller
    started: StartResult | None


class ServerControls(Protocol):
    """Server control as the keyboard and a swap use it: what both the real controller
    (`ServerController`) and the demo's (`specmon.feeds.demo.DemoActions`) offer. The demo's
    return None where the real one returns a result."""

    @property
    def name(self) -> str: ...

    @property
    def running(self) -> bool | None:
        """Known to be running (True) or stopped (False) without asking the host; None: only
        the host knows (a swap checks there)."""

    async def start(self, progress: ProgressCb | None = None) -> StartResult | None: ...

    async def stop(self) -> StopResult | None: ...

    async def restart(self, progress: ProgressCb | None = None) -> StartResult | None: ...

    async def benchmark(self) -> BenchResult: ...


async def _restore(stopped: ServerControls, failed: ServerControls, exc: Exception,
                   progress: Any) -> NoReturn:
    """`failed` did not start after `stopped` was stopped for it: start `stopped` again, or
    say loudly that it is down. Always raises SwapFailed."""
    why = str(exc) or type(exc).__name__
    if isinstance(exc, StartTimeout):  # `failed` is left running on the GPUs: no restart
        raise SwapFailed(f"swap failed: {failed.name} did not become ready ({why}); it is left "
                         f"running. {stopped.name} is STOPPED AND DOWN: stop {failed.name}, "
                         f"then start {stopped.name}", exc, down=(stopped.name,)) from exc
    try:
        again = await stopped.start(progress)
    except Exception as exc2:  # noqa: BLE001 - said, in the one error below
        raise SwapFailed(f"swap failed: {failed.name} did not start ({why}); starting "
                         f"{stopped.name} again failed too ({exc2 or type(exc2).__name__}): "
                         f"{stopped.name} IS DOWN", exc, down=(stopped.name,)) from exc
    raise SwapFailed(f"swap failed: {failed.name} did not start ({why}); {stopped.name} was "
                     f"started again", exc, restarted=again) from exc


async def swap(stop_ctrl: ServerControls, start_ctrl: ServerControls,
               progress: ProgressCb | None = None, gpu_timeout: float = 120.0) -> SwapResult:
    """Check that the other server can start, stop one server, wait until the other's GPUs are
    free, start the other. Nothing is stopped when a precondition fails (already running, a
    profile that cannot launch, GPUs held by anything but the server being stopped, a pidfile
    that does not prove its group). When the start fails after the stop, the stopped server
    is started again, or the SwapFailed raised says loudly that it is down.

    Controllers other than ServerController (the demo's) are swapped by stop and start, with
    the same restore on failure."""
    emit = progress or (lambda p: None)
    if not (isinstance(stop_ctrl, ServerController) and isinstance(start_ctrl, ServerController)):
        emit(StartProgress("swap", f"stopping {stop_ctrl.name}", 0.0))
        stopped_any = await stop_ctrl.stop()
        try:
            started_any = await start_ctrl.start(progress)
        except Exception as exc:  # noqa: BLE001 - restored or said, in SwapFailed
            await _restore(stop_ctrl, start_ctrl, exc, progress)
        return SwapResult(stopped_any, started_any)
    emit(StartProgress("swap", f"checking that {start_ctrl.name} can start", 0.0))
    await start_ctrl.check_can_start(freed_by=stop_ctrl)
    rec = await stop_ctrl.read_record()
    if rec is not None and (problem := record_problem(rec)) is not None:
        raise NotOurs(f"{stop_ctrl.name}: not stopping pid {rec['pid']}: {problem}; "
                      f"{start_ctrl.name} not started")
    emit(StartProgress("swap", f"stopping {stop_ctrl.name}", 0.0))
    stopped = await stop_ctrl.stop()
    if stopped.remaining:
        raise ControlError(f"{stop_ctrl.name}: processes {stopped.remaining} survived; "
                           f"not starting {start_ctrl.name}")
    try:
        emit(StartProgress("swap", f"waiting for {start_ctrl.name}'s GPUs to be free", 0.0))
        free, holders = await start_ctrl.wait_gpus_free(gpu_timeout)
        if free is False:
            raise GpuBusy(start_ctrl.name, await start_ctrl.owners(holders))
        started = await start_ctrl.start(progress)
    except Exception as exc:  # noqa: BLE001 - restored or said, in SwapFailed
        await _restore(stop_ctrl, start_ctrl, exc, progress)
    return SwapResult(stopped, started)


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def record_problem(rec: dict[str, Any]) -> str | None:
    """Why a pidfile record cannot prove a group specmon started (None: it can be checked).

    specmon launches every server with setsid, so its leader's pid is also its process group
    and session id, always > 1, and the record carries the leader's start time and command.
    A record without those (a forged `starttime: null`, pgid 0 or 1, which would make killpg
    hit specmon's own group or init's) is refused before anything is asked of the host."""
    pid, pgid, sid = _int(rec.get("pid")), _int(rec.get("pgid")), _int(rec.get("sid"))
    if pid is None or pgid is None or sid is None:
        return "the record has no integer pid, pgid and sid"
    if pid <= 1 or pgid <= 1 or sid <= 1:
        return f"refusing pid {pid} / process group {pgid} / session {sid} (<= 1)"
    if not pid == pgid == sid:
        return (f"pid {pid}, process group {pgid} and session {sid} differ: specmon's servers "
                "lead their own session")
    start = _int(rec.get("starttime"))
    if start is None or start <= 0:
        return "the record has no start time, so its process cannot be proven"
    argvs = [rec.get("cmdline"), rec.get("chain")]
    if not any(isinstance(a, list) and a and all(isinstance(x, str) for x in a) for a in argvs):
        return "the record has no command line to check"
    return None


def _ident(rec: dict[str, Any]) -> dict[str, Any]:
    return {k: rec.get(k) for k in ("pid", "pgid", "sid", "starttime", "cmdline", "chain")}


def _title(argv: list[str]) -> str:
    if not argv:
        return "?"
    if argv[0].startswith("sglang::") or is_worker_title(argv[0]):
        return argv[0].split()[0]
    return " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(argv))[:120]


def _traceback(lines: list[str]) -> list[str]:
    """The last Python traceback in `lines`: from 'Traceback' to the exception line."""
    start = None
    for i, ln in enumerate(lines):
        if "Traceback (most recent call last)" in ln:
            start = i
    if start is None:
        return []
    out = [lines[start]]
    for ln in lines[start + 1:]:
        out.append(ln)
        if ln and not ln.startswith((" ", "\t")) and len(out) > 2:
            break
    return out
