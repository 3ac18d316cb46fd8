"""`specmon server start|stop|restart|status|bench NAME [TARGET]`.

The headless face of specmon.control: the same ServerController the UI binds to keys. Exit
status: 0 done, 1 the action failed (crash during start, busy GPUs, not ours, survivors), 2 bad
config or usage.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from specmon.commands.options import add_config, add_json, add_ssh, count, seconds
from specmon.errors import CliError

# a benchmark is a short run (specmon.control.benchmark): beyond these it is no "short run"
MAX_BENCH_PROMPTS = 100_000
MAX_BENCH_OUTPUT_LEN = 1_000_000


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Control a server defined in the config (see examples/specmon.toml). start "
                     "launches it in its own session with the profile's env (SPT_NOENV=1 by default), "
                     "follows its start-up lines, waits for /health and audits its workers' "
                     "environment; stop signals only the process group specmon recorded. Exit 1 when "
                     "the action failed.")
    p.add_argument("action", choices=["start", "stop", "restart", "status", "bench"])
    p.add_argument("name", metavar="NAME", help="server name ([servers.NAME] in the config)")
    p.add_argument("target", metavar="TARGET", nargs="?", default=None,
                   help="override the profile's host: 'local', [USER@]HOST[:PORT] or an alias")
    add_config(p, "the server profiles and hosts")
    add_ssh(p)
    p.add_argument("--timeout", type=seconds(), metavar="S", help="readiness timeout (default: "
                   "the profile's ready_timeout)")
    p.add_argument("--grace", type=seconds(zero=True), default=30.0, metavar="S",
                   help="seconds between SIGTERM and SIGKILL (default 30)")
    p.add_argument("--quiet", action="store_true", help="no start-up progress lines")
    add_json(p, "status/bench as JSON")
    p.add_argument("--num-prompts", type=count(MAX_BENCH_PROMPTS), default=8, metavar="N",
                   help="bench: requests (default 8)")
    p.add_argument("--concurrency", type=count(MAX_BENCH_PROMPTS), default=1, metavar="N",
                   help="bench: in flight (default 1)")
    p.add_argument("--output-len", type=count(MAX_BENCH_OUTPUT_LEN), default=128, metavar="N",
                   help="bench: tokens per request (default 128)")
    p.add_argument("--builtin", action="store_true",
                   help="bench: the built-in client even when sglang.bench_serving exists")


def _load(args: argparse.Namespace) -> Any:
    from specmon.config import ConfigError, load_config

    try:
        return load_config(args.config)
    except ConfigError as exc:
        raise CliError("; ".join(i.format() for i in exc.issues[:3])
                       + (f" (+{len(exc.issues) - 3} more: run specmon config check)"
                          if len(exc.issues) > 3 else "")) from None


def run(args: argparse.Namespace) -> int:
    cfg = _load(args)
    try:
        profile = cfg.server(args.name)
    except KeyError as exc:
        raise CliError(str(exc.args[0])) from None
    hp = cfg.host_for(profile)
    target = args.target or hp.target
    from specmon.hosts import HostError, make_host

    try:
        host = make_host(target, ssh_config=args.ssh_config or hp.ssh_config,
                         known_hosts=args.known_hosts or hp.known_hosts,
                         accept_new=args.accept_new)
    except ValueError as exc:
        raise CliError(f"bad TARGET {target!r}: {exc}") from None
    try:
        return asyncio.run(_run(args, host, profile, hp))
    except HostError as exc:
        raise CliError(str(exc)) from None


def _progress(p: Any) -> None:
    print(f"  {p.describe()}", file=sys.stderr, flush=True)


def _say(text: str, file: Any = None) -> None:
    """Every line this command prints: secrets masked (HF_TOKEN=..., --api-key ...)."""
    from specmon.redact import redact_text

    print(redact_text(text), file=file or sys.stdout)


def _print_audit(audit: Any) -> None:
    if audit is None:
        return
    _say("environment (NCCL_/CUDA_/SGLANG_/TORCH_ and profile variables):")
    for p in audit.processes:
        if p.status != "ok":
            _say(f"  {p.title} (pid {p.pid}): unreadable ({p.reason})")
            continue
        env = " ".join(f"{k}={v}" for k, v in (p.env or {}).items()) or "(none)"
        _say(f"  {p.title} (pid {p.pid}): {env}")
    for line in audit.problems():
        _say(f"  ! {line}")


async def _run(args: argparse.Namespace, host: Any, profile: Any, hp: Any) -> int:
    from specmon.control.benchmark import BenchConfig
    from specmon.control.server import (
        ControlError,
        GpuBusy,
        ServerController,
        StartFailed,
    )
    from specmon.jsonout import dumps

    await host.connect()
    try:
        async with ServerController(host, profile, hp) as ctl:
            try:
                if args.action == "status":
                    st = await ctl.status()
                    if args.json:
                        from specmon.redact import redact_obj

                        print(dumps(redact_obj({"status": st.__dict__}), default=str))
                    else:
                        _say(st.describe())
                        if st.state in ("ready", "starting"):
                            _print_audit(await ctl.audit_env())
                    return 0
                if args.action == "stop":
                    res = await ctl.stop(grace=args.grace)
                    _print_stop(res)
                    return 0 if res.ok else 1
                if args.action == "bench":
                    b = await ctl.benchmark(BenchConfig(
                        num_prompts=args.num_prompts, concurrency=args.concurrency,
                        output_len=args.output_len,
                        use_bench_serving=False if args.builtin else None))
                    failure = b.failure()
                    if args.json:
                        print(dumps(b.to_json()))
                    elif failure is None:  # the line, then why any number in it is N/A
                        print(b.describe())
                        for note in b.notes:
                            print(f"  note: {note}")
                    if failure is not None:  # no request completed: the action failed
                        _say(f"specmon server bench: {failure}", file=sys.stderr)
                        return 1
                    return 0
                if args.action == "restart":
                    _print_stop(await ctl.stop(grace=args.grace))
                started = await ctl.start(None if args.quiet else _progress, timeout=args.timeout)
                _say(f"{profile.name}: ready in {started.elapsed_s:.1f}s (pid {started.pid}, "
                     f"log {started.log})")
                if started.gpu_note:
                    _say(f"  note: {started.gpu_note}")
                _print_audit(started.audit)
                return 0
            except GpuBusy as exc:
                print(f"specmon server {args.action}: {exc}", file=sys.stderr)
                return 1
            except StartFailed as exc:
                _say(f"specmon server {args.action}: {exc}", file=sys.stderr)
                if exc.last_lines:
                    _say("last log lines:", file=sys.stderr)
                    for ln in exc.last_lines[-20:]:
                        _say(f"  | {ln}", file=sys.stderr)
                if exc.traceback:
                    _say("traceback:", file=sys.stderr)
                    for ln in exc.traceback:
                        _say(f"  | {ln}", file=sys.stderr)
                return 1
            except ControlError as exc:
                _say(f"specmon server {args.action}: {exc}", file=sys.stderr)
                return 1
    finally:
        await host.close()


def _print_stop(res: Any) -> None:
    if not res.was_running:
        print(f"{res.name}: {res.detail or 'not running'}")
        return
    sig = "+".join(res.signals) or "no signal"
    gpus = {None: "GPUs not checked", True: "GPUs free", False: f"GPUs still busy: "
            f"{res.gpu_holders}"}[res.gpus_free]
    left = f"processes left: {res.remaining}" if res.remaining else "no process left"
    print(f"{res.name}: stopped ({sig}); {left}; {gpus}")
