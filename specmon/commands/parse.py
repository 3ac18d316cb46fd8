"""`specmon parse`: offline analysis of SGLang logs, and the JSON contract other tools build on."""

from __future__ import annotations

import argparse
import json
import sys

from specmon.analysis.logfile import PartialRead, iter_json, summarise
from specmon.analysis.logsummary import LogSummary


def run(args: argparse.Namespace) -> int:
    if args.json:
        out = sys.stdout
        for name in args.files:
            for obj in iter_json(name, args.kind):
                out.write(json.dumps(obj))
                out.write("\n")
        return 0
    total = LogSummary()
    for name in args.files:
        try:
            total.merge(summarise(name))
        except PartialRead as exc:
            total.merge(exc.summary)
            print(total.render())  # what was read before the damage is still reported
            raise
    print(total.render())
    return 0
