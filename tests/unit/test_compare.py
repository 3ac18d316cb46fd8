"""`specmon compare` and `specmon parse --runs` on real logs: restarts, DP groups, too few samples."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest
from kit.paths import TESTS

from specmon.cli import main
from specmon.parse.sglang import BatchRecord, parse_line
from specmon.sim import formats

DATA = TESTS / "data" / "sglang-longlogs"


def real(name: str) -> list[str]:
    with gzip.open(DATA / name, "rt", encoding="utf-8") as fh:
        return [ln.rstrip("\n") for ln in fh]


def restart(stamp: str, **args: object) -> str:
    return f"[{stamp}] " + formats.server_args_message("0.5.11", {"model_path": "m", **args})


def write(path: Path, lines: list[str]) -> str:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def decode_tps(lines: list[str], rr: int) -> list[float]:
    out = []
    for ln in lines:
        r = parse_line(ln)
        if isinstance(r, BatchRecord) and r.kind == "decode" and r.running_req == rr:
            out.append(r.gen_throughput)
    return out


def med(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def two_run_base(tmp_path):
    run1 = real("r9700-qwen3coder-reap25b-bs1.log.gz")
    run2 = real("r9700-qwen3coder30b-ream-bs1.log.gz")
    path = write(tmp_path / "base.log", [restart("2026-05-25 17:56:00", tp_size=2), *run1,
                                         restart("2026-05-25 18:04:00", tp_size=2), *run2])
    return path, run1, run2


def test_compare_last_runs_json_shape_and_numbers(tmp_path, capsys, two_run_base):
    base, run1, run2 = two_run_base
    spec_lines = real("rtxpro6000-agentic-spec-bs1.log.gz")
    spec = write(tmp_path / "spec.log", spec_lines)
    code, out, _ = run_cli(capsys, "compare", base, spec, "--json")
    assert code == 0
    res = json.loads(out)
    assert set(res) == {"conditions_differ", "conditions_unknown", "baseline", "speculative",
                        "by_running_req", "speedup", "notes"}
    # the real speculative log starts after its launch line: its args are unknown, and said so
    assert res["conditions_unknown"] == [
        "the speculative server's server args (no launch line in its run)"]
    b, s = res["baseline"], res["speculative"]
    assert (b["run"], b["runs"], s["run"], s["runs"]) == (2, 2, 1, 1)
    assert b["start"] == "2026-05-25 18:04:00"
    assert set(b) == {"run", "runs", "start", "median_tok_s", "n", "p10", "p90"}
    assert set(s) == set(b) | {"accept_len_median"}
    # the last run only: run 2's own median, not the two runs pooled
    assert b["median_tok_s"] == pytest.approx(med(decode_tps(run2, 1)), abs=1e-4)
    assert b["n"] == len(decode_tps(run2, 1))
    assert med(decode_tps(run1, 1)) != pytest.approx(b["median_tok_s"], abs=0.01)
    ratio = med(decode_tps(spec_lines, 1)) / med(decode_tps(run2, 1))
    assert res["speedup"]["running_req"] == 1
    assert res["speedup"]["value"] == pytest.approx(ratio, abs=1e-3)
    lo, hi = res["speedup"]["ci95"]
    assert lo < ratio < hi
    assert res["by_running_req"][0]["n_spec"] == s["n"]
    assert any("baseline log holds 2 runs; compared run 2 (from 18:04:00)" == n for n in res["notes"])
    # --run 1 picks the first run of both logs
    code, out, _ = run_cli(capsys, "compare", base, spec, "--json", "--run", "1")
    assert code == 0 and json.loads(out)["baseline"]["median_tok_s"] == pytest.approx(
        med(decode_tps(run1, 1)), abs=1e-4)
    # --base-run and --spec-run choose each side's run separately
    code, out, _ = run_cli(capsys, "compare", base, base, "--json", "--base-run", "1",
                           "--spec-run", "2")
    r = json.loads(out)
    assert (r["baseline"]["run"], r["speculative"]["run"]) == (1, 2)
    assert r["baseline"]["median_tok_s"] == pytest.approx(med(decode_tps(run1, 1)), abs=1e-4)
    assert r["speculative"]["median_tok_s"] == pytest.approx(med(decode_tps(run2, 1)), abs=1e-4)
    code, _, err = run_cli(capsys, "compare", base, spec, "--spec-run", "2")
    assert code == 2 and "speculative log: no run 2 (the log holds runs 1..1)" in err
    # parse --runs lists them
    code, out, _ = run_cli(capsys, "parse", "--runs", "--json", base)
    rows = [json.loads(x) for x in out.splitlines()]
    assert [r["run"] for r in rows] == [1, 2] and rows[1]["start"] == "2026-05-25 18:04:00"
    assert [r["decode_lines"] for r in rows] == [len(decode_tps(run1, 1)), len(decode_tps(run2, 1))]
    assert rows[0]["args"] == "model m, tp 2"


def test_compare_dp_groups_sums_the_groups(tmp_path, capsys):
    dp = str(DATA / "ascend-qwen3coder-480b-dp4.log.gz")
    code, out, _ = run_cli(capsys, "compare", dp, dp, "--json", "--running-req", "80")
    assert code == 0
    res = json.loads(out)
    assert {k: res["speedup"][k] for k in ("running_req", "value", "ci95_reason", "n_base")} == \
        {"running_req": 80, "value": 1.0, "ci95_reason": None, "n_base": 298}
    assert 4 * 380 < res["baseline"]["median_tok_s"] < 4 * 440  # four groups of ~414 tok/s
    assert any("4 DP groups, summed per interval" in n for n in res["notes"])
    code, out, _ = run_cli(capsys, "parse", "--runs", dp)
    assert "1 run" in out and "4 DP groups" in out


def test_compare_too_few_samples_exits_3_and_says_which(tmp_path, capsys, two_run_base):
    base, _, _ = two_run_base
    spec_lines = [ln for ln in real("rtxpro6000-agentic-spec-bs1.log.gz") if "Decode batch" in ln][:2]
    spec = write(tmp_path / "spec.log", spec_lines)
    code, out, err = run_cli(capsys, "compare", base, spec, "--json")
    assert code == 3
    res = json.loads(out)
    assert res["speedup"] is None
    assert "speculative run 1: bs 1: n 2" in err and "baseline run 2: bs 1: n 224" in err
    assert not any(isinstance(v, float) and not math.isfinite(v) for v in res["baseline"].values())
    # a batch size the logs do not share at all
    code, out, err = run_cli(capsys, "compare", base, spec, "--running-req", "4")
    assert code == 3 and "speedup: N/A" in out and "bs 4: n 0" in err


def test_compare_usage_errors_exit_2(tmp_path, capsys, two_run_base):
    base, _, _ = two_run_base
    code, _, err = run_cli(capsys, "compare", base, str(tmp_path / "nope.log"))
    assert code == 2 and "nope.log: no such file" in err
    code, _, err = run_cli(capsys, "compare", base, base, "--run", "3")
    assert code == 2 and "no run 3 (the log holds runs 1..2)" in err
    code, _, err = run_cli(capsys, "compare", base, base, "--running-req", "0")
    assert code == 2 and "--running-req" in err


def test_compare_json_ci95_is_null_with_reason_for_one_sample_a_side(tmp_path, capsys):
    def log(name: str, rr_vals: list[tuple[int, float]]) -> str:
        lines = [restart("2026-05-25 17:56:00", tp_size=1)]
        for i, (rr, v) in enumerate(rr_vals):
            lines.append(f"[2026-05-25 17:56:{10 + i:02d}] Decode batch, #running-req: {rr}, "
                         f"#token: 900, token usage: 0.04, cuda graph: True, gen throughput "
                         f"(token/s): {v:.2f}, #queue-req: 0")
        return write(tmp_path / name, lines)

    base = log("b.log", [(1, 80.0), (1, 81.0), (1, 79.0), (4, 200.0)])
    spec = log("s.log", [(1, 120.0), (1, 121.0), (1, 119.0), (4, 260.0)])
    code, out, _ = run_cli(capsys, "compare", base, spec, "--json")
    assert code == 0
    rows = {r["running_req"]: r for r in json.loads(out)["by_running_req"]}
    assert rows[4]["ci95"] is None and rows[4]["speedup"] == 1.3
    assert "fewer than 2 samples" in rows[4]["ci95_reason"]
    assert rows[1]["ci95"] is not None and rows[1]["ci95_reason"] is None


def test_compare_says_which_conditions_differ(tmp_path, capsys):
    def log(name: str, vals: list[float], accept: float | None = None, **args: object) -> str:
        lines = [restart("2026-05-25 17:56:00", **args)]
        lines += [f"[2026-05-25 17:56:{10 + i:02d}] NCCL INFO NCCL_PROTO set by environment to LL"
                  for i in range(1) if args.get("port") == 30000]
        acc = f"accept len: {accept:.2f}, accept rate: 0.70, " if accept else ""
        for i, v in enumerate(vals):
            lines.append(f"[2026-05-25 17:57:{10 + i:02d}] Decode batch, #running-req: 1, "
                         f"#token: 900, token usage: 0.04, {acc}cuda graph: True, gen throughput "
                         f"(token/s): {v:.2f}, #queue-req: 0")
        return write(tmp_path / name, lines)

    common = {"tp_size": 8, "mem_fraction_static": 0.85}
    spec_args = {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 2}
    base = log("b.log", [88.0, 89.0, 90.0], port=30000, disable_custom_all_reduce=False, **common)
    spec = log("s.log", [94.0, 95.0, 93.0], 2.5, port=30001, disable_custom_all_reduce=True,
               **common, **spec_args)
    code, out, _ = run_cli(capsys, "compare", base, spec, "--json")
    assert code == 0
    assert json.loads(out)["conditions_differ"] == ["disable_custom_all_reduce: False vs True"]
    code, out, _ = run_cli(capsys, "compare", base, spec)
    assert "conditions differ: disable_custom_all_reduce: False vs True" in out.splitlines()[1]
    same = log("s2.log", [94.0, 95.0, 93.0], 2.5, port=30001, disable_custom_all_reduce=False,
               **common, **spec_args)
    code, out, _ = run_cli(capsys, "compare", base, same, "--json")
    assert json.loads(out)["conditions_differ"] == []  # port and speculative_* do not count
    assert json.loads(out)["conditions_unknown"] == []  # both launch lines read


def test_compare_says_when_a_run_has_no_launch_line(tmp_path, capsys):
    """A run read without its server_args line could differ in anything (model, TP size): the
    speedup is still shown, with that said beside it, never as if the conditions matched."""
    def log(name: str, vals: list[float], accept: float | None = None) -> str:
        acc = f"accept len: {accept:.2f}, accept rate: 0.70, " if accept else ""
        return write(tmp_path / name, [
            f"[2026-05-25 17:57:{10 + i:02d}] Decode batch, #running-req: 1, #token: 900, token "
            f"usage: 0.04, {acc}cuda graph: True, gen throughput (token/s): {v:.2f}, "
            "#queue-req: 0" for i, v in enumerate(vals)])

    base, spec = log("b.log", [88.0, 89.0, 90.0]), log("s.log", [94.0, 95.0, 93.0], 2.5)
    code, out, _ = run_cli(capsys, "compare", base, spec)
    assert code == 0
    assert out.splitlines()[1] == (
        "conditions unknown: the baseline's server args (no launch line in its run); the "
        "speculative server's server args (no launch line in its run): the speedup may measure "
        "more than speculation")


def test_decode_lines_with_no_readable_value_are_not_called_absent(tmp_path, capsys):
    """20 decode lines whose throughput is `inf` or overflows: the note counts them, and says
    none could be read, instead of "no decode lines" beside `parse --runs`' "20 decode lines"."""
    bad = [f"[2026-05-25 17:56:{i:02d}] Decode batch, #running-req: 1, #token: 9, token usage: "
           f"0.04, cuda graph: True, gen throughput (token/s): {v}, #queue-req: 0"
           for i, v in enumerate(["inf"] * 10 + ["1e400"] * 10)]
    log = write(tmp_path / "inf.log", bad)
    code, _, err = run_cli(capsys, "compare", log, log)
    assert code == 3
    assert ("baseline run 1: 20 decode lines, none with a readable batch size and throughput"
            in err)
    code, out, _ = run_cli(capsys, "parse", "--runs", log)
    assert "20 decode lines" in out


