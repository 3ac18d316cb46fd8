"""`specmon report SNAPSHOT [--format md|html] [-o FILE]`: a pasteable report with charts.

Markdown links its charts as SVG files written beside the report (`<stem>-throughput.svg`);
HTML inlines them, so one file carries everything. Files are written atomically.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specmon.errors import CliError
from specmon.export.report import build_blocks, render_html, render_markdown
from specmon.export.snapshot import SnapshotError, atomic_write_bytes, read_snapshot


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Servers and fingerprints, throughput per batch size (median, p10-p90, n), "
                     "speedup with its 95%% interval, accept length, GPU clocks and power, alerts, "
                     "and SVG charts of throughput over time.")
    p.add_argument("snapshot", metavar="SNAPSHOT")
    p.add_argument("--format", choices=["md", "html"], default="md")
    p.add_argument("-o", "--out", metavar="FILE",
                   help="report file (default: next to SNAPSHOT, .report.md/.report.html); '-' "
                   "prints Markdown without chart files")


def default_out(snapshot: str, fmt: str) -> Path:
    p = Path(snapshot)
    name = p.name
    for suffix in (".gz", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return p.with_name(f"{name}.report.{fmt}")


def run(args: argparse.Namespace) -> int:
    try:
        snap = read_snapshot(args.snapshot)
    except SnapshotError as exc:
        raise CliError(str(exc)) from None
    blocks = build_blocks(snap)
    if args.out == "-":
        if args.format == "html":
            sys.stdout.write(render_html(blocks))
        else:
            sys.stdout.write(render_markdown(blocks))
        return 0
    out = Path(args.out) if args.out else default_out(args.snapshot, args.format)
    try:
        if args.format == "html":
            atomic_write_bytes(out, render_html(blocks).encode())
            written = [out]
        else:
            charts: dict[str, str] = {}
            written = []
            stem = out.name[: -len(out.suffix)] if out.suffix else out.name
            for blk in blocks:
                if blk[0] == "svg":
                    svg_path = out.with_name(f"{stem}-{blk[1]}.svg")
                    atomic_write_bytes(svg_path, blk[2].encode())
                    charts[blk[1]] = svg_path.name
                    written.append(svg_path)
            atomic_write_bytes(out, render_markdown(blocks, charts).encode())
            written.insert(0, out)
    except OSError as exc:
        raise CliError(f"cannot write {out}: {exc.strerror or exc}") from None
    print("specmon report: wrote " + ", ".join(str(p) for p in written), file=sys.stderr)
    return 0
