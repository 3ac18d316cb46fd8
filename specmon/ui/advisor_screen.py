"""The advisor screen (key `a`) in the live app.

The numbers come from specmon.analysis.advisor (pure); this module only picks the servers and
remembers what was predicted for a run so the next run at those settings shows predicted vs
measured. The "speculation no longer pays" alert is raised by the session model
(specmon.session.pays, from `FleetSession.tick`). Text from hosts goes through `plain`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from specmon.analysis.advisor import Advice, CannotAdvise, check_prediction
from specmon.numfmt import num
from specmon.session.advice import action_text, best_speedup_text, host_advice, speedup_text
from specmon.session.state import HostState
from specmon.session.window import DEFAULT_WINDOW_S
from specmon.ui.keys import bindings
from specmon.ui.safe import plain, plain_lines


@dataclass
class AdvisorMemory:
    """What the advisor predicted, per server, while a given run was current."""

    made: dict[str, list[tuple[str, Advice]]] = field(default_factory=dict)

    def before(self, server: str, run: str) -> Advice | None:
        """The latest advice made while another run of this server was current."""
        for r, adv in reversed(self.made.get(server, [])):
            if r != run:
                return adv
        return None

    def remember(self, server: str, run: str, adv: Advice) -> None:
        runs = self.made.setdefault(server, [])
        if not any(r == run for r, _ in runs):  # the first advice of a run is its prediction
            runs.append((run, adv))
            del runs[:-20]


_n = num  # specmon.numfmt: the one N/A formatter


def advisor_report(session: HostState, memory: AdvisorMemory, window_s: float = DEFAULT_WINDOW_S
                   ) -> str:
    """The screen's text: measured speedup (the headline's, over the same window), break-even,
    best settings and flags, and predicted vs measured for a run started with settings
    predicted earlier. The advice is the session's (`session.advice.host_advice`)."""
    try:
        adv = host_advice(session, window_s)
    except CannotAdvise as exc:
        if session.by_role("speculative") is None:
            return "advisor: no speculative server in this session (N/A)"
        return plain(f"advisor: too little data: {exc}")
    spec = session.by_role("speculative")
    assert spec is not None  # host_advice raised otherwise
    return plain_lines("\n".join(_report_lines(adv, spec.name, memory)))


def _report_lines(adv: Advice, server: str, memory: AdvisorMemory) -> list[str]:
    lines = [f"advisor: {server} at #running-req {adv.running_req}"]
    cur = adv.current
    lines.append(f"now: steps {cur.steps} topk {cur.topk} draft tokens {cur.draft_tokens}, "
                 f"accept len {_n(cur.accept_len)}, cycle {_n(cur.t_cycle_ms)} ms, "
                 f"{cur.tok_s:.1f} tok/s (mean of n={cur.n} clean lines: the model's input)")
    sp = adv.speedup
    if sp is None:
        lines.append("measured speedup: N/A (no baseline run with enough samples at this batch "
                     "size)")
    else:
        lines.append(f"measured speedup {speedup_text(sp)}; break-even accept len "
                     f"{_n(adv.break_even_accept_len)}")
    if adv.conditions_differ:
        lines.append("conditions differ: " + "; ".join(adv.conditions_differ))
    b = adv.best
    if adv.baseline_run:
        lines.append(adv.baseline_run)
    if b is None:
        lines.append(adv.no_recommendation or "no setting recommended")
    else:
        lines.append(f"best ({b.basis}): steps {b.steps} topk {b.topk} draft tokens "
                     f"{b.draft_tokens}: {_n(b.predicted_tok_s, '{:.1f}')} tok/s (95 % "
                     f"{b.band[0]:.1f}-{b.band[1]:.1f})"
                     + best_speedup_text(adv))
        lines.append(action_text(adv))
    prev = memory.before(server, cur.run)
    if prev is not None:
        chk = check_prediction(prev, cur)
        if chk is not None:
            err = "" if chk.error_pct is None else f"{chk.error_pct:+.1f} %, "
            lines.append(f"this run vs the earlier prediction: predicted "
                         f"{_n(chk.predicted_tok_s, '{:.1f}')} ({chk.band[0]:.1f}-{chk.band[1]:.1f}),"
                         f" measured {chk.measured_tok_s:.1f} tok/s ({err}"
                         f"{'inside' if chk.within else 'OUTSIDE'} the band)")
    memory.remember(server, cur.run, adv)
    lines.append("P(draft position k accepted): "
                 + ", ".join(f"{p:.2f}" for p in adv.profile.survival)
                 + f" (from {adv.profile.source})")
    lines.append("cost model: " + adv.cost_text())
    lines.append("assumptions:")
    lines += [f"  - {a}" for a in adv.assumptions]
    lines.append("candidates (tok/s, 95 % band, basis):")
    for c in sorted(adv.candidates, key=lambda c: -c.band[0])[:8]:
        lines.append(f"  steps {c.steps} topk {c.topk} draft {c.draft_tokens}: "
                     f"{_n(c.predicted_tok_s, '{:.1f}')} ({c.band[0]:.1f}-{c.band[1]:.1f}) {c.basis}")
    return lines


class AdvisorScreen(ModalScreen[None]):
    BINDINGS = bindings("advisor")

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(self.text, id="advisor-text", markup=False)


class AdvisorApp(Protocol):
    """What the advisor key needs of the app."""

    @property
    def session(self) -> HostState: ...

    @property
    def window_s(self) -> float: ...

    def push_screen(self, screen: AdvisorScreen) -> object: ...


class AdvisorKeys:
    """Key `a` (the advisor screen); it remembers the advisor's last advice per server."""

    def __init__(self, app: AdvisorApp) -> None:
        self.app = app
        self.memory = AdvisorMemory()

    def show(self) -> None:
        self.app.push_screen(AdvisorScreen(advisor_report(self.app.session, self.memory,
                                                          self.app.window_s)))
