"""`specmon check LOG`: stream a decode log through the drift detector (for scripts and CI).

Exit status: 0 ok/improved, 1 drift, 3 insufficient data, 2 usage error.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from specmon.analysis.drift import BaselineStats, DriftMonitor, DriftParams, format_estimate
from specmon.errors import CliError
from specmon.jsonout import dumps
from specmon.parse.sglang import EventRecord, parse_line

EXIT = {"ok": 0, "improved": 0, "drift": 1, "insufficient": 3}


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
    monitor = DriftMonitor(stats, params, label=label, running_req=args.running_req)
    from specmon.analysis.fingerprint import LogEvidence

    evidence = LogEvidence()
    from specmon.analysis.logfile import READ_ERRORS, capped_lines, open_input

    fh = open_input(args.log)
    try:
        line_no = 0
        try:
            for raw in capped_lines(fh):
                line_no += 1
                parsed = parse_line(raw)
                if parsed is None:
                    if b"NCCL INFO" in raw or b"set by environment" in raw:
                        evidence.add_line(raw.decode("utf-8", "replace"))
                    continue
                if isinstance(parsed, EventRecord):
                    evidence.add_event(parsed, raw.decode("utf-8", "replace"))
                monitor.observe(parsed, None, line_no)
        except READ_ERRORS as exc:
            raise CliError(f"{args.log}: read error after line {line_no} "
                           f"({exc or type(exc).__name__})") from None
    finally:
        if fh is not sys.stdin.buffer:
            fh.close()
    out = result(monitor, fp_recorded, evidence)
    if args.json:
        print(dumps(out))
    else:
        print(render(out))
    return EXIT[out["verdict"]]


def result(monitor: DriftMonitor, fp_recorded: Any, evidence: Any) -> dict[str, Any]:
    from specmon.analysis.fingerprint import causes_for_alert

    verdict = monitor.verdict()
    est = monitor.summary_estimate()
    excluded = monitor.excluded
    causes: list[str] = []
    alert = monitor.first_alert or monitor.alert
    if verdict in ("drift", "improved") and alert is not None:
        causes = causes_for_alert(alert, monitor, fp_recorded, evidence.fingerprint(), gpus=())
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
    }


def _r(x: float) -> float:
    return round(x, 2)


def render(out: dict[str, Any]) -> str:
    lines = [f"verdict: {out['verdict']}"]
    if out["alert"]:
        lines.append(out["alert"])
    elif out["verdict"] == "insufficient":
        lines.append(f"not enough comparable samples (clean live n={out['live']['n']})")
    if out["first_alert_line"] is not None:
        lines.append(f"first alert at line {out['first_alert_line']}")
    for c in out["causes"]:
        lines.append(f"cause: {c}")
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(out["excluded_by_reason"].items()))
    lines.append(f"excluded: {out['excluded']}" + (f" ({reasons})" if reasons else ""))
    return "\n".join(lines)
