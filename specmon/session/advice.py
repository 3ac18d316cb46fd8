"""The advisor's view of a server: its session runs, split at adaptive step changes.

The advisor (specmon.analysis.advisor, pure) has no run model of its own: it reads the runs the
session built (`ServerState.runs`), each split into segments of constant speculative settings
where an `Adaptive spec params updated` line changed the step count. Every point is the run's
server-level decode interval (a DP server's groups summed), on the times SGLang printed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specmon.analysis.advisor import Line, Segment
from specmon.session.runs import stamp
from specmon.session.state import Run, ServerState


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
