"""/generate as SGLang 0.5.23 sends it (spec_* only when finished; errors inside a 200 stream)
and the built-in benchmark client against it: per-request spec counters, the server's error
text, and the log's decode-only number only when its window is the benchmark's."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from kit.sim_server import launch  # noqa: F401
from kit.wait import wait_until

from specmon.control.benchmark import BenchConfig, _one_request, run_builtin, spec_from_meta
from specmon.sim import formats

SPEC = ("--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1", "--startup-s", "0", "--accept-prob", "0.7")


def up(launch, *args):  # noqa: F811
    p, port, log = launch(*args)
    base = f"http://127.0.0.1:{port}"

    def ready():
        try:
            return httpx.get(base + "/health", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    wait_until(ready, 60, "ready")
    return base, log


def test_spec_fields_only_in_finished_chunk_and_error_inside_stream(launch):  # noqa: F811
    base, _ = up(launch, *SPEC)
    body = {"text": "tell me a story", "sampling_params": {"max_new_tokens": 40}, "stream": True}
    with httpx.stream("POST", base + "/generate", json=body, timeout=60) as r:
        assert r.status_code == 200
        events = [ln[6:] for ln in r.iter_lines() if ln.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e)["meta_info"] for e in events[:-1]]
    assert len(chunks) > 3
    for meta in chunks[:-1]:
        assert not [k for k in meta if k.startswith("spec_")], meta
    last = chunks[-1]
    assert last["finish_reason"]["type"] == "length" and last["completion_tokens"] == 40
    hist = last["spec_correct_drafts_histogram"]
    assert len(hist) == 4 and sum(hist) == last["spec_verify_ct"]
    assert sum(k * c for k, c in enumerate(hist)) == last["spec_num_correct_drafts"]
    assert last["spec_num_proposed_drafts"] == 3 * last["spec_verify_ct"]
    assert last["spec_accept_length"] == pytest.approx(40 / last["spec_verify_ct"])
    assert last["spec_accept_rate"] == pytest.approx(
        last["spec_num_correct_drafts"] / last["spec_num_proposed_drafts"])
    assert "spec_accept_histogram" not in last  # gone by 0.5.23

    long = {"text": "word " * 110_000, "sampling_params": {"max_new_tokens": 4}}
    with httpx.stream("POST", base + "/generate", json={**long, "stream": True},
                      timeout=60) as r:
        assert r.status_code == 200  # the stream had started: the error is a data chunk
        events = [ln[6:] for ln in r.iter_lines() if ln.startswith("data: ")]
    assert events[-1] == "[DONE]" and len(events) == 2
    err = json.loads(events[0])["error"]["message"]
    assert "longer than the model's context length (131072 tokens)" in err
    r = httpx.post(base + "/generate", json=long, timeout=60)  # not streaming: plain 400
    assert r.status_code == 400 and "context length" in r.json()["error"]["message"]

    async def client_side():
        async with httpx.AsyncClient(base_url=base) as c:
            return await _one_request(c, "word " * 110_000, 4, 60)

    one = asyncio.run(client_side())
    assert not one.ok and one.tokens == 0
    assert one.error.startswith("server error in stream: The input (")
    assert "no tokens received" not in one.error


def test_builtin_benchmark_collects_spec_counters_and_guards_the_log_window(launch):  # noqa: F811
    base, log = up(launch, *SPEC, "--decode-log-interval", "5")
    short = asyncio.run(run_builtin(base, "s", BenchConfig(num_prompts=1, output_len=6)))
    assert short.completed == 1 and short.server_gen_throughput is None  # < 2 log windows
    assert short.notes and "decode_log_interval (5)" in short.notes[0]
    res = asyncio.run(run_builtin(base, "s", BenchConfig(num_prompts=3, output_len=60)))
    assert res.completed == 3 and len(res.spec_requests) == 3
    for s in res.spec_requests:
        assert sum(s["histogram"]) == s["verify_ct"] and s["completion_tokens"] == 60
    assert sum(res.spec_histogram) == sum(s["verify_ct"] for s in res.spec_requests)
    assert res.request_accept_length == pytest.approx(
        sum(s["accept_length"] for s in res.spec_requests) / 3)
    # measured only now, and it agrees with the log's own last decode line
    assert res.server_gen_throughput is not None and not res.notes
    last = [ln for ln in log.read_text().splitlines() if "Decode batch" in ln][-1]
    assert f"gen throughput (token/s): {res.server_gen_throughput:.2f}" in last


@pytest.mark.parametrize("version,names", [
    ("0.4.3", {"spec_verify_ct"}),
    ("0.5.4", {"spec_verify_ct", "spec_accept_length", "spec_accept_rate"}),
    ("0.5.8", {"spec_verify_ct", "spec_accept_length", "spec_accept_rate",
               "spec_accept_token_num", "spec_draft_token_num"}),
    ("0.5.11", {"spec_verify_ct", "spec_accept_length", "spec_accept_rate",
                "spec_accept_histogram", "spec_accepted_drafts", "spec_proposed_drafts"}),
    ("0.5.20", {"spec_verify_ct", "spec_accept_length", "spec_accept_rate",
                "spec_accept_histogram", "spec_accepted_drafts", "spec_proposed_drafts",
                "spec_num_correct_drafts", "spec_num_proposed_drafts",
                "spec_correct_drafts_histogram"}),
    ("0.5.23", {"spec_verify_ct", "spec_accept_length", "spec_accept_rate",
                "spec_num_correct_drafts", "spec_num_proposed_drafts",
                "spec_correct_drafts_histogram"}),
])
def test_three_generations_of_names_round_trip(version, names):
    hist = [3, 2, 4, 1]
    meta = formats.spec_meta_info(version, verify_ct=10, correct_drafts=13, histogram=hist,
                                  completion_tokens=24, num_steps=3, num_draft_tokens=4)
    assert set(meta) == names
    got = spec_from_meta({"completion_tokens": 24, **meta})
    assert got["verify_ct"] == 10
    if "spec_accept_token_num" in names or "spec_accepted_drafts" in names or \
            "spec_num_correct_drafts" in names:
        assert got["correct_drafts"] == 13 and got["proposed_drafts"] == 30
    if "spec_accept_histogram" in names or "spec_correct_drafts_histogram" in names:
        assert got["histogram"] == hist
    else:
        assert got["histogram"] is None
    if "spec_accept_length" in names:
        assert got["accept_length"] == pytest.approx(2.4)


def test_meta_without_spec_or_with_junk_is_not_invented():
    assert spec_from_meta({"completion_tokens": 5}) is None
    got = spec_from_meta({"spec_verify_ct": -1, "spec_accept_length": float("nan"),
                          "spec_correct_drafts_histogram": [1, "x"]})
    assert got["verify_ct"] is None and got["accept_length"] is None and got["histogram"] is None


def test_prometheus_spec_gauges_read_and_cross_checked(launch):  # noqa: F811
    base, _ = up(launch, *SPEC, "--enable-metrics", "--decode-log-interval", "5")
    res = asyncio.run(run_builtin(base, "s", BenchConfig(num_prompts=2, output_len=30)))
    prom = res.prometheus
    assert prom is not None and prom["num_steps"] == 3 and prom["num_draft_tokens"] == 4
    # the gauge is the last decode-log interval (SGLang's definition), so it needs one
    assert prom["accept_length"] > 1.0 and prom["cap_length"] == 0.0  # not DSPARK
    # the tokenizer-side counter moved by exactly the rounds the responses report
    assert res.prometheus_verify_calls == sum(s["verify_ct"] for s in res.spec_requests)


def test_no_metrics_endpoint_means_none(launch):  # noqa: F811
    base, _ = up(launch, *SPEC)
    res = asyncio.run(run_builtin(base, "s", BenchConfig(num_prompts=1, output_len=8)))
    assert res.prometheus is None and res.prometheus_verify_calls is None


def test_server_info_preferred_then_get_server_info(launch):  # noqa: F811
    from specmon.control.benchmark import server_info

    async def fetch(base):
        async with httpx.AsyncClient(base_url=base) as c:
            return await server_info(c)

    new, new_log = up(launch, "--startup-s", "0")  # 0.5.23: both; /server_info is asked first
    info = asyncio.run(fetch(new))
    assert info["version"] == "0.5.23" and "internal_states" in info
    old, old_log = up(launch, "--startup-s", "0", "--format-version", "0.5.6")  # no /server_info
    info = asyncio.run(fetch(old))
    assert info["version"] == "0.5.6"
    wait_until(lambda: "GET /get_server_info" in old_log.read_text(), 10, "access line")
    text = old_log.read_text()
    assert '"GET /server_info HTTP/1.1" 404' in text  # tried first, then the fallback
    assert '"GET /get_server_info HTTP/1.1" 200' in text
    wait_until(lambda: "GET /server_info" in new_log.read_text(), 10, "access line")
    assert "GET /get_server_info" not in new_log.read_text()


def test_info_numbers_under_dp_skip_null_ranks_and_junk():
    from specmon.control.benchmark import info_log_interval, info_numbers

    info = {"decode_log_interval": 40, "internal_states": [
        {"avg_spec_accept_length": None, "last_gen_throughput": float("nan")},
        {"avg_spec_accept_length": 2.9, "last_gen_throughput": 180.0}]}
    assert info_numbers(info) == (2.9, 180.0)
    assert info_log_interval(info) == 40
    assert info_numbers({"internal_states": [{"avg_spec_accept_length": True}]}) == (None, None)
    assert info_log_interval({"decode_log_interval": "40"}) is None
