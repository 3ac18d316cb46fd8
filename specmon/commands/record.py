"""`specmon record TARGET --out FILE.jsonl`: the live pipeline without a UI.

Connects to TARGET (`local`, `[USER@]HOST[:PORT]` or an ssh_config alias), finds the SGLang
servers (or takes --log NAME=PATH), tails their logs and writes one JSON object per received
line: {"server", "path", "offset", "line", "received_at", "record"}, flushed as it goes. Ends
cleanly on SIGINT/SIGTERM or after --duration seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import time
from typing import IO, Any

from specmon.cli import CliError
from specmon.hosts import Host, HostError, make_host
from specmon.hosts.agent_client import AgentClient
from specmon.parse.sglang import parse_line
from specmon.sources.discovery import discover
from specmon.sources.tail import LogLine, LogTailer, TailNotice, TailSpec

NOTICE_KINDS = {"truncated", "rotated", "missing", "lost", "resumed", "error", "disconnected"}


def _log(msg: str) -> None:
    print(f"specmon record: {msg}", file=sys.stderr, flush=True)


def parse_record(text: str) -> dict[str, Any] | None:
    """The parsed record as JSON, or None for lines the parser does not use."""
    try:
        rec = parse_line(text)
    except Exception:  # parse_line promises not to raise; a recording must survive anyway
        return None
    return rec.to_json() if rec is not None else None


def host_from_args(args: argparse.Namespace) -> Host:
    try:
        return make_host(
            args.target,
            ssh_config=args.ssh_config,
            known_hosts=args.known_hosts,
            accept_new=args.accept_new,
        )
    except ValueError as exc:
        raise CliError(f"bad TARGET: {exc}") from None


def specs_from_args(args: argparse.Namespace) -> list[TailSpec]:
    specs = []
    for text in args.log or []:
        try:
            specs.append(TailSpec.parse(text))
        except ValueError as exc:
            raise CliError(str(exc)) from None
    names = [s.name for s in specs]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise CliError(f"--log names must be unique; repeated: {', '.join(sorted(dup))}")
    return specs


async def discover_specs(host: Host) -> list[TailSpec]:
    """Tail specs for every discovered server with a readable log; report the others."""
    agent = AgentClient(host)
    await agent.start()
    try:
        servers = await discover(agent)
    finally:
        await agent.close()
    specs = []
    for s in servers:
        _log(s.describe())
        if s.log_path:
            specs.append(TailSpec(s.name, s.log_path))
    if not specs:
        found = f"{len(servers)} server(s) found, none with a readable log" if servers else (
            "no SGLang server found")
        raise CliError(f"{host.name}: {found}; pass --log NAME=PATH")
    return specs


def line_json(ev: LogLine) -> str:
    return json.dumps(
        {
            "server": ev.server,
            "path": ev.path,
            "offset": ev.offset,
            "line": ev.text,
            "received_at": round(ev.received_at, 6),
            "record": parse_record(ev.text),
        },
        ensure_ascii=False,
    )


async def record(
    host: Host,
    specs: list[TailSpec],
    out: IO[str],
    *,
    duration: float | None = None,
    history_lines: int | None = 2000,
    stop: asyncio.Event | None = None,
) -> int:
    """Write one JSON line per received log line until `stop`, the duration, or failure."""
    stop = stop or asyncio.Event()
    tailer = LogTailer(host, specs, history_lines=history_lines)
    count = 0

    async def consume() -> None:
        nonlocal count
        async for ev in tailer.events():
            if isinstance(ev, LogLine):
                out.write(line_json(ev) + "\n")
                out.flush()
                count += 1
            elif isinstance(ev, TailNotice) and ev.kind in NOTICE_KINDS:
                detail = " ".join(f"{k}={v}" for k, v in ev.detail.items())
                _log(f"{ev.server} {ev.path}: {ev.kind} {detail}".rstrip())

    task = asyncio.create_task(consume())
    waiter = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait({task, waiter}, timeout=duration,
                                 return_when=asyncio.FIRST_COMPLETED)
    tailer.stop()
    waiter.cancel()
    if task in done:
        exc = task.exception()
        if isinstance(exc, HostError):
            raise CliError(str(exc))
        if exc is not None:
            raise exc
    else:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, HostError):
            await task
    return count


async def _main(args: argparse.Namespace, host: Host, specs: list[TailSpec]) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        try:
            await host.connect()
        except HostError as exc:
            raise CliError(str(exc)) from None
        # from now on, report reconnects (the first connect's failure is the CLI error)
        host.add_state_listener(
            lambda st: st.state != "closed" and _log(f"{host.name}: {st.describe()}")
        )
        if not specs:
            try:
                specs = await discover_specs(host)
            except HostError as exc:
                raise CliError(str(exc)) from None
        try:
            out = open(args.out, "a" if args.append else "w", encoding="utf-8")
        except OSError as exc:
            raise CliError(f"cannot write {args.out}: {exc.strerror}") from None
        t0 = time.monotonic()
        with out:
            n = await record(host, specs, out, duration=args.duration,
                             history_lines=None if args.whole_file else args.history,
                             stop=stop)
        _log(f"{n} lines from {len(specs)} file(s) in {time.monotonic() - t0:.1f}s -> {args.out}")
        return 0
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await host.close()


def run(args: argparse.Namespace) -> int:
    if args.duration is not None and args.duration <= 0:
        raise CliError(f"--duration must be positive, got {args.duration}")
    if args.history < 0:
        raise CliError(f"--history must be >= 0, got {args.history}")
    specs = specs_from_args(args)
    host = host_from_args(args)
    return asyncio.run(_main(args, host, specs))
