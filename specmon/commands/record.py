"""`specmon record TARGET... --out FILE.jsonl`: the live path without a UI.

The same HostFeeds and session model as `connect` (one host is a fleet of one): connects to
each TARGET (`local`, `[USER@]HOST[:PORT]`, an ssh_config alias or a [hosts.NAME] of the
config), finds the SGLang servers (or takes --log NAME=PATH), tails their logs and writes one
JSON object per received line: {"server", "path", "offset", "line", "received_at", "record"},
and one per GPU poll: {"gpus": [...], "received_at"}, flushed as it goes. Ends cleanly on
SIGINT/SIGTERM or after --duration seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import time
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

from specmon.commands.hostargs import (
    HostPlan,
    default_baselines,
    listen_from_args,
    plans_from_args,
    print_notes,
)
from specmon.commands.options import add_config, add_hosts
from specmon.errors import CliError
from specmon.export.redact import redact_text
from specmon.hosts import HostError
from specmon.hosts.base import ConnectionState
from specmon.jsonout import dumps
from specmon.parse.gpu import GpuSample
from specmon.parse.sglang import parse_line
from specmon.sources.tail import LogLine

if TYPE_CHECKING:
    from specmon.session.fleet import FleetSession


def _log(msg: str) -> None:
    print(f"specmon record: {msg}", file=sys.stderr, flush=True)


def parse_record(text: str) -> dict[str, Any] | None:
    """The parsed record as JSON, or None for lines the parser does not use."""
    try:
        rec = parse_line(text)
    except Exception:  # parse_line promises not to raise; a recording must survive anyway
        return None
    return rec.to_json() if rec is not None else None


def line_json(ev: LogLine) -> str:
    """One JSONL row; the line is redacted (a recording is a way out like any export) and the
    record parsed from the redacted text, so no secret reaches the file by either field."""
    text = redact_text(ev.text)
    return dumps(
        {
            "server": ev.server,
            "path": ev.path,
            "offset": ev.offset,
            "line": text,
            "received_at": round(ev.received_at, 6),
            "record": parse_record(text),
        },
        ensure_ascii=False,
    )


def _fleet_line_json(host: str, ev: LogLine, multi: bool) -> str:
    if not multi:
        return line_json(ev)
    obj = json.loads(line_json(ev))
    obj["server"] = f"{host}/{ev.server}"
    obj["host"] = host
    return dumps(obj, ensure_ascii=False)


def gpu_json(host: str, samples: list[GpuSample], multi: bool) -> str:
    """One GPU poll as a record row (`specmon export` reads it; it downsamples long runs)."""
    t = max((g.ts for g in samples if g.ts is not None), default=time.time())
    obj: dict[str, Any] = {"gpus": [g.to_json() for g in samples], "received_at": round(t, 6)}
    if multi:
        obj["host"] = host
    return dumps(obj, ensure_ascii=False)


class _LoggingSink:
    """The session model's events, plus one stderr line for what a headless user must know
    (connection changes, discovery, notices, files that cannot be read)."""

    def __init__(self, fleet: FleetSession, log: Callable[[str], None]) -> None:
        self.fleet = fleet
        self.log = log

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fleet, name)

    def host_state(self, host: str, state: ConnectionState) -> None:
        prev = self.fleet.host(host).state
        self.fleet.host_state(host, state)
        if (prev.state, prev.reason) != (state.state, state.reason) and state.state != "closed":
            self.log(f"{host}: {state.describe()}")

    def declare_server(self, host: str, server: str, role: str | None, path: str | None) -> None:
        self.fleet.declare_server(host, server, role, path)
        self.log(f"{host}: {server}: tailing {path}" + (f" ({role})" if role else ""))

    def notice(self, host: str, server: str, text: str) -> None:
        self.fleet.notice(host, server, text)
        self.log(f"{host}: {text}" if server == "*" else f"{host}: {server}: {text}")

    def tail_missing(self, host: str, server: str, path: str, reason: str) -> None:
        self.fleet.tail_missing(host, server, path, reason)


async def record_fleet(plans: list[HostPlan], out: IO[str], *, listen: tuple[str, int] | None,
                       duration: float | None = None, history_lines: int | None = 2000,
                       stop: asyncio.Event | None = None, baselines: Any = None,
                       gpu_retry_s: float = 10.0) -> int:
    """1..N hosts (and /metrics): every received line and GPU poll into `out`; servers named
    `host/server` (with a "host" key) when there is more than one host."""
    from specmon.feeds.host import HostFeed, HostFeeds
    from specmon.session.fleet import FleetSession

    stop = stop or asyncio.Event()
    multi = len(plans) > 1
    fleet = FleetSession([p.host.name for p in plans], baselines=baselines)
    count = 0

    def tap(host: str, ev: LogLine) -> None:
        nonlocal count
        out.write(_fleet_line_json(host, ev, multi) + "\n")
        out.flush()
        count += 1

    def gpu_tap(host: str, samples: list[GpuSample]) -> None:
        if samples:
            out.write(gpu_json(host, samples, multi) + "\n")
            out.flush()

    feed = HostFeeds([HostFeed(p.host, p.specs, history_lines=history_lines, python=p.python,
                               tap=tap, gpu_tap=gpu_tap, gpu_retry_s=gpu_retry_s,
                               all_users=p.all_users)
                      for p in plans])
    server = None
    if listen is not None:
        from specmon.export.prometheus import registry_for, serve

        try:
            server = await serve(registry_for(fleet), *listen)
        except OSError as exc:
            raise CliError(f"--prometheus: cannot listen on {listen[0]}:{listen[1]}: "
                           f"{exc.strerror or exc}") from None
        _log(f"Prometheus metrics on http://{server.host}:{server.port}/metrics")
    def alert(host: str, server: str, a: Any) -> None:  # drift on a stored baseline, headless
        name = f"{host}/{server}" if multi else server
        _log(f"{name}: {'cleared: ' if a.cleared else a.level + ': '}{a.text}"
             + "".join(f"; cause: {c}" for c in a.causes))

    fleet.alert_listeners.append(alert)
    task = asyncio.create_task(feed.run(_LoggingSink(fleet, _log)))
    waiter = asyncio.create_task(stop.wait())

    async def tick() -> None:
        while True:
            fleet.tick()
            await asyncio.sleep(1.0)

    ticker = asyncio.create_task(tick())
    try:
        await asyncio.wait({task, waiter}, timeout=duration, return_when=asyncio.FIRST_COMPLETED)
        if task.done():  # every host gave up (refused key or login)
            failed = [f"{h}: {hv.state.describe()}" for h, hv in fleet.hosts.items()]
            raise CliError("no host could be watched: " + "; ".join(failed))
    finally:
        for t in (task, waiter, ticker):
            t.cancel()
        for t in (task, waiter, ticker):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        if server is not None:
            await server.close()
    return count


async def _main(args: argparse.Namespace, plans: list[HostPlan],
                listen: tuple[str, int] | None) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        if len(plans) == 1:  # one host: a refused key or login is the CLI error (one line)
            try:
                await plans[0].host.connect()
            except HostError as exc:
                raise CliError(str(exc)) from None
            print_notes(plans[0].host)
        try:
            out = open(args.out, "a" if args.append else "w", encoding="utf-8")
        except OSError as exc:
            raise CliError(f"cannot write {args.out}: {exc.strerror}") from None
        t0 = time.monotonic()
        with out:
            n = await record_fleet(plans, out, listen=listen, duration=args.duration,
                                   history_lines=None if args.whole_file else args.history,
                                   stop=stop, baselines=default_baselines())
        _log(f"{n} lines from {len(plans)} host(s) in {time.monotonic() - t0:.1f}s -> {args.out}")
        return 0
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        for p in plans:
            with contextlib.suppress(Exception):
                await p.host.close()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Connect to TARGET, find its SGLang servers (or use --log) and write one JSON "
                     'object per received log line: {"server","path","offset","line","received_at",'
                     '"record"}. Stops on Ctrl-C, SIGTERM or after --duration.')
    add_hosts(p)
    p.add_argument("--out", required=True, metavar="FILE.jsonl", help="output file")
    p.add_argument("--append", action="store_true", help="append to --out instead of replacing it")
    p.add_argument("--duration", type=float, metavar="SECONDS", help="stop after this long")
    add_config(p, "its [hosts.NAME] are recorded when no TARGET is given")


def run(args: argparse.Namespace) -> int:
    if args.duration is not None and not 0 < args.duration < float("inf"):  # NaN fails too
        raise CliError(f"--duration must be a positive number of seconds, got {args.duration}")
    if args.history < 0:
        raise CliError(f"--history must be >= 0, got {args.history}")
    listen = listen_from_args(args)
    plans = plans_from_args(args)
    return asyncio.run(_main(args, plans, listen))
