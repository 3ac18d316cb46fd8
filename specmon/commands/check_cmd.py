"""`specmon check LOG`: stream a decode log through the drift detector (for scripts and CI).

The log is judged run by run, split where the session model splits it (`ServerState.apply`):
each server run gets its own detector and its own evidence (server args, NCCL_DEBUG lines), so
a run's alert is explained by that run's cause. The verdict is the last run's (or `--run N`'s);
every run's first alert is listed.

Exit status: 0 ok/improved, 1 drift, 3 insufficient data, 2 usage error or a damaged log (the
verdict on the lines before the damage is printed, then the damage).
"""

from __future__ import annotations

import argparse
import math
from collections import deque
from typing import TYPE_CHECKING, Any

from specmon.analysis.drift import BaselineStats, DriftMonitor, DriftParams, format_estimate
from specmon.commands.options import add_json, add_running_req
from specmon.errors import CliError
from specmon.jsonout import dumps
from specmon.numfmt import num, spread_text
from specmon.parse.sglang import parse_line
from specmon.parse.vllm import EngineGuard, SpecJoiner

if TYPE_CHECKING:
    from specmon.analysis.fingerprint import Fingerprint

EXIT = {"ok": 0, "improved": 0, "drift": 1, "insufficient": 3}
MAX_RUNS_LISTED = 256  # runs whose results are kept (a log of endless restarts stays bounded)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Stream a decode log through the drift detector and print the verdict. "
                     "Exit status: 0 ok or improved, 1 drift, 3 insufficient data, 2 usage error or a "
                     "damaged log (the verdict on the lines before it is printed).")
    p.add_argument("log", metavar="LOG", help="SGLang or vLLM log file, or '-' for stdin")
    p.add_argument("--baseline", metavar="NAME", help="a recorded baseline (specmon baseline list)")
    p.add_argument("--baseline-value", metavar="TOKS", type=float,
                   help="a known baseline gen throughput (tok/s) instead of a recorded baseline")
    p.add_argument("--baseline-spread", metavar="PCT", type=float,
                   help="per-sample robust spread of --baseline-value in %% (default: the live spread)")
    add_running_req(p, "compare only lines at this #running-req")
    p.add_argument("--run", metavar="N", type=int,
                   help="judge server run N of the log (default: the last); every run's first "
                   "alert is listed with its own cause")
    add_json(p)


