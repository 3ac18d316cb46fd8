"""`specmon compare BASELINE_LOG SPEC_LOG`: the speedup of the last runs, per batch size.

Exit status: 0 compared, 3 no batch size with enough samples on both or a log without a run
(which is said), 2 usage or a damaged log (what was read before the damage is still compared,
and the damage said).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from specmon.commands.options import add_json, add_running_req
from specmon.errors import CliError
from specmon.jsonout import dumps

if TYPE_CHECKING:
    from specmon.session.state import ServerState


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Read two SGLang or vLLM server logs (files, .gz or '-'), split each into runs "
                     "(server_args lines, restarts) and compare the last run of each (or the runs "
                     "chosen) at the same #running-req, with the same code as the UI. Says which "
                     "conditions differ besides speculation (server args, NCCL env, versions). Exit "
                     "status: 0 compared, 3 no batch size has enough samples on both (or a log holds no "
                     "server run), 2 usage error or "
                     "a damaged log (the lines before the damage are compared, the damage said).")
    p.add_argument("baseline", metavar="BASELINE_LOG")
    p.add_argument("spec", metavar="SPEC_LOG")
    add_running_req(p, "compare only this #running-req")
    p.add_argument("--run", metavar="K", type=int,
                   help="compare run K of each log (1 = the first; default: the last run)")
    p.add_argument("--base-run", metavar="K", type=int,
                   help="run K of the baseline log (overrides --run for it)")
    p.add_argument("--spec-run", metavar="K", type=int,
                   help="run K of the speculative log (overrides --run for it)")
    add_json(p)


def _read(name: str, label: str) -> tuple[ServerState, CliError | None]:
    """The log's runs, and the read error that ended it early (its lines before count)."""
    from specmon.analysis.logfile import LogLines
    from specmon.session.runs import read_runs

    with LogLines(name) as log:
        state = read_runs(log, label)
    return state, log.error


def run(args: argparse.Namespace) -> int:
    from specmon.session.runs import compare, render

    if args.running_req is not None and args.running_req < 1:
        raise CliError(f"--running-req must be >= 1 (got {args.running_req})")
    for flag in ("run", "base_run", "spec_run"):
        v = getattr(args, flag)
        if v is not None and v < 1:
            raise CliError(f"--{flag.replace('_', '-')} must be >= 1 (got {v})")
    base_run = args.base_run if args.base_run is not None else args.run
    spec_run = args.spec_run if args.spec_run is not None else args.run
    if args.baseline == "-" and args.spec == "-":
        raise CliError("only one of the two logs can be '-' (stdin)")
    base, base_err = _read(args.baseline, "baseline")
    spec, spec_err = _read(args.spec, "speculative")
    for state, name, err in ((base, args.baseline, base_err), (spec, args.spec, spec_err)):
        if not state.runs:  # too little data, as parse says of a log without a run (exit 3)
            if err is not None:
                raise err
            print(f"specmon compare: {name}: no SGLang or vLLM lines (no server run)",
                  file=sys.stderr)
            return 3
    try:
        cmp = compare(base, spec, base_run=base_run, spec_run=spec_run,
                      running_req=args.running_req)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if args.json:
        print(dumps(cmp.result))
    else:
        print(render(cmp.result))
    damaged = [e for e in (base_err, spec_err) if e is not None]
    for err in damaged:  # the comparison above holds the lines read before the damage
        print(f"specmon compare: {err}; compared the lines before it", file=sys.stderr)
    if not cmp.enough:
        print(f"specmon compare: {cmp.why}", file=sys.stderr)
        return 3
    return 2 if damaged else 0
