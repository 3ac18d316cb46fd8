"""The advisor screen (key a), predicted vs measured after a restart, and the live
"speculation no longer pays" alert, on sessions fed with simulated SGLang logs."""

from __future__ import annotations

import re
import sys

from kit.paths import ROOT
from kit.ui import ARGS_BASE, ARGS_SPEC, T0, apply, decode_line

from specmon.session.advice import action_text
from specmon.session.pays import PaysWatcher
from specmon.session.state import HostState
from specmon.session.window import speedup
from specmon.sim import formats
from specmon.sim.engine import simulate
from specmon.ui.advisor_screen import AdvisorMemory, AdvisorScreen, advisor_report
from specmon.ui.app import SpecmonApp

sys.path.insert(0, str(ROOT / "bench"))
import advisor_eval as ev  # noqa: E402

CASE = ev.Case(5, 0.8, 0.15, 0.03)


def sim_lines(cfg, seconds: float, tp: int = 8) -> list[str]:
    s = cfg.spec
    args = {"model_path": "m", "tp_size": tp, "speculative_algorithm": s.algorithm if s else None,
            "speculative_num_steps": s.num_steps if s else None,
            "speculative_eagle_topk": s.eagle_topk if s else None,
            "speculative_num_draft_tokens": s.num_draft_tokens if s else None}
    out = [formats.line("0.5.23", 1.78e9, formats.server_args_message("0.5.23", args))]
    return out + [x.text for x in simulate(cfg, duration_s=seconds, env=ev.TUNED,
                                           start=1.78e9 + 1)]


def feed(session: HostState, server: str, lines: list[str], t0: float) -> float:
    t = t0
    for x in lines:
        apply(session, server, x, t)
        t += 0.5
    return t


def test_report_advises_then_shows_predicted_vs_measured_after_restart():
    s = HostState(host="sim")
    s.server("base").role = "baseline"
    s.server("spec").role = "speculative"
    feed(s, "base", sim_lines(CASE.engine(None, 4), 150), T0)
    t = feed(s, "spec", sim_lines(CASE.engine(CASE.spec(2), 1), 150), T0)
    t = feed(s, "spec", sim_lines(CASE.engine(CASE.spec(4), 2), 150), t)
    mem = AdvisorMemory()
    first = advisor_report(s, mem)
    assert "measured speedup" in first and "break-even accept len" in first
    assert action_text(mem.made["spec"][-1][1]) in first  # keep or try, as `advise` says it
    assert re.search(r"\n(keep|try): --speculative-num-steps", first)
    assert "this run vs the earlier prediction" not in first
    best = mem.made["spec"][-1][1].best
    # the user restarts with the suggested flags
    feed(s, "spec", sim_lines(CASE.engine(CASE.spec(best.steps), 3), 150), t)
    second = advisor_report(s, mem)
    assert "this run vs the earlier prediction: predicted" in second
    assert "inside the band" in second
    assert "this run vs the earlier prediction" in advisor_report(s, mem)  # stays for the run


def _pair(base_tp: int = 8) -> HostState:
    s = HostState(host="sim")
    s.server("base").role = "baseline"
    s.server("spec").role = "speculative"
    feed(s, "base", sim_lines(CASE.engine(None, 4), 150, base_tp), T0)
    feed(s, "spec", sim_lines(CASE.engine(CASE.spec(3), 1), 150), T0)
    return s


def test_report_speedup_is_the_headlines_over_the_same_window():
    """One truth: the advisor's measured speedup is the headline's (session.window.speedup,
    the app's window), not the advisor's own clean-line means."""
    s = _pair()
    base, spec = s.by_role("baseline"), s.by_role("speculative")
    shown = set()
    for window_s in (20.0, 120.0):
        sp = speedup(base, spec, T0 + 200, window_s)
        text = advisor_report(s, AdvisorMemory(), window_s)
        line = next(x for x in text.splitlines() if x.startswith("measured speedup "))
        assert line.startswith(f"measured speedup {sp.ratio:.3f}x (95 % {sp.low:.3f}-"
                               f"{sp.high:.3f}; #running-req {sp.running_req}, n {sp.base.n} "
                               f"base / {sp.spec.n} spec; medians, last {window_s:.0f} s of each "
                               "run (baseline run 1, speculative run 1))"), line
        assert f"break-even accept len {sp.break_even_accept_len:.2f}" in line
        shown.add(line.split()[2])
    assert len(shown) == 2  # the two windows give two numbers: the window is the app's


