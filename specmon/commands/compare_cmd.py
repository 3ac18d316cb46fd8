"""`specmon compare BASELINE_LOG SPEC_LOG`: the speedup of the last runs, per batch size.

Exit status: 0 compared, 3 no batch size with enough samples on both (which is said), 2 usage.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, BinaryIO

from specmon.commands.options import add_json, add_running_req
from specmon.errors import CliError
from specmon.jsonout import dumps

if TYPE_CHECKING:
    from specmon.session.state import ServerState


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Read two SGLang server logs (files, .gz or '-'), split each into runs "
                     "(server_args lines, restarts) and compare the last run of each at the same "
                     "#running-req, with the same code as the UI. Exit status: 0 compared, 3 no batch "
                     "size has enough samples on both, 2 usage error.")
    p.add_argument("baseline", metavar="BASELINE_LOG")
    p.add_argument("spec", metavar="SPEC_LOG")
    add_running_req(p, "compare only this #running-req")
    p.add_argument("--run", metavar="K", type=int,
                   help="compare run K of each log (1 = the first; default: the last run)")
    add_json(p)


def _read(name: str, label: str) -> ServerState:
    from specmon.analysis.logfile import open_input
    from specmon.session.runs import read_runs

    fh = open_input(name)
    try:
        return read_runs(_lines(fh, name), label)
    finally:
        if fh is not sys.stdin.buffer:
            fh.close()


def _lines(fh: BinaryIO, name: str) -> Iterator[bytes]:
    import gzip

    try:
        yield from fh
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise CliError(f"{name}: read error ({exc})") from None


def run(args: argparse.Namespace) -> int:
    from specmon.session.runs import compare, render

    if args.running_req is not None and args.running_req < 1:
        raise CliError(f"--running-req must be >= 1 (got {args.running_req})")
    if args.run is not None and args.run < 1:
        raise CliError(f"--run must be >= 1 (got {args.run})")
    if args.baseline == "-" and args.spec == "-":
        raise CliError("only one of the two logs can be '-' (stdin)")
    base = _read(args.baseline, "baseline")
    spec = _read(args.spec, "speculative")
    try:
        cmp = compare(base, spec, base_run=args.run, spec_run=args.run,
                      running_req=args.running_req)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if args.json:
        print(dumps(cmp.result))
    else:
        print(render(cmp.result))
    if not cmp.enough:
        print(f"specmon compare: {cmp.why}", file=sys.stderr)
        return 3
    return 0
