"""A simulated TP rank (`sglang::scheduler_TP<r>`), started with multiprocessing *spawn*.

It does what matters to a monitor, the way SGLang's scheduler processes do: sets its process
title with setproctitle (which wipes /proc/PID/environ unless SPT_NOENV=1), reads the NCCL
variables from ITS OWN environment once, at "communicator init" (so a variable the launcher sets
in its os.environ after the spawn never arrives here), logs NCCL's "set by environment" lines
when NCCL_DEBUG=INFO (on stdout, as real NCCL does, unless a log file stands for `> log 2>&1`;
only the variables real NCCL prints in that configuration), and reports its per-step
communication cost and its GPU's clock to the main process. On a crash it logs a traceback and
sends SIGQUIT to its parent, as SGLang does.

Keep imports light: every worker is a fresh interpreter.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from specmon.sim import formats
from specmon.sim.perf import nccl_comm_ms, nccl_vars

NCCL_VERSION = "2.28.9+cuda13.0"  # the version of the real captures this output imitates
_NCCL_SILENT = {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "NCCL_VERSION"}
# Real NCCL 2.28.9 with 1 rank (tests/data/nccl-h200-launcher) printed a line for these when set,
# and none for NCCL_PROTO/NCCL_ALGO (read only by the tuning model, which a 1-rank communicator
# skips). With 2+ ranks the sim prints every NCCL_* it has, as NCCL's source says the tuning model
# does; no real multi-rank capture exists yet to check that.
_ONE_RANK_REPORTED = frozenset({"NCCL_CUMEM_ENABLE", "NCCL_P2P_LEVEL", "NCCL_NVLS_ENABLE", "NCCL_BUFFSIZE"})
# The line of NCCL_P2P_LEVEL comes with the INIT debug subsystem (the capture with
# NCCL_DEBUG_SUBSYS=INIT had it and no other); the others need ENV.
_INIT_SUBSYS_VARS = frozenset({"NCCL_P2P_LEVEL"})
# Printed as strings; NCCL's integer params end with "." ("... set by environment to 0.")
_STRING_VARS = frozenset({"NCCL_P2P_LEVEL", "NCCL_PROTO", "NCCL_ALGO", "NCCL_NET_GDR_LEVEL", "NCCL_NET",
                          "NCCL_SOCKET_IFNAME", "NCCL_IB_HCA"})


class LogWriter:
    """Appends whole lines to the log file (O_APPEND: several processes share it) or stderr."""

    def __init__(self, path: str | None, fallback_fd: int = 2) -> None:
        if path:
            self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self._own = True
        else:
            self.fd = fallback_fd
            self._own = False
        self._lock = threading.Lock()

    def write(self, text: str) -> None:
        data = (text if text.endswith("\n") else text + "\n").encode("utf-8", "replace")
        with self._lock:
            try:
                while data:
                    n = os.write(self.fd, data)
                    data = data[n:]
            except OSError:
                pass

    def close(self) -> None:
        if self._own:
            try:
                os.close(self.fd)
            except OSError:
                pass


def nccl_debug_lines(env: dict[str, str], rank: int, pid: int, tid: int, nranks: int) -> list[str]:
    """What NCCL_DEBUG=INFO prints on this rank at communicator init, in real NCCL's line shapes."""
    if env.get("NCCL_DEBUG", "").upper() not in ("INFO", "TRACE"):
        return []
    subs = _debug_subsystems(env)
    host = socket.gethostname().split(".")[0]
    pre = f"{host}:{pid}:{tid} [{rank}] NCCL INFO "
    comm = f"0x{(pid * 2654435761) & 0xFFFFFFFF:x}"
    init = (f"ncclCommInitRankConfig comm {comm} rank {rank} nranks {nranks} cudaDev {rank} nvmlDev {rank} "
            f"busId {rank + 1}0 commId 0x91ef59283a7fc5c - Init")
    out = [pre + f"NCCL version {NCCL_VERSION}"] if rank == 0 and "INIT" in subs else []
    if "INIT" in subs:
        out.append(pre + init + " START")
    for var, value in nccl_vars(env).items():
        if var in _NCCL_SILENT or (nranks == 1 and var not in _ONE_RANK_REPORTED):
            continue
        if ("INIT" if var in _INIT_SUBSYS_VARS else "ENV") not in subs:
            continue
        dot = "." if var not in _STRING_VARS and value.lstrip("-").isdigit() else ""
        out.append(formats.nccl_env_line(host, pid, tid, rank, var, value + dot))
    if "INIT" in subs:
        out.append(pre + f"comm {comm} rank {rank} nRanks {nranks} nNodes 1 localRanks {nranks} "
                   f"localRank {rank} MNNVL 0")
        out.append(pre + init + " COMPLETE")
    return out


def _debug_subsystems(env: dict[str, str]) -> set[str]:
    """INIT/ENV per NCCL_DEBUG_SUBSYS (unset: NCCL's default INIT,BOOTSTRAP,ENV; "^X": all but X)."""
    sub = env.get("NCCL_DEBUG_SUBSYS")
    if sub is None:
        return {"INIT", "ENV"}
    parts = {p.strip().upper() for p in sub.lstrip("^").split(",")}
    if sub.startswith("^"):
        return {"INIT", "ENV"} - parts
    return {"INIT", "ENV"} if "ALL" in parts else parts & {"INIT", "ENV"}


