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
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

from specmon.errors import CliError
from specmon.hosts import Host, HostError, make_host
from specmon.hosts.agent_client import AgentClient
from specmon.parse.sglang import parse_line
from specmon.sources.discovery import discover
from specmon.sources.tail import LogLine, LogTailer, TailNotice, TailSpec

if TYPE_CHECKING:
    from specmon.config import Config

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


def _make_host(target: str, args: argparse.Namespace, name: str | None = None,
               ssh_config: str | None = None, known_hosts: str | None = None) -> Host:
    try:
        if target == "local":
            from specmon.hosts.local import LocalHost

            return LocalHost(name or "local")
        kw = {"name": name} if name else {}
        return make_host(target, ssh_config=args.ssh_config or ssh_config,
                         known_hosts=args.known_hosts or known_hosts,
                         accept_new=args.accept_new, **kw)
    except ValueError as exc:
        raise CliError(f"bad TARGET: {exc}") from None


def host_from_args(args: argparse.Namespace) -> Host:
    """The one host of a single-TARGET command line."""
    return plans_from_args(args)[0].host


@dataclass
class HostPlan:
    """One host to watch: the Host, its --log/logs files (empty: discover), agent python."""

    host: Host
    specs: list[TailSpec] = field(default_factory=list)
    python: str | None = None


def plans_from_args(args: argparse.Namespace) -> list[HostPlan]:
    """TARGETs from the command line, else the config's [hosts.NAME]; one plan per host."""
    # connect's single-host path sets args.target (resolved from a [hosts.NAME] if need be)
    single = getattr(args, "target", None)
    targets = [single] if single else list(getattr(args, "targets", None) or [])
    specs = specs_from_args(args)
    plans: list[HostPlan] = []
    if targets:
        if specs and len(targets) > 1:
            raise CliError("--log NAME=PATH needs exactly one TARGET; for several hosts put "
                           'logs = { NAME = "PATH" } under each [hosts.NAME] of the config')
        plans = [HostPlan(_make_host(t, args), list(specs) if i == 0 else []) for i, t in
                 enumerate(targets)]
    else:
        cfg = config_from_args(args)
        path = cfg.path if cfg is not None else None
        hosts = list(cfg.hosts.values()) if cfg is not None else []
        if not hosts:
            where = f"{path} has no [hosts.NAME]" if path is not None else "no config file found"
            raise CliError(f"no TARGET given and {where}; pass TARGET (e.g. 'local') or add "
                           '[hosts.NAME] with target = "HOST" to the config')
        if specs and len(hosts) > 1:
            raise CliError("--log NAME=PATH needs exactly one host; use logs = { NAME = \"PATH\" } "
                           "under each [hosts.NAME] instead")
        for h in hosts:
            hs = [TailSpec(n, p) for n, p in h.logs.items()] or list(specs)
            plans.append(HostPlan(_make_host(h.target, args, h.name, h.ssh_config, h.known_hosts),
                                  hs, h.python))
    names = [p.host.name for p in plans]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise CliError(f"TARGET given twice: {', '.join(dup)}")
    return plans


def config_from_args(args: argparse.Namespace) -> Config | None:
    """The config when one is given or found (hosts-only files too); None when there is none."""
    from specmon.config import ConfigError, load_path, locate_config

    try:
        path = locate_config(getattr(args, "config", None))
        return load_path(path, require_servers=False) if path is not None else None
    except ConfigError as exc:
        raise CliError(exc.one_line()) from None


def listen_from_args(args: argparse.Namespace) -> tuple[str, int] | None:
    text = getattr(args, "prometheus", None)
    if not text:
        return None
    from specmon.export.prometheus import parse_listen

    try:
        return parse_listen(text)
    except ValueError as exc:
        raise CliError(f"--prometheus: {exc}") from None


def default_baselines() -> Any:
    """Lookup of the newest recorded baseline for (host, server), if a baseline store exists."""
    from specmon.session.baselines import DB_NAME, BaselineStore, data_dir

    path = data_dir() / DB_NAME
    if not path.is_file():
        return None
    store = BaselineStore(path)

    def lookup(host: str, server: str, role: str | None) -> Any:
        try:
            rows = store.list(host=host, server=server)
            return store.get(rows[-1]["name"]) if rows else None
        except Exception:  # a broken store must not stop monitoring
            return None

    return lookup


def specs_from_args(args: argparse.Namespace) -> list[TailSpec]:
    """--log NAME=PATH, each with its name and path (a bare PATH is refused: say which server)."""
    specs = []
    for text in args.log or []:
        name, sep, path = text.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise CliError(f"--log {text!r}: expected NAME=PATH (e.g. --log base=/var/log/sglang.log)")
        if "/" in name or ".." in name:
            raise CliError(f"--log {text!r}: NAME must not contain '/' or '..'")
        specs.append(TailSpec(name.strip(), path.strip()))
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


def _fleet_line_json(host: str, ev: LogLine, multi: bool) -> str:
    if not multi:
        return line_json(ev)
    obj = json.loads(line_json(ev))
    obj["server"] = f"{host}/{ev.server}"
    obj["host"] = host
    return json.dumps(obj, ensure_ascii=False)


async def record_fleet(plans: list[HostPlan], out: IO[str], *, listen: tuple[str, int] | None,
                       duration: float | None = None, history_lines: int | None = 2000,
                       stop: asyncio.Event | None = None, baselines: Any = None,
                       gpu_retry_s: float = 10.0) -> int:
    """Several hosts (and/or /metrics): lines of every host into `out`, servers named
    `host/server` (with a "host" key) when there is more than one host."""
    from specmon.feeds.fleet import FleetFeed, HostFeed, SessionFleetSink
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

    feed = FleetFeed([HostFeed(p.host, p.specs, history_lines=history_lines, python=p.python,
                               tap=tap, gpu_retry_s=gpu_retry_s) for p in plans])
    server = None
    if listen is not None:
        from specmon.export.prometheus import registry_for, serve

        try:
            server = await serve(registry_for(fleet), *listen)
        except OSError as exc:
            raise CliError(f"--prometheus: cannot listen on {listen[0]}:{listen[1]}: "
                           f"{exc.strerror or exc}") from None
        _log(f"Prometheus metrics on http://{server.host}:{server.port}/metrics")
    task = asyncio.create_task(feed.run(SessionFleetSink(fleet, log=_log)))
    waiter = asyncio.create_task(stop.wait())

    async def tick() -> None:
        while True:
            fleet.update_alerts()
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


async def _fleet_main(args: argparse.Namespace, plans: list[HostPlan],
                      listen: tuple[str, int] | None) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        if len(plans) == 1:  # one host: a refused key or login is the CLI error, as without
            try:             # --prometheus
                await plans[0].host.connect()
            except HostError as exc:
                raise CliError(str(exc)) from None
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


def run(args: argparse.Namespace) -> int:
    if args.duration is not None and args.duration <= 0:
        raise CliError(f"--duration must be positive, got {args.duration}")
    if args.history < 0:
        raise CliError(f"--history must be >= 0, got {args.history}")
    plans = plans_from_args(args)
    listen = listen_from_args(args)
    if len(plans) > 1 or listen is not None:
        return asyncio.run(_fleet_main(args, plans, listen))
    return asyncio.run(_main(args, plans[0].host, plans[0].specs))
