"""Find SGLang and vLLM servers on a host from its process table (through the host agent).

A server is a process whose command line runs `sglang.launch_server`, `sglang serve`, `vllm
serve` (or vLLM's API server module), or the simulated `specmon sim server`; its
`sglang::scheduler*` (vLLM: EngineCore / Worker) descendants are its GPU workers. Port,
TP size and speculative flags come from the command line; the log file is the `--log-file` of
the command line when it names a regular file (relative to the process's working directory),
else where the main process's fd 2 (else fd 1) points when that is a regular file. A server
writing to a terminal or a pipe cannot be tailed: it is listed with a hint to pass
--log NAME=PATH.

Trust: only the connecting user's processes are listed unless `all_users` (--all-users). Another
user's server is listed, never trusted: its log is not tailed (its --log-file may name a file
only we could read) and nothing of its command line or environment is ever executed; --log
NAME=PATH tails such a file on purpose. An own server's log is tailed only when the connecting
user can open it by its path.
"""

from __future__ import annotations

import base64
import json
import os
import posixpath
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from specmon.hosts.agent_client import AgentClient
from specmon.numfmt import ascii_int, ascii_port
from specmon.parse.argv import flag_values

DEFAULT_PORT = 30000  # SGLang's default --port
LOG_NOT_READABLE = "log not readable; pass --log NAME=PATH"
ALL_USERS_NOTE = ("listing every user's servers (--all-users): other users' logs are not "
                  "tailed and nothing of their processes is run")
ACCEPT_LEN_PROBE_BYTES = 256 << 10
VLLM_DEFAULT_PORT = 8000  # vllm serve's default --port
# what only a speculative server's log prints: SGLang's decode field, vLLM V1's and V0's lines
SPEC_LOG_MARKERS = (b"accept len", b"SpecDecoding metrics: ", b"Speculative metrics: ")
# Worker process titles (data): SGLang's schedulers; vLLM's set_process_title
# f"{VLLM_PROCESS_NAME_PREFIX}::{name}" (default prefix VLLM) for EngineCore[_DP<n>] and
# Worker[_DP<d>][_PP<p>][_TP<t>]..., and the mp process name `VllmWorker...` of 0.8/0.9.
WORKER_TITLE = re.compile(r"sglang::scheduler|[^\s:]+::(?:EngineCore|DPEngineCore|Worker|"
                          r"VllmWorker)(?:_|\s|$)|VllmWorker")

Kind = Literal["baseline", "speculative"]


@dataclass
class Proc:
    pid: int
    ppid: int
    uid: int
    argv: list[str]


@dataclass
class DiscoveredServer:
    pid: int
    argv: list[str]
    name: str
    port: int
    port_from_args: bool  # False: SGLang's default port was assumed
    kind: Kind
    kind_source: Literal["args", "log"]
    spec_args: dict[str, str | bool] = field(default_factory=dict)
    tp_size: int | None = None
    model: str | None = None
    simulated: bool = False
    engine: Literal["sglang", "vllm"] = "sglang"
    workers: list[tuple[int, str]] = field(default_factory=list)  # (pid, process title)
    log_path: str | None = None
    log_problem: str | None = None  # why the log cannot be tailed (None when it can)
    log_target: str | None = None  # what fd 1/2 point to, e.g. "pipe:[1234]" or "/dev/pts/3"
    log_file_arg: str | None = None  # the command line's --log-file, as given
    uid: int | None = None  # the process's owner
    own: bool = True  # run by the connecting user (another user's is listed, not trusted)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        spec = self.spec_args.get("--speculative-algorithm")
        kind = f"{self.kind} ({spec})" if spec and spec is not True else self.kind
        log = self.log_path if self.log_path else self.log_problem
        who = "" if self.own else f", user {self.uid}"
        return f"{self.name}: pid {self.pid}{who}, port {self.port}, {kind}, log: {log}"