def run(args: argparse.Namespace) -> int:
    params = DriftParams()
    fp_recorded = None
    if args.baseline is not None and args.baseline_value is not None:
        raise CliError("give either --baseline NAME or --baseline-value TOKS, not both")
    if args.baseline_spread is not None and args.baseline_value is None:
        raise CliError("--baseline-spread needs --baseline-value")
    if args.running_req is not None and args.running_req < 1:
        raise CliError(f"--running-req must be >= 1 (got {args.running_req})")
    if args.baseline is not None:
        from specmon.session.baselines import BaselineStore, StoreError

        try:
            rec = BaselineStore.open_default().get(args.baseline)
        except StoreError as exc:
            raise CliError(str(exc)) from None
        if rec is None:
            raise CliError(f"no baseline named {args.baseline!r} (see `specmon baseline list`)")
        stats = rec.stats
        fp_recorded = rec.fingerprint
        label = rec.server_label
    elif args.baseline_value is not None:
        v = args.baseline_value
        if not (v > 0 and math.isfinite(v)):
            raise CliError(f"--baseline-value must be a positive tok/s figure (got {v})")
        spread = args.baseline_spread
        if spread is not None and not (0 <= spread < 100):
            raise CliError(f"--baseline-spread is a percentage in [0, 100) (got {spread})")
        stats = BaselineStats.fixed_value(v, spread, args.running_req, params)
        label = "baseline"
    else:
        raise CliError("a baseline is needed: --baseline NAME or --baseline-value TOKS")
    if args.run is not None and args.run < 1:
        raise CliError(f"--run must be >= 1 (got {args.run})")
    from specmon.analysis.logfile import LogLines
    from specmon.session.runs import run_by_rr, run_fingerprint_offline, stamp
    from specmon.session.state import ServerState

    def fresh() -> DriftMonitor:
        return DriftMonitor(stats, params, label=label, running_req=args.running_req)

    # the session's run model: where one run ends, the next starts, and what each run's lines
    # say about its conditions (its args, vLLM's non-default args, NCCL lines), as live
    state = ServerState(args.log)
    runs: deque[dict[str, Any]] = deque(maxlen=MAX_RUNS_LISTED)
    monitor = fresh()
    run_no = epoch = 0

    def close_run() -> None:
        if run_no:
            r = next((x for x in state.runs if x.index == run_no), None)
            live = run_fingerprint_offline(r) if r else None
            runs.append({"run": run_no, "start": stamp(r.start_t) if r else None,
                         **result(monitor, fp_recorded, live),
                         # the run's own statistics, as parse --runs, compare and the report
                         # show them (the verdict's `live` is the detector's clean samples)
                         "by_running_req": run_by_rr(r) if r else []})

    joiner = SpecJoiner()  # vLLM: the spec line joins its engine's line (no-op for SGLang)
    guard = EngineGuard(args.log)
    at: dict[int, int] = {}  # id(record) -> its line number (an engine line waits a line)
    line_no = 0
    with LogLines(args.log) as log:  # a read error ends the loop: what came before is judged
        for raw in log:
            line_no += 1
            parsed = parse_line(raw)
            guard.check(parsed, line_no)
            if parsed is None:
                continue
            state.apply(raw.decode("utf-8", "replace").rstrip("\r\n"), parsed, 0.0)
            if state.runs_total == run_no and state.runs and state.run.epoch != epoch:
                # log time went back: the verdict is on the lines after it, as the run's own
                # figures (the two sides pooled read 88.0 where the run ran at 60.1)
                epoch, monitor = state.run.epoch, fresh()
            if state.runs_total != run_no:  # this line began the next run
                for ready in joiner.flush():  # the ended run's last joined interval
                    monitor.observe(ready, None, at.pop(id(ready), line_no))
                close_run()
                monitor = fresh()
                run_no, epoch = state.runs_total, state.run.epoch
            at[id(parsed)] = line_no
            for ready in joiner.push(parsed):
                monitor.observe(ready, None, at.pop(id(ready), line_no))
        for ready in joiner.flush():
            monitor.observe(ready, None, at.pop(id(ready), line_no))
    close_run()
    out = judged(list(runs), args.run, args.log, result(monitor, fp_recorded, None), run_no)
    if args.json:
        print(dumps(out))
    else:
        print(render(out))
    if log.error is not None:  # judged on the lines before the damage: said, and not a verdict
        raise CliError(f"{log.error}; the verdict above is on the lines before it")
    return EXIT[out["verdict"]]


def judged(runs: list[dict[str, Any]], k: int | None, log: str,
           empty: dict[str, Any], total: int) -> dict[str, Any]:
    """The judged run's result (the last, or run k) at the top, with `run`, `runs_total` and
    every (kept) run's first alert and causes under `runs`."""
    if k is not None and not any(r["run"] == k for r in runs):
        if runs and k < runs[0]["run"]:
            raise CliError(f"{log}: run {k} is not kept (the last {len(runs)} of {total} runs "
                           "are)")
        have = f"runs 1..{total}" if runs else "no run"
        raise CliError(f"{log}: no run {k} (the log holds {have})")
    if not runs:  # nothing SGLang printed: insufficient, as before
        return {"run": None, "runs_total": 0, **empty, "runs": []}
    pick = runs[-1] if k is None else next(r for r in runs if r["run"] == k)
    summary = [{"run": r["run"], "start": r["start"], "verdict": r["verdict"],
                "live": r["live"], "delta_pct": r["delta_pct"],
                "first_alert_line": r["first_alert_line"], "alert": r["alert"],
                "causes": r["causes"]} for r in runs]
    return {"run": pick["run"], "runs_total": total, "start": pick["start"],
            **{x: v for x, v in pick.items() if x not in ("run", "start")}, "runs": summary}


