# ruff: noqa: UP031  (vLLM's own %-format strings, kept verbatim)
"""vLLM log lines -> records: real pasted lines (tests/data/vllm-logs/real-lines.jsonl) and lines
generated here from vLLM's own format strings (verbatim from the released wheels, as listed in
the observables reference; see tests/data/README.md)."""

from __future__ import annotations

import json

import pytest
from kit.paths import TESTS

from specmon.parse.sglang import BatchRecord, EventRecord, parse_line
from specmon.parse.vllm import (
    JOINED,
    SpecJoiner,
    VllmDecodeRecord,
    VllmEventRecord,
    clean,
    infer_year,
    join_records,
    normalised_accept_len,
    same_line,
)

DATA = TESTS / "data" / "vllm-logs"


def _real() -> list[dict]:
    return [json.loads(x) for x in (DATA / "real-lines.jsonl").read_text().splitlines()]


def _row_id(r: dict) -> str:
    return r["source"].split(" ")[0].rsplit("/", 2)[-2] + "-" + r["kind"]


@pytest.mark.parametrize("row", _real(), ids=_row_id)
def test_real_lines(row: dict) -> None:
    rec = parse_line(row["line"])
    if row["kind"] == "other":
        assert rec is None
        return
    assert rec is not None and rec.kind == row["kind"]
    out = rec.to_json()
    assert out["engine"] == "vllm"
    for key, want in row["expect"].items():  # (None: not printed, so absent or null)
        assert (out.get(key) if want is None else out[key]) == want, key


# --- lines built from vLLM's format strings --------------------------------------------------

F1 = ("SpecDecoding metrics: " "Draft acceptance rate: %.1f%%, " "Accepted: %d tokens, "
      "Drafted: %d tokens")
F2 = ("SpecDecoding metrics: " "Draft acceptance rate: %.1f%%, " "Mean acceptance length: %.2f, "
      "Accepted: %d tokens, " "Drafted: %d tokens, " "Per-position acceptance rate: %s")
F3 = ("SpecDecoding metrics: " "Mean acceptance length: %.2f, "
      "Accepted throughput: %.2f tokens/s, " "Drafted throughput: %.2f tokens/s, "
      "Accepted: %d tokens, " "Drafted: %d tokens, " "Per-position acceptance rate: %s, "
      "Avg Draft acceptance rate: %.1f%%")
V0_SPEC = ("Speculative metrics: Draft acceptance rate: {:.3f}, System efficiency: {:.3f}, "
           "Number of speculative tokens: {}, Number of accepted tokens: {}, "
           "Number of draft tokens: {}, Number of emitted tokens: {}.")
THR_080 = ("Avg prompt throughput: %.1f tokens/s, " "Avg generation throughput: %.1f tokens/s, "
           "Running: %d reqs, Waiting: %d reqs, " "GPU KV cache usage: %.1f%%, "
           "Prefix cache hit rate: %.1f%%")
THR_V0 = ("Avg prompt throughput: %.1f tokens/s, " "Avg generation throughput: %.1f tokens/s, "
          "Running: %d reqs, Swapped: %d reqs, " "Pending: %d reqs, GPU KV cache usage: %.1f%%, "
          "CPU KV cache usage: %.1f%%.")
HEAD_08 = "INFO 04-18 09:15:02 [%s:%d] "  # 0.8.0-0.10.1
HEAD_31 = "(%s pid=%d) INFO 11-20 08:00:00 [%s:%d] "  # 0.31+ (and the 0.10-0.30 wrapper)


def _parts_012(*, preempt: int = 0, deferred: int = 0, dev: str = "GPU", prefix: bool = True,
               kv_fetch: tuple[int, int, int] | None = None) -> str:
    """The 0.12-0.33 throughput line, built as `LoggingStatLogger.log` builds it."""
    parts = ["Avg prompt throughput: %.1f tokens/s" % 812.4,
             "Avg generation throughput: %.1f tokens/s" % 1445.9,
             "Running: %d reqs" % 24, "Waiting: %d reqs" % 3]
    if deferred:
        parts.append("Deferred: %d reqs" % deferred)
    if preempt:
        parts.append("Preemptions: %d" % preempt)
    parts.append("%s KV cache usage: %.1f%%" % (dev, 18.3))
    if prefix:
        parts.append("Prefix cache hit rate: %.1f%%" % 52.7)
    if kv_fetch:
        parts.append("KV fetch: %d waiting to start, %d in progress, %d completed waiting" % kv_fetch)
    parts.append("External prefix cache hit rate: %.1f%%" % 7.5)
    parts.append("MM cache hit rate: %.1f%%" % 1.0)
    return "Engine %03d: " % 2 + ", ".join(parts)


