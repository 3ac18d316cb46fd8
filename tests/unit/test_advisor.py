"""The tuning advisor: runs/segments, acceptance profile, cost model, candidates, the
"speculation no longer pays" rule; and on simulated runs whose optimum is known."""

from __future__ import annotations

import json
import sys

import pytest
from kit.paths import ROOT

from specmon.analysis.advisor import (
    CannotAdvise,
    Measured,
    PaysState,
    advise,
    check_prediction,
    fit_cost,
    geometric_alpha,
    holdout_checks,
    profile_from_histogram,
    speculation_no_longer_pays,
)
from specmon.session.advice import segments
from specmon.session.runs import read_runs

sys.path.insert(0, str(ROOT / "bench"))
import advisor_eval as ev  # noqa: E402

ARGS = ("[2026-10-30 10:00:00] server_args={'model_path': 'm', 'speculative_algorithm': 'EAGLE3', "
        "'speculative_num_steps': 3, 'speculative_eagle_topk': 1, "
        "'speculative_num_draft_tokens': 4}")
DEC = ("[2026-10-30 10:00:{s:02d} TP0] Decode batch, #running-req: 1, #token: 900, token usage: "
       "0.01, accept len: {al:.2f}, accept rate: 0.50, cuda graph: True, gen throughput "
       "(token/s): {gt:.2f}, #queue-req: 0")
ADAPT = "[2026-10-30 10:00:30 TP0] Adaptive spec params updated: steps 3 -> 1 (ema_accept_len=0.42)"


def segs_of(lines, label="spec.log"):
    """A log through the session model, as the advisor reads it (its runs, no second parse)."""
    return segments(read_runs(lines, label))


def test_runs_split_at_server_args_and_segments_at_adaptive_changes():
    from datetime import datetime

    lines = [ARGS] + [DEC.format(s=i, al=2.5, gt=90) for i in range(10)] + [ADAPT] + [
        DEC.format(s=31 + i, al=1.6, gt=70) for i in range(5)] + [ARGS] + [
        DEC.format(s=50 + i, al=2.4, gt=88) for i in range(4)]
    segs = segs_of(lines)
    assert [(s.run, s.steps, s.draft_tokens, len(s.lines), s.started_by) for s in segs] == [
        ("spec.log run 1", 3, 4, 10, "server_args"), ("spec.log run 1.2", 1, 2, 5, "adaptive"),
        ("spec.log run 2", 3, 4, 4, "server_args")]
    # where a chart marks the change: the adaptive line's own log time
    assert segs[1].start_t == datetime.fromisoformat("2026-10-30 10:00:30").timestamp()
    assert all(r.accept_len == 1.6 for r in segs[1].records)
    assert segs[2].named() == "spec.log run 2 (started 2026-10-30 10:00:00)"
    prefill = ("[2026-10-30 10:00:40 TP0] Prefill batch, #new-seq: 1, #new-token: 512, "
               "#cached-token: 0, token usage: 0.01, #running-req: 0, #queue-req: 0, "
               "#pending-token: 0, cuda graph: False, input throughput (token/s): 8000.00")
    from specmon.analysis.advisor import clean_lines
    seg = segs_of([ARGS] + [DEC.format(s=i, al=2.5, gt=90) for i in range(8)] + [prefill]
                  + [DEC.format(s=9, al=2.5, gt=60), DEC.format(s=10, al=2.5, gt=90)], "p")[0]
    assert [ln.after_prefill for ln in seg.lines].index(True) == 8  # the session marks it
    kept = clean_lines(seg.lines)
    assert len(kept) == 4 and all(r.gen_throughput == 90 for r in kept)  # warm-up + prefill out


def test_geometric_alpha_inverts_and_histogram_profile_gives_positions():
    for a in (0.3, 0.7, 0.9):
        tau = sum(a**k for k in range(4))
        assert geometric_alpha(tau, 3) == pytest.approx(a, abs=1e-6)
    p = profile_from_histogram([10, 20, 30, 40])  # rounds with 0, 1, 2, 3 correct drafts
    assert p.survival == pytest.approx((0.9, 0.7, 0.4))
    assert p.per_position() == pytest.approx([0.9, 0.7 / 0.9, 0.4 / 0.7])
    assert p.tau(3) == pytest.approx(1 + 0.9 + 0.7 + 0.4)
    assert p.tau(4) == pytest.approx(3.0 + 0.4 * (0.4 / 0.7))  # last conditional rate beyond