def _nccl_debug_writer(env: dict[str, str], log: LogWriter) -> LogWriter:
    """NCCL_DEBUG_FILE=/tmp/nccl.%h.%p gets one file per host/pid, like real NCCL; else stdout
    (the log file when there is one: it stands for `> log 2>&1`)."""
    path = env.get("NCCL_DEBUG_FILE")
    if not path:
        return log if log._own else LogWriter(None, fallback_fd=1)
    host = socket.gethostname().split(".")[0]
    path = path.replace("%h", host).replace("%p", str(os.getpid()))
    try:
        return LogWriter(path)
    except OSError:
        return log


def _forward_decode(rank: int) -> None:
    raise RuntimeError(
        "CUDA error: an illegal memory access was encountered\n"
        "CUDA kernel errors might be asynchronously reported at some other API call, so the "
        "stacktrace below might be incorrect.\n"
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1"
    )


def _run_batch(rank: int) -> None:
    _forward_decode(rank)


def _event_loop_overlap(rank: int) -> None:
    _run_batch(rank)


def worker_main(cfg: dict[str, Any], rank: int, conn: Connection) -> None:
    """Entry point of a spawned rank. `cfg` is plain data (picklable)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher handles Ctrl+C and stops us
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    title = cfg.get("title")
    if title:
        import setproctitle

        setproctitle.setproctitle(title)
    log = LogWriter(cfg.get("log_file"))
    version: str = cfg["version"]
    tag: str = cfg["tag"]
    log_ms = bool(cfg.get("log_ms"))
    parent = os.getppid()

    vllm = cfg.get("engine") == "vllm"

    def emit(msg: str) -> None:
        if vllm:
            _vllm_emit(cfg, log, msg, "ERROR" if "Traceback" in msg else "INFO")
        else:
            log.write(formats.line(version, time.time(), msg, tag, log_ms=log_ms))

    # "communicator init": the environment is read here, once, like NCCL_PARAM's cache
    env = dict(os.environ)
    comm = nccl_comm_ms(int(cfg["tp_size"]), env)
    begin, end = cfg.get("init_msgs") or ("Init torch distributed begin.",
                                          "Init torch distributed ends. mem usage=0.97 GB")
    emit(begin)
    dbg = _nccl_debug_writer(env, log)
    for text in nccl_debug_lines(env, rank, os.getpid(), threading.get_native_id(), int(cfg["tp_size"])):
        dbg.write(text)
    emit(end)
    host = None
    gpu = int(cfg["gpu"])
    if cfg.get("sim_dir"):
        from specmon.sim.gpu_model import SimGpuHost

        host = SimGpuHost(Path(cfg["sim_dir"]), n_gpus=int(cfg.get("n_gpus", 8)))

    def clock_ratio() -> float:
        if host is None:
            return 1.0
        try:
            return host.sm_clock_ratio(gpu)
        except (IndexError, OSError, ValueError):
            return 1.0

    try:
        conn.send(
            {
                "type": "ready",
                "rank": rank,
                "pid": os.getpid(),
                "comm_ms": comm,
                "nccl": nccl_vars(env),
                "clock_ratio": clock_ratio(),
            }
        )
        while not stop.is_set():
            if os.getppid() != parent:
                break  # the launcher is gone: do not linger as an orphan
            if conn.poll(0.5):
                msg = conn.recv()
                if msg == "stop":
                    break
                if msg == "crash":
                    try:
                        _event_loop_overlap(rank)
                    except Exception:
                        head = cfg.get("crash_head", "WorkerProc hit an exception.") + "\n" \
                            if vllm else "Scheduler hit an exception: "
                        emit(head + traceback.format_exc().rstrip("\n"))
                        os.kill(parent, signal.SIGQUIT)
                        log.close()
                        sys.exit(1)
            conn.send({"type": "speed", "rank": rank, "clock_ratio": clock_ratio()})
    except (EOFError, BrokenPipeError, ConnectionResetError, KeyboardInterrupt):
        pass
    finally:
        log.close()


def _vllm_emit(cfg: dict[str, Any], log: LogWriter, msg: str, level: str) -> None:
    """A worker's record in vLLM's format: its `(Worker_TP<r> pid=N)` tag, header, message."""
    from specmon.sim import vllm_formats as vf

    version = cfg["version"]
    tag = vf.tag_prefix(version, cfg.get("tag_name"), os.getpid(),
                        no_color=bool(os.environ.get("NO_COLOR")))
    if level == "ERROR":
        filename, lineno = cfg.get("crash_where") or ("multiproc_executor.py", 527)
    elif msg.startswith("Model loading took"):
        filename, lineno = "gpu_model_runner.py", 1892
    else:
        filename, lineno = "parallel_state.py", 1134
    log.write(vf.line(version, time.time(), msg, filename=filename, lineno=lineno, tag=tag,
                      level=level, prefix=os.environ.get("VLLM_LOGGING_PREFIX", "")))


def detokenizer_main(cfg: dict[str, Any], conn: Connection) -> None:
    """`sglang::detokenizer`: present in the process tree, otherwise idle."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if cfg.get("title"):
        import setproctitle

        setproctitle.setproctitle(cfg["title"])
    parent = os.getppid()
    try:
        conn.send({"type": "ready", "pid": os.getpid()})
        while not stop.is_set() and os.getppid() == parent:
            if conn.poll(0.5) and conn.recv() == "stop":
                break
    except (EOFError, BrokenPipeError, ConnectionResetError, KeyboardInterrupt):
        pass
