"""Bad input never raises and never yields wrong values; the non-batch lines specmon uses."""

from __future__ import annotations

from specmon.parse.sglang import BatchRecord, EventRecord, parse_line

GOOD = ("[2026-02-26 19:16:45 TP0] Decode batch, #running-req: 16, #token: 9000, token usage: 0.04, "
        "accept len: 3.21, accept rate: 0.80, cuda graph: True, gen throughput (token/s): 1800.55, "
        "#queue-req: 0")


def test_non_utf8_bytes_are_replaced_not_fatal():
    rec = parse_line(GOOD.replace("TP0]", "TP0]\xff").encode("latin-1"))
    assert rec.gen_throughput == 1800.55 and rec.tp_rank == 0


def test_nul_bytes_and_crlf():
    rec = parse_line(("\x00" + GOOD + "\r\n").encode())
    assert rec.gen_throughput == 1800.55 and rec.queue_req == 0


def test_empty_and_whitespace_lines():
    assert parse_line("") is None
    assert parse_line(b"") is None
    assert parse_line("   \r\n") is None


def test_ten_megabyte_line_does_not_raise():
    huge = "x" * 10_000_000
    assert parse_line(huge) is None
    rec = parse_line(GOOD + ", " + "y" * 10_000_000)
    assert isinstance(rec, BatchRecord) and rec.gen_throughput == 1800.55


def test_line_cut_in_half_keeps_what_it_can_read_and_nothing_else():
    cut = GOOD[: GOOD.index("gen throughput") + 5]  # ends inside the key "gen throughput"
    rec = parse_line(cut)
    assert rec.kind == "decode"
    assert rec.running_req == 16 and rec.accept_len == 3.21 and rec.cuda_graph is True
    assert rec.gen_throughput is None and rec.queue_req is None


def test_garbled_values_become_none_not_guesses():
    rec = parse_line("[2026-02-26 19:16:45] Decode batch, #running-req: 1x6, #token: 9000, "
                     "token usage: 0.0.4, gen throughput (token/s): 18..00, #queue-req: -")
    assert rec.running_req is None and rec.token_usage is None and rec.gen_throughput is None
    assert rec.tokens == 9000


def test_unknown_future_fields_are_kept_normalised():
    rec = parse_line(GOOD + ", #future-thing: 7, est. decode TFLOPS/s (per GPU): 123.45, "
                     "new kind of ratio: 0.5")
    assert rec.extra["future_thing"] == 7
    assert rec.est_decode_tflops_s == 123.45 and "est_decode_tflops_s" not in rec.extra
    assert rec.extra["new_kind_of_ratio"] == 0.5
    assert rec.gen_throughput == 1800.55


def test_swa_049_values_are_kept():
    rec = parse_line("[2025-07-06 09:10:12] Decode batch. #running-req: 4, #token: full=1200, "
                     "swa=800, token usage: full=0.01, swa=0.02, cuda graph: True, gen throughput "
                     "(token/s): 400.00, #queue-req: 0")
    assert rec.tokens == 1200 and rec.extra["swa_token"] == 800
    assert rec.token_usage == 0.01 and rec.extra["swa_token_usage"] == 0.02
    assert rec.gen_throughput == 400.0 and rec.running_req == 4


def test_access_and_request_lines_are_not_batches():
    for line in [
        '[2026-04-05 20:02:51] INFO:     127.0.0.1:40052 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
        "Receive: obj=GenerateReqInput(rid='x', text='Decode batches are great')",
    ]:
        assert not isinstance(parse_line(line), BatchRecord)


# --- events -------------------------------------------------------------------------------------

def test_ready_event():
    rec = parse_line("[2026-04-05 20:02:51] The server is fired up and ready to roll!")
    assert isinstance(rec, EventRecord) and rec.kind == "ready"
    assert rec.timestamp == "2026-04-05 20:02:51"