def test_throughput_line_parts_by_name() -> None:
    line = HEAD_31 % ("APIServer", 7, "loggers.py", 240) + _parts_012(
        preempt=4, deferred=2, dev="XPU", prefix=False, kv_fetch=(1, 2, 3))
    rec = parse_line(line)
    assert isinstance(rec, VllmDecodeRecord)
    assert (rec.dp_rank, rec.running_req, rec.queue_req) == (2, 24, 3)
    assert (rec.gen_throughput, rec.prompt_throughput) == (1445.9, 812.4)
    assert (rec.kv_device, rec.kv_cache_usage_pct, rec.prefix_cache_hit_pct) == ("XPU", 18.3, None)
    assert (rec.preemptions, rec.deferred_req) == (4, 2)
    assert (rec.kv_fetch_waiting, rec.kv_fetch_in_progress, rec.kv_fetch_completed_waiting) == (1, 2, 3)
    assert (rec.external_prefix_cache_hit_pct, rec.mm_cache_hit_pct) == (7.5, 1.0)
    j = rec.to_json()
    assert j["prefix_cache_hit_pct"] is None and j["preemptions"] == 4


def test_080_and_v0_throughput_lines() -> None:
    r080 = parse_line(HEAD_08 % ("loggers.py", 70) + THR_080 % (1.0, 50.5, 3, 0, 2.5, 0.0))
    assert isinstance(r080, VllmDecodeRecord) and r080.dp_rank is None
    assert (r080.gen_throughput, r080.running_req, r080.queue_req) == (50.5, 3, 0)
    v0 = parse_line("INFO 05-06 08:00:15 metrics.py:400] "
                    + THR_V0 % (10.0, 220.3, 8, 1, 5, 40.2, 0.5))
    assert isinstance(v0, VllmDecodeRecord)
    assert (v0.running_req, v0.swapped_req, v0.queue_req) == (8, 1, 5)
    assert (v0.kv_cache_usage_pct, v0.cpu_kv_cache_usage_pct) == (40.2, 0.5)


def test_aggregated_engines_line() -> None:
    rec = parse_line(HEAD_31 % ("APIServer", 7, "loggers.py", 240) + "4 Engines Aggregated: "
                     + THR_080 % (1.0, 900.0, 64, 2, 30.0, 10.0))
    assert isinstance(rec, VllmDecodeRecord)
    assert rec.engines_aggregated == 4 and rec.dp_rank is None and rec.running_req == 64


@pytest.mark.parametrize("fmt,args,layout,mal", [
    (F1, (60.8, 9339, 15360), "F1", None),
    (F2, (60.8, 1.82, 9339, 15360, "0.801, 0.602, 0.421"), "F2", 1.82),
    (F3, (2.82, 933.9, 1536.0, 9339, 15360, "0.801, 0.602, 0.421", 60.8), "F3", 2.82),
])
def test_spec_layouts(fmt: str, args: tuple, layout: str, mal: float | None) -> None:
    rec = parse_line(HEAD_08 % ("metrics.py", 87) + fmt % args)
    assert isinstance(rec, VllmEventRecord) and rec.kind == "spec"
    d = rec.data
    assert (d["_layout"], d["mean_accept_len"], d["accepted"], d["drafted"]) == (layout, mal, 9339, 15360)
    assert "_layout" not in rec.to_json()
    assert d["draft_accept_rate_pct"] == 60.8
    if layout == "F3":
        assert (d["accepted_throughput"], d["drafted_throughput"]) == (933.9, 1536.0)
    else:
        assert d["accepted_throughput"] is None and d["drafted_throughput"] is None
    assert d["per_position"] == (None if layout == "F1" else [0.801, 0.602, 0.421])
    assert set(rec.to_json()) >= {"mean_accept_len", "accepted", "drafted", "draft_accept_rate_pct",
                                  "accepted_throughput", "drafted_throughput", "per_position"}


