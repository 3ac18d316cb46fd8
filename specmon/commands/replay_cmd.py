"""`specmon replay SNAPSHOT`: load the snapshot (one clear line on a bad file), then the UI."""

from __future__ import annotations

import argparse
from pathlib import Path

from specmon.errors import CliError


def run(args: argparse.Namespace) -> int:
    from specmon.export.snapshot import SnapshotError, read_snapshot

    try:
        snap = read_snapshot(args.snapshot)
    except SnapshotError as exc:
        raise CliError(str(exc)) from None
    if not 0 < args.speed < float("inf"):  # NaN fails this too
        raise CliError(f"--speed must be a positive number, got {args.speed}")
    from specmon.commands.hostargs import config_from_args
    from specmon.ui.replay import ReplayApp  # Textual only here

    cfg = config_from_args(args)  # the same [keys] remaps as every other path
    app = ReplayApp(snap, speed=args.speed, playing=not args.paused, export_dir=args.export_dir,
                    source_name=Path(args.snapshot).name,
                    keymap=dict(cfg.keys) if cfg is not None else None)
    app.run()
    return 0
