"""Property tests: every decode/prefill template of every version, random values and prefixes."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specmon.parse.sglang import BatchRecord, parse_line

ints = st.integers(min_value=0, max_value=2_000_000)
small = st.integers(min_value=0, max_value=4096)
# values as SGLang prints them ({:.2f}); the parser must return exactly the printed number
f2 = st.integers(min_value=0, max_value=10_000_000).map(lambda n: n / 100)
bools = st.booleans()
graph_words = st.sampled_from(["cuda", "cpu", "npu", "musa"])

PREFIXES = st.sampled_from([
    "[2025-07-06 09:10:11 TP0] ",
    "[14:02:11 TP0] ",
    "[2025-12-03 10:00:00.123 TP3] ",
    "[2026-10-30 10:00:00 DP1 PP0 ATTN_CP2 MOE_DP3 TP4 EP5] ",
    "[2025-06-24 08:00:00] ",
    "(SGLangEngine pid=41820, ip=10.0.0.1) [2026-03-22 13:53:38 TP0] ",
    "2025-10-29 02:27:35 INFO 8900 [ DP15 TP15 EP15 scheduler_metrics_mixin.py:222] ",
    "2026-06-07 10:59:31,659 [INFO] sglang.srt.managers.scheduler: ",
    "Loading safetensors: 100%|##########| 8/8 [00:03<00:00]",
    "[2026-01-01 00:00:00 gpu=3 TP1] ",
])


def _fmt(v: object) -> str:
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float):
        return f"{v:.2f}"
    return str(v)


def decode_line(version: str, d: dict) -> str:
    """D1..D10 literal templates from sglang-observables.md section 2."""
    spec = d["accept_len"] is not None
    usage = f"#token: {d['tokens']}, token usage: {_fmt(d['token_usage'])}, "
    acc = f"accept len: {_fmt(d['accept_len'])}, " if spec else ""
    acc_rate = f"accept len: {_fmt(d['accept_len'])}, accept rate: {_fmt(d['accept_rate'])}, " if spec else ""
    gt = f"gen throughput (token/s): {_fmt(d['gen_throughput'])}, "
    graph = f"{d['graph_kind']} graph: {d['cuda_graph']}, "
    q = f"#queue-req: {d['queue_req']}"
    rr = f"#running-req: {d['running_req']}, "
    return {
        "D1": f"Decode batch. {rr}{usage}{gt}{q}",
        "D2": f"Decode batch. {rr}{usage}{acc}{gt}{q}",
        "D3": f"Decode batch. {rr}{usage}{acc}{gt}largest-len: 0, {q}, ",
        "D4": f"Decode batch. {rr}{usage}{acc}{gt}{q}, ",
        "D5": f"Decode batch. {rr}{usage}{acc}pre-allocated usage: 0.10, {gt}{q}",
        "D6": f"Decode batch. {rr}{usage}{acc}pre-allocated usage: 0.10, #retracted-req: 0, {graph}{gt}{q}",
        "D7": f"Decode batch. {rr}{usage}{acc}{graph}{gt}{q}, ",
        "D8": f"Decode batch [{d['iteration']}], {rr}{usage}{acc_rate}{graph}{gt}{q}, ",
        "D9": f"Decode batch, {rr}{usage}{acc_rate}{graph}{gt}{q}, ",
        "D10": f"Decode batch, {rr}{usage}{acc_rate}{graph}{gt}{q}, fwd occupancy: 87.50%",
    }[version]


def prefill_line(version: str, d: dict) -> str:
    """P1..P11 literal templates from sglang-observables.md section 3."""
    head = (f"#new-seq: {d['new_seq']}, #new-token: {d['new_token']}, "
            f"#cached-token: {d['cached_token']}, ")
    use = f"token usage: {_fmt(d['token_usage'])}, "
    rrq = f"#running-req: {d['running_req']}, #queue-req: {d['queue_req']}"
    it = f"input throughput (token/s): {_fmt(d['input_throughput'])}"
    graph = f"{d['graph_kind']} graph: {d['cuda_graph']}"
    return {
        "P1": f"Prefill batch. {head}cache hit rate: 12.50%, {rrq}",
        "P2": f"Prefill batch. {head}cache hit rate: 12.50%, {use}{rrq}",
        "P3": f"Prefill batch. {head}{use}{rrq}, ",
        "P4": f"Prefill batch. {head}#token: 1024, {use}{rrq}",
        "P5": f"Prefill batch. {head}{use}{rrq}, ",
        "P6": f"Prefill batch. {head}{use}{rrq}, #prealloc-req: 1, #inflight-req: 3, ",
        "P7": f"Prefill batch [{d['iteration']}], {head}{use}{rrq}, ",
        "P8": f"Prefill batch, {head}{use}{rrq}, ",
        "P9": f"Prefill batch, {head}{use}{rrq}, {it}, {graph}",
        "P10": f"Prefill batch, {head}{use}{rrq}, {graph}, {it}",
        "P11": f"Prefill batch, {head}{use}{rrq}, #pending-token: {d['pending_token']}, {graph}, {it}",
    }[version]


# accept len: tokens per verify step, below MAX_ACCEPT_LEN (1000): a larger one is invalid
accept_lens = st.integers(min_value=0, max_value=99_999).map(lambda n: n / 100)
decode_values = st.fixed_dictionaries({
    "running_req": small, "tokens": ints, "token_usage": f2, "queue_req": small,
    "gen_throughput": f2, "accept_len": st.none() | accept_lens, "accept_rate": f2,
    "cuda_graph": bools, "graph_kind": graph_words, "iteration": ints,
})
prefill_values = st.fixed_dictionaries({
    "new_seq": small, "new_token": ints, "cached_token": ints, "token_usage": f2,
    "running_req": small, "queue_req": small, "input_throughput": f2, "pending_token": ints,
    "cuda_graph": bools, "graph_kind": graph_words, "iteration": ints,
})
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(st.sampled_from([f"D{i}" for i in range(1, 11)]), decode_values, PREFIXES)
def test_decode_templates_round_trip(version, d, prefix):
    rec = parse_line(prefix + decode_line(version, d))
    assert isinstance(rec, BatchRecord) and rec.kind == "decode"
    assert rec.running_req == d["running_req"]
    assert rec.tokens == d["tokens"]
    assert rec.token_usage == d["token_usage"]
    assert rec.gen_throughput == d["gen_throughput"]
    assert rec.queue_req == d["queue_req"]
    has_spec = version != "D1" and d["accept_len"] is not None
    assert rec.accept_len == (d["accept_len"] if has_spec else None)
    if version in ("D8", "D9", "D10") and has_spec:
        assert rec.accept_rate == d["accept_rate"]
    else:
        assert rec.accept_rate is None
    if version in ("D6", "D7", "D8", "D9", "D10"):
        assert rec.cuda_graph is d["cuda_graph"]
        assert rec.graph_kind == d["graph_kind"]
    else:
        assert rec.cuda_graph is None
    assert rec.iteration == (d["iteration"] if version == "D8" else None)
    if version == "D10":
        assert rec.fwd_occupancy_pct == 87.5 and "fwd_occupancy_pct" not in rec.extra


@FAST
@given(st.sampled_from([f"P{i}" for i in range(1, 12)]), prefill_values, PREFIXES)
def test_prefill_templates_round_trip(version, d, prefix):
    rec = parse_line(prefix + prefill_line(version, d))
    assert isinstance(rec, BatchRecord) and rec.kind == "prefill"
    assert (rec.new_seq, rec.new_token, rec.cached_token) == (
        d["new_seq"], d["new_token"], d["cached_token"])
    assert rec.running_req == d["running_req"]
    assert rec.queue_req == d["queue_req"]
    assert rec.token_usage == (None if version == "P1" else d["token_usage"])
    if version in ("P9", "P10", "P11"):
        assert rec.input_throughput == d["input_throughput"]
        assert rec.cuda_graph is d["cuda_graph"]
    if version == "P11":
        assert rec.pending_token == d["pending_token"]
    if version in ("P1", "P2"):
        assert rec.extra["cache_hit_rate_pct"] == 12.5


@FAST
@given(PREFIXES)
def test_prefix_ranks_and_time(prefix):
    rec = parse_line(prefix + "Decode batch, #running-req: 1, #token: 5, token usage: 0.00, "
                     "cuda graph: True, gen throughput (token/s): 88.80, #queue-req: 0")
    assert rec.gen_throughput == 88.8
    if "DP1 PP0 ATTN_CP2 MOE_DP3 TP4 EP5" in prefix:
        assert (rec.dp_rank, rec.pp_rank, rec.attn_cp_rank, rec.moe_dp_rank, rec.tp_rank,
                rec.ep_rank) == (1, 0, 2, 3, 4, 5)
    if prefix.startswith("[14:02:11"):
        assert rec.timestamp is None and rec.time_of_day == "14:02:11"
    if ",659" in prefix:
        assert rec.timestamp == "2026-06-07 10:59:31.659"
    if "gpu=3" in prefix:
        assert rec.gpu == 3 and rec.tp_rank == 1
    if "tqdm" in prefix or "Loading" in prefix:
        assert rec.tp_rank is None and rec.timestamp is None


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_never_raise(data):
    rec = parse_line(data)
    assert rec is None or rec.kind in ("decode", "prefill") or isinstance(rec.to_json(), dict)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200), st.binary(max_size=200))
def test_bytes_around_a_real_line_never_raise(before, after):
    line = (b"[2026-02-26 19:16:45 TP0] Decode batch, #running-req: 16, #token: 9000, "
            b"token usage: 0.04, cuda graph: True, gen throughput (token/s): 1800.55, "
            b"#queue-req: 0")
    rec = parse_line(before.replace(b"\n", b"") + line + after.replace(b"\n", b""))
    assert rec is not None
