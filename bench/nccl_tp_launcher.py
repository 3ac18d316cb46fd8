"""A stand-in for `python -m sglang.launch_server --tp N`: what spawned TP workers really see.

It does what SGLang's launcher does that matters to specmon's env audit: multiprocessing *spawn*,
one worker per GPU, `setproctitle("sglang::scheduler_TP{r}")` first thing in the worker (which
wipes /proc/PID/environ unless SPT_NOENV=1), then a torch.distributed nccl init (NCCL prints its
"set by environment" lines there) and a loop of decode-sized all-reduces, each call timed.

Where the tuning variables come from (`--mode`):
  env       in the launcher's environment before it starts (they reach the workers);
  late      set by the launcher in os.environ *after* the spawn (the seed incident: they do not);
  prespawn  set by the launcher in os.environ before the spawn (they reach the workers, and are
            invisible in /proc/<launcher>/environ, like SGLang's own NCCL_CUMEM_ENABLE edit);
  none      nowhere.

Every process writes its stdout and stderr to its own files (NCCL's debug output goes to stdout,
SGLang-style logging to stderr); the launcher records /proc/PID/environ of itself and of each
worker (tracked prefixes only: other variables are counted, never written) and the all-reduce
times per call (CUDA events and host wall clock around all_reduce + synchronize).

  python bench/nccl_tp_launcher.py capture --world-size 1 --out DIR   # every mode x SPT_NOENV 0/1
  python bench/nccl_tp_launcher.py launch --mode late --world-size 2 --out DIR
  python bench/nccl_tp_launcher.py capture --world-size 2 --no-nccl --out DIR  # no GPU: /proc only

Needs torch (and setproctitle) on the GPU machine; specmon and its tests never import it.
Keep NCCL_NVLS_ENABLE=0: `capture` forces it for every case.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing as mp
import os
import shlex
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TUNING = "NCCL_PROTO=LL,NCCL_ALGO=Ring,NCCL_P2P_LEVEL=SYS,NCCL_CUMEM_ENABLE=0,NCCL_BUFFSIZE=4194304"
TRACKED = ("NCCL_", "CUDA_", "TORCH_", "NVSHMEM_", "SGLANG_", "SPT_")
DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV"}
SAFETY_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
MODES = ("env", "late", "prespawn", "none")


def parse_tuning(text: str) -> dict[str, str]:
    out = {}
    for item in filter(None, text.split(",")):
        k, sep, v = item.partition("=")
        if not sep or not k.startswith("NCCL_"):
            raise SystemExit(f"--tuning: {item!r} is not NCCL_VAR=VALUE")
        out[k] = v
    return out


def environ_summary(pid: int | str) -> tuple[dict[str, Any], bytes]:
    """/proc/PID/environ as {bytes, all_nul, n_vars, tracked} plus the filtered raw bytes.

    Only tracked variables are kept (the machine's other variables may be private); the raw
    bytes keep the all-NUL shape of a setproctitle-wiped block so specmon reads it as it would.
    """
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}, b""
    items = [x for x in raw.split(b"\0") if x]
    tracked: dict[str, str] = {}
    for item in items:
        k, _, v = item.decode("utf-8", "replace").partition("=")
        if k.startswith(TRACKED):
            tracked[k] = v
    all_nul = not raw.strip(b"\0")
    filtered = b"\0" * len(raw) if all_nul else b"".join(
        f"{k}={v}".encode() + b"\0" for k, v in sorted(tracked.items()))
    return {"bytes": len(raw), "all_nul": all_nul, "n_vars": len(items),
            "tracked": dict(sorted(tracked.items()))}, filtered


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError as exc:
        return f"error: {exc}"


def _stats(xs: list[float]) -> dict[str, float]:
    return {"n": len(xs), "mean_us": round(statistics.fmean(xs), 2),
            "median_us": round(statistics.median(xs), 2), "min_us": round(min(xs), 2),
            "p90_us": round(sorted(xs)[int(0.9 * (len(xs) - 1))], 2)}


# --------------------------------------------------------------------------------------------
# Worker (runs in a fresh interpreter: spawn)
# --------------------------------------------------------------------------------------------


def worker_main(rank: int, world: int, port: int, out: str, cfg: dict[str, Any], conn: Any) -> None:
    """One TP rank: title, NCCL init, timed all-reduces, report, wait for stop."""
    for fd, suffix in ((1, "stdout"), (2, "stderr")):  # this process's own files, at fd level
        f = os.open(f"{out}/TP{rank}.{suffix}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, datefmt="%Y-%m-%d %H:%M:%S",
                        format=f"[%(asctime)s TP{rank}] %(message)s", force=True)
    log = logging.getLogger("worker")
    mine = {k: v for k, v in sorted(os.environ.items()) if k.startswith(TRACKED)}
    res: dict[str, Any] = {"rank": rank, "pid": os.getpid(), "os_environ": mine}
    res["self_environ_before_title"], _ = environ_summary("self")
    try:
        import setproctitle

        setproctitle.setproctitle(f"sglang::scheduler_TP{rank}")
        res["setproctitle"] = getattr(setproctitle, "__version__", "?")
    except ImportError as exc:
        res["setproctitle"] = f"missing: {exc}"
    res["self_environ_after_title"], _ = environ_summary("self")
    try:
        if cfg.get("nccl", True):
            _run_collectives(rank, world, port, cfg, res, log)
    except Exception:  # noqa: BLE001 - report what we have; the launcher still reads /proc
        import traceback

        res["error"] = traceback.format_exc()
        log.error("worker failed: %s", res["error"])
    conn.send(res)
    try:
        conn.recv()  # "stop": the launcher has read our /proc entries
    except EOFError:
        pass
    _destroy()
    sys.stdout.flush()


def _destroy() -> None:
    try:
        import torch.distributed as dist
    except ImportError:
        return

    if dist.is_initialized():
        dist.destroy_process_group()


def _run_collectives(rank: int, world: int, port: int, cfg: dict[str, Any], res: dict[str, Any],
                     log: logging.Logger) -> None:
    """NCCL init, then per decode size: warmup, then each all-reduce timed on its own."""
    import torch
    import torch.distributed as dist

    dev = torch.device(f"cuda:{rank}")
    torch.cuda.set_device(dev)
    log.info("Init torch distributed begin.")
    t0 = time.perf_counter()
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            device_id=dev)
    res["init_s"] = round(time.perf_counter() - t0, 3)
    log.info("Init torch distributed ends. init %.2f s", res["init_s"])
    res["torch"] = torch.__version__
    res["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    res["gpu"] = torch.cuda.get_device_name(dev)
    res["sizes"] = []
    for tokens in cfg["tokens"]:
        t = torch.empty(tokens, cfg["hidden"], dtype=torch.bfloat16, device=dev)
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(cfg["iters"])]
        host_us: list[float] = []
        for i in range(cfg["warmup"] + cfg["iters"]):
            t.fill_(1.0)
            torch.cuda.synchronize()
            h0 = time.perf_counter_ns()
            if i >= cfg["warmup"]:
                ev[i - cfg["warmup"]][0].record()
            dist.all_reduce(t)
            if i >= cfg["warmup"]:
                ev[i - cfg["warmup"]][1].record()
            torch.cuda.synchronize()
            if i >= cfg["warmup"]:
                host_us.append((time.perf_counter_ns() - h0) / 1000.0)
        gpu_us = [a.elapsed_time(b) * 1000.0 for a, b in ev]
        ok = bool((t == float(world)).all().item())
        res["sizes"].append({"tokens": tokens, "hidden": cfg["hidden"], "dtype": "bfloat16",
                             "bytes": t.numel() * t.element_size(), "sum_ok": ok,
                             "gpu_event": _stats(gpu_us), "host_sync": _stats(host_us),
                             "gpu_event_us": [round(x, 2) for x in gpu_us],
                             "host_sync_us": [round(x, 2) for x in host_us]})
        log.info("all_reduce %d x %d bf16 (%d B): median %.1f us (events), %.1f us (host), sum ok %s",
                 tokens, cfg["hidden"], t.numel() * t.element_size(), statistics.median(gpu_us),
                 statistics.median(host_us), ok)


# --------------------------------------------------------------------------------------------
# Launcher
# --------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(args: argparse.Namespace) -> int:
    """The server stand-in: spawn the workers, apply --mode, read /proc, write run.json."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, datefmt="%Y-%m-%d %H:%M:%S",
                        format="[%(asctime)s] %(message)s")
    log = logging.getLogger("launcher")
    tuning = parse_tuning(args.tuning)
    present = {k for k in tuning if k in os.environ}
    if args.mode == "env" and present != set(tuning):
        print(f"--mode env: start the launcher with {', '.join(sorted(set(tuning) - present))} set",
              file=sys.stderr)
        return 2
    if args.mode != "env" and present:
        print(f"--mode {args.mode}: {', '.join(sorted(present))} already in the environment", file=sys.stderr)
        return 2
    run: dict[str, Any] = {"mode": args.mode, "world_size": args.world_size, "launcher_pid": os.getpid(),
                           "tuning": tuning, "spt_noenv": os.environ.get("SPT_NOENV"),
                           "argv": sys.argv, "started": time.time()}
    run["launcher_environ_start"], raw = environ_summary("self")
    (out / "launcher.environ").write_bytes(raw)
    if args.mode == "prespawn":
        os.environ.update(tuning)
    cfg = {"tokens": [int(x) for x in args.tokens.split(",")], "hidden": args.hidden,
           "iters": args.iters, "warmup": args.warmup, "nccl": not args.no_nccl}
    ctx = mp.get_context("spawn")
    port = _free_port()
    procs, conns = [], []
    for r in range(args.world_size):
        parent, child = ctx.Pipe()
        p = ctx.Process(target=worker_main, args=(r, args.world_size, port, str(out), cfg, child))
        p.start()
        child.close()  # only the worker holds that end: its death reads as EOF here
        procs.append(p)
        conns.append(parent)
    if args.mode == "late":
        os.environ.update(tuning)  # what the seed incident's launcher did: too late for the workers
        log.info("set %s in os.environ after spawning %d workers", ",".join(tuning), len(procs))
    run["launcher_os_environ"] = {k: v for k, v in sorted(os.environ.items()) if k.startswith(TRACKED)}
    workers: list[dict[str, Any]] = []
    rc = 0
    for r, (p, c) in enumerate(zip(procs, conns, strict=True)):
        deadline = time.monotonic() + args.timeout
        while not c.poll(0.5) and p.is_alive() and time.monotonic() < deadline:
            pass
        if not c.poll(0) and p.is_alive():
            log.error("TP%d sent nothing in %.0f s (exit code %s)", r, args.timeout, p.exitcode)
            workers.append({"rank": r, "pid": p.pid, "error": "no result"})
            rc = 1
            continue
        try:
            res = c.recv()
        except EOFError:
            workers.append({"rank": r, "pid": p.pid, "error": f"died (exit code {p.exitcode})"})
            rc = 1
            continue
        res["cmdline"] = cmdline(p.pid)  # read while it waits: title set, environ as the world sees it
        res["proc_environ"], wraw = environ_summary(p.pid)
        (out / f"TP{r}.environ").write_bytes(wraw)
        workers.append(res)
    run["launcher_environ_end"], _ = environ_summary("self")
    for c in conns:
        try:
            c.send("stop")
        except (BrokenPipeError, OSError):
            pass
    for p in procs:
        p.join(60)
        if p.is_alive():
            p.terminate()  # our own child only
            p.join(10)
    run["workers"] = workers
    run["exit_codes"] = [p.exitcode for p in procs]
    (out / "run.json").write_text(json.dumps(run, indent=1) + "\n")
    for w in workers:
        for s in w.get("sizes", []):
            log.info("mode %s TP%d %d B: events mean %.1f median %.1f us; host mean %.1f median %.1f us",
                     args.mode, w["rank"], s["bytes"], s["gpu_event"]["mean_us"], s["gpu_event"]["median_us"],
                     s["host_sync"]["mean_us"], s["host_sync"]["median_us"])
    return rc or max((p.exitcode or 0) for p in procs)


