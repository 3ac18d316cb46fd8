"""`specmon demo`: a simulated SGLang or vLLM host with a baseline and a speculative server, live."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from specmon.commands.options import add_config, add_export_dir
from specmon.errors import CliError
from specmon.session.baselines import BaselineStore
from specmon.session.fleet import FleetSession
from specmon.textsafe import visible

# After SIGHUP or SIGTERM, how long the app may take to end before the servers are stopped and
# the process ends without it: with the terminal gone, Textual's writer thread dies on EIO and
# the next screen refresh blocks the event loop for good, so the exit it was asked for never runs.
QUIT_GRACE_S = 3.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", choices=["sglang", "vllm"], default="sglang",
                   help="simulate SGLang servers (default) or vLLM (`vllm serve`) servers")
    p.add_argument("--format-version", metavar="V", default=None,
                   help="release whose log format the simulated servers write (default newest)")
    p.add_argument("--concurrency", type=int, default=1, metavar="N",
                   help="requests the built-in clients keep in flight per server (default 1)")
    p.add_argument("--keep", action="store_true",
                   help="keep the demo's log files and recorded baselines on exit")
    add_export_dir(p)
    add_config(p, "its [keys] remap the UI")
    p.add_argument("--scenario", choices=["default", "phantom-baseline"], default="default",
                   help="phantom-baseline: record a tuned baseline, then restart it without the "
                   "NCCL variables, then with a power cap and a patched file; drift alerts follow")


def run(args: argparse.Namespace) -> int:
    from specmon.feeds.demo import DemoFeed, default_servers, demo_actions
    from specmon.sim import formats, vllm_formats

    engine = getattr(args, "engine", "sglang")
    if args.format_version:
        try:
            (vllm_formats if engine == "vllm" else formats).check_version(args.format_version)
        except ValueError as exc:
            raise CliError(str(exc)) from None
    from specmon.commands.hostargs import config_from_args

    cfg = config_from_args(args)  # the same [keys] remaps as every other path
    servers = default_servers(args.format_version, load_concurrency=args.concurrency,
                              engine=engine)
    # at concurrency c the lines spread over batch sizes 1..c: the scenario waits c times as
    # many before it records (a baseline needs 30 clean lines at one batch size) and per phase
    c = max(1, args.concurrency)
    feed = DemoFeed(servers, scenario=args.scenario, record_after=40 * c, phase_lines=60 * c)
    from specmon.ui.app import SpecmonApp

    kind = "vLLM " if engine == "vllm" else ""

    app = SpecmonApp(FleetSession([feed.host]), feed,
                     baseline_store=BaselineStore(feed.workdir / "baselines.sqlite3"),
                     actions=demo_actions(feed), title=f"{feed.host} (simulated {kind}host)",
                     keymap=dict(cfg.keys) if cfg is not None else None,
                     export_dir=Path(args.export_dir) if args.export_dir else None,
                     store_note=None if args.keep else
                     "demo: temporary store, deleted at exit")

    def _cleanup() -> None:
        # a closed terminal (SIGHUP) or a kill (SIGTERM) must still stop the servers we started
        feed.stop_all_sync()
        if not args.keep:
            shutil.rmtree(feed.workdir, ignore_errors=True)

    from specmon.ui.signals import exit_code, exit_on_signals

    try:
        with exit_on_signals(app, grace=QUIT_GRACE_S, cleanup=_cleanup) as got:
            app.run()
    finally:
        _cleanup()
        if args.keep:
            print(f"demo logs kept in {visible(str(feed.workdir))}")  # ($TMPDIR: raw stdout)
    return exit_code(app, got)
