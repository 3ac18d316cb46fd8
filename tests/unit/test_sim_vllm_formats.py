"""The simulator's vLLM lines against vLLM's format strings and against real/quoted lines.

Real lines (vllm-project/vllm PR #24127 test output, quoted in shared/vllm-observables.md 1a,
see tests/data/README.md "vLLM format lines") and the note's example lines built from the
format strings are pasted below as literals: the simulator must reproduce them byte for byte
from the counts alone.
"""

import math
import re
import time

import pytest
from kit.paths import TESTS

from specmon.sim import vllm_formats as vf

ANSI = re.compile(r"\x1b\[[0-9;]*m")

# vllm/v1/spec_decode/metrics.py, copied from the research note's table 1a (not from vf)
F1 = ('"SpecDecoding metrics: " "Draft acceptance rate: %.1f%%, " "Accepted: %d tokens, " '
      '"Drafted: %d tokens"')
F2 = ('"SpecDecoding metrics: " "Draft acceptance rate: %.1f%%, " "Mean acceptance length: '
      '%.2f, " "Accepted: %d tokens, " "Drafted: %d tokens, " "Per-position acceptance rate: %s"')
F3 = ('"SpecDecoding metrics: " "Mean acceptance length: %.2f, " "Accepted throughput: %.2f '
      'tokens/s, " "Drafted throughput: %.2f tokens/s, " "Accepted: %d tokens, " "Drafted: %d '
      'tokens, " "Per-position acceptance rate: %s, " "Avg Draft acceptance rate: %.1f%%"')
ENGINE_011 = ('"Avg prompt throughput: %.1f tokens/s, " "Avg generation throughput: %.1f '
              'tokens/s, " "Running: %d reqs, Waiting: %d reqs, " "GPU KV cache usage: %.1f%%, '
              '" "Prefix cache hit rate: %.1f%%"')


def joined(literals: str) -> str:
    """Python's implicit concatenation of the quoted literals."""
    return "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', literals))


def fmt_regex(fmt: str) -> re.Pattern[str]:
    """A %-format string as a regex: %.Nf -> number or nan, %d -> int, %s -> rates list."""
    out, i = "", 0
    for m in re.finditer(r"%(\.\d)?[dfs%]", fmt):
        out += re.escape(fmt[i:m.start()])
        spec = m.group(0)
        out += {"%%": "%", "%d": r"\d+", "%s": r"(?:\d+\.\d{3}|nan)(?:, (?:\d+\.\d{3}|nan))*"}.get(
            spec, r"(?:\d+\.\d+|nan)")
        i = m.end()
    return re.compile(out + re.escape(fmt[i:]))


def local(md_hms: str, year: int = 2025) -> float:
    return time.mktime(time.strptime(f"{year}-{md_hms}", "%Y-%m-%d %H:%M:%S"))


def test_the_sims_format_strings_are_vllms_verbatim():
    assert vf.SPEC_F1 == joined(F1)
    assert vf.SPEC_F2 == joined(F2)
    assert vf.SPEC_F3 == joined(F3)
    assert vf.ENGINE_FIXED == joined(ENGINE_011)


def test_layout_by_version():
    assert [vf.spec_layout(v) for v in ("0.8.3", "0.8.4", "0.8.5", "0.9.0", "0.10.1.1",
                                        "0.10.2", "0.33.0")] == [
        "F1", "F1", "F2a", "F2b", "F2b", "F3", "F3"]
    assert [vf.spec_lineno(v) for v in ("0.8.4", "0.8.5", "0.9.0", "0.9.2", "0.11.0", "0.18.0",
                                        "0.21.0", "0.25.0", "0.33.0")] == [
        53, 82, 86, 87, 96, 100, 101, 120, 120]