def test_nan_becomes_none_and_is_named() -> None:
    rec = parse_line(HEAD_08 % ("metrics.py", 82) + F2 % (float("nan"), float("nan"), 0, 0,
                                                          "nan, nan, nan"))
    assert isinstance(rec, VllmEventRecord)
    assert rec.data["mean_accept_len"] is None and rec.data["draft_accept_rate_pct"] is None
    assert rec.data["per_position"] == [None, None, None]
    assert "mean_accept_len" in rec.invalid and len(rec.invalid) == 5
    assert "NaN" not in json.dumps(rec.to_json())


def test_bonus_detection_085_vs_09() -> None:
    pp = [0.801, 0.602, 0.421]
    base = {"per_position": pp, "accepted": 9339, "drafted": 15360}
    v085, note = normalised_accept_len({**base, "mean_accept_len": 1.82})
    assert v085 == pytest.approx(2.82) and note and "0.8.5" in note
    v09, note9 = normalised_accept_len({**base, "mean_accept_len": 2.82})
    assert v09 == 2.82 and note9 is None
    # all rejected: 0.00 on 0.8.5, 1.00 on 0.9+ -> both 1.0
    assert normalised_accept_len({"per_position": [0.0, 0.0], "mean_accept_len": 0.0})[0] == 1.0
    assert normalised_accept_len({"per_position": [0.0, 0.0], "mean_accept_len": 1.0})[0] == 1.0


def test_config_lines() -> None:
    v1 = parse_line(
        "(EngineCore_DP0 pid=774560) INFO 10-30 14:20:52 [core.py:93] Initializing a V1 LLM engine "
        "(v0.11.0) with config: model='meta-llama/Meta-Llama-3.1-8B-Instruct', "
        "speculative_config=SpeculativeConfig(method='eagle3', model='org/eagle3-draft', "
        "num_spec_tokens=3), tokenizer='meta-llama/Meta-Llama-3.1-8B-Instruct', "
        "tensor_parallel_size=2, pipeline_parallel_size=1, data_parallel_size=4, seed=0")
    assert isinstance(v1, VllmEventRecord) and v1.kind == "server_args"
    assert v1.to_json() | {} == v1.to_json()
    want = {"engine_version": "0.11.0", "model_path": "meta-llama/Meta-Llama-3.1-8B-Instruct",
            "speculative_algorithm": "eagle3", "speculative_num_tokens": 3,
            "speculative_draft_model_path": "org/eagle3-draft", "tp_size": 2, "pp_size": 1,
            "dp_size": 4}
    assert {k: v1.data[k] for k in want} == want
    ngram = parse_line("INFO 04-17 23:05:00 [core.py:61] Initializing a V1 LLM engine (v0.8.3) "
                       "with config: model='m', speculative_config=SpeculativeConfig("
                       "method='ngram', model=None, num_spec_tokens=5), tokenizer='m'")
    assert isinstance(ngram, EventRecord)
    assert (ngram.data["speculative_algorithm"], ngram.data["speculative_draft_model_path"],
            ngram.data["speculative_num_tokens"]) == ("ngram", None, 5)
    assert "tp_size" not in ngram.data and "dp_size" not in ngram.data  # not printed: unknown
    base = parse_line("INFO 01-14 03:08:50 llm_engine.py:234] Initializing an LLM engine (v0.6.6) "
                      "with config: model='/m/Qwen2', speculative_config=None, tokenizer='/m/Qwen2', "
                      "tensor_parallel_size=1, pipeline_parallel_size=2")
    assert isinstance(base, EventRecord) and base.data["speculative_algorithm"] is None
    assert (base.data["engine_version"], base.data["pp_size"]) == ("0.6.6", 2)
    nd = parse_line("(APIServer pid=1) INFO 05-01 10:00:00 [utils.py:233] non-default args: "
                    "{'model': 'Qwen/Qwen3-8B', 'speculative_config': {'method': 'eagle3', "
                    "'num_speculative_tokens': 3, 'rejection_sample_method': 'synthetic'}}")
    assert isinstance(nd, EventRecord) and nd.kind == "vllm_args"
    assert nd.data["args"]["speculative_config"]["rejection_sample_method"] == "synthetic"


