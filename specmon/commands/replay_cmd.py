"""`specmon replay SNAPSHOT`: load the snapshot (one clear line on a bad file), then the UI."""

from __future__ import annotations

import argparse
from pathlib import Path

from specmon.commands.options import add_config, add_export_dir
from specmon.errors import CliError
from specmon.interrupt import killable


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Replay SNAPSHOT through the live UI on its recorded times. Keys: space "
                     "play/pause, , . seek 10 s, < > seek 60 s, [ ] speed, g/G start/end, e export, "
                     "s SVG screenshot.")
    p.add_argument("snapshot", metavar="SNAPSHOT")
    p.add_argument("--speed", type=float, default=1.0, help="playback speed (default 1)")
    p.add_argument("--paused", action="store_true", help="start paused at the beginning")
    add_export_dir(p, default=".")
    add_config(p, "its [keys] remap the UI")


def run(args: argparse.Namespace) -> int:
    from specmon.export.snapshot import SnapshotError, read_snapshot

    try:
        with killable():  # (specmon/interrupt.py: a large snapshot's decode is one long C call)
            snap = read_snapshot(args.snapshot)
    except SnapshotError as exc:
        raise CliError(str(exc)) from None
    if not 0 < args.speed < float("inf"):  # NaN fails this too
        raise CliError(f"--speed must be a positive number, got {args.speed}")
    from specmon.commands.hostargs import config_from_args
    from specmon.ui.replay_app import ReplayApp  # Textual only here

    cfg = config_from_args(args)  # the same [keys] remaps as every other path
    app = ReplayApp(snap, speed=args.speed, playing=not args.paused, export_dir=args.export_dir,
                    source_name=Path(args.snapshot).name,
                    keymap=dict(cfg.keys) if cfg is not None else None)
    from specmon.ui.signals import exit_code, exit_on_signals

    with exit_on_signals(app) as got:
        app.run()
    return exit_code(app, got)