@pytest.mark.parametrize("version", vf.VERSIONS)
def test_every_versions_spec_line_matches_its_format_string(version):
    fmt = {"F1": F1, "F2a": F2, "F2b": F2, "F3": F3}[vf.spec_layout(version)]
    msg = vf.spec_message(version, num_drafts=5120, num_draft_tokens=15360, num_accepted=9339,
                          accepted_per_pos=[4101, 3082, 2156], elapsed_s=10.0)
    assert msg is not None and fmt_regex(joined(fmt)).fullmatch(msg), msg
    eng = vf.engine_message(version, engine=0, prompt_tps=812.4, gen_tps=1445.9, running=24,
                            waiting=0, kv_usage_pct=18.3, prefix_hit_pct=52.7)
    assert re.fullmatch(r"Engine 000: " + fmt_regex(joined(ENGINE_011)).pattern, eng), eng


def test_real_f3_and_engine_lines_reproduced_byte_for_byte():
    # vllm-project/vllm PR #24127 (v0.10.2 dev); pasted without its ANSI colour
    real_spec = ("(APIServer pid=722408) INFO 10-26 12:36:16 [metrics.py:96] SpecDecoding "
                 "metrics: Mean acceptance length: 2.01, Accepted throughput: 20.60 tokens/s, "
                 "Drafted throughput: 60.90 tokens/s, Accepted: 206 tokens, Drafted: 609 "
                 "tokens, Per-position acceptance rate: 0.601, 0.286, 0.128, Avg Draft "
                 "acceptance rate: 33.8%")
    real_engine = ("(APIServer pid=722408) INFO 10-26 12:36:26 [loggers.py:127] Engine 000: "
                   "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 47.4 "
                   "tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.9%, "
                   "Prefix cache hit rate: 37.2%")
    v = "0.10.2"
    tag = vf.tag_prefix(v, vf.api_tag(v), 722408)
    assert tag.startswith("\x1b[1;36m(APIServer pid=722408)\x1b[0;0m ")
    msg = vf.spec_message(v, num_drafts=203, num_draft_tokens=609, num_accepted=206,
                          accepted_per_pos=[122, 58, 26], elapsed_s=10.0)
    assert msg is not None
    line = vf.line(v, local("10-26 12:36:16"), msg, filename="metrics.py",
                   lineno=vf.spec_lineno(v), tag=tag)
    assert ANSI.sub("", line) == real_spec
    eng = vf.engine_message(v, engine=0, prompt_tps=0.0, gen_tps=47.4, running=1, waiting=0,
                            kv_usage_pct=1.9, prefix_hit_pct=37.2)
    line = vf.line(v, local("10-26 12:36:26"), eng, filename="loggers.py",
                   lineno=vf.engine_lineno(v), tag=tag)
    assert ANSI.sub("", line) == real_engine


def test_note_example_lines_per_layout():
    counts = dict(num_drafts=5120, num_draft_tokens=15360, num_accepted=9339,
                  accepted_per_pos=[4101, 3082, 2156], elapsed_s=10.0)
    cases = [
        ("0.8.4", "INFO 04-18 09:15:02 [metrics.py:53] SpecDecoding metrics: Draft acceptance "
         "rate: 60.8%, Accepted: 9339 tokens, Drafted: 15360 tokens", "04-18 09:15:02"),
        ("0.8.5", "INFO 05-06 11:02:40 [metrics.py:82] SpecDecoding metrics: Draft acceptance "
         "rate: 60.8%, Mean acceptance length: 1.82, Accepted: 9339 tokens, Drafted: 15360 "
         "tokens, Per-position acceptance rate: 0.801, 0.602, 0.421", "05-06 11:02:40"),
        ("0.9.2", "INFO 07-10 14:20:31 [metrics.py:87] SpecDecoding metrics: Draft acceptance "
         "rate: 60.8%, Mean acceptance length: 2.82, Accepted: 9339 tokens, Drafted: 15360 "
         "tokens, Per-position acceptance rate: 0.801, 0.602, 0.421", "07-10 14:20:31"),
        ("0.33.0", "(APIServer pid=2210) INFO 12-01 10:11:12 [metrics.py:120] SpecDecoding "
         "metrics: Mean acceptance length: 2.82, Accepted throughput: 933.90 tokens/s, Drafted "
         "throughput: 1536.00 tokens/s, Accepted: 9339 tokens, Drafted: 15360 tokens, "
         "Per-position acceptance rate: 0.801, 0.602, 0.421, Avg Draft acceptance rate: 60.8%",
         "12-01 10:11:12"),
    ]
    for version, want, when in cases:
        msg = vf.spec_message(version, **counts)
        assert msg is not None
        tag = vf.tag_prefix(version, vf.api_tag(version), 2210)
        got = vf.line(version, local(when), msg, filename="metrics.py",
                      lineno=vf.spec_lineno(version), tag=tag)
        assert got == want, version  # 0.18+ writes no colour into files