def test_preprocessing_tags_ansi_prefix_continuation() -> None:
    body = F3 % (2.06, 235.7, 669.0, 2357, 6690, "0.612, 0.301, 0.144", 35.2)
    ansi = (f"\x1b[1;36m(APIServer pid=2210)\x1b[0;0m \x1b[32mINFO\x1b[0m 12-01 10:11:22 "
            f"[metrics.py:120] {body}")
    head = "(APIServer pid=2210) INFO 12-01 10:11:22 "
    prefix = f"[myhost] {head}[v1/spec_decode/metrics.py:120] {body}"
    cont = f"{head}[metrics.py:120] first part\r{head}[metrics.py:120] {body}\r\n"
    for line in (ansi, prefix, cont):
        rec = parse_line(line)
        assert isinstance(rec, VllmEventRecord), line
        assert (rec.process, rec.pid, rec.data["accepted"]) == ("APIServer", 2210, 2357)
    worker = parse_line("(VllmWorker rank=1 pid=99) INFO 07-10 14:20:31 [loggers.py:111] Engine 001: "
                        + THR_080 % (0.0, 10.0, 1, 0, 1.0, 0.0))
    assert isinstance(worker, VllmDecodeRecord) and worker.process == "VllmWorker rank=1"
    assert clean(b"a\rb\r\n") == "b"


def test_year_inference_and_rollover() -> None:
    import time
    jan2 = time.mktime((2027, 1, 2, 12, 0, 0, 0, 0, -1))
    assert infer_year(12, 31, jan2) == 2026  # written last year
    assert infer_year(1, 2, jan2) == 2027
    assert infer_year(1, 3, jan2) == 2027  # one day of clock skew still this year
    dec31 = time.mktime((2026, 12, 31, 23, 0, 0, 0, 0, -1))
    assert infer_year(1, 1, dec31) == 2027  # tomorrow across New Year


def test_not_vllm_lines() -> None:
    assert parse_line("(APIServer pid=1) INFO 05-01 10:00:00 [api.py:1] Avg prompt throughput "
                      "is a nice name") is None
    assert parse_line("a user wrote SpecDecoding metrics: into a prompt") is None
    garbage = "(APIServer pid=1) INFO 05-01 10:00:00 [m.py:1] SpecDecoding metrics: Accepted: " \
              + "9" * 5000 + " tokens, Drafted: 1 tokens"
    rec = parse_line(garbage)
    assert rec is None or rec.data["accepted"] is None


def test_joiner_pairs_spec_with_its_engine_and_diffs_v0() -> None:
    h = "(APIServer pid=5) INFO 07-10 14:20:31 [x.py:1] "
    lines = [h + "Engine 000: " + THR_080 % (0.0, 100.0, 4, 0, 1.0, 0.0),
             h + F2 % (60.8, 2.82, 9339, 15360, "0.801, 0.602, 0.421"),
             h + "Engine 001: " + THR_080 % (0.0, 50.0, 2, 0, 1.0, 0.0),
             "(APIServer pid=5) INFO:     127.0.0.1:1 - \"POST /v1/completions\" 200 OK",
             h + "Engine 000: " + THR_080 % (0.0, 90.0, 4, 0, 1.0, 0.0)]
    recs = join_records(parse_line(x) for x in lines)
    dec = [r for r in recs if isinstance(r, BatchRecord)]
    assert [r.dp_rank for r in dec] == [0, 1, 0]
    assert dec[0].accept_len == 2.82 and dec[0].accept_rate == pytest.approx(9339 / 15360)
    assert dec[1].accept_len is None and dec[2].accept_len is None
    assert sum(1 for r in recs if r.kind == "spec") == 1  # passed on, nothing lost
    v0 = [parse_line(_real()[i]["line"]) for i in (11, 12)]
    j = SpecJoiner()
    out = [r for x in v0 for r in j.push(x)]
    assert out[0].data["accepted"] is None  # first cumulative line: no interval yet
    assert (out[1].data["accepted"], out[1].data["drafted"], out[1].data["emitted"]) == (0, 10, 2)
    assert out[1].data["accepted_total"] == 1 and out[1].data["draft_accept_rate_pct"] == 0.0
    assert out[1].data["mean_accept_len"] == pytest.approx(2 * 5 / 10)


