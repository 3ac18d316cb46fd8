"""`specmon connect TARGET`: the live UI on a host's SGLang servers (SSH or local).

The first connection is made before the UI starts, so an unknown host key, a refused login or a
typo in the host name is one line on the terminal (exit 2), not a screen to dismiss.
"""

from __future__ import annotations

import argparse
import asyncio

from specmon.cli import CliError
from specmon.commands.record import host_from_args, specs_from_args
from specmon.hosts import HostError
from specmon.session.state import Session


def run(args: argparse.Namespace) -> int:
    host = host_from_args(args)
    specs = specs_from_args(args)
    return asyncio.run(_main(args, host, specs))


async def _main(args: argparse.Namespace, host, specs) -> int:  # noqa: ANN001
    try:
        await host.connect()
    except HostError as exc:
        raise CliError(str(exc)) from None
    from specmon.feeds.connect import ConnectFeed
    from specmon.ui.app import SpecmonApp

    roles = {}
    for spec in specs:
        low = spec.name.lower()
        if "spec" in low or "eagle" in low or "mtp" in low:
            roles[spec.name] = "speculative"
        elif "base" in low:
            roles[spec.name] = "baseline"
    feed = ConnectFeed(host, list(specs), history_lines=None if args.whole_file else args.history,
                       roles=roles)
    app = SpecmonApp(Session(host=host.name), feed)
    await app.run_async()
    return 0