def test_nan_line_of_085_and_silence_from_090():
    msg = vf.spec_message("0.8.5", num_drafts=0, num_draft_tokens=0, num_accepted=0,
                          accepted_per_pos=[0, 0, 0], elapsed_s=10.0)
    assert msg == ("SpecDecoding metrics: Draft acceptance rate: nan%, Mean acceptance length: "
                   "nan, Accepted: 0 tokens, Drafted: 0 tokens, Per-position acceptance rate: "
                   "nan, nan, nan")
    for v in ("0.9.0", "0.10.2", "0.33.0"):
        assert vf.spec_message(v, num_drafts=0, num_draft_tokens=0, num_accepted=0,
                               accepted_per_pos=[0, 0, 0], elapsed_s=10.0) is None


def test_bonus_token_left_out_only_in_085():
    args = dict(num_drafts=100, num_draft_tokens=300, num_accepted=182,
                accepted_per_pos=[80, 60, 42], elapsed_s=10.0)
    mean = {v: float(re.search(r"Mean acceptance length: ([\d.]+)",
                               vf.spec_message(v, **args) or "").group(1))
            for v in ("0.8.5", "0.9.0", "0.33.0")}
    assert mean["0.8.5"] == 1.82 and mean["0.9.0"] == mean["0.33.0"] == 2.82


def test_tags_and_colour_per_version():
    assert vf.api_tag("0.9.2") is None and vf.tag_prefix("0.9.2", None, 5) == ""
    assert vf.engine_core_name("0.9.2") is None
    assert vf.engine_core_name("0.9.2", dp_rank=1, dp_size=2) == "EngineCore_1"
    assert vf.engine_core_name("0.13.0") == "EngineCore_DP0"
    assert vf.engine_core_name("0.18.0") == "EngineCore"
    assert vf.engine_core_name("0.33.0", 1, 2) == "EngineCore_DP1"
    assert vf.worker_name("0.9.2", 1, 2) == "VllmWorker rank=1"
    assert vf.worker_name("0.10.2", 1, 2) == "Worker_TP1"
    assert vf.worker_name("0.10.2", 0, 1) == "Worker"
    assert vf.tag_prefix("0.13.0", "APIServer", 7) == "\x1b[0;36m(APIServer pid=7)\x1b[0;0m "
    assert vf.tag_prefix("0.13.0", "APIServer", 7, no_color=True) == "(APIServer pid=7) "
    assert vf.tag_prefix("0.11.0", "APIServer", 7, no_color=True).startswith("\x1b[1;36m")
    assert vf.tag_prefix("0.31.0", "APIServer", 7) == "(APIServer pid=7) "
    assert vf.proc_title("Worker_TP3") == "VLLM::Worker_TP3"
    assert vf.proc_title("EngineCore_DP0", "X") == "X::EngineCore_DP0"


def test_continuation_lines_repeat_tag_and_header():
    t = local("03-04 05:06:07")
    got = vf.line("0.10.2", t, "Traceback (most recent call last):\n  File \"x\"",
                  filename="core.py", lineno=9, tag="(EngineCore_DP0 pid=3) ", level="ERROR",
                  prefix="P> ")
    head = "(EngineCore_DP0 pid=3) P> ERROR 03-04 05:06:07 [core.py:9] "
    assert got == head + "Traceback (most recent call last):\r\n" + head + '  File "x"'