def test_hostile_lines_never_raise_and_stay_bounded() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    head = "(APIServer pid=1) INFO 05-01 10:00:00 [m.py:1] "
    bodies = st.sampled_from([
        "SpecDecoding metrics: ", "Engine 000: Avg prompt throughput: ", "Speculative metrics: ",
        "Initializing a V1 LLM engine (v1) with config: ", "non-default args: "])

    @settings(max_examples=300, deadline=None)
    @given(bodies, st.text(max_size=300))
    def check(body: str, tail: str) -> None:
        rec = parse_line(head + body + tail)
        assert rec is None or rec.to_json()["engine"] == "vllm"

    check()
    many = head + F2 % (50.0, 2.0, 10, 20, ", ".join(["0.500"] * 10_000))
    rec = parse_line(many)
    assert isinstance(rec, VllmEventRecord) and len(rec.data["per_position"]) == 64
    deep = head + "non-default args: " + "{'a': " * 5000 + "1" + "}" * 5000
    assert parse_line(deep) is None  # literal_eval's recursion limit: not a crash


def test_non_default_args_keep_only_known_keys_no_secrets() -> None:
    rec = parse_line("(APIServer pid=1) INFO 05-01 10:00:00 [utils.py:233] non-default args: "
                     "{'model': 'm', 'api_key': ['sk-live-abcdef1234567890'], "
                     "'hf_token': 'hf_abcdefghijklmnopqrstuvwxyz12', 'max_num_seqs': 64}")
    assert isinstance(rec, VllmEventRecord)
    assert rec.data["args"] == {"model": "m", "max_num_seqs": 64}
    assert "sk-live" not in json.dumps(rec.to_json())


def test_a_non_default_arg_nested_too_deep_is_left_out() -> None:
    """Python's parser reads ~200 levels: a speculative_config nested 150 deep was kept, and
    its record, exported, nested past what the snapshot reader takes (jsonout.MAX_DEPTH per
    field): export wrote a file report refused. Past MAX_ARG_DEPTH a value is no config."""
    from specmon.jsonout import MAX_DEPTH, too_deep
    from specmon.parse.vllm import MAX_ARG_DEPTH

    head = "(APIServer pid=1) INFO 05-01 10:00:00 [utils.py:233] non-default args: "
    deep = "{'a': " * 150 + "1" + "}" * 150
    rec = parse_line(head + "{'model': 'm', 'speculative_config': " + deep + "}")
    assert isinstance(rec, VllmEventRecord) and rec.data["args"] == {"model": "m"}
    ok = "{'method': 'eagle3', 'k': [[1]]}"
    rec = parse_line(head + "{'model': 'm', 'speculative_config': " + ok + "}")
    assert isinstance(rec, VllmEventRecord)
    assert rec.data["args"]["speculative_config"] == {"method": "eagle3", "k": [[1]]}
    assert too_deep(rec.to_json(), MAX_DEPTH) is None and MAX_ARG_DEPTH + 3 < MAX_DEPTH


def test_joiner_two_api_servers_interleaved() -> None:
    """External DP load balancing: `(APIServer_DP0 pid=A)` and `(APIServer_DP1 pid=B)` print
    into one file; each spec line joins its own process's engine line."""
    def eng(dp: int, pid: int, gen: float) -> str:
        return (f"(APIServer_DP{dp} pid={pid}) INFO 05-20 10:42:11 [loggers.py:271] "
                + "Engine %03d: " % dp + THR_080 % (0.0, gen, 8, 0, 1.0, 0.0))

    def spec(dp: int, pid: int, acc: int) -> str:
        return (f"(APIServer_DP{dp} pid={pid}) INFO 05-20 10:42:11 [metrics.py:120] "
                + F3 % (1 + acc / 1000, acc / 10, 300.0, acc, 3000, "0.500, 0.300, 0.100", 30.0))

    lines = [eng(1, 22, 900.0), eng(0, 11, 800.0), spec(1, 22, 600), spec(0, 11, 900)]
    recs = [r for r in join_records(parse_line(x) for x in lines) if isinstance(r, VllmDecodeRecord)]
    by_dp = {r.dp_rank: r for r in recs}
    assert by_dp[1].spec is not None and by_dp[1].spec["accepted"] == 600
    assert by_dp[0].spec is not None and by_dp[0].spec["accepted"] == 900


def test_api_server_start_is_ready() -> None:
    """Real 0.10.2 line (kagaho/Build-Jetson-Container-VLLM-0.10.2): an idle vLLM server prints
    no stats line, so its start line is what says it is up."""
    rec = parse_line("(APIServer pid=291) INFO 09-21 23:16:28 [api_server.py:1957] Starting vLLM "
                     "API server 0 on http://0.0.0.0:8000")
    assert isinstance(rec, VllmEventRecord) and rec.kind == "ready" and rec.pid == 291
    assert rec.data == {"url": "http://0.0.0.0:8000", "port": 8000}  # where /metrics is
    from specmon.session.state import ServerState
    st = ServerState("v")
    st.apply("x", rec, 1.0)
    assert st.status == "ready" and st.args["port"] == 8000