def test_a_megabyte_model_path_is_cut_in_the_run_summary(tmp_path, capsys):
    """A hostile launch line's model path is one line of output, not a megabyte of it; a
    secret in it is masked before the cut."""
    huge = "hf_" + "A" * 40 + "/" + "m" * 1_000_000
    lines = [restart("2026-05-25 17:56:00", model_path=huge, tp_size=2)]
    lines += [f"[2026-05-25 17:56:{10 + i:02d}] Decode batch, #running-req: 1, #token: 9, "
              "token usage: 0.04, cuda graph: True, gen throughput (token/s): 88.00, "
              "#queue-req: 0" for i in range(3)]
    code, out, _ = run_cli(capsys, "parse", "--runs", write(tmp_path / "m.log", lines))
    assert code == 0
    run_line = next(ln for ln in out.splitlines() if "run 1:" in ln)
    assert len(run_line) < 400 and "..." in run_line and "tp 2" in run_line
    assert "hf_AAAA" not in out and "***REDACTED***" in run_line


VLLM = TESTS / "data" / "vllm-logs"


def test_vllm_non_default_args_are_compared_key_by_key(tmp_path, capsys):
    """vLLM's `non-default args: {...}` is the CLI the user set: its port and speculative_config
    tell nothing about conditions (the demo's headline said "conditions differ:
    non_default_args: {'port': ...}" for every pair); a key one side sets and the other leaves
    at its default is a difference, named as such."""
    def log(name: str, src: str, **nd: object) -> str:
        head = ("(APIServer pid=100) INFO 11-20 09:59:58 [utils.py:326] non-default args: "
                + repr({"model_tag": "Qwen/Qwen3-8B", "host": "0.0.0.0",
                        "model": "Qwen/Qwen3-8B", **nd}))
        return write(tmp_path / name, [head, *(VLLM / src).read_text().splitlines()])

    spec_cfg = {"method": "eagle3", "model": "org/Qwen3-8B-eagle3", "num_speculative_tokens": 3}
    base = log("b.log", "gen-baseline-0.11.log", port=8000, max_num_seqs=64)
    spec = log("s.log", "gen-eagle3-0.11.log", port=8001, max_num_seqs=64,
               speculative_config=spec_cfg)
    code, out, _ = run_cli(capsys, "compare", base, spec, "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["conditions_differ"] == [] and doc["conditions_unknown"] == []
    other = log("s2.log", "gen-eagle3-0.11.log", port=8001, enforce_eager=True,
                speculative_config=spec_cfg)
    code, out, _ = run_cli(capsys, "compare", base, other, "--json")
    assert json.loads(out)["conditions_differ"] == [
        "enforce_eager: default vs True", "max_num_seqs: 64 vs default"]
    # the batch-size limit rule holds for vLLM's max_num_seqs too: 16 requests run under both
    low = log("s3.log", "gen-eagle3-0.11.log", port=8001, max_num_seqs=32,
              speculative_config=spec_cfg)
    code, out, _ = run_cli(capsys, "compare", base, low, "--json")
    assert json.loads(out)["conditions_differ"] == []
    # a benchmark mode that fakes acceptance: the speedup is not speculation's, and says so
    fake = log("s4.log", "gen-eagle3-0.11.log", port=8001, max_num_seqs=64,
               speculative_config={**spec_cfg, "rejection_sample_method": "synthetic"})
    code, out, _ = run_cli(capsys, "compare", base, fake)
    assert ("conditions differ: the speculative server's acceptance is synthetic (vLLM "
            "rejection_sample_method 'synthetic', a benchmark mode), not its drafts'"
            in out.splitlines()[1])
    # a batch-size rule that stops the drafts at the compared batch size (the logs run at
    # Running: 16): two plain decoders are compared there, and the speedup says so
    for rule, said in (({"disable_by_batch_size": 8}, "disable_by_batch_size 8"),
                       ({"num_speculative_tokens_per_batch_size": {"1-8": 3, "9-4096": 0}},
                        "num_speculative_tokens_per_batch_size 9-4096: 0")):
        off = log("s5.log", "gen-eagle3-0.11.log", port=8001, max_num_seqs=64,
                  speculative_config={**spec_cfg, **rule})
        code, out, _ = run_cli(capsys, "compare", base, off, "--json")
        assert json.loads(out)["conditions_differ"] == [
            f"the speculative server drafts no tokens at #running-req 16 ({said}): the ratio "
            "is not speculation's"]
    # ... but not where it still drafts (16 is inside 1-16, at k 2) or below the threshold
    for rule in ({"disable_by_batch_size": 16},
                 {"num_speculative_tokens_per_batch_size": {"1-16": 2, "64-4096": 0}}):
        on = log("s6.log", "gen-eagle3-0.11.log", port=8001, max_num_seqs=64,
                 speculative_config={**spec_cfg, **rule})
        code, out, _ = run_cli(capsys, "compare", base, on, "--json")
        assert json.loads(out)["conditions_differ"] == []


def test_a_size_one_vllm_release_does_not_print_is_unknown_not_a_difference(tmp_path, capsys):
    """vLLM 0.8.3's config line has no data_parallel_size: compare and advise said
    "conditions differ: dp_size: 1 vs None" against a 0.11 baseline that prints 1."""
    lines = (VLLM / "gen-eagle3-0.11.log").read_text().splitlines()
    cfg = ("(EngineCore_DP0 pid=101) INFO 11-20 10:00:00 [core.py:61] Initializing a V1 LLM "
           "engine (v0.8.3) with config: model='Qwen/Qwen3-8B', speculative_config="
           "SpeculativeConfig(method='eagle3', model='org/Qwen3-8B-eagle3', num_spec_tokens=3), "
           "tokenizer='Qwen/Qwen3-8B', skip_tokenizer_init=False, tensor_parallel_size=1, "
           "pipeline_parallel_size=1, enable_prefix_caching=True")
    assert "Initializing a V1 LLM engine" in lines[0]
    spec = write(tmp_path / "s083.log", [cfg, *lines[1:]])
    code, out, _ = run_cli(capsys, "compare", str(VLLM / "gen-baseline-0.11.log"), spec,
                           "--json")
    assert code == 0
    assert json.loads(out)["conditions_differ"] == ["vLLM version 0.11.0 vs 0.8.3"]