def test_engine_line_optional_parts():
    base = dict(engine=1, prompt_tps=1.0, gen_tps=2.0, running=3, waiting=4, kv_usage_pct=5.0)
    assert vf.engine_message("0.12.0", preemptions=2, prefix_hit_pct=6.0, **base) == (
        "Engine 001: Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 "
        "tokens/s, Running: 3 reqs, Waiting: 4 reqs, Preemptions: 2, GPU KV cache usage: 5.0%, "
        "Prefix cache hit rate: 6.0%")
    # 0.31+: no prefix-cache part before the cache saw queries
    assert vf.engine_message("0.31.0", prefix_hit_pct=None, **base).endswith(
        "GPU KV cache usage: 5.0%")
    assert "Prefix cache hit rate: 0.0%" in vf.engine_message("0.11.0", prefix_hit_pct=None,
                                                              **base)


def test_config_line_carries_the_fingerprint_fields():
    msg = vf.config_message("0.10.2", model="m/x", served_model_name="x", method="eagle3",
                            draft="d/y", k=3, tp=2, seed=0, max_model_len=4096)
    assert msg.startswith("Initializing a V1 LLM engine (v0.10.2) with config: model='m/x', "
                          "speculative_config=SpeculativeConfig(method='eagle3', model='d/y', "
                          "num_spec_tokens=3), ")
    assert "tensor_parallel_size=2, pipeline_parallel_size=1, data_parallel_size=1" in msg
    assert "data_parallel_size" not in vf.config_message(
        "0.10.1.1", model="m", served_model_name="m", method=None, draft=None, k=0, tp=1, seed=0,
        max_model_len=1)
    assert "speculative_config=None" in vf.config_message(
        "0.9.2", model="m", served_model_name="m", method=None, draft=None, k=0, tp=1, seed=0,
        max_model_len=1)


def test_metrics_text_is_prometheus_and_finite():
    text = vf.metrics_text("0.33.0", model_name="m", counters={"generation_tokens": 5},
                           gauges={"num_requests_running": 2}, per_pos=[3, 1], created=1.5)
    assert 'vllm:generation_tokens_total{model_name="m",engine="0"} 5.0' in text
    assert 'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",engine="0",' \
           'position="1"} 1.0' in text
    assert "# TYPE vllm:num_requests_running gauge" in text
    for ln in text.splitlines():
        if not ln.startswith("#"):
            assert math.isfinite(float(ln.rsplit(" ", 1)[1]))


def test_env_edits():
    assert vf.env_edits("0.9.2", {"NCCL_CUMEM_ENABLE": "1"})["NCCL_CUMEM_ENABLE"] == "0"
    assert "NCCL_CUMEM_ENABLE" not in vf.env_edits("0.10.2", {"NCCL_CUMEM_ENABLE": "1"})
    assert "OMP_NUM_THREADS" not in vf.env_edits("0.10.2", {"OMP_NUM_THREADS": "4"})


def _real_lines():
    import json

    path = TESTS / "data" / "vllm-logs" / "real-lines.jsonl"
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def _split_header(line: str):
    m = re.match(r"(?:\S+Z )?(?:\((?P<proc>[^()]+) pid=(?P<pid>\d+)\) )?INFO (?P<md>\d\d-\d\d "
                 r"\d\d:\d\d:\d\d) \[(?P<file>[^:\]]+):(?P<lineno>\d+)\] (?P<msg>.*)", line)
    assert m, line
    return m


def _elapsed(count: int, tps: float) -> tuple[float, float]:
    """The open interval of elapsed seconds for which count/elapsed rounds to tps (%.2f)."""
    return count / (tps + 0.005), (count / (tps - 0.005) if tps > 0.005 else float("inf"))


