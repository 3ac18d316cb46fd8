"""`specmon connect TARGET...`: the live UI on hosts' SGLang servers (SSH or local).

With one TARGET the first connection is made before the UI starts, so an unknown host key, a
refused login or a typo in the host name is one line on the terminal (exit 2), not a screen to
dismiss; the config's server profiles on it get control keys. With several TARGETs (or none: the
config's [hosts.NAME]) each host connects on its own and one that fails never blocks the
others. `--prometheus [ADDR]:PORT` also serves /metrics.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from pathlib import Path
from typing import Any

from specmon.commands.record import (
    HostPlan,
    config_from_args,
    default_baselines,
    host_from_args,
    listen_from_args,
    plans_from_args,
    specs_from_args,
)
from specmon.errors import CliError
from specmon.hosts import HostError
from specmon.session.state import Session
from specmon.sources.tail import TailSpec


def _config(args: argparse.Namespace) -> Any:
    """The config when one is given or found; None when there is none at all."""
    return config_from_args(args)


def run(args: argparse.Namespace) -> int:
    targets = list(getattr(args, "targets", None) or [])
    listen = listen_from_args(args)
    if len(targets) == 1 and listen is None:
        args.target = targets[0]
        return asyncio.run(_main(args))
    plans = plans_from_args(args)
    return asyncio.run(_fleet_main(args, plans, listen))


async def _main(args: argparse.Namespace) -> int:
    app, actions = await open_app(args)
    try:
        await app.run_async()
    finally:
        for ctl in actions.values():
            with contextlib.suppress(Exception):
                await ctl.close()
    return 0


async def open_app(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """Resolve config and target, connect (errors are one line), and build the app."""
    if getattr(args, "target", None) is None:  # the one TARGET of `connect TARGET`
        targets = getattr(args, "targets", None) or []
        if len(targets) != 1:
            raise CliError("expected exactly one TARGET")
        args.target = targets[0]
    cfg = _config(args)
    profiles = []
    if cfg is not None:
        if args.target in cfg.hosts:  # a [hosts.NAME] of the config
            hp = cfg.hosts[args.target]
            args.target = hp.target
            args.ssh_config = args.ssh_config or hp.ssh_config
            args.known_hosts = args.known_hosts or hp.known_hosts
        profiles = [p for p in cfg.servers.values()
                    if cfg.host_for(p).target == args.target or cfg.host_for(p).name == args.target]
    host = host_from_args(args)
    specs = specs_from_args(args)
    try:
        await host.connect()
    except HostError as exc:
        raise CliError(str(exc)) from None
    from specmon.feeds.connect import ConnectFeed
    from specmon.ui.app import SpecmonApp

    actions: dict[str, Any] = {}
    roles: dict[str, str] = {}
    if profiles and not specs:
        from specmon.control.server import ServerController

        for prof in profiles:
            ctl = ServerController(host, prof, cfg.host_for(prof))
            actions[prof.name] = ctl
            roles[prof.name] = prof.role
            try:
                specs.append(TailSpec(prof.name, await ctl.log_path()))
            except HostError as exc:
                raise CliError(f"{prof.name}: {exc}") from None
    for spec in specs:
        if spec.name in roles:
            continue
        low = spec.name.lower()
        if "spec" in low or "eagle" in low or "mtp" in low:
            roles[spec.name] = "speculative"
        elif "base" in low:
            roles[spec.name] = "baseline"
    feed = ConnectFeed(host, list(specs), history_lines=None if args.whole_file else args.history,
                       roles=roles)
    app = SpecmonApp(Session(host=host.name), feed, actions=actions,
                     keymap=dict(cfg.keys) if cfg is not None else None,
                     export_dir=Path(args.export_dir) if args.export_dir else None)
    return app, actions


async def _fleet_main(args: argparse.Namespace, plans: list[HostPlan],
                      listen: tuple[str, int] | None) -> int:
    from specmon.feeds.fleet import FleetFeed, HostFeed, SingleViewFeed
    from specmon.session.fleet import FleetSession

    if len(plans) == 1:
        try:
            await plans[0].host.connect()
        except HostError as exc:
            raise CliError(str(exc)) from None
    fleet = FleetSession([p.host.name for p in plans], baselines=default_baselines())
    history = None if args.whole_file else args.history
    feed = FleetFeed([HostFeed(p.host, p.specs, history_lines=history, python=p.python)
                      for p in plans])
    server = None
    if listen is not None:
        from specmon.export.prometheus import registry_for, serve

        try:
            server = await serve(registry_for(fleet), *listen)
        except OSError as exc:
            raise CliError(f"--prometheus: cannot listen on {listen[0]}:{listen[1]}: "
                           f"{exc.strerror or exc}") from None
    from specmon.ui.app import SpecmonApp

    app = SpecmonApp(Session(host=", ".join(fleet.hosts)),
                     SingleViewFeed(feed, fleet, prefix=len(plans) > 1),
                     export_dir=Path(args.export_dir) if args.export_dir else None,
                     fleet=fleet if len(plans) > 1 else None)
    if server is not None:
        app.sub_title += f"  ·  /metrics on {server.host}:{server.port}"
    try:
        await app.run_async()
    finally:
        if server is not None:
            await server.close()
        for p in plans:
            with contextlib.suppress(Exception):
                await p.host.close()
    return 0