def test_real_f2b_line_is_bonus_included() -> None:
    """vllm#19254 (0.9.0.1): 2.16 = 1 + 0.543 + 0.357 + 0.264 (rounded): nothing to correct."""
    rows = [r for r in _real() if "19254" in r["source"]]
    recs = join_records(parse_line(r["line"]) for r in rows)
    dec = next(r for r in recs if isinstance(r, VllmDecodeRecord))
    assert dec.accept_len == 2.16 and dec.accept_len_note is None
    assert dec.accept_rate == pytest.approx(150 / 387)


@pytest.mark.parametrize("method,want", [("eagle", 1 + 9339 * 3 / 15360), ("ngram", None),
                                         (None, None)])
def test_f1_accept_length_from_k_only_for_full_length_drafts(method: str | None,
                                                              want: float | None) -> None:
    cfg = ("INFO 04-18 09:00:00 [core.py:61] Initializing a V1 LLM engine (v0.8.4) with config: "
           f"model='m', speculative_config=SpeculativeConfig(method='{method}', model=None, "
           "num_spec_tokens=3), tokenizer='m'")
    lines = ([cfg] if method else []) + [
        HEAD_08 % ("loggers.py", 87) + "Engine 000: " + THR_080 % (0.0, 1000.0, 8, 0, 1.0, 0.0),
        HEAD_08 % ("metrics.py", 53) + F1 % (60.8, 9339, 15360)]
    dec = next(r for r in join_records(parse_line(x) for x in lines)
               if isinstance(r, VllmDecodeRecord))
    assert dec.accept_rate == pytest.approx(9339 / 15360)
    if want is None:
        assert dec.accept_len is None  # not measured, not invented
    else:
        assert dec.accept_len == pytest.approx(want) and "k = 3" in (dec.accept_len_note or "")


def test_a_vllm_stats_line_quoting_an_sglang_marker_is_vllms() -> None:
    """Hypothesis found it: `SpecDecoding metrics: Prefill batch.` was read as an SGLang prefill
    record (the SGLang batch search ran first); a line with vLLM's head and marker is vLLM's, so
    it can never be counted as the other engine's line (nor trip the mixed-engines error)."""
    head = "(APIServer pid=1) INFO 05-01 10:00:00 [m.py:1] "
    for body in ("SpecDecoding metrics: Prefill batch.",
                 "SpecDecoding metrics: Decode batch. #running-req: 1, gen throughput "
                 "(token/s): 5.00, #queue-req: 0"):
        rec = parse_line(head + body)
        assert rec is None or rec.to_json()["engine"] == "vllm"
    # an SGLang line stays SGLang's, even one that says "throughput" and "metrics"
    rec = parse_line("[2026-01-01 00:00:00] Prefill batch. #new-seq: 1, #new-token: 42, "
                     "input throughput (token/s): 9.00, metrics: on")
    assert isinstance(rec, BatchRecord) and rec.kind == "prefill" and rec.new_seq == 1


def test_a_joined_record_is_still_its_lines_record() -> None:
    """Joining changes only the `JOINED` fields: the live snapshot matches a joined record back
    to its engine line by the rest (`same_line`); a field added by the joiner and not listed
    there made every line of a speculative vLLM server unmatchable."""
    lines = (DATA / "gen-eagle3-0.11.log").read_text().splitlines()
    recs = [parse_line(ln) for ln in lines]
    join_records(recs)  # (joins the records in place)
    pairs = [(r, parse_line(ln)) for r, ln in zip(recs, lines, strict=True)
             if isinstance(r, VllmDecodeRecord)]
    assert len(pairs) == 40 and all(r.accept_len is not None for r, _ in pairs)
    changed = {f for r, fresh in pairs for f in r.__dataclass_fields__
               if getattr(r, f) != getattr(fresh, f)}
    assert "accepted_tok_s" in changed and changed <= JOINED
    assert all(same_line(r, fresh) for r, fresh in pairs)
    assert not same_line(pairs[0][0], pairs[1][1])  # another interval's line
