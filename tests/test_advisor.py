"""The tuning advisor: runs/segments, acceptance profile, cost model, candidates, the
"speculation no longer pays" rule; and on simulated runs whose optimum is known."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

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
    split_runs,
)
from specmon.parse.sglang import parse_line

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import advisor_eval as ev  # noqa: E402

ARGS = ("[2026-10-30 10:00:00] server_args={'model_path': 'm', 'speculative_algorithm': 'EAGLE3', "
        "'speculative_num_steps': 3, 'speculative_eagle_topk': 1, "
        "'speculative_num_draft_tokens': 4}")
DEC = ("[2026-10-30 10:00:{s:02d} TP0] Decode batch, #running-req: 1, #token: 900, token usage: "
       "0.01, accept len: {al:.2f}, accept rate: 0.50, cuda graph: True, gen throughput "
       "(token/s): {gt:.2f}, #queue-req: 0")
ADAPT = "[2026-10-30 10:00:30 TP0] Adaptive spec params updated: steps 3 -> 1 (ema_accept_len=0.42)"


def test_runs_split_at_server_args_and_segments_at_adaptive_changes():
    lines = [ARGS] + [DEC.format(s=i, al=2.5, gt=90) for i in range(10)] + [ADAPT] + [
        DEC.format(s=31 + i, al=1.6, gt=70) for i in range(5)] + [ARGS] + [
        DEC.format(s=50 + i, al=2.4, gt=88) for i in range(4)]
    segs = split_runs((parse_line(x) for x in lines), "spec.log")
    assert [(s.run, s.steps, s.draft_tokens, len(s.records), s.started_by) for s in segs] == [
        ("spec.log#1", 3, 4, 10, "server_args"), ("spec.log#1.2", 1, 2, 5, "adaptive"),
        ("spec.log#2", 3, 4, 4, "server_args")]
    assert segs[1].start_ts == "2026-10-30 10:00:30"  # where a chart marks the change
    assert all(r.accept_len == 1.6 for r in segs[1].records)
    prefill = ("[2026-10-30 10:00:40 TP0] Prefill batch, #new-seq: 1, #new-token: 512, "
               "#cached-token: 0, token usage: 0.01, #running-req: 0, #queue-req: 0, "
               "#pending-token: 0, cuda graph: False, input throughput (token/s): 8000.00")
    from specmon.analysis.advisor import clean_lines
    recs = [parse_line(x) for x in [ARGS] + [DEC.format(s=i, al=2.5, gt=90) for i in range(8)]
            + [prefill] + [DEC.format(s=9, al=2.5, gt=60), DEC.format(s=10, al=2.5, gt=90)]]
    seg = split_runs(recs, "p")[0]
    kept = clean_lines(seg.records)
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
    assert any("draft cost per step assumed negligible" in a for a in one.assumptions)


def test_one_run_advice_states_the_assumption_and_json_has_exact_shape():
    seg = ev.sim_log(ev.Case(1, 0.8, 0.2, 0.04).engine(ev.Case(1, 0.8, 0.2, 0.04).spec(3), 11),
                     120, "s3")
    adv = advise(seg)
    d = adv.to_json()
    assert list(d) == ["measured", "baseline_ms_per_token", "break_even_accept_len",
                       "assumptions", "candidates", "best", "flags"]
    assert list(d["measured"][0]) == ["run", "steps", "topk", "draft_tokens", "running_req",
                                      "accept_len", "t_cycle_ms", "tok_s", "n"]
    assert list(d["candidates"][0]) == ["steps", "topk", "draft_tokens", "predicted_tok_s",
                                        "band", "predicted_speedup"]
    assert d["baseline_ms_per_token"] is None and d["best"]["predicted_speedup"] is None
    assert any("negligible" in a for a in d["assumptions"])
    assert [(c["steps"], c["topk"], c["draft_tokens"]) for c in d["candidates"]] == [
        (s, 1, s + 1) for s in range(1, 7)]  # chain-only model: topk 1
    assert d["best"]["steps"] == 6  # free drafts: the longest chain, as the assumption implies
    assert d["flags"] == ("--speculative-num-steps 6 --speculative-eagle-topk 1 "
                          "--speculative-num-draft-tokens 7")
    json.dumps(d, allow_nan=False)


def test_cannot_advise_says_what_is_missing():
    with pytest.raises(CannotAdvise, match="no speculative decode lines"):
        advise(split_runs([parse_line(DEC.replace("accept len: {al:.2f}, accept rate: 0.50, ",
                                                  "").format(s=1, gt=80))], "b"))
    with pytest.raises(CannotAdvise, match="server_args"):
        advise(split_runs((parse_line(DEC.format(s=i, al=2.0, gt=80)) for i in range(20)), "x"))


@pytest.fixture(scope="module")
def outcomes():
    return [ev.run_case(c, 300) for c in ev.cases(10)]


def test_advisor_picks_the_true_optimum_or_one_within_its_band(outcomes):
    good = [o.ok for o in outcomes]
    assert sum(good) >= 9, [(o.case, o.advice.best.steps, o.true_best) for o in outcomes]
    assert len({o.true_best for o in outcomes}) >= 3  # the cases really move the optimum
    for o in outcomes:
        assert o.advice.baseline is not None and o.advice.best.predicted_speedup is not None
        assert o.advice.measured_speedup is not None


def test_prediction_vs_measurement_for_three_settings_within_band(outcomes):
    o = outcomes[2]  # fitted on steps 2 and 4: steps 1 and 3 interpolate, 6 extrapolates
    for steps in (1, 3, 6):
        tok, ok = ev.measured_check(o.case, o.advice, steps, 600)
        c = next(c for c in o.advice.candidates if c.steps == steps)
        assert ok, (steps, tok, c.band)
        check = check_prediction(o.advice, _measured(o, steps))
        assert check is not None and check.within == (c.band[0] <= check.measured_tok_s
                                                       <= c.band[1])


def _measured(o, steps):
    from specmon.analysis.advisor import measure
    seg = ev.sim_log(o.case.engine(o.case.spec(steps), o.case.seed * 10 + 5 + steps), 600, "x")
    return measure(seg[0], o.advice.running_req)


def test_holdout_checks_show_the_models_error_after_a_restart():
    c = ev.Case(7, 0.8, 0.15, 0.03)
    runs = (ev.sim_log(c.engine(c.spec(2), 1), 200, "a") + ev.sim_log(c.engine(c.spec(4), 2),
            200, "b") + ev.sim_log(c.engine(c.spec(3), 3), 200, "c"))
    checks = holdout_checks(runs)
    assert len(checks) == 1 and checks[0].run == "c#1"
    assert abs(checks[0].error_pct) < 8 and checks[0].within


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
    s3 = next(x for x in adv.candidates if x.steps == 3)
    assert s3.tau == pytest.approx(1 + 0.9 + 0.75 + 0.55)
