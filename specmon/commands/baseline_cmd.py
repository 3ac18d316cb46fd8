"""`specmon baseline record|list|show|delete`: the recorded baselines drift alerts compare against."""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specmon.analysis.drift import DriftParams, baseline_from_records
from specmon.analysis.fingerprint import Fingerprint, fingerprint_from
from specmon.commands.options import add_json, add_running_req, count
from specmon.errors import CliError
from specmon.jsonout import MAX_DEPTH, dumps, not_finite, too_deep
from specmon.parse.sglang import BatchRecord, Record, parse_line
from specmon.parse.vllm import EngineGuard, join_records
from specmon.redact import redact_fingerprint, redact_obj, redact_text
from specmon.session.baselines import Baseline, BaselineExists, BaselineStore, StoreError

if TYPE_CHECKING:
    from specmon.session.state import Run


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Recorded baselines live in SQLite under the user data dir (override with "
                     "SPECMON_DATA_DIR).")
    bs = p.add_subparsers(dest="baseline_action", metavar="ACTION")
    r = bs.add_parser("record", help="record a baseline from a log file")
    r.add_argument("name", metavar="NAME")
    r.add_argument("--log", metavar="FILE",
                   help="SGLang or vLLM log ('-' for stdin); the last server run is used")
    r.add_argument("--server-info", metavar="JSON", help="/get_server_info output (a file or inline JSON)")
    add_running_req(r, "keep only this #running-req")
    r.add_argument("--last", metavar="LINES", type=count(10 ** 9),
                   help="only the last LINES decode lines (a positive number)")
    r.add_argument("--host", help="host the server ran on (default: local)")
    r.add_argument("--server", help="server name (e.g. sglang-30000)")
    r.add_argument("--role", choices=["baseline", "speculative"], help="default: from the log")
    r.add_argument("--note", help="free text kept with the baseline")
    r.add_argument("--replace", action="store_true", help="replace a baseline of the same name")
    ls = bs.add_parser("list", help="list recorded baselines")
    ls.add_argument("--host")
    ls.add_argument("--server")
    add_json(ls, "print JSON")
    sh = bs.add_parser("show", help="show one baseline: strata and fingerprint")
    sh.add_argument("name", metavar="NAME")
    add_json(sh, "print JSON")
    d = bs.add_parser("delete", help="delete a baseline (a damaged one too)")
    d.add_argument("name", metavar="NAME", nargs="?")
    d.add_argument("--id", type=int, metavar="ROW",
                   help="delete by row id instead (a damaged row whose name cannot be typed)")
    for q in (r, ls, sh, d):
        q.set_defaults(parser=q)
    p.set_defaults(baseline_action=None)


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except StoreError as exc:  # one line: the file and the fix
        raise CliError(str(exc)) from None


def _warn(line: str) -> None:
    """A damaged row a read skipped: one line on stderr (redacted, made visible by the CLI)."""
    print(f"specmon baseline: {redact_text(line)}", file=sys.stderr)


def _run(args: argparse.Namespace) -> int:
    action = args.baseline_action
    if action == "record":  # created now: a folder that cannot take it fails before the work
        return record(BaselineStore.open_default(create=True), args)
    # reading (and delete) opens an existing store only; reads never write it
    store = BaselineStore.open_default(warn=_warn)
    if action == "list":
        # redacted on the way out, as `show` is (a name may come from a log or an old store)
        rows = [redact_obj(r) for r in store.list(host=args.host, server=args.server)]
        if args.json:
            print(dumps(rows))
            return 0
        if not rows:
            print("no baselines recorded")
            return 0
        for r in rows:
            when = datetime.fromtimestamp(r["created_at"]).strftime("%Y-%m-%d %H:%M")
            med = "N/A" if r["median"] is None else f"{r['median']:.1f} tok/s"
            print(f"{r['name']}\t{r['host']}/{r['server'] or '-'}\t{when}\t{med}\t"
                  f"n={r['n']} ({r['stratum']}, {r['strata']} strata)")
        return 0
    if action == "show":
        b = store.get(args.name)
        if b is None:
            raise CliError(f"no baseline named {args.name!r}")
        # redacted again on the way out: a store written by an older specmon may hold secrets
        print(dumps(redact_obj(show_json(b))) if args.json
              else "\n".join(redact_text(x) for x in show_lines(b)))
        return 0
    if action == "delete":
        if (args.name is None) == (args.id is None):
            raise CliError("delete needs a NAME or --id ROW (one of them)")
        if args.id is not None:
            if not store.delete(row_id=args.id):
                raise CliError(f"no baseline in row {args.id}")
            print(f"deleted row {args.id}")
            return 0
        if not store.delete(args.name):
            raise CliError(f"no baseline named {args.name!r}")
        print(f"deleted {args.name}")
        return 0
    raise CliError("expected one of: record, list, show, delete")


