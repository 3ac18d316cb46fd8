"""Every supported format version: the sim's lines parse back (specmon.parse.sglang) to the
values the sim wrote."""

import pytest

from specmon.parse.sglang import BatchRecord, EventRecord, parse_line
from specmon.sim import formats
from specmon.sim.engine import DecodeRecord, EngineConfig, PrefillRecord, simulate
from specmon.sim.perf import SpecConfig
from specmon.sim.worker import nccl_debug_lines


@pytest.mark.parametrize("version", formats.VERSIONS)
def test_simulated_lines_parse_back(version):
    spec = SpecConfig(num_steps=2, num_draft_tokens=3) if formats.has_spec_fields(version) else None
    cfg = EngineConfig(tp_size=8, load_concurrency=4, load_input_len=300, load_output_len=120,
                       seed=7, spec=spec, max_running_requests=48)  # fmt: skip
    lines = list(simulate(cfg, duration_s=20, version=version))
    kinds = {type(line.record) for line in lines}
    assert kinds == {DecodeRecord, PrefillRecord}
    for line in lines:
        got = parse_line(line.text)
        assert isinstance(got, BatchRecord), line.text
        rec = line.record
        assert got.tp_rank == 0
        assert got.running_req == rec.running_req
        assert got.queue_req == rec.queue_req
        if isinstance(rec, DecodeRecord):
            assert got.kind == "decode"
            assert got.tokens == rec.num_tokens
            assert got.token_usage == round(rec.token_usage, 2)
            assert got.gen_throughput == pytest.approx(round(rec.gen_throughput, 2), abs=1e-9)
            if spec is not None:
                assert got.accept_len == pytest.approx(round(rec.accept_len, 2), abs=1e-9)
                if formats.ge(version, "0.5.4"):
                    want = formats.accept_rate(version, rec.accept_len, 2, 3)
                    assert got.accept_rate == pytest.approx(round(want, 2), abs=1e-9)
            else:
                assert got.accept_len is None
            if formats.ge(version, "0.4.6.post1"):
                assert got.cuda_graph is rec.cuda_graph
        else:
            assert got.kind == "prefill"
            assert (got.new_seq, got.new_token, got.cached_token) == (
                rec.new_seq, rec.new_token, rec.cached_token)  # fmt: skip
            if formats.ge(version, "0.5.9"):
                assert got.input_throughput == pytest.approx(round(rec.input_throughput, 2))
            if formats.ge(version, "0.5.11"):
                assert got.pending_token == rec.pending_token


@pytest.mark.parametrize("version", ["0.3.0", "0.4.6", "0.5.9", "0.5.18", "0.5.23"])
def test_startup_lines_parse_as_events(version):
    t = 1_780_000_000.0
    args = {"model_path": "m", "tp_size": 8, "speculative_algorithm": "EAGLE3"}
    ev = parse_line(formats.line(version, t, formats.server_args_message(version, args)))
    assert isinstance(ev, EventRecord) and ev.kind == "server_args"
    assert ev.data["tp_size"] == 8 and ev.data["speculative_algorithm"] == "EAGLE3"
    msg = formats.max_tokens_message(version, max_total_num_tokens=123456,
                                     chunked_prefill_size=8192, max_prefill_tokens=16384,
                                     max_running_requests=48, context_len=131072,
                                     available_gpu_mem=10.5)  # fmt: skip
    ev = parse_line(formats.line(version, t, msg, " TP0"))
    assert ev.kind == "max_total_num_tokens" and ev.data["max_total_num_tokens"] == 123456
    begin = [parse_line(formats.line(version, t, m, " TP0"))
             for m in formats.capture_begin_message(version, [1, 2, 4], 20.0)]  # fmt: skip
    assert any(e and e.kind == "cuda_graph_begin" and e.data.get("batch_sizes") == [1, 2, 4]
               for e in begin) or not formats.ge(version, "0.5.3")  # fmt: skip
    end = parse_line(formats.line(version, t, formats.capture_end_message(version, 3, 1, 2)))
    assert end.kind == "cuda_graph_end"
    ready = parse_line(formats.line(version, t, "The server is fired up and ready to roll!"))
    assert ready.kind == "ready"


def test_nccl_debug_lines_parse_as_env_events():
    env = {"NCCL_DEBUG": "INFO", "NCCL_PROTO": "LL128", "NCCL_P2P_LEVEL": "NVL"}
    lines = nccl_debug_lines(env, rank=1, pid=4242, tid=4242, nranks=2)
    evs = [parse_line(ln) for ln in lines]
    assert all(e.kind == "nccl_env" for e in evs)  # with the communicator lines around them
    assert {(e.data["var"], e.data["value"]) for e in evs if e.data} == {
        ("NCCL_PROTO", "LL128"), ("NCCL_P2P_LEVEL", "NVL")}  # fmt: skip
    assert nccl_debug_lines({"NCCL_PROTO": "LL"}, 0, 1, 1, 2) == []  # silent without NCCL_DEBUG