def result(monitor: DriftMonitor, fp_recorded: Any, live: Fingerprint | None) -> dict[str, Any]:
    from specmon.analysis.fingerprint import causes_for_alert, diff

    verdict = monitor.verdict()
    # what differs from the recording whatever the verdict: an "ok" between unlike runs (another
    # step count, other flags) says so rather than passing as like for like
    changed = diff(fp_recorded, live)[0] if fp_recorded is not None and live is not None else []
    est = monitor.summary_estimate()
    excluded = monitor.excluded
    causes: list[str] = []
    alert = monitor.first_alert or monitor.alert
    if verdict in ("drift", "improved") and alert is not None:
        causes = causes_for_alert(alert, monitor, fp_recorded, live, gpus=())
    return {
        "verdict": verdict,
        "live": {"median": _r(est.live) if est else None, "n": est.n_live if est else monitor.clean},
        "baseline": {"median": _r(est.base) if est else None, "n": est.n_base if est else None},
        "delta_pct": _r(est.delta_pct) if est else None,
        "ci_pct": [_r(est.ci_pct[0]), _r(est.ci_pct[1])] if est else None,
        "first_alert_line": monitor.first_alert_line,
        "excluded": sum(excluded.values()),
        "causes": causes,
        "metric": est.metric if est else None,
        "running_req": est.running_req if est else None,
        "alert": format_estimate(est, monitor.label) if est and verdict != "insufficient" else None,
        "excluded_by_reason": excluded,
        "conditions_changed": changed,
    }


def _r(x: float) -> float:
    return round(x, 2)


def render(out: dict[str, Any]) -> str:
    lines = [f"verdict: {out['verdict']}"]
    if out["alert"]:
        lines.append(out["alert"])
    elif out["verdict"] == "insufficient":
        lines.append(f"not enough comparable samples (clean live n={out['live']['n']})")
        if out["excluded_by_reason"].get("speculative_vs_value"):
            lines.append("the run's decode lines are a speculative server's: --baseline-value "
                         "is a plain server's tok/s, not held against them; judge them against "
                         "a baseline recorded from a speculative run (specmon baseline record), "
                         "or compare the two servers' logs (specmon compare BASE SPEC)")
    if out.get("run") is not None:
        lines.append(f"judged: run {out['run']} of {out['runs_total']} (from {out['start'] or '?'})"
                     + (", the last" if out["run"] == out["runs_total"] else ""))
    for row in out.get("by_running_req", []):
        lines.append(f"run median at #running-req {row['running_req']}: {num(row['median_tok_s'])} tok/s "
                     f"(p10-p90 {spread_text(row['p10'], row['p90'])}, n {row['n']}; whole run, as compare "
                     "and parse --runs)")
    if out["first_alert_line"] is not None:
        lines.append(f"first alert at line {out['first_alert_line']}")
    for c in out["causes"]:
        lines.append(f"cause: {c}")
    if not out["causes"]:  # (a drift's causes name them already)
        lines += [f"note: since the recording: {c} (the verdict compares unlike runs)"
                  for c in out.get("conditions_changed", [])]
    if out["excluded_by_reason"].get("other_rank") and out.get("by_running_req"):
        lines.append("note: this server prints a line per DP group (or rank): the verdict reads "
                     "one group's lines (the first seen), so its tok/s and a --baseline-value "
                     "are one group's; the run medians above are the groups summed")
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(out["excluded_by_reason"].items()))
    lines.append(f"excluded: {out['excluded']}" + (f" ({reasons})" if reasons else ""))
    others = [r for r in out.get("runs", []) if r["run"] != out["run"]]
    if others:
        lines.append("other runs (each judged on its own lines, its causes from its own evidence):")
    for r in others:
        head = f"  run {r['run']} (from {r['start'] or '?'}): {r['verdict']}"
        if r["first_alert_line"] is not None:
            head += f", first alert at line {r['first_alert_line']}"
        lines.append(head + (f": {r['alert']}" if r["alert"] and r["verdict"] != "ok" else ""))
        lines += [f"    cause: {c}" for c in r["causes"]]
    return "\n".join(lines)
