"""`specmon parse`: offline analysis of SGLang logs, and the JSON contract other tools build on."""

from __future__ import annotations

import argparse
import sys

from specmon.analysis.logfile import (
    NO_LINES,
    PartialRead,
    iter_json,
    open_input,
    read_lines,
    summarise,
)
from specmon.analysis.logsummary import LogSummary
from specmon.jsonout import dumps


def run(args: argparse.Namespace) -> int:
    if getattr(args, "runs", False):
        return list_runs(args.files, args.json)
    if args.json:
        out = sys.stdout
        found = 0
        for name in args.files:
            for obj in iter_json(name, "all"):
                found += 1
                if args.kind != "all" and obj["kind"] != args.kind:
                    continue
                out.write(dumps(obj))
                out.write("\n")
        if not found:
            print("specmon parse: no SGLang lines found", file=sys.stderr)
            return NO_LINES
        return 0
    total = LogSummary()
    for name in args.files:
        try:
            total.merge(summarise(name))
        except PartialRead as exc:
            total.merge(exc.summary)
            print(total.render())  # what was read before the damage is still reported
            raise
    if not total.recognised and not total.events:
        print(total.render())
        print("specmon parse: no SGLang lines found", file=sys.stderr)
        return NO_LINES
    print(total.render())
    return 0


def list_runs(files: list[str], as_json: bool) -> int:
    """`specmon parse --runs`: each log's runs, as the session model splits them."""
    from specmon.session.runs import read_runs, run_row

    for name in files:
        fh = open_input(name)
        try:
            state = read_runs(read_lines(fh, name), name)
        finally:
            if fh is not sys.stdin.buffer:
                fh.close()
        rows = [run_row(r) for r in state.runs]
        if as_json:
            for row in rows:
                print(dumps({"file": name, **row}))
            continue
        print(f"{name}: {len(rows)} run{'s' if len(rows) != 1 else ''}")
        for row in rows:
            dp = f", {row['dp_groups']} DP groups" if row["dp_groups"] else ""
            print(f"  run {row['run']}: {row['start'] or '?'} -> {row['end'] or '?'} "
                  f"({row['start_reason']}; {row['end_reason'] or 'last'}), "
                  f"{row['decode_lines']} decode lines{dp}; {row['args']}")
            for sg in row["time_segments"]:  # log time broke: windows restart there
                step = sg["step_s"]
                what = f"went back {-step:.0f} s" if step < 0 else f"jumped ahead {step:.0f} s"
                print(f"    time segment {sg['segment']} from {sg['from']}: log time {what} "
                      f"(after {sg['after']}); no statistic spans it")
    return 0
