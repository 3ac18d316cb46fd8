"""`specmon report SNAPSHOT [--format md|html|json] [-o FILE]`: a pasteable report with charts.

Markdown links its charts as SVG files written beside the report (`<stem>-throughput.svg`);
HTML inlines them, so one file carries everything; JSON is the same document without the charts.
Files are written atomically; a symbolic link at any of them (the report or a chart) is refused,
nothing written, unless --force, which replaces the link (never writes through it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specmon.errors import CliError
from specmon.export.report import build_blocks, render_html, render_markdown, report_json
from specmon.export.snapshot import (
    SnapshotError,
    SymlinkOutputError,
    atomic_write_bytes,
    read_snapshot,
    symlink_refusal,
)
from specmon.interrupt import killable
from specmon.jsonout import dumps


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("The snapshot played through the session model: servers and readable "
                     "fingerprints, one section per server run (throughput per batch size: median, "
                     "p10-p90, n), the speedup between the current runs with their run numbers, its "
                     "95%% interval and the conditions that differ, accept length, GPU clocks and "
                     "power per server, alerts, and SVG charts on log time. --format json prints the "
                     "same document.")
    p.add_argument("snapshot", metavar="SNAPSHOT")
    p.add_argument("--format", choices=["md", "html", "json"], default="md")
    p.add_argument("-o", "--out", metavar="FILE",
                   help="report file (default: next to SNAPSHOT, .report.md/.report.html/"
                   ".report.json); '-' prints to stdout (Markdown without chart files)")
    p.add_argument("--force", action="store_true",
                   help="replace a symbolic link at the report or a chart file (the link, not its "
                   "target; without --force such a link is refused and nothing is written)")


def default_out(snapshot: str, fmt: str) -> Path:
    p = Path(snapshot)
    name = p.name
    for suffix in (".gz", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return p.with_name(f"{name}.report.{fmt}")


def _write_all(files: list[tuple[Path, str, bytes]], force: bool) -> None:
    """Write (path, what, data) in order, each atomically; a symbolic link at any of the paths
    is refused before anything is written, unless `force` (which replaces the link itself)."""
    if not force:
        for path, what, _ in files:
            refusal = symlink_refusal(path, what)
            if refusal is not None:
                raise CliError(refusal)
    for path, what, data in files:
        try:
            atomic_write_bytes(path, data, force=force)
        except SymlinkOutputError as exc:  # made a link since the check above
            raise CliError(symlink_refusal(path, what) or str(exc)) from None
        except OSError as exc:
            raise CliError(f"cannot write {path}: {exc.strerror or exc}") from None


def run(args: argparse.Namespace) -> int:
    try:
        with killable():  # reading, decoding and building write nothing (specmon/interrupt.py)
            snap = read_snapshot(args.snapshot)
    except SnapshotError as exc:
        raise CliError(str(exc)) from None
    out_what = "--out " if args.out else ""
    if args.format == "json":
        with killable():
            text = dumps(report_json(snap), indent=1) + "\n"
        if args.out == "-":
            sys.stdout.write(text)
            return 0
        out = Path(args.out) if args.out else default_out(args.snapshot, "json")
        _write_all([(out, out_what, text.encode())], args.force)
        print(f"specmon report: wrote {out}", file=sys.stderr)
        return 0
    with killable():
        blocks = build_blocks(snap)
    if args.out == "-":
        if args.format == "html":
            sys.stdout.write(render_html(blocks))
        else:
            sys.stdout.write(render_markdown(blocks))
        return 0
    out = Path(args.out) if args.out else default_out(args.snapshot, args.format)
    if args.format == "html":
        files = [(out, out_what, render_html(blocks).encode())]
    else:
        charts: dict[str, str] = {}
        files = []
        stem = out.name[: -len(out.suffix)] if out.suffix else out.name
        for blk in blocks:
            if blk[0] == "svg":
                svg_path = out.with_name(f"{stem}-{blk[1]}.svg")
                charts[blk[1]] = svg_path.name
                files.append((svg_path, "chart ", blk[2].encode()))
        # the charts first, so the report's links work when it appears
        files.append((out, out_what, render_markdown(blocks, charts).encode()))
    _write_all(files, args.force)
    written = [files[-1][0]] + [path for path, _, _ in files[:-1]]
    print("specmon report: wrote " + ", ".join(str(p) for p in written), file=sys.stderr)
    return 0
