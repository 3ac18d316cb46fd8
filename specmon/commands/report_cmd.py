"""`specmon report SNAPSHOT [--format md|html|json] [-o FILE]`: a pasteable report with charts.

Markdown links its charts as SVG files written beside the report (`<stem>-throughput.svg`);
HTML inlines them, so one file carries everything; JSON is the same document without the charts.
Files are written atomically.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specmon.errors import CliError
from specmon.export.report import build_blocks, render_html, render_markdown, report_json
from specmon.export.snapshot import SnapshotError, atomic_write_bytes, read_snapshot
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
    if args.format == "json":
        text = dumps(report_json(snap), indent=1) + "\n"
        if args.out == "-":
            sys.stdout.write(text)
            return 0
        out = Path(args.out) if args.out else default_out(args.snapshot, "json")
        try:
            atomic_write_bytes(out, text.encode())
        except OSError as exc:
            raise CliError(f"cannot write {out}: {exc.strerror or exc}") from None
        print(f"specmon report: wrote {out}", file=sys.stderr)
        return 0
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
