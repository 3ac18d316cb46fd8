"""`specmon advise` end to end on simulated logs: text, --json shape, exit codes 0/3/2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from kit.paths import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import advisor_eval as ev  # noqa: E402

from specmon.sim import formats  # noqa: E402
from specmon.sim.engine import simulate  # noqa: E402

CASE = ev.Case(5, 0.8, 0.15, 0.03)


def run_lines(cfg, seconds: float, start: float = 1.78e9, **extra: object) -> list[str]:
    """One launch: its server_args line (tp 8 unless `extra` says otherwise), then its lines."""
    s = cfg.spec
    args = {"model_path": "m", "tp_size": 8, "speculative_algorithm": s.algorithm if s else None,
            "speculative_num_steps": s.num_steps if s else None,
            "speculative_eagle_topk": s.eagle_topk if s else None,
            "speculative_num_draft_tokens": s.num_draft_tokens if s else None, **extra}
    lines = [formats.line("0.5.23", start, formats.server_args_message("0.5.23", args))]
    return lines + [sl.text for sl in simulate(cfg, duration_s=seconds, env=ev.TUNED,
                                               start=start + 1)]


def write_log(path: Path, cfg, seconds: float, **extra: object) -> Path:
    path.write_text("\n".join(run_lines(cfg, seconds, **extra)) + "\n")
    return path


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    d = tmp_path_factory.mktemp("advise")
    return {
        "s2": write_log(d / "s2.log", CASE.engine(CASE.spec(2), 1), 150),
        "s4": write_log(d / "s4.log", CASE.engine(CASE.spec(4), 2), 150),
        "s3": write_log(d / "s3.log", CASE.engine(CASE.spec(3), 3), 150),
        "base": write_log(d / "base.log", CASE.engine(None, 4), 150),
    }


def advise(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specmon", "advise", *args],
                          capture_output=True, text=True, timeout=120)


def test_json_shape_and_values(logs):
    r = advise(str(logs["s2"]), str(logs["s4"]), "--baseline-log", str(logs["base"]), "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert list(d) == ["running_req", "measured", "baseline_run", "baseline_ms_per_token", "speedup",
                       "break_even_accept_len", "assumptions", "candidates", "best", "flags",
                       "conditions_differ", "no_recommendation"]
    started = logs["base"].read_text()[1:20]  # the log time of its server_args line
    assert d["baseline_run"] == f"baseline base.log run 1 (started {started})"
    assert d["conditions_differ"] == [] and d["no_recommendation"] is None
    assert [m["steps"] for m in d["measured"]] == [2, 4]
    assert {m["running_req"] for m in d["measured"]} == {1}
    assert 10.5 < d["baseline_ms_per_token"] < 12.0  # the sim's tuned bs-1 step (~11.3 ms)
    # one truth: the measured speedup is compare's (the last runs' medians at the advice's
    # batch size), not the advisor's clean-line means; the break-even accept len is its
    rr = d["measured"][-1]["running_req"]
    c = subprocess.run([sys.executable, "-m", "specmon", "compare", str(logs["base"]),
                        str(logs["s4"]), "--running-req", str(rr), "--json"],
                       capture_output=True, text=True, timeout=120)
    cmp = json.loads(c.stdout)
    sp = d["speedup"]
    assert sp["value"] == cmp["speedup"]["value"] and sp["ci95"] == cmp["speedup"]["ci95"]
    assert (sp["running_req"], sp["n_base"], sp["n_spec"]) == (
        rr, cmp["speedup"]["n_base"], cmp["speedup"]["n_spec"])
    assert sp["basis"] == "medians, whole runs (baseline run 1, speculative run 1)"
    means = d["measured"][-1]["tok_s"] * d["baseline_ms_per_token"] / (1000.0 * rr)
    assert abs(sp["value"] - means) > 1e-4  # the two statistics differ on these logs
    accept = cmp["speculative"]["accept_len_median"]
    assert d["break_even_accept_len"] == pytest.approx(accept / sp["value"], rel=1e-3)
    assert d["best"] in d["candidates"]
    best_measured = max(m["tok_s"] for m in d["measured"])
    # the pick: the best measured setting, or one whose whole band lies at or above it
    assert d["best"]["band"][0] >= best_measured or (
        d["best"]["basis"] == "measured"
        and d["best"]["predicted_tok_s"] == pytest.approx(best_measured, abs=0.006))
    for c in d["candidates"]:
        if c["basis"] == "prior":
            assert c["predicted_tok_s"] is None and c["band"][0] < c["band"][1]
        else:
            assert c["band"][0] < c["predicted_tok_s"] < c["band"][1]
    b = d["best"]
    assert d["flags"] == (f"--speculative-num-steps {b['steps']} --speculative-eagle-topk 1 "
                          f"--speculative-num-draft-tokens {b['draft_tokens']}")
    assert not any("draft cost prior" in a for a in d["assumptions"])  # two step counts measured


def test_text_shows_advice_and_predicted_vs_measured_after_restart(logs):
    r = advise(str(logs["s2"]), str(logs["s4"]), str(logs["s3"]), "--baseline-log",
               str(logs["base"]))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "measured speedup (as compare): " in out and "break-even accept len" in out
    assert "medians, whole runs (baseline run 1, speculative run 1)" in out
    assert "try: --speculative-num-steps" in out or "keep: --speculative-num-steps" in out
    assert "predicted (from the runs before) vs measured:" in out
    assert "s3.log run 1: predicted" in out and "inside the band" in out
    # the draft cost per step is measured (three step counts), the tree-token cost assumed
    cost = next(x for x in out.splitlines() if x.startswith("cost model: "))
    assert "ms/step (+-" in cost and "ms/token (not measured)" in cost
    slope = float(cost.split("steps x ")[1].split()[0])
    assert 3.5 < slope < 5.0  # the simulator's own per-step cost for this case is ~4.2 ms
    p1 = float(out.split("P(draft position k accepted) = ")[1].split(",")[0])
    assert 0.75 < p1 < 0.85  # the simulated draft model accepts 0.8 per token


def test_too_little_data_exits_3_and_says_what(logs, tmp_path):
    r = advise(str(logs["base"]), "--json")
    assert r.returncode == 3 and "no speculative decode lines" in json.loads(r.stdout)["error"]
    short = tmp_path / "short.log"
    short.write_text("\n".join(logs["s2"].read_text().splitlines()[:4]) + "\n")
    r = advise(str(short))
    assert r.returncode == 3 and "too little data" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("argv,msg", [
    ([], "required"),
    (["nope.log"], "no such file"),
    (["x", "--running-req", "0"], "--running-req"),
])
def test_usage_errors_exit_2(argv, msg):
    r = advise(*argv)
    assert r.returncode == 2 and msg in r.stderr and "Traceback" not in r.stderr


def test_baseline_log_must_be_the_baseline(logs):
    r = advise(str(logs["s2"]), "--baseline-log", str(logs["s4"]))
    assert r.returncode == 2 and "non-speculative" in r.stderr


def test_a_baseline_log_among_the_spec_logs_is_said_not_used(logs):
    """`advise BASE SPEC` (compare's order): the baseline was dropped without a word, and the
    advice said only "no --baseline-log"."""
    r = advise(str(logs["base"]), str(logs["s2"]))
    assert r.returncode == 0, r.stderr
    assert f"{logs['base']}: no speculative decode lines (no accept length), not used; a " \
        "baseline server's log goes after --baseline-log" in r.stderr
    assert "s2.log: no speculative" not in r.stderr


def test_real_log_without_its_launch_line_says_so(data_dir):
    # a real EAGLE-3 bs-1 run (tests/data/sglang-longlogs): decode lines only, no server_args
    r = advise(str(data_dir / "sglang-longlogs/rtxpro6000-agentic-spec-bs1.log.gz"))
    assert r.returncode == 3
    assert "no server_args line with speculative_num_steps" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_phantom_baseline_conditions_differ_blocks_advice_and_names_the_baseline_run(tmp_path):
    """The phantom-baseline scenario's logs: against the baseline's run 2 (workers without the
    NCCL variables) the advisor recommends nothing and says why; against run 3 (tuning back)
    the conditions the logs show match and the advice names the baseline run it used."""
    from kit.phantom_runs import baseline_lines, spec_lines

    spec = tmp_path / "speculative.log"
    spec.write_text("\n".join(spec_lines()) + "\n")
    lines = baseline_lines()
    starts = [i for i, x in enumerate(lines) if "server_args=" in x]
    two = tmp_path / "two.log"
    two.write_text("\n".join(lines[:starts[2]]) + "\n")
    three = tmp_path / "three.log"
    three.write_text("\n".join(lines) + "\n")
    r = advise(str(spec), "--baseline-log", str(two), "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    # the session's one rule (the same text compare and the headline give)
    (nccl,) = d["conditions_differ"]
    assert nccl.startswith("NCCL env seen by workers: ")
    for v, x in (("NCCL_ALGO", "Ring"), ("NCCL_P2P_LEVEL", "NVL"), ("NCCL_PROTO", "LL")):
        assert f"{v} unset vs {x}" in nccl
    assert d["best"] is None and d["flags"] is None and "NCCL_PROTO" in d["no_recommendation"]
    assert d["baseline_run"] == f"baseline two.log run 2 (started {lines[starts[1]][1:20]})"
    text = advise(str(spec), "--baseline-log", str(two)).stdout
    assert "conditions differ: NCCL env seen by workers: NCCL_ALGO unset vs Ring" in text
    assert "try:" not in text and "no setting recommended" in text
    r = advise(str(spec), "--baseline-log", str(three), "--json")
    d = json.loads(r.stdout)
    assert r.returncode == 0 and d["conditions_differ"] == [] and d["best"] is not None
    assert d["baseline_run"] == f"baseline three.log run 3 (started {lines[starts[2]][1:20]})"


def test_a_truncated_log_gives_advice_on_the_lines_before_and_says_where_it_broke(logs, tmp_path):
    import gzip

    lines = logs["s4"].read_bytes().splitlines(keepends=True)
    whole = gzip.compress(b"".join(lines))
    cut = tmp_path / "s4.log"  # (gzip, found by its magic) the log, then a member cut short
    cut.write_bytes(whole + gzip.compress(b"more\n")[:10])
    full = advise(str(logs["s2"]), str(logs["s4"]), "--baseline-log", str(logs["base"]), "--json")
    res = advise(str(logs["s2"]), str(cut), "--baseline-log", str(logs["base"]), "--json")
    assert full.returncode == 0, full.stderr
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and f"read error after {len(lines):,} lines" in err[0], err
    assert "the advice above is on the lines before it" in err[0]
    assert json.loads(res.stdout) == json.loads(full.stdout)  # every line before it was used


def test_a_baseline_without_its_launch_line_is_said_with_the_speedup(logs, tmp_path):
    late = tmp_path / "late-base.log"  # the baseline's log from after its server_args line
    late.write_text("\n".join(logs["base"].read_text().splitlines()[1:]) + "\n")
    r = advise(str(logs["s4"]), "--baseline-log", str(late), "--json")
    assert r.returncode == 0, r.stderr
    sp = json.loads(r.stdout)["speedup"]
    assert sp["conditions_unknown"] == ["the baseline's server args (no launch line in its run)"]
    text = advise(str(logs["s4"]), "--baseline-log", str(late)).stdout
    line = next(x for x in text.splitlines() if x.startswith("measured speedup"))
    assert ("; conditions unknown: the baseline's server args (no launch line in its run): the "
            "speedup may measure more than speculation); break-even accept len ") in line
    r = advise(str(logs["s4"]), "--baseline-log", str(logs["base"]), "--json")
    assert json.loads(r.stdout)["speedup"]["conditions_unknown"] == []  # its launch line read


def test_every_speculative_run_pooled_is_checked_whatever_the_order(logs, tmp_path):
    """The advice pools every speculative log's runs: one at tp 4 against a tp-8 baseline is
    named and blocks a recommendation in either argument order (it was checked only when last)."""
    tp4 = write_log(tmp_path / "s4tp.log", CASE.engine(CASE.spec(4), 2), 150, tp_size=4)
    for order in ((logs["s2"], tp4), (tp4, logs["s2"])):
        r = advise(*map(str, order), "--baseline-log", str(logs["base"]), "--json")
        assert r.returncode == 0, r.stderr
        d = json.loads(r.stdout)
        assert d["conditions_differ"] == ["base.log run 1 vs s4tp.log run 1: tp_size: 8 vs 4"]
        assert d["best"] is None and "s4tp.log run 1" in d["no_recommendation"]


def test_conditions_are_those_of_the_baseline_run_the_advice_uses(tmp_path):
    """A baseline log whose last run has too few lines: the advice's t_b is run 1's, so run 1's
    conditions (tp 4) are compared, not run 2's (tp 8, as the speculative server's)."""
    base = CASE.engine(None, 4)
    run2 = run_lines(base, 150, start=1.78e9 + 500)
    batch = [i for i, x in enumerate(run2) if "Decode batch" in x]
    path = tmp_path / "base2.log"
    path.write_text("\n".join(run_lines(base, 150, tp_size=4) + run2[:batch[1]]) + "\n")
    spec = write_log(tmp_path / "s2.log", CASE.engine(CASE.spec(2), 1), 150)
    d = json.loads(advise(str(spec), "--baseline-log", str(path), "--json").stdout)
    assert d["baseline_run"].startswith("baseline base2.log run 1 ")
    assert d["conditions_differ"] == ["tp_size: 4 vs 8"] and d["best"] is None


def test_batch_limits_below_the_advised_batch_size_are_no_difference(tmp_path):
    """SGLang lowers cuda_graph_max_bs and max_running_requests when speculation is on: at the
    batch size advised (chosen by the advisor when not given) they are no difference, as in
    compare; a limit below it is."""
    base = write_log(tmp_path / "b.log", CASE.engine(None, 4), 150, max_running_requests=2048,
                     cuda_graph_max_bs=256)
    spec = write_log(tmp_path / "s.log", CASE.engine(CASE.spec(2), 1), 150,
                     max_running_requests=48, cuda_graph_max_bs=48)
    d = json.loads(advise(str(spec), "--baseline-log", str(base), "--json").stdout)
    assert d["running_req"] < 48 and d["conditions_differ"] == [] and d["best"] is not None


def test_advise_and_compare_print_the_same_speedup_digits(logs):
    """The measured speedup is compare's: the same value and interval to the last digit
    printed (compare's JSON held 4 decimals printed to 3, a second rounding: 1.530 beside
    advise's 1.531), JSON values to the 3 decimals printed."""
    import re

    cmp = subprocess.run([sys.executable, "-m", "specmon", "compare", str(logs["base"]),
                          str(logs["s4"]), "--json"], capture_output=True, text=True, timeout=120)
    sp = json.loads(cmp.stdout)["speedup"]
    assert sp["value"] == round(sp["value"], 3) and sp["ci95"] == [round(x, 3) for x in sp["ci95"]]
    text = advise(str(logs["s4"]), "--baseline-log", str(logs["base"])).stdout
    m = re.search(r"measured speedup \(as compare\): ([\d.]+)x \(95 % ([\d.]+)-([\d.]+);", text)
    assert m is not None, text
    assert m.groups() == (f"{sp['value']:.3f}", f"{sp['ci95'][0]:.3f}", f"{sp['ci95'][1]:.3f}")
    adv = json.loads(advise(str(logs["s4"]), "--baseline-log", str(logs["base"]),
                            "--json").stdout)["speedup"]
    assert adv["value"] == sp["value"] and adv["ci95"] == sp["ci95"]