def test_server_args_dataclass_repr():
    line = ("[2026-02-23 10:00:00] server_args=ServerArgs(model_path='meta-llama/Llama-3.1-8B', "
            "tokenizer_path='meta-llama/Llama-3.1-8B', tp_size=8, dp_size=1, port=30000, "
            "speculative_algorithm='EAGLE3', speculative_draft_model_path='jamesliu1/eagle3', "
            "speculative_num_steps=2, speculative_eagle_topk=1, speculative_num_draft_tokens=3, "
            "disable_cuda_graph=False)")
    rec = parse_line(line)
    assert rec.kind == "server_args"
    assert rec.data["model_path"] == "meta-llama/Llama-3.1-8B"
    assert rec.data["tp_size"] == 8
    assert rec.data["speculative_algorithm"] == "EAGLE3"
    assert (rec.data["speculative_num_steps"], rec.data["speculative_eagle_topk"],
            rec.data["speculative_num_draft_tokens"]) == (2, 1, 3)
    assert rec.data["disable_cuda_graph"] is False


def test_server_args_dict_repr_and_none():
    line = ("[2026-09-18 10:00:00] server_args={'model_path': '/models/qwen', 'tp_size': 1, "
            "'speculative_algorithm': None, 'speculative_num_steps': None, 'port': 30001}")
    rec = parse_line(line)
    assert rec.kind == "server_args"
    assert rec.data["model_path"] == "/models/qwen"
    assert rec.data["tp_size"] == 1 and rec.data["port"] == 30001
    assert rec.data["speculative_algorithm"] is None


def test_max_total_num_tokens_event():
    rec = parse_line("[2025-06-10 10:00:00 TP0] max_total_num_tokens=1048576, chunked_prefill_size=8192, "
                     "max_prefill_tokens=16384, max_running_requests=48, context_len=131072, "
                     "available_gpu_mem=12.34 GB")
    assert rec.kind == "max_total_num_tokens"
    assert rec.data["max_total_num_tokens"] == 1048576
    assert rec.data["max_running_requests"] == 48
    assert rec.data["available_gpu_mem"] == 12.34


def test_cuda_graph_capture_events():
    begin = parse_line("[2026-01-01 10:00:00 TP0] Capture cuda graph begin. This can take up to "
                       "several minutes. avail mem=20.00 GB")
    assert begin.kind == "cuda_graph_begin" and begin.data["draft"] is False
    bs = parse_line("[2026-01-01 10:00:00 TP0] Capture cuda graph bs [1, 2, 4, 8, 16]")
    assert bs.kind == "cuda_graph_begin" and bs.data["batch_sizes"] == [1, 2, 4, 8, 16]
    new = parse_line("[2026-10-30 10:00:00 TP0] Capture target decode CUDA graph begin. "
                     "backend=fa3, num_tokens_per_req=1, bs=[1, 2, 4], avail mem=30.00 GB")
    assert new.kind == "cuda_graph_begin" and new.data["batch_sizes"] == [1, 2, 4]
    end = parse_line("[2026-01-01 10:00:05 TP0] Capture draft cuda graph end. Time elapsed: 5.00 s. "
                     "mem usage=1.00 GB. avail mem=19.00 GB.")
    assert end.kind == "cuda_graph_end" and end.data["draft"] is True


def test_kv_pool_full_and_traceback_and_nccl():
    kv = parse_line("[2026-01-01 10:00:00 TP0] KV cache pool is full. Retract requests. "
                    "#retracted_reqs: 3, #new_tokens_gained: 100, #new_token_ratio: 0.5 -> 0.7")
    assert kv.kind == "kv_pool_full" and kv.data["retracted_reqs"] == 3
    old = parse_line("[2025-01-01 10:00:00 TP0] Decode out of memory happened. #retracted_reqs: 2, "
                     "#new_token_ratio: 0.5 -> 0.7")
    assert old.kind == "kv_pool_full" and old.data["retracted_reqs"] == 2
    tb = parse_line("Traceback (most recent call last):")
    assert tb.kind == "traceback"
    nccl = parse_line("host:1234:1234 [0] NCCL INFO NCCL_PROTO set by environment to LL")
    assert nccl.kind == "nccl_env" and nccl.data == {"var": "NCCL_PROTO", "value": "LL"}
