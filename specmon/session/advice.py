"""The advisor's view of a server: its session runs, split at adaptive step changes.

The advisor (specmon.analysis.advisor, pure) has no run model of its own: it reads the runs the
session built (`ServerState.runs`), each split into segments of constant speculative settings
where an `Adaptive spec params updated` line changed the step count. Every point is the run's
server-level decode interval (a DP server's groups summed), on the times SGLang printed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from specmon.analysis.advisor import Advice, CannotAdvise, Line, MeasuredSpeedup, Segment, advise
from specmon.session.drift_watch import run_fingerprint
from specmon.session.runs import run_conditions, run_unknowns, stamp
from specmon.session.speedup import fingerprint_differences, unknown_text
from specmon.session.state import HostState, Run, ServerState
from specmon.session.window import run_speedup


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def run_segments(run: Run, label: str) -> list[Segment]:
    """One run's segments: the launch settings, then one per adaptive step change (topk 1:
    draft tokens follow as steps + 1, as SGLang sets them)."""
    a = run.args
    name = f"{label} run {run.index}"
    started = stamp(run.start_t)
    first = run.decode_total - len(run.decode)  # index of the oldest point still kept
    seg = Segment(name, _int(a.get("speculative_num_steps")), _int(a.get("speculative_eagle_topk")),
                  _int(a.get("speculative_num_draft_tokens")),
                  a.get("speculative_algorithm") or None,
                  started_by="server_args" if run.has_server_args else run.start_reason,
                  start_t=run.start_t, launch=name, started=started)
    out = [seg]
    changes = list(run.spec_changes)
    ci = 0
    for i, pt in enumerate(run.decode, start=first):
        if pt.epoch != run.epoch:  # log time went back since: as the run's figures, the
            continue  # advice never reaches behind the last step back (two clocks)
        while ci < len(changes) and changes[ci].at <= i:
            ch = changes[ci]
            ci += 1
            dt = ch.steps + 1 if ch.steps is not None and seg.topk == 1 else seg.draft_tokens
            seg = Segment(f"{name}.{len(out) + 1}", ch.steps, seg.topk, dt, seg.algorithm,
                          started_by="adaptive", start_t=ch.t, launch=name, started=started)
            out.append(seg)
        seg.lines.append(Line(pt.rec, pt.t, pt.after_prefill))
    return [s for s in out if s.lines]


def segments(state: ServerState, label: str | None = None,
             histogram: Sequence[int] | None = None) -> list[Segment]:
    """Every kept run's segments, oldest first; a benchmark's histogram, if given, belongs to
    the newest segment."""
    out: list[Segment] = []
    for run in state.runs:
        out += run_segments(run, label or state.name)
    if out and histogram:
        out[-1].histogram = list(histogram)
    return out


def launch_conditions(states: Sequence[ServerState | None],
                      live: Callable[[Run, Run, int], list[str] | None] | None = None,
                      ) -> Callable[[str, str, int], list[str]]:
    """The advisor's `conditions`: two runs, by the launch names `segments` gives them, compared
    by the one rule (`run_conditions`, from their launch lines); `live` may answer first for a
    pair it knows more of (the live session's current runs: workers' environment too)."""
    runs = {f"{st.name} run {run.index}": run for st in states if st is not None
            for run in st.runs}

    def conditions(a: str, b: str, running_req: int) -> list[str]:
        ra, rb = runs.get(a), runs.get(b)
        if ra is None or rb is None:
            return []
        found = live(ra, rb, running_req) if live is not None else None
        return found if found is not None else run_conditions(ra, rb, running_req)
    return conditions


def with_speedup(adv: Advice, base: ServerState | None, spec: ServerState,
                 window_s: float = math.inf) -> Advice:
    """The advice with its measured speedup: the current runs at the advice's batch size, by
    the rule `compare` (window_s inf: whole runs) and the headline (the live window) use, so
    the three say the same number. None (N/A) without a baseline run with enough samples."""
    if base is None or not base.runs or not spec.runs:
        return replace(adv, speedup=None)
    br, sr = base.runs[-1], spec.runs[-1]
    sp = run_speedup(br, sr, window_s, running_req=adv.running_req)
    if sp is None:
        return replace(adv, speedup=None)
    span = "whole runs" if math.isinf(window_s) else f"last {window_s:.0f} s of each run"
    return replace(adv, speedup=MeasuredSpeedup(
        sp.ratio, sp.ci95, sp.ci_reason, sp.running_req, sp.base.n, sp.spec.n,
        sp.break_even_accept_len,
        f"medians, {span} (baseline run {br.index}, speculative run {sr.index})",
        tuple(run_unknowns(br, sr))))


def speedup_text(sp: MeasuredSpeedup) -> str:
    """`2.115x (95 % 2.052-2.180; #running-req 1, n 40 base / 40 spec; medians, whole runs
    (baseline run 1, speculative run 2))`: the value, its interval and what it covers."""
    ci = (f"95 % {sp.ci95[0]:.3f}-{sp.ci95[1]:.3f}" if sp.ci95 is not None
          else sp.ci_reason or "95% interval N/A")
    return (f"{sp.ratio:.3f}x ({ci}; #running-req {sp.running_req}, n {sp.n_base} base / "
            f"{sp.n_spec} spec; {sp.basis}"
            + (f"; {unknown_text(sp.conditions_unknown)}" if sp.conditions_unknown else "") + ")")


def action_text(adv: Advice) -> str:
    """What to do with the best setting, as `advise` and the `a` screen both say it. While the
    measured speedup's interval lies below 1, speculation loses to the baseline: "keep" would
    keep a losing setting (the candidates' clean-line means can rank it above 1)."""
    sp = adv.speedup
    if sp is not None and sp.ci95 is not None and sp.ci95[1] < 1.0:
        loses = (f"speculation loses at #running-req {adv.running_req} (measured speedup "
                 f"{sp.ratio:.3f}x, its 95 % interval below 1)")
        if adv.keeps_current:
            return (f"{loses}: no setting shown beats the baseline; run without speculation "
                    "at this batch size, or measure other settings")
        return f"try: {adv.flags} ({loses}: measure it against the baseline before keeping it)"
    if adv.keeps_current:
        return f"keep: {adv.flags} (no other setting is shown to be at least as good)"
    return f"try: {adv.flags}"


def best_speedup_text(adv: Advice) -> str:
    """The best setting's speedup: for the running setting the measured one (said above, the
    same as compare's), else the model's, named as such."""
    b = adv.best
    if b is None or not b.predicted_speedup:
        return ""
    if adv.keeps_current:
        return ", speedup: the measured one above" if adv.speedup is not None else ""
    what = "clean-line means" if b.basis == "measured" else "predicted"
    return f", speedup {b.predicted_speedup:.3f}x ({what})"


def host_advice(session: HostState, window_s: float) -> Advice:
    """The advice for a live host: its speculative server's runs against its baseline's (when
    the baseline cannot be used, the advice without it), the conditions that differ besides
    speculation (no setting is recommended while they do, as `specmon advise` says) and the
    speedup the headline shows. Raises CannotAdvise saying what is missing."""
    spec = session.by_role("speculative")
    if spec is None:
        raise CannotAdvise("no speculative server in this session")
    base = session.by_role("baseline")
    hist = getattr(spec.last_bench, "spec_histogram", None)
    segs = segments(spec, spec.name, hist)  # the session's runs, no re-parse
    bsegs = segments(base, base.name) if base is not None else []

    def current(a: Run, b: Run, running_req: int) -> list[str] | None:
        """The two servers' current runs: their live fingerprints (workers' environment too)."""
        if base is None or not base.runs or not spec.runs or (a, b) != (base.runs[-1],
                                                                       spec.runs[-1]):
            return None
        return fingerprint_differences(run_fingerprint(session, base),
                                       run_fingerprint(session, spec), running_req)
    try:
        adv = advise(segs, bsegs, conditions=launch_conditions([spec, base], current))
    except CannotAdvise as exc:
        if not bsegs:
            raise
        try:  # without a usable baseline the advice still stands (no speedup)
            return advise(segs)
        except CannotAdvise:
            raise exc from None
    return with_speedup(adv, base, spec, window_s)