def _is_launcher(argv: list[str]) -> tuple[bool, bool]:
    """(is an SGLang or vLLM server's main process, is the simulated server)."""
    if not argv or argv[0].startswith("sglang::"):
        return False, False
    # Only an interpreter running the module/script, or the script itself, counts: a
    # `grep sglang.launch_server` or `tail -F sglang.launch_server.log` must not.
    interp = os.path.basename(argv[0]).startswith("python")
    for i, arg in enumerate(argv):
        if i > 0 and not interp:
            break
        base = os.path.basename(arg)
        if base in ("sglang.launch_server", "launch_server.py") and (
            base != "launch_server.py" or "sglang" in arg
        ):
            return True, False
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if base == "sglang" and nxt == "serve":
            return True, False
        if _is_vllm_main(argv, i, interp):
            return True, False
        if base == "specmon" and nxt == "sim" and argv[i + 2: i + 3] == ["server"]:
            return True, True
        if arg == "specmon.sim" or arg.startswith("specmon.sim."):
            return True, True
    return False, False




def is_worker_title(argv0: str) -> bool:
    """A server's GPU worker by its process title (SGLang scheduler, vLLM EngineCore/Worker)."""
    return WORKER_TITLE.match(argv0) is not None


def worker_order(title: str, pid: int) -> tuple[list[tuple[int, str]], int]:
    """Sort key: workers by rank as their titles number them (`..._TP2` before `..._TP10`),
    then pid. Process-table order is pid order, which a wrapped pid counter (pid_max 32768)
    turns around: TP1 could be listed, and shown, before TP0. A run of digits compares by
    length, then text (no int(): a title is another user's text, of any length)."""
    parts = [(len(t.lstrip("0")), t.lstrip("0")) if i % 2 else (0, t)
             for i, t in enumerate(re.split(r"(\d+)", title))]
    return parts, pid


def _is_vllm_main(argv: list[str], i: int, interp: bool) -> bool:
    """`vllm serve ...` (the console script, or `python -m vllm.entrypoints.cli.main serve`),
    `python -m vllm.entrypoints.openai.api_server ...`, or `specmon sim server --engine vllm`
    counts as a vLLM API server at argv[i]."""
    arg = argv[i]
    base = os.path.basename(arg)
    nxt = argv[i + 1] if i + 1 < len(argv) else None
    if base == "vllm" and nxt == "serve":
        return True
    if arg in ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.cli.main") and interp:
        return arg.endswith("api_server") or nxt == "serve"
    return base == "api_server.py" and "vllm" in arg and "/entrypoints/" in arg


def engine_of(argv: list[str]) -> Literal["sglang", "vllm"]:
    """Which engine a server's command line runs."""
    interp = bool(argv) and os.path.basename(argv[0]).startswith("python")
    for i in range(len(argv) if interp else min(1, len(argv))):
        if _is_vllm_main(argv, i, interp):
            return "vllm"
    flags = flag_values(argv)
    return "vllm" if flags.get("--engine") == "vllm" and "sim" in argv else "sglang"


def _vllm_fields(s: DiscoveredServer) -> None:
    """vLLM's defaults and flags: port 8000, `serve MODEL`, --tensor-parallel-size/-tp and the
    --speculative-config JSON (or 0.8's --speculative-model / --num-speculative-tokens)."""
    if engine_of(s.argv) != "vllm":
        return
    s.engine = "vllm"
    if any("Worker" in t for _, t in s.workers):
        # TP > 1: the EngineCore only drives the workers; the GPU ranks are the Worker_TP<r>
        s.workers = [(pid, t) for pid, t in s.workers if "EngineCore" not in t]
    flags = flag_values(s.argv)
    if not s.port_from_args:
        s.port = VLLM_DEFAULT_PORT
    if s.tp_size is None:
        tp = next((s.argv[j + 1] for j, a in enumerate(s.argv[:-1]) if a == "-tp"), None)
        s.tp_size = _int(tp)
    if s.model is None and "serve" in s.argv:
        j = s.argv.index("serve") + 1
        if j < len(s.argv) and not s.argv[j].startswith("-"):
            s.model = s.argv[j]
    spec: dict[str, str | bool] = {k: v for k, v in flags.items() if k in (
        "--speculative-config", "--speculative_config", "--speculative-model",
        "--num-speculative-tokens")}
    method = None
    raw = _first(spec, "--speculative-config", "--speculative_config")
    if raw is not None:
        try:
            cfg = json.loads(raw)
        except ValueError:
            cfg = None
        if isinstance(cfg, dict):
            m = cfg.get("method") or ("draft_model" if cfg.get("model") else None)
            method = m if isinstance(m, str) else None
    elif isinstance(spec.get("--speculative-model"), str):
        method = str(spec["--speculative-model"])
    s.spec_args = spec
    if method:
        s.spec_args["--speculative-algorithm"] = method  # what describe() and the UI show
    s.kind = "speculative" if method else "baseline"