def test_report_withholds_advice_while_conditions_differ_as_the_cli_does():
    text = advisor_report(_pair(base_tp=4), AdvisorMemory())
    assert "conditions differ: tp_size: 4 vs 8" in text
    assert "no setting recommended: the runs it compares differ in more than speculation" in text
    assert "try: " not in text and "keep: " not in text
    assert re.search(r"\n(keep|try): ", advisor_report(_pair(), AdvisorMemory()))


def test_report_without_speculative_server_is_na():
    s = HostState(host="x")
    s.server("base").role = "baseline"
    assert "N/A" in advisor_report(s, AdvisorMemory())


async def test_key_a_opens_the_advisor_screen():
    s = HostState(host="sim")
    s.server("base").role = "baseline"
    s.server("spec").role = "speculative"
    feed(s, "base", sim_lines(CASE.engine(None, 4), 60), T0)
    feed(s, "spec", sim_lines(CASE.engine(CASE.spec(3), 1), 60), T0)
    app = SpecmonApp(s, clock=lambda: T0 + 31, show_clock=False)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("a")
        await pilot.pause()
        assert isinstance(app.screen, AdvisorScreen)
        assert re.search(r"\n(keep|try): --speculative-num-steps", app.screen.text)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, AdvisorScreen)


def _session(spec_tok: float, accept: float, base_tok: float, n: int = 30, t0: float = T0,
             s: HostState | None = None) -> HostState:
    s = s or HostState(host="x")
    if "baseline" not in s.servers:
        s.server("baseline").role = "baseline"
        s.server("speculative").role = "speculative"
        apply(s, "baseline", ARGS_BASE, t0)
        apply(s, "speculative", ARGS_SPEC, t0)
    for i in range(n):
        apply(s, "baseline", decode_line(i, base_tok + (i % 3) * 0.2), t0 + 1 + i)
        apply(s, "speculative", decode_line(i, spec_tok + (i % 3) * 0.2, accept), t0 + 1 + i)
    return s


def test_no_longer_pays_alert_raised_once_names_the_side_and_clears():
    w = PaysWatcher()
    s = _session(110.0, 2.6, 88.8)
    assert w.tick(s, T0 + 31, 60.0) == []  # pays: becomes the reference
    s = _session(80.0, 2.6, 88.8, t0=T0 + 100, s=s)  # same acceptance, slower cycle
    alerts = w.tick(s, T0 + 131, 25.0)
    assert len(alerts) == 1 and alerts[0]["kind"] == "speculation_pays"
    assert alerts[0]["cause"] == "cycle slower" and not alerts[0]["cleared"]
    assert w.tick(s, T0 + 131, 25.0) == []  # raised once
    s = _session(112.0, 2.6, 88.8, t0=T0 + 200, s=s)
    cleared = w.tick(s, T0 + 231, 25.0)
    assert len(cleared) == 1 and cleared[0]["cleared"]


def test_the_screen_says_keep_as_advise_does_and_prints_its_numbers():
    """With one setting measured, the best is the running one: the screen said "try: <the
    flags it already runs>" where `advise` says "keep:", and printed ".1f" for the best
    setting's tok/s (a bare format spec given to the N/A formatter)."""
    from specmon.session.advice import host_advice

    s = HostState(host="sim")
    s.server("base").role = "baseline"
    s.server("spec").role = "speculative"
    feed(s, "base", sim_lines(CASE.engine(None, 4), 150), T0)
    feed(s, "spec", sim_lines(CASE.engine(CASE.spec(2), 1), 150), T0)
    text = advisor_report(s, AdvisorMemory())
    adv = host_advice(s, 60.0)
    assert adv.keeps_current and adv.best is not None
    assert f"keep: {adv.flags} (no other setting is shown to be at least as good)" in text
    assert "try: " not in text and ".1f" not in text
    assert f"{adv.best.predicted_tok_s:.1f} tok/s (95 %" in text
