"""`specmon connect TARGET...`: the live UI on hosts' SGLang and vLLM servers (SSH or local).

One path for every form (a single host is a fleet of one): TARGETs (or the config's
[hosts.NAME]) -> one HostFeed each -> the one session model -> the app, with the config's
server profiles on those hosts as control keys and its [keys] remaps, `--prometheus` reading
the same session. With one TARGET the first connection is made before the UI starts, so an
unknown host key, a refused login or a typo in the host name is one line on the terminal
(exit 2), not a screen to dismiss; with several, each host connects on its own and one that
fails never blocks the others.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from specmon.commands.hostargs import (
    config_from_args,
    default_baselines,
    listen_from_args,
    plans_from_args,
    print_notes,
)
from specmon.commands.options import add_config, add_export_dir, add_hosts
from specmon.errors import CliError
from specmon.hosts import HostError
from specmon.sources.tail import TailSpec
from specmon.textsafe import visible

if TYPE_CHECKING:
    from specmon.control.server import ServerController
    from specmon.ui.app import SpecmonApp

Key = tuple[str, str]  # (host, server), as every server is keyed


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Connect to TARGET over SSH (or 'local'), find its SGLang and vLLM servers (or tail "
                     "--log NAME=PATH), and show them live. A --log NAME containing 'base' or 'spec' "
                     "sets the server's role; otherwise it is read from the log.")
    add_hosts(p)
    add_config(p, "its server profiles on TARGET are tailed and get start/stop/restart/swap/benchmark "
               "keys; with no TARGET its [hosts.NAME] are watched")
    add_export_dir(p)


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_main(args))


async def _main(args: argparse.Namespace) -> int:
    from specmon.ui.signals import exit_code, exit_on_signals

    app, actions = await open_app(args)
    try:
        with exit_on_signals(app) as got:
            await app.run_async()
    finally:
        await close_app(app, actions)
    return exit_code(app, got)


async def close_app(app: SpecmonApp, actions: dict[Key, ServerController]) -> None:
    """Close what open_app opened: controllers, the /metrics server, the host connections."""
    for ctl in actions.values():
        with contextlib.suppress(Exception):
            await ctl.close()
    if app.metrics_server is not None:
        await app.metrics_server.close()
    for host in app.hosts:
        with contextlib.suppress(Exception):
            await host.close()


async def open_app(args: argparse.Namespace) -> tuple[SpecmonApp, dict[Key, ServerController]]:
    """Resolve config and targets, connect (one host: errors are one line), build the app.

    Returns the app and its control actions, keyed (host, server) like every server.
    """
    listen = listen_from_args(args)
    cfg = config_from_args(args)
    plans = plans_from_args(args, cfg)
    actions: dict[Key, ServerController] = {}
    roles: dict[str, dict[str, str]] = {}
    for plan in plans:
        host = plan.host
        profiles = [] if cfg is None else [
            p for p in cfg.servers.values()
            if host.name in (cfg.host_for(p).name, cfg.host_for(p).target)]
        if len(plans) == 1 or profiles:
            try:
                await host.connect()
            except HostError as exc:
                if len(plans) == 1:
                    raise CliError(str(exc)) from None
                continue  # one of several: its feed keeps retrying; no control keys there
            print_notes(host)
        if not profiles:
            continue
        from specmon.control.server import ServerController

        assert cfg is not None
        tail_profiles = not plan.specs  # --log / logs = {...} win over the profiles' logs
        for prof in profiles:
            ctl = ServerController(host, prof, cfg.host_for(prof))
            actions[(host.name, prof.name)] = ctl
            roles.setdefault(host.name, {})[prof.name] = prof.role
            if tail_profiles:
                try:
                    plan.specs.append(TailSpec(prof.name, await ctl.log_path()))
                except HostError as exc:
                    raise CliError(f"{prof.name}: {exc}") from None
    from specmon.feeds.host import HostFeed, HostFeeds
    from specmon.session.fleet import FleetSession

    notes: list[str] = []
    fleet = FleetSession([p.host.name for p in plans], baselines=default_baselines(notes.append))
    history = None if args.whole_file else args.history
    feed = HostFeeds([HostFeed(p.host, p.specs, history_lines=history, python=p.python,
                               roles=roles.get(p.host.name), all_users=p.all_users)
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

    for note in notes:  # a broken baseline store: said on screen, monitoring goes on
        print(f"specmon connect: {visible(note)}", file=sys.stderr)  # (raw stderr: a path)
    title = ", ".join(fleet.hosts) + (f"  ·  /metrics on {server.host}:{server.port}"
                                      if server is not None else "")
    if any(p.all_users for p in plans):  # said for as long as the app runs, not in a toast
        title += "  ·  every user's servers (--all-users)"
    app = SpecmonApp(fleet, feed, actions=actions,
                     keymap=dict(cfg.keys) if cfg is not None else None,
                     export_dir=Path(args.export_dir) if args.export_dir else None,
                     title=title, metrics_server=server, hosts=[p.host for p in plans],
                     startup_warnings=notes)
    return app, actions
