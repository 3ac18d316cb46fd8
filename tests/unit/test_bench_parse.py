"""bench_serving result blocks and bench_one_batch_server lines -> typed records."""

from __future__ import annotations

import json

from specmon.parse.bench_output import parse_bench_serving, parse_one_batch_server


def _bench_items(data_dir):
    items = []
    for line in (data_dir / "sglang-logs" / "real-sample.jsonl").open():
        d = json.loads(line)
        if d.get("kind") == "bench_summary":
            items.append(d)
    return items


def test_real_bench_serving_blocks_match_expectations(data_dir):
    items = _bench_items(data_dir)
    assert len(items) == 2
    for item in items:
        blocks = parse_bench_serving("#Input tokens: 10\nnoise: 1\n" + item["line"] + "\ntrailer: 3\n")
        assert len(blocks) == 1
        b = blocks[0]
        assert b.fields == item["expect"]  # every row, typed like the expectation (int/float/str)
        assert b.output_throughput == item["expect"]["Output token throughput (tok/s)"]
        assert b.mean_ttft_ms == item["expect"]["Mean TTFT (ms)"]
        assert b.mean_itl_ms == item["expect"]["Mean ITL (ms)"]
        assert b.completed == item["expect"]["Successful requests"]
    # accept length only where the block prints it
    assert parse_bench_serving(items[0]["line"])[0].accept_length == 2.61
    assert parse_bench_serving(items[1]["line"])[0].accept_length is None


def test_old_misspelt_label_and_two_blocks():
    text = ("============ Serving Benchmark Result ============\n"
            "Backend:                                 sglang    \n"
            "Max reqeuest concurrency:                 4         \n"
            "Output token throughput (tok/s):          12.50     \n"
            "==================================================\n"
            "Output token throughput (tok/s):          99.00     \n"  # outside a block: ignored
            "============ Serving Benchmark Result ============\n"
            "Output token throughput (tok/s):          13.00     \n"
            "==================================================\n")
    a, b = parse_bench_serving(text)
    assert a.concurrency == 4 and a.output_throughput == 12.5
    assert b.output_throughput == 13.0 and b.mean_itl_ms is None
    assert parse_bench_serving("no block here") == []


def test_one_batch_server_versions():
    old = "batch size: 1\nlatency: 2.50 s\noutput throughput: 40.00 token/s\n" \
          "(input + output) throughput: 90.00 token/s\n"
    new = ("batch size: 8\ninput_len: 1024\noutput_len: 256\nlatency: 5.12 s\n"
           "input throughput: 9000.00 tok/s\noutput throughput: 400.00 tok/s\nlast_ttft: 0.21 s\n"
           "last generation throughput: 420.50 tok/s\nacc_length: 2.43 \n"
           "batch size: 16\ninput_len: 1024\noutput_len: 256\nlatency: 6.00 s\n"
           "last generation throughput: -1.00 tok/s\n")
    (o,) = parse_one_batch_server(old)
    assert (o.batch_size, o.latency_s, o.output_throughput, o.input_len) == (1, 2.5, 40.0, None)
    a, b = parse_one_batch_server(new)
    assert (a.batch_size, a.input_len, a.output_len) == (8, 1024, 256)
    assert (a.ttft_s, a.last_gen_throughput, a.accept_length) == (0.21, 420.5, 2.43)
    assert b.batch_size == 16 and b.last_gen_throughput is None  # -1 means not available