def _m(run, steps, cycle, se=0.01):
    return Measured(run, steps, 1, steps + 1, 1, 2.0, cycle, 1000 * 2 / cycle, 100, 50.0, 0.01,
                    0.02, se)


def test_cost_model_slope_from_two_step_counts_or_stated_assumption():
    two = fit_cost([_m("a", 2, 25.0), _m("b", 4, 35.0)])
    assert two.coef[0] == pytest.approx(15.0) and two.coef[1] == pytest.approx(5.0)
    t, se = two.predict(6, 7)
    assert t == pytest.approx(45.0) and se > two.predict(3, 4)[1]  # extrapolation is wider
    assert not any("negligible" in a for a in two.assumptions)
    one = fit_cost([_m("a", 3, 30.0)])
    assert one.coef[1] == 0.0 and one.predict(6, 7)[0] == pytest.approx(30.0)
    assert any("draft cost per step not identified" in a for a in one.assumptions)


def test_one_run_advice_states_the_assumption_and_json_has_exact_shape():
    seg = ev.sim_log(ev.Case(1, 0.8, 0.2, 0.04).engine(ev.Case(1, 0.8, 0.2, 0.04).spec(3), 11),
                     120, "s3")
    adv = advise(seg)
    d = adv.to_json()
    assert list(d) == ["running_req", "measured", "baseline_run", "baseline_ms_per_token", "speedup",
                       "break_even_accept_len", "assumptions", "candidates", "best", "flags",
                       "conditions_differ", "no_recommendation"]
    assert list(d["measured"][0]) == ["run", "steps", "topk", "draft_tokens", "running_req",
                                      "accept_len", "t_cycle_ms", "tok_s", "n"]
    assert list(d["candidates"][0]) == ["steps", "topk", "draft_tokens", "predicted_tok_s",
                                        "band", "predicted_speedup", "basis"]
    assert d["baseline_ms_per_token"] is None and d["best"]["predicted_speedup"] is None
    assert d["baseline_run"] is None and d["conditions_differ"] == []
    assert d["speedup"] is None and d["break_even_accept_len"] is None  # no baseline: N/A
    assert any("draft cost prior: one more step costs 0 to" in a for a in d["assumptions"])
    assert [(c["steps"], c["topk"], c["draft_tokens"]) for c in d["candidates"]] == [
        (s, 1, s + 1) for s in range(1, 7)]  # chain-only model: topk 1
    # one step count: the others are not identified (no point, a band over the priors), and
    # none is shown to beat the measured one, so the measured setting is kept
    assert [c["basis"] for c in d["candidates"]] == ["prior"] * 2 + ["measured"] + ["prior"] * 3
    assert all(c["predicted_tok_s"] is None for c in d["candidates"] if c["basis"] == "prior")
    assert d["best"]["steps"] == 3 and d["best"]["basis"] == "measured"
    assert d["flags"] == ("--speculative-num-steps 3 --speculative-eagle-topk 1 "
                          "--speculative-num-draft-tokens 4")
    json.dumps(d, allow_nan=False)


def test_cannot_advise_says_what_is_missing():
    with pytest.raises(CannotAdvise, match="no speculative decode lines"):
        advise(segs_of([DEC.replace("accept len: {al:.2f}, accept rate: 0.50, ",
                                    "").format(s=1, gt=80)], "b"))
    with pytest.raises(CannotAdvise, match="server_args"):
        advise(segs_of([DEC.format(s=i, al=2.0, gt=80) for i in range(20)], "x"))


@pytest.fixture(scope="module")
def outcomes():
    return [ev.run_case(c, 300) for c in ev.cases(10)]


def test_advisor_pick_is_never_worse_than_measured_and_bands_hold_the_optimum(outcomes):
    good = [o.ok for o in outcomes]
    assert sum(good) >= 9, [(o.case, o.best, o.true_best) for o in outcomes]
    assert all(o.no_worse for o in outcomes), [(o.case, o.best, o.true) for o in outcomes]
    assert len({o.true_best for o in outcomes}) >= 3  # the cases really move the optimum
    for o in outcomes:
        assert o.advice.baseline is not None and o.advice.best.predicted_speedup is not None


def test_prediction_vs_measurement_for_three_settings_within_band(outcomes):
    o = outcomes[2]  # fitted on steps 2 and 4: steps 1 and 3 interpolate, 6 extrapolates
    for steps in (1, 3, 6):
        tok, ok = ev.measured_check(o.case, o.advice, steps, 600)
        c = next(c for c in o.advice.candidates if c.steps == steps)
        assert ok, (steps, tok, c.band)
        check = check_prediction(o.advice, _measured(o, steps))
        assert check is not None and check.within == (c.band[0] <= check.measured_tok_s
                                                       <= c.band[1])
        assert (check.error_pct is None) == (c.predicted_tok_s is None)