def _read_log(name: str) -> tuple[list[Record], Run | None, int]:
    """The log's records, what its last run's lines say about its conditions, read by the
    session's run model as live and `check` read them (vLLM's non-default args come before
    the config line that starts the run), and the index of the first record of that run's
    last stretch of log time (its figures never reach behind a step back: `Run.epoch`)."""
    from specmon.analysis.logfile import LogLines
    from specmon.session.state import ServerState

    out: list[Record] = []
    guard = EngineGuard(name)
    state = ServerState(name)
    at: tuple[int, int] | None = None  # (run index, epoch) of the stretch the cut opens
    cut = 0
    with LogLines(name) as log:
        for n, raw in enumerate(log, 1):
            rec = parse_line(raw)
            guard.check(rec, n)
            if rec is not None:
                out.append(rec)
                state.apply(raw.decode("utf-8", "replace").rstrip("\r\n"), rec, 0.0)
                run = state.run if state.runs else None
                now = (run.index, run.epoch) if run is not None else None
                if now != at:
                    at, cut = now, len(out) - 1
    if log.error is not None:  # a baseline is never recorded from part of a log
        raise log.error
    # vLLM: each spec line joins its engine's line (the records are the same objects)
    join_records(out)
    return out, state.run if state.runs else None, cut


def _server_info(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    p = Path(text)
    from_file = not text.lstrip().startswith("{") and p.is_file()
    try:
        raw = p.read_text() if from_file else text
    except OSError as exc:
        raise CliError(f"--server-info {text}: cannot read ({exc.strerror})") from None
    try:
        d = json.loads(raw)
    except RecursionError:  # (nested past the parser's depth)
        raise CliError(f"--server-info: nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as exc:
        raise CliError(f"--server-info: not JSON ({str(exc).split(';')[0]})") from None
    if not isinstance(d, dict):
        raise CliError("--server-info: expected a JSON object (/get_server_info output)")
    path = too_deep(d)  # (redaction and the store's writer recurse into it)
    if path is not None:
        raise CliError(f"--server-info: {path.lstrip('.')}: nested more than {MAX_DEPTH} levels "
                       "deep (specmon.jsonout.MAX_DEPTH)")
    path = not_finite(d)  # (Python's json reads NaN, Infinity and 1e400; no baseline holds them)
    if path is not None:
        where = f"--server-info {text}" if from_file else "--server-info"
        raise CliError(f"{where}: field {path.lstrip('.')} is not a finite "
                       "number (NaN, Infinity or past a float's range)")
    return d


def record(store: BaselineStore, args: argparse.Namespace) -> int:
    if not args.name.strip():
        raise CliError("a baseline name must not be empty")
    if args.log is None:
        raise CliError("record needs --log FILE (recording from a live server is the TUI's key)")
    params = DriftParams()
    lines, seen, cut = _read_log(args.log)
    # the last server run in the file (a restart starts a new configuration), from its last
    # step back of log time (both sides pooled read 88.0 where the run after it ran at 60.1,
    # and `check` of the same log then said "drift -32 %")
    recs: list[tuple[Record, float | None]] = [(r, None) for r in lines[cut:]]
    if seen is not None and seen.epoch:
        back = next((g for g in reversed(seen.segments) if g.step_s < 0), None)
        _warn(f"{args.log}: the run's " + (back.describe() if back is not None else
                                           "log time went back")
              + ": the baseline is recorded from the lines after that step")
    decodes = [i for i, (r, _) in enumerate(recs) if getattr(r, "kind", None) == "decode"]
    if args.last is not None and len(decodes) > args.last:
        recs = recs[decodes[-args.last]:]
    stats = baseline_from_records(recs, params)
    if args.running_req is not None:
        stats.strata = {k: b for k, b in stats.strata.items()
                        if args.running_req in b.rr and min(b.rr) == max(b.rr)}
    usable = [b for b in stats.strata.values() if b.n >= params.min_base]
    if not usable:
        best = stats.best()
        raise CliError(f"{args.log}: not enough clean decode samples for a baseline "
                       f"(best stratum n={best.n if best else 0}, need {params.min_base}; "
                       f"excluded: {sum(stats.excluded.values())})")
    info = redact_obj(_server_info(args.server_info))  # the store keeps no secret
    args_seen = dict(seen.args) if seen else {}
    args_seen.update({k: v for k, v in info.items() if not isinstance(v, (dict, list))})
    fp = fingerprint_from(server_args=args_seen, nccl_lines=seen.nccl_lines if seen else (),
                          version=info.get("version") if isinstance(info.get("version"), str) else None,
                          collected_at=time.time())
    spec = any(r.is_speculative for r, _ in recs if isinstance(r, BatchRecord)
               and r.kind == "decode")  # (a stratum with accept lens has such lines)
    role = args.role or ("speculative" if spec else "baseline")
    b = Baseline(args.name, stats, redact_fingerprint(fp), host=args.host or "local",
                 server=args.server or "", role=role,
                 source={"log": redact_text(str(args.log)), "decode_lines": len(decodes),
                         "last": args.last},
                 note=redact_text(args.note) if args.note else args.note)
    try:
        store.save(b, replace=args.replace)
    except BaselineExists:
        raise CliError(f"a baseline named {args.name!r} exists (use --replace)") from None
    best = max(usable, key=lambda x: x.n)
    print(f"recorded {args.name}: {best.median_thr:.1f} tok/s median, n={best.n} "
          f"({best.stratum.describe()}), {len(usable)} usable strata, "
          f"excluded {sum(stats.excluded.values())}")
    return 0


def show_json(b: Baseline) -> dict[str, Any]:
    strata = []
    for s in sorted(b.stats.strata.values(), key=lambda s: -s.n):
        strata.append({"stratum": s.stratum.describe(), "key": s.stratum.key, "n": s.n,
                       "median": s.median_thr, "robust_cv": round(s.sig, 5),
                       "autocorr": round(s.rho, 3), "accept_len": s.median_accept,
                       "t_cycle_ms": s.t_cycle_ms, "t_first": s.t_first, "t_last": s.t_last})
    return {"name": b.name, "host": b.host, "server": b.server, "role": b.role,
            "created_at": b.created_at, "source": b.source, "note": b.note,
            "excluded": b.stats.excluded, "strata": strata,
            "fingerprint": b.fingerprint.to_json() if b.fingerprint else None}


def show_lines(b: Baseline) -> list[str]:
    when = datetime.fromtimestamp(b.created_at).strftime("%Y-%m-%d %H:%M:%S")
    out = [f"{b.name}: {b.host}/{b.server or '-'} ({b.role or 'N/A'}), recorded {when}"]
    if b.source:
        out.append("source: " + ", ".join(f"{k} {v}" for k, v in b.source.items() if v is not None))
    for s in sorted(b.stats.strata.values(), key=lambda s: -s.n):
        extra = ""
        if s.stratum.spec:
            extra = f", accept len {s.median_accept or 0:.2f}, t_cycle {s.t_cycle_ms or 0:.1f} ms"
        out.append(f"  {s.stratum.describe()}: {s.median_thr or 0:.1f} tok/s, n={s.n}, "
                   f"robust sd {100 * s.sig:.2f}% (log), lag-1 AC {s.rho:.2f}{extra}")
    if b.stats.excluded:
        out.append("excluded: " + ", ".join(f"{k} {v}" for k, v in sorted(b.stats.excluded.items())))
    fp: Fingerprint | None = b.fingerprint
    if fp is not None:
        out.append("fingerprint:")
        out += ["  " + x for x in fp.summary()] or ["  (empty)"]
    return out