def capture(args: argparse.Namespace) -> int:
    """Run `launch` for every mode with and without SPT_NOENV=1; one folder per case."""
    root = Path(args.out)
    root.mkdir(parents=True, exist_ok=True)
    tuning = parse_tuning(args.tuning)
    base = {k: v for k, v in os.environ.items() if k not in tuning and k != "SPT_NOENV"}
    base.update(DEBUG_ENV)
    base.update(SAFETY_ENV)
    commands = []
    rc = 0
    for mode in args.modes.split(","):
        for spt in (False, True):
            case = f"{mode}-{'noenv' if spt else 'spt'}"
            env = dict(base)
            extra = dict(DEBUG_ENV) | dict(SAFETY_ENV)
            if mode == "env":
                env.update(tuning)
                extra.update(tuning)
            if spt:
                env["SPT_NOENV"] = extra["SPT_NOENV"] = "1"
            argv = [sys.executable, os.path.abspath(__file__), "launch", "--mode", mode,
                    "--world-size", str(args.world_size), "--out", str(root / case), "--tuning", args.tuning,
                    "--tokens", args.tokens, "--hidden", str(args.hidden), "--iters", str(args.iters),
                    "--warmup", str(args.warmup)] + (["--no-nccl"] if args.no_nccl else [])
            (root / case).mkdir(exist_ok=True)
            cmd = " ".join(f"{k}={shlex.quote(v)}" for k, v in extra.items()) + " " + shlex.join(argv)
            commands.append(f"{cmd} >{case}/launcher.stdout 2>{case}/launcher.stderr")
            so = open(root / case / "launcher.stdout", "wb")  # noqa: SIM115 - closed below
            se = open(root / case / "launcher.stderr", "wb")  # noqa: SIM115
            with so, se:
                try:
                    r = subprocess.run(argv, env=env, stdout=so, stderr=se,
                                       timeout=args.timeout + 60).returncode
                except subprocess.TimeoutExpired:
                    r = 124
            print(f"{case}: rc {r}", flush=True)
            rc = rc or r
    (root / "commands.txt").write_text("\n".join(commands) + "\n")
    return rc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("launch", "capture"):
        p = sub.add_parser(name)
        p.add_argument("--world-size", type=int, default=1)
        p.add_argument("--out", required=True)
        p.add_argument("--tuning", default=TUNING, help="comma list of NCCL_VAR=VALUE")
        p.add_argument("--tokens", default="1,16,64", help="decode batch sizes (rows of the all-reduce)")
        p.add_argument("--hidden", type=int, default=8192)
        p.add_argument("--iters", type=int, default=500)
        p.add_argument("--warmup", type=int, default=50)
        p.add_argument("--timeout", type=float, default=240.0)
        p.add_argument("--no-nccl", action="store_true",
                       help="skip torch/NCCL: only spawn, titles and /proc captures (CPU test)")
        if name == "launch":
            p.add_argument("--mode", choices=MODES, required=True)
        else:
            p.add_argument("--modes", default=",".join(MODES))
    args = ap.parse_args(argv)
    return launch(args) if args.cmd == "launch" else capture(args)


if __name__ == "__main__":
    sys.exit(main())