def _measured(o, steps):
    from specmon.analysis.advisor import measure
    seg = ev.sim_log(o.case.engine(o.case.spec(steps), o.case.seed * 10 + 5 + steps), 600, "x")
    return measure(seg[0], o.advice.running_req)


def test_holdout_checks_show_the_models_error_after_a_restart():
    c = ev.Case(7, 0.8, 0.15, 0.03)
    runs = (ev.sim_log(c.engine(c.spec(2), 1), 200, "a") + ev.sim_log(c.engine(c.spec(4), 2),
            200, "b") + ev.sim_log(c.engine(c.spec(3), 3), 200, "c"))
    checks = holdout_checks(runs)
    assert len(checks) == 1 and checks[0].run == "c run 1"
    assert checks[0].within  # steps 3 from steps 2 and 4: inside its band over the priors
    b = checks[0].band
    assert b[0] < checks[0].measured_tok_s < b[1] and b[1] / b[0] < 1.6


def _state(speedup, lo, hi, acc, tb, cyc):
    return PaysState(speedup, lo, hi, acc, tb, cyc)


def test_no_longer_pays_rule():
    ref = _state(1.3, 1.25, 1.35, 2.6, 11.3, 22.6)
    assert speculation_no_longer_pays(_state(1.2, 1.1, 1.3, 2.5, 11.3, 23.0), ref) is None
    assert speculation_no_longer_pays(_state(0.98, 0.9, 1.05, 2.4, 11.3, 27.0), ref) is None
    a = speculation_no_longer_pays(_state(0.9, 0.85, 0.95, 2.6, 11.3, 32.6), ref)
    assert a.reason == "slower" and a.moved == "cycle slower"
    b = speculation_no_longer_pays(_state(0.9, 0.85, 0.95, 2.6, 8.0, 23.0), ref)
    assert b.moved == "baseline faster" and "baseline faster" in b.text
    c = speculation_no_longer_pays(_state(0.95, 0.9, 0.99, 1.8, 11.3, 22.6), ref)
    assert c.moved == "acceptance fell"
    d = speculation_no_longer_pays(_state(1.02, 0.95, 1.1, 1.04, 11.3, 11.6), ref)
    assert d.reason == "no acceptance" and "within 5 %" in d.text
    assert speculation_no_longer_pays(_state(1.02, 0.95, 1.1, 1.06, 11.3, 11.6)) is None
    assert speculation_no_longer_pays(_state(0.9, 0.8, 0.99, 2.0, 11.3, 25.0)).moved is None
    assert "0.85-0.95" in a.text  # the interval that is wholly below 1.0


def test_benchmark_histogram_drives_the_profile():
    c = ev.Case(3, 0.8, 0.15, 0.03)
    seg = ev.sim_log(c.engine(c.spec(3), 9), 120, "s3")
    seg[0].histogram = [100, 150, 200, 550]  # rounds with 0..3 correct drafts
    adv = advise(seg)
    assert adv.profile.source == "histogram"
    assert adv.profile.per_position() == pytest.approx([0.9, 750 / 900, 550 / 750])
    assert not any("windowed accept len only" in a for a in adv.assumptions)
    s2 = next(x for x in adv.candidates if x.steps == 2)  # inside the histogram: identified
    assert s2.tau == pytest.approx(1 + 0.9 + 0.75) and s2.basis == "prior"  # cost: one step count
    s3 = next(x for x in adv.candidates if x.steps == 3)
    assert s3.basis == "measured" and s3.predicted_tok_s == adv.measured[0].tok_s


@pytest.fixture(scope="module")
def costly_decaying():
    """Issue 21's case: a drafter with a real cost (30 % of the target's weight time per draft
    forward, +5 % verify per draft token) whose acceptance decays with depth (0.8, then x0.85
    per position), measured at one step count (3), with a baseline."""
    c = ev.Case(5, 0.8, 0.3, 0.05, 0.85)
    spec = ev.sim_log(c.engine(c.spec(3), 51), 300, "spec.log")
    base = ev.sim_log(c.engine(None, 53), 300, "base.log")
    return c, spec, base, {s: ev.true_tok_s(c, s, 4000) for s in range(1, 7)}