def _log_fds(s: DiscoveredServer, fds: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """vLLM's logger writes to stdout (SGLang's to stderr): for a vLLM server fd 1 is looked at
    first, so `vllm serve > out.log 2> err.log` tails out.log."""
    if s.engine != "vllm" or not isinstance(fds, dict):
        return fds
    return {"2": fds.get("1") or {}, "1": fds.get("2") or {}}


def _proc_row(r: Any) -> Proc | None:
    """One row of the agent's process list, checked (a malformed row is skipped, not a crash)."""
    if not (isinstance(r, list) and len(r) == 4 and all(type(x) is int for x in r[:3])
            and isinstance(r[3], list) and all(isinstance(a, str) for a in r[3])):
        return None
    return Proc(r[0], r[1], r[2], list(r[3]))


def _first(flags: dict[str, str | bool], *names: str) -> str | None:
    for n in names:
        v = flags.get(n)
        if isinstance(v, str):
            return v
    return None


MAX_PARALLEL = 1 << 16  # a TP/PP size, node count or rank past this is no server's


def _int(s: str | None) -> int | None:
    """A size from a process's command line (another user's text): ASCII digits, bounded."""
    return ascii_int(s, 1, MAX_PARALLEL)


def find_servers(procs: list[Proc]) -> list[DiscoveredServer]:
    """Pure: group a process table into servers (main process + scheduler workers)."""
    by_pid = {p.pid: p for p in procs}
    mains: dict[int, DiscoveredServer] = {}
    for p in procs:
        is_main, simulated = _is_launcher(p.argv)
        if not is_main:
            continue
        # A launcher started by another launcher (e.g. a wrapper) belongs to the outer one.
        if any(_is_launcher(a.argv)[0] for a in _ancestors(p, by_pid)):
            continue
        flags = flag_values(p.argv)
        port = ascii_port(_first(flags, "--port"))
        spec = {k: v for k, v in flags.items() if k.startswith("--speculative-")}
        algo = spec.get("--speculative-algorithm")
        speculative = isinstance(algo, str) and algo.upper() not in ("", "NONE")
        mains[p.pid] = DiscoveredServer(
            pid=p.pid,
            argv=p.argv,
            name="",
            port=port if port is not None else DEFAULT_PORT,
            port_from_args=port is not None,
            kind="speculative" if speculative else "baseline",
            kind_source="args",
            spec_args=spec,
            tp_size=_int(_first(flags, "--tp-size", "--tensor-parallel-size", "--tp")),
            model=_first(flags, "--model-path", "--model"),
            simulated=simulated,
            log_file_arg=_first(flags, "--log-file"),
            uid=p.uid,
        )
    for p in procs:
        if p.argv and is_worker_title(p.argv[0]):
            for a in _ancestors(p, by_pid):
                if a.pid in mains:
                    mains[a.pid].workers.append((p.pid, p.argv[0].split()[0]))
                    break
    for s in mains.values():
        _vllm_fields(s)
    servers = sorted(mains.values(), key=lambda s: (s.port, s.pid))
    seen: dict[int, int] = {}
    for s in servers:
        seen[s.port] = seen.get(s.port, 0) + 1
    for s in servers:
        s.name = f"{s.engine}-{s.port}" if seen[s.port] == 1 else f"{s.engine}-{s.port}-{s.pid}"
        s.workers.sort(key=lambda w: worker_order(w[1], w[0]))
    return servers


def _ancestors(p: Proc, by_pid: dict[int, Proc]) -> list[Proc]:
    out, seen = [], {p.pid}
    cur = by_pid.get(p.ppid)
    while cur is not None and cur.pid not in seen:
        out.append(cur)
        seen.add(cur.pid)
        cur = by_pid.get(cur.ppid)
    return out


def log_from_fds(fds: dict[str, dict[str, Any]]) -> tuple[str | None, str | None, str | None]:
    """(log path, problem, raw target) from the agent's fd info for fds 2 and 1: a regular
    file the connecting user can open by its path (an agent without the "readable" answer
    counts as able)."""
    target = None
    for fd in ("2", "1"):
        info = fds.get(fd) or {}
        t = info.get("target")
        if t and target is None:
            target = t
        if (t and info.get("regular") and t.startswith("/") and not t.endswith(" (deleted)")
                and info.get("readable", True) is True):
            return t, None, t
    return None, LOG_NOT_READABLE, target


def log_file_verdict(path: str, st: Any, me: Any) -> tuple[str | None, str | None]:
    """(log path, problem) for a server's `--log-file` (resolved against its cwd) from the
    agent's stat of it. Tailed only when the user could open it by its path and the server
    writes it: the server holds it open, or the user owns it. A file that another user put
    at that name in a shared folder, and that the server never opened, is theirs, not the
    server's log."""
    if not (isinstance(st, dict) and st.get("regular") and st.get("readable", True) is True):
        return None, f"--log-file {path}: not a readable file; pass --log NAME=PATH"
    owner = st.get("uid")
    if st.get("held") is False and type(owner) is int and type(me) is int and owner != me:
        return None, (f"--log-file {path}: owned by uid {owner} and not open in the server: "
                      "not its log; pass --log NAME=PATH to tail it")
    return posixpath.normpath(path), None


def foreign_problem(uid: int | None) -> str:
    return (f"another user's process (uid {uid}): its log is not tailed; pass --log NAME=PATH "
            "to tail it")


async def discover(agent: AgentClient, *, probe_log: bool = True,
                   all_users: bool = False) -> list[DiscoveredServer]:
    """List the connecting user's SGLang servers (every user's with `all_users`) on the
    agent's host, with their log files when tailable (own servers only)."""
    rows = await agent.request("procs", all_users=all_users)
    me = agent.hello.get("uid")
    procs = [p for p in map(_proc_row, rows if isinstance(rows, list) else []) if p is not None]
    if not all_users and type(me) is int:
        procs = [p for p in procs if p.uid == me]
    servers = find_servers(procs)
    for s in servers:
        if s.uid != me:
            s.own = False
            s.log_problem = foreign_problem(s.uid)
            continue
        try:
            info = await agent.request("proc_info", pid=s.pid, fds=[1, 2])
        except Exception as exc:  # the process may have exited meanwhile
            s.log_problem = f"{LOG_NOT_READABLE} ({exc})"
            continue
        s.log_path, s.log_problem, s.log_target = log_from_fds(_log_fds(s, info.get("fds", {})))
        if s.log_file_arg:
            # `... --log-file base.log > base.out 2>&1`: the log is base.log, not stderr
            path = posixpath.join(info.get("cwd") or "/", s.log_file_arg)
            st = await agent.request("stat", path=path, pid=s.pid)
            s.log_path, s.log_problem = log_file_verdict(path, st, me)
        if s.log_path is None and s.workers and not s.log_file_arg:
            # Workers usually share the launcher's stderr, but check them too.
            winfo = await agent.request("proc_info", pid=s.workers[0][0], fds=[1, 2])
            wpath, wproblem, _ = log_from_fds(winfo.get("fds", {}))
            if wpath is not None:
                s.log_path, s.log_problem = wpath, wproblem
        if probe_log and s.log_path and s.kind == "baseline":
            try:
                res = await agent.request(
                    "read", path=s.log_path, offset=-ACCEPT_LEN_PROBE_BYTES,
                    size=ACCEPT_LEN_PROBE_BYTES,
                )
            except Exception:
                continue
            if any(m in base64.b64decode(res["b64"]) for m in SPEC_LOG_MARKERS):
                s.kind, s.kind_source = "speculative", "log"
    return servers