def test_real_f3_and_engine_lines_reproduced_from_their_counts():
    """Every real F3 spec line and every real Engine line whose parts the sim writes
    (tests/data/vllm-logs/real-lines.jsonl) comes out byte for byte from its counts alone."""
    done = {"spec": 0, "decode": 0}
    for case in _real_lines():
        line, exp = case["line"], case["expect"]
        pre_merge = "Draft acceptance rate" in line.split("Mean")[0]  # PR #24127's variant
        if case["kind"] == "spec" and "Mean acceptance length" in line and not pre_merge:
            m = _split_header(line)
            pp, acc, drafted = exp["per_position"], exp["accepted"], exp["drafted"]
            k = len(pp)
            drafts = drafted // k  # these drafters propose full-length drafts
            per_pos = [round(p * drafts) for p in pp]
            d_tps = float(re.search(r"Drafted throughput: ([\d.]+)", line).group(1))
            a_tps = float(re.search(r"Accepted throughput: ([\d.]+)", line).group(1))
            lo, hi = _elapsed(drafted, d_tps)
            if acc:
                a_lo, a_hi = _elapsed(acc, a_tps)
                lo, hi = max(lo, a_lo), min(hi, a_hi)
            assert lo < hi, case
            msg = vf.spec_message("0.33.0", num_drafts=drafts, num_draft_tokens=drafted,
                                  num_accepted=acc, accepted_per_pos=per_pos,
                                  elapsed_s=(lo + hi) / 2)
            assert msg == m["msg"], (msg, line)
            done["spec"] += 1
        elif case["kind"] == "decode" and "MM cache" not in line and "Engine 000" in line:
            m = _split_header(line)
            version = "0.13.0" if m["proc"] else "0.9.2"
            hit = re.search(r"Prefix cache hit rate: ([\d.]+)%", line)
            msg = vf.engine_message(
                version, engine=0, prompt_tps=float(re.search(r"prompt throughput: ([\d.]+)",
                                                              line).group(1)),
                gen_tps=exp["gen_throughput"], running=exp["running_req"],
                waiting=exp["queue_req"], kv_usage_pct=float(re.search(
                    r"KV cache usage: ([\d.]+)%", line).group(1)),
                prefix_hit_pct=float(hit.group(1)) if hit else None)
            head = vf.tag_prefix(version, m["proc"], int(m["pid"] or 0), no_color=True)
            got = vf.line(version, local(m["md"], 2025), msg, filename=m["file"],
                          lineno=int(m["lineno"]), tag=head)
            assert got == line[line.index(m["proc"] and "(" or "INFO"):], (got, line)
            done["decode"] += 1
    assert done["spec"] >= 4 and done["decode"] >= 5, done  # each such line was checked above


def test_metrics_text_parses_with_prometheus_client():
    """The sim's /metrics is valid exposition text: prometheus_client's own parser reads the
    counters (`_total`, `_created`), gauges and the per-position series back."""
    from prometheus_client.parser import text_string_to_metric_families

    text = vf.metrics_text("0.33.0", model_name="org/m", engine=0,
                           counters={"generation_tokens": 1234,
                                     "spec_decode_num_drafts": 10,
                                     "spec_decode_num_accepted_tokens": 17},
                           gauges={"num_requests_running": 3, "kv_cache_usage_perc": 0.25},
                           per_pos=[9, 6, 2], created=1700000000.0)
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert fams["vllm:generation_tokens"].type == "counter"
    total = [s for s in fams["vllm:generation_tokens"].samples if s.name.endswith("_total")]
    assert total[0].value == 1234 and total[0].labels == {"model_name": "org/m", "engine": "0"}
    assert fams["vllm:num_requests_running"].samples[0].value == 3
    pos = {s.labels["position"]: s.value
           for s in fams["vllm:spec_decode_num_accepted_tokens_per_pos"].samples
           if s.name.endswith("_total")}
    assert pos == {"0": 9, "1": 6, "2": 2}
