# ruff: noqa: UP031  (vLLM's own %-format strings)
"""vLLM logs through the session model and the offline front ends (parse, compare, runs)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specmon.parse.sglang import parse_line
from specmon.parse.vllm import MixedEngines
from specmon.session.runs import compare, read_runs
from specmon.session.state import ServerState

DATA = Path(__file__).parent / "data" / "vllm-logs"
SPEC_LOG = DATA / "gen-eagle3-0.11.log"
BASE_LOG = DATA / "gen-baseline-0.11.log"
ENG = ("Engine %03d: Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f "
       "tokens/s, Running: %d reqs, Waiting: %d reqs, GPU KV cache usage: %.1f%%, "
       "Prefix cache hit rate: %.1f%%")
F2 = ("SpecDecoding metrics: " "Draft acceptance rate: %.1f%%, " "Mean acceptance length: %.2f, "
      "Accepted: %d tokens, " "Drafted: %d tokens, " "Per-position acceptance rate: %s")


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specmon", *args], capture_output=True,
                          timeout=120, text=True)


def test_read_runs_joins_spec_lines_and_maps_config() -> None:
    state = read_runs(SPEC_LOG.read_text().splitlines(), "spec")
    assert state.engine == "vllm" and len(state.runs) == 1
    run = state.runs[0]
    assert run.start_reason == "server_args"
    assert run.args["speculative_algorithm"] == "eagle3"
    assert (run.args["speculative_num_steps"], run.args["speculative_num_draft_tokens"]) == (3, 4)
    pts = list(run.decode)
    assert len(pts) == 40 and all(p.rec.accept_len is not None for p in pts)
    for p in pts:  # bonus included: 1 + accepted / drafts, as printed by 0.9+
        assert p.rec.accept_len == pytest.approx(1 + sum(p.rec.spec["per_position"]), abs=0.006)
        assert p.rec.accept_rate == pytest.approx(p.rec.spec["accepted"] / p.rec.spec["drafted"])
    assert state.is_speculative and state.role == "speculative"


def test_085_accept_length_gets_its_bonus() -> None:
    h = "INFO 05-06 11:02:%02d [x.py:1] "
    lines = [h % 0 + ENG % (0, 0.0, 1500.0, 8, 0, 1.0, 0.0),
             h % 0 + F2 % (60.8, 1.82, 9339, 15360, "0.801, 0.602, 0.421")]
    state = read_runs(lines)
    rec = state.runs[0].decode[0].rec
    assert rec.accept_len == pytest.approx(2.82)
    assert "0.8.5" in (rec.accept_len_note or "")


def test_dp_engines_summed_and_config_copies_one_run() -> None:
    cfg = ("(EngineCore_DP%d pid=%d) INFO 07-10 14:20:00 [core.py:61] Initializing a V1 LLM engine "
           "(v0.10.1) with config: model='m', speculative_config=SpeculativeConfig(method='eagle', "
           "model='d', num_spec_tokens=3), tensor_parallel_size=1, data_parallel_size=2")
    h = "(APIServer pid=9) INFO 07-10 14:20:%02d [x.py:1] "
    lines = [cfg % (0, 10), cfg % (1, 11)]
    for s in (10, 20):
        lines += [h % s + ENG % (0, 0.0, 1000.0, 8, 0, 1.0, 0.0),
                  h % s + F2 % (60.0, 2.80, 1800, 3000, "0.800, 0.600, 0.400"),
                  h % s + ENG % (1, 0.0, 500.0, 4, 0, 1.0, 0.0),
                  h % s + F2 % (40.0, 2.20, 600, 1500, "0.600, 0.400, 0.200")]
    state = read_runs(lines)
    assert len(state.runs) == 1
    run = state.runs[0]
    assert sorted(run.groups) == [0, 1]
    assert len(run.decode) == 2
    p = run.decode[-1]
    assert (p.groups, p.rec.running_req, p.rec.gen_throughput) == (2, 12, 1500.0)
    # weighted by each engine's throughput, as SGLang DP groups are
    assert p.rec.accept_len == pytest.approx((2.8 * 1000 + 2.2 * 500) / 1500)


def test_live_baseline_points_not_delayed_spec_points_joined() -> None:
    base = ServerState("b")
    line = "(APIServer pid=1) INFO 11-20 10:00:30 [x.py:1] " + ENG % (0, 0.0, 400.0, 16, 0, 2.0, 0.0)
    assert len(base.apply(line, parse_line(line), 1.0)) == 1  # no config line, no spec: at once
    spec = ServerState("s")
    for text in SPEC_LOG.read_text().splitlines()[:2]:
        got = spec.apply(text, parse_line(text), 1.0)
    assert got == []  # the engine line waits for its spec line (the config said eagle3)
    third = SPEC_LOG.read_text().splitlines()[2]
    got = spec.apply(third, parse_line(third), 1.0)
    assert len(got) == 1 and got[0].rec.accept_len is not None


def test_mixed_engines_is_an_error() -> None:
    sg = ("[2026-02-26 19:16:00 TP0] Decode batch, #running-req: 1, #token: 900, token usage: 0.04, "
          "gen throughput (token/s): 80.00, #queue-req: 0")
    vl = SPEC_LOG.read_text().splitlines()[1]
    with pytest.raises(MixedEngines, match="line 2 is a vLLM line in a SGLang log"):
        read_runs([sg, vl], "mixed.log")


def test_mixed_engines_cli_one_line(tmp_path: Path) -> None:
    f = tmp_path / "mixed.log"
    f.write_text(SPEC_LOG.read_text() + "[2026-02-26 19:16:00 TP0] Decode batch, #running-req: 1, "
                 "#token: 900, token usage: 0.04, gen throughput (token/s): 80.00, #queue-req: 0\n")
    for args in (("parse", str(f)), ("parse", "--json", str(f)), ("parse", "--runs", str(f))):
        r = cli(*args)
        assert r.returncode == 2, args
        err = r.stderr.strip().splitlines()
        assert len(err) == 1 and "mixes engines" in err[0] and "Traceback" not in r.stderr


def test_parse_json_contract_and_nan_warning(tmp_path: Path) -> None:
    f = tmp_path / "v085.log"
    h = "INFO 05-06 11:03:00 [metrics.py:82] "
    f.write_text(h + ENG % (0, 0.0, 10.0, 1, 0, 1.0, 0.0) + "\n"
                 + h + F2 % (float("nan"), float("nan"), 0, 0, "nan, nan, nan") + "\n")
    r = cli("parse", "--json", str(f))
    assert r.returncode == 0, r.stderr
    objs = [json.loads(x) for x in r.stdout.splitlines()]
    assert [o["kind"] for o in objs] == ["decode", "spec"] and {o["engine"] for o in objs} == {"vllm"}
    assert {"dp_rank", "gen_throughput", "prompt_throughput", "running_req", "queue_req",
            "kv_cache_usage_pct", "prefix_cache_hit_pct"} <= set(objs[0])
    assert objs[1]["mean_accept_len"] is None and objs[1]["per_position"] == [None, None, None]
    assert "warning: 5 value(s)" in r.stderr
    cfg = cli("parse", "--json", "--kind", "server_args", str(SPEC_LOG))
    obj = json.loads(cfg.stdout.splitlines()[0])
    assert obj["speculative_algorithm"] == "eagle3" and obj["speculative_num_tokens"] == 3


def test_compare_cli_on_vllm_logs_labels_throughput() -> None:
    r = cli("compare", str(BASE_LOG), str(SPEC_LOG), "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["speedup"]["running_req"] == 16
    base = res["baseline"]["median_tok_s"]
    spec = res["speculative"]["median_tok_s"]
    assert res["speedup"]["value"] == pytest.approx(spec / base, rel=0.02)
    assert any("prefill steps included" in n for n in res["notes"])
    assert not any("decode-only gen throughput" in n for n in res["notes"])
    direct = compare(read_runs(BASE_LOG.read_text().splitlines()),
                     read_runs(SPEC_LOG.read_text().splitlines()))
    assert direct.result["speedup"]["value"] == res["speedup"]["value"]  # one truth


def test_summary_labels_vllm_throughput() -> None:
    r = cli("parse", str(SPEC_LOG))
    assert r.returncode == 0, r.stderr
    assert "vLLM 'Avg generation throughput'" in r.stdout and "accept len" in r.stdout


def test_baseline_record_and_check_on_vllm_logs(tmp_path: Path) -> None:
    env_home = {"HOME": str(tmp_path)}
    import os
    env = {**os.environ, **env_home}

    def run(*a: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "specmon", *a], capture_output=True, text=True,
                              timeout=120, env=env)
    r = run("baseline", "record", "vs", "--log", str(SPEC_LOG))
    assert r.returncode == 0, r.stderr
    ok = run("check", "--baseline", "vs", "--json", str(SPEC_LOG))
    assert ok.returncode == 0, ok.stderr
    out = json.loads(ok.stdout)
    assert out["verdict"] == "ok" and out["live"]["n"] >= 20


def test_advise_uses_measured_per_position_profile() -> None:
    r = cli("advise", str(SPEC_LOG), "--baseline-log", str(BASE_LOG), "--json")
    assert r.returncode == 0, r.stderr
    adv = json.loads(r.stdout)
    assert any("per-position acceptance" in a and "rest on it" in a for a in adv["assumptions"])
    assert not any("constant per-position acceptance" in a for a in adv["assumptions"])
    assert adv["flags"].startswith("--speculative-config '{\"method\": \"eagle3\"")
    # the profile is the drafted-weighted mean of the printed rates, computed here independently
    from specmon.analysis.advisor import best_profile, measure, split_runs
    from specmon.parse.vllm import join_records
    segs = split_runs(join_records(parse_line(x) for x in SPEC_LOG.read_text().splitlines()), "s")
    m = measure(segs[0], 16)
    assert m is not None and m.per_position is not None
    prof = best_profile([m])
    assert prof is not None and prof.survival == m.per_position
    from specmon.analysis.advisor import clean_lines
    lines = [x for x in clean_lines(segs[0].records) if x.running_req == 16]
    w = sum(x.spec["drafted"] for x in lines)
    want0 = sum(x.spec["per_position"][0] * x.spec["drafted"] for x in lines) / w
    assert prof.survival[0] == pytest.approx(want0)