def test_one_measured_step_count_never_recommends_a_truly_worse_setting(costly_decaying):
    c, spec, base, true = costly_decaying
    adv = advise(spec, base)
    # the trap: the point model (zero draft cost, constant acceptance) ranks steps 6 first,
    # and steps 6 is truly far worse than the measured steps 3
    point = {s: adv.profile.tau(s) / adv.cost.predict(s, s + 1)[0] for s in range(1, 7)}
    assert max(point, key=point.__getitem__) == 6 and true[6] < 0.8 * true[3]
    b = adv.best
    assert b is not None and true[b.steps] >= 0.995 * true[3]  # never worse than measured
    assert b.basis == "measured" or b.band[0] >= adv.reference.tok_s
    for cand in adv.candidates:
        if cand.basis == "prior":  # not identified: no point, a band over the stated priors
            assert cand.predicted_tok_s is None and cand.predicted_speedup is None
            assert cand.band[0] <= true[cand.steps] <= cand.band[1], (cand, true[cand.steps])
    six = next(x for x in adv.candidates if x.steps == 6)
    assert six.band[0] < adv.reference.tok_s < six.band[1]  # wide: it may be worse
    text = " ".join(adv.assumptions)
    assert "draft cost prior: one more step costs 0 to" in text
    assert "decay prior" in text and "does not rise with k" in text
    started = spec[0].named().split("(started ")[1]
    assert adv.baseline_run == f"baseline base.log run 1 (started {started}"
    assert adv.to_json()["baseline_run"] == adv.baseline_run


def test_no_recommendation_while_conditions_differ(costly_decaying):
    _, spec, base, _ = costly_decaying
    differ = ["disable_custom_all_reduce: False vs True",
              "NCCL env seen by the workers, NCCL_PROTO: LL vs unset"]
    asked: list[tuple[str, str, int]] = []

    def conditions(a: str, b: str, rr: int) -> list[str]:
        asked.append((a, b, rr))
        return differ

    adv = advise(spec, base, conditions=conditions)
    # asked once, of the baseline run used against the speculative run, at the advised size
    assert asked == [("base.log run 1", "spec.log run 1", adv.running_req)]
    assert adv.best is None and adv.flags is None
    d = adv.to_json()
    assert d["best"] is None and d["flags"] is None and d["conditions_differ"] == differ
    assert d["no_recommendation"].startswith("no setting recommended: the runs it compares "
                                             "differ in more than speculation")
    assert all(x in d["no_recommendation"] for x in differ)
    assert advise(spec, base, conditions=lambda a, b, rr: []).best is not None  # it decides
    json.dumps(d, allow_nan=False)


def test_no_keep_while_speculation_measurably_loses(costly_decaying):
    """The candidates' clean-line means can rank the running setting above 1 while the
    measured speedup (compare's medians) lies below 1: 'keep' then kept a losing setting."""
    from dataclasses import replace

    from specmon.analysis.advisor import MeasuredSpeedup
    from specmon.session.advice import action_text

    _, spec, base, _ = costly_decaying
    adv = advise(spec, base)
    assert adv.keeps_current and action_text(adv).startswith("keep: ")
    loses = replace(adv, speedup=MeasuredSpeedup(0.938, (0.917, 0.960), None, adv.running_req,
                                                 898, 898, 3.02, "medians, whole runs"))
    text = action_text(loses)
    assert text.startswith(f"speculation loses at #running-req {adv.running_req} (measured "
                           "speedup 0.938x, its 95 % interval below 1): no setting shown beats "
                           "the baseline") and "keep" not in text
    holds = replace(adv, speedup=MeasuredSpeedup(0.98, (0.95, 1.01), None, adv.running_req,
                                                 898, 898, 3.02, "medians, whole runs"))
    assert action_text(holds).startswith("keep: ")  # the interval holds 1: not shown to lose


def test_the_advice_never_reaches_behind_a_step_back_in_log_time():
    """A log whose clock went back an hour mid-run: the run's figures count only the lines
    after it (compare: n 100); the advisor's segments mixed both clocks (its t_b from n 391)."""
    lines = [DEC.format(s=i, al=2.5, gt=336.0) for i in range(60)]
    assert len(segments(read_runs(lines, "s.log"))[0].lines) == 60
    back = [ln.replace("2026-10-30 10:00", "2026-10-30 09:00") for ln in lines[:20]]
    state = read_runs(lines + back, "s.log")
    assert state.runs[-1].epoch == 1 and len(state.runs) == 1
    (seg,) = segments(state)
    assert len(seg.lines) == 20  # the lines after the step back only
