"""`specmon advise SPEC_LOG... [--baseline-log LOG] [--json]`: what to try next, with numbers.

Reads one or more speculative server logs (runs at different settings sharpen the cost model)
and optionally a baseline server's log, and prints the measured speedup, the break-even accept
length, the best predicted settings with their band, and the launch flags to try. Runs after the
first two are also predicted from the runs before them, so the model's error is visible.

Exit status: 0 advice given, 3 the logs hold too little to fit the model (what is missing is
said), 2 usage error or a damaged log (the advice on the lines before the damage is printed).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from specmon.commands.options import add_json, add_running_req
from specmon.errors import CliError
from specmon.jsonout import dumps

if TYPE_CHECKING:
    from specmon.analysis.advisor import Advice, Check, Segment
    from specmon.session.state import ServerState

MAX_DECODE_LINES = 2_000_000  # per file: records are kept in memory


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Fit the acceptance profile and speculative cost model to the runs in the "
                     "logs and predict tok/s for steps 1-6 (and draft tokens 2-8 for tree runs). Exit "
                     "status: 0 advice given, 3 the logs hold too little to fit the model, 2 usage error "
                     "or a damaged log (advice on the lines before it is printed).")
    p.add_argument("spec_logs", nargs="+", metavar="SPEC_LOG",
                   help="speculative server log(s); several runs at different settings help")
    p.add_argument("--baseline-log", metavar="LOG", help="the baseline (non-speculative) log")
    add_running_req(p, "batch size to advise for (default: the most common one)")
    add_json(p)


def read_state(name: str, damage: list[CliError] | None = None,
               label: str | None = None) -> ServerState:
    """A log through the session model (`ServerState.apply`): the advisor reads its runs. A
    read error part-way ends the log there and goes to `damage` (without it: raised)."""
    from specmon.analysis.logfile import LogLines
    from specmon.parse.sglang import BatchRecord, parse_line
    from specmon.parse.vllm import EngineGuard
    from specmon.session.state import ServerState

    state = ServerState(label or _label(name))
    guard = EngineGuard(name)  # a log that mixes SGLang and vLLM lines is an error
    n_decode = 0
    line_no = 0
    with LogLines(name) as log:
        for raw in log:
            line_no += 1
            text = raw.decode("utf-8", "replace").rstrip("\r\n")
            rec = parse_line(text)
            guard.check(rec, line_no)
            if isinstance(rec, BatchRecord) and rec.kind == "decode":
                n_decode += 1
                if n_decode > MAX_DECODE_LINES:
                    raise CliError(f"{name}: more than {MAX_DECODE_LINES:,} decode lines; "
                                   "cut the log to the runs to compare")
            state.apply(text, rec, 0.0)  # offline: no receive time
        state.flush()  # a vLLM engine line still waiting for its spec line
    if log.error is not None:
        if damage is None:
            raise log.error
        damage.append(log.error)
    return state


def _label(name: str) -> str:
    return "stdin" if name == "-" else name.rsplit("/", 1)[-1]


def _labels(names: list[str]) -> list[str]:
    """Each log's name in the advice: its file name, or its path where two share a file name
    (runs are told apart by these names: /a/server.log and /b/server.log are two servers)."""
    short = [_label(n) for n in names]
    return [s if short.count(s) == 1 else n for s, n in zip(short, names, strict=True)]


def run(args: argparse.Namespace) -> int:
    from specmon.analysis.advisor import CannotAdvise, advise, holdout_checks

    if args.running_req is not None and args.running_req < 1:
        raise CliError(f"--running-req must be >= 1 (got {args.running_req})")
    if sum(1 for x in [*args.spec_logs, args.baseline_log] if x == "-") > 1:
        raise CliError("only one input can be '-' (stdin)")
    from specmon.session.advice import segments, with_speedup

    spec: list[Segment] = []
    damage: list[CliError] = []  # read errors: advice on the lines before them, then said
    labels = _labels([*args.spec_logs, *([args.baseline_log] if args.baseline_log else [])])
    states = [read_state(name, damage, label)
              for name, label in zip(args.spec_logs, labels, strict=False)]
    for name, st in zip(args.spec_logs, states, strict=True):
        own = segments(st)
        spec.extend(own)
        if own and not any(s.speculative for s in own):  # `advise BASE SPEC`, as compare's order
            print(f"specmon advise: {name}: no speculative decode lines (no accept length), "
                  "not used; a baseline server's log goes after --baseline-log", file=sys.stderr)
    bstate = read_state(args.baseline_log, damage, labels[-1]) if args.baseline_log else None
    base = segments(bstate) if bstate is not None else []
    if args.baseline_log and any(s.speculative for s in base):
        raise CliError(f"{args.baseline_log}: has speculative decode lines; --baseline-log is "
                       "the non-speculative server's log")
    from specmon.session.advice import launch_conditions

    try:  # (what differs besides speculation: the one rule, asked of every run pooled)
        adv = advise(spec, base, args.running_req, launch_conditions([*states, bstate]))
    except CannotAdvise as exc:
        if args.json:
            print(dumps({"error": str(exc)}))
        print(f"specmon advise: too little data: {exc}", file=sys.stderr)
        for err in damage:
            print(f"specmon advise: {err}; only the lines before it were read", file=sys.stderr)
        return 2 if damage else 3
    # the measured speedup is compare's: the last runs' medians at this batch size
    adv = with_speedup(adv, bstate, states[-1])
    if args.json:
        print(dumps(adv.to_json()))
    else:
        print(render(adv, holdout_checks(spec, base)))
    for err in damage:
        print(f"specmon advise: {err}; the advice above is on the lines before it",
              file=sys.stderr)
    return 2 if damage else 0


def _f(v: float | None, fmt: str = ".2f") -> str:
    return "N/A" if v is None else format(v, fmt)


def render(adv: Advice, checks: list[Check]) -> str:
    from specmon.ui.safe import plain

    out = [f"speculative advice at #running-req {adv.running_req}", "",
           "measured runs (the model's inputs: means of clean decode lines, without warm-up, "
           "queue, prefill or idle gaps):"]
    out.append(f"  {'run':<28} {'steps':>5} {'topk':>4} {'draft':>5} {'accept':>7} "
               f"{'cycle ms':>9} {'tok/s':>8} {'n':>5}")
    for m in adv.measured:
        out.append(f"  {plain(m.run)[:28]:<28} {_f(m.steps, 'd') if m.steps else 'N/A':>5} "
                   f"{m.topk or 'N/A':>4} {m.draft_tokens or 'N/A':>5} {_f(m.accept_len):>7} "
                   f"{_f(m.t_cycle_ms):>9} {m.tok_s:>8.2f} {m.n:>5}")
    from specmon.session.advice import action_text, best_speedup_text, speedup_text

    bl = adv.baseline
    if bl is None:
        out.append("baseline: N/A (no --baseline-log): no speedup, break-even or predicted "
                   "speedup")
    else:
        out.append(f"{plain(adv.baseline_run or 'baseline')}: {adv.baseline_ms_per_token:.2f} "
                   f"ms/token ({bl.tok_s:.2f} tok/s clean-line mean, n={bl.n}; the model's t_b)")
    if adv.speedup is not None:
        out.append(f"measured speedup (as compare): {speedup_text(adv.speedup)}; break-even "
                   f"accept len {_f(adv.break_even_accept_len)} (now {_f(adv.current.accept_len)})")
    elif bl is not None:
        out.append(f"measured speedup: N/A (the last runs have no #running-req "
                   f"{adv.running_req} with enough samples on both)")
    if adv.conditions_differ:
        out.append("conditions differ: " + plain("; ".join(adv.conditions_differ)))
    out += ["", "assumptions:"] + [f"  - {plain(a)}" for a in adv.assumptions]
    out += ["", f"acceptance profile (from {adv.profile.source}, n={adv.profile.n:.0f}): "
            "P(draft position k accepted) = "
            + ", ".join(f"{p:.2f}" for p in adv.profile.survival)
            + "; per position given the previous: "
            + ", ".join(f"{p:.2f}" for p in adv.profile.per_position())
            + f", then {adv.profile.tail:.2f}"]
    out.append("cost model: " + adv.cost_text())
    out += ["", "candidates (basis: measured, model = identified by the runs, prior = N/A point, "
            "band over the stated priors; tok/s and speedup as the model reads them: clean-line "
            "means against the baseline's t_b):"]
    out.append(f"  {'steps':>5} {'topk':>4} {'draft':>5} {'tok/s':>8} {'95 % band':>17} "
               f"{'speedup':>8}  basis")
    for c in sorted(adv.candidates, key=lambda c: -c.band[0])[:12]:
        mark = " <- best" if c is adv.best else ""
        out.append(f"  {c.steps:>5} {c.topk:>4} {c.draft_tokens:>5} "
                   f"{_f(c.predicted_tok_s):>8} {c.band[0]:>8.2f}-{c.band[1]:<8.2f} "
                   f"{_f(c.predicted_speedup, '.3f'):>8}  {c.basis}{mark}")
    b = adv.best
    if b is None:
        out += ["", plain(adv.no_recommendation or "no setting recommended")]
    else:
        what = ("measured" if b.basis == "measured" else "predicted")
        out += ["", action_text(adv),
                f"     {what} {_f(b.predicted_tok_s)} tok/s (95 % {b.band[0]:.2f}-{b.band[1]:.2f})"
                + best_speedup_text(adv)]
    if checks:
        out += ["", "predicted (from the runs before) vs measured:"]
        for ch in checks:
            err = "" if ch.error_pct is None else f"{ch.error_pct:+.1f} %, "
            out.append(f"  {plain(ch.run)}: predicted {_f(ch.predicted_tok_s)} "
                       f"({ch.band[0]:.2f}-{ch.band[1]:.2f}), measured {ch.measured_tok_s:.2f} "
                       f"tok/s ({err}{'inside' if ch.within else 'OUTSIDE'} the band)")
    return "\n".join(out)
