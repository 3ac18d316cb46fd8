"""The sim's log lines are byte-identical to SGLang's templates, version by version."""

import json
import re

import pytest
from kit.paths import TESTS

from specmon.sim import formats
from specmon.sim.engine import DecodeRecord, PrefillRecord, render
from specmon.sim.perf import SpecConfig

SAMPLES = TESTS / "data" / "sglang-samples.jsonl"


def doc_samples() -> dict[int, str]:
    """The numbered reference sample lines, exactly as written (trailing ', ' included)."""
    with SAMPLES.open(encoding="utf-8") as fh:
        return {d["n"]: d["line"] for d in map(json.loads, fh)}


def split(line: str) -> tuple[str, str, str]:
    m = re.match(r"^\[(\S+ ?\S*?)((?: [A-Z]+\d+)*)\] (.*)$", line)
    assert m, line
    return m.group(1), m.group(2), m.group(3)


# sample number -> (version, decode?, fields)
DECODE_SAMPLES = {
    1: ("0.3.0", dict(running_req=8, num_tokens=5120, token_usage=0.02, gen_throughput=612.34,
                      queue_req=0)),
    3: ("0.4.1", dict(running_req=32, num_tokens=20480, token_usage=0.09,
                      gen_throughput=2456.78, queue_req=4)),
    5: ("0.4.3", dict(running_req=16, num_tokens=9000, token_usage=0.04, accept_len=3.21,
                      gen_throughput=1800.55, queue_req=0)),
    6: ("0.4.4", dict(running_req=16, num_tokens=9000, token_usage=0.04, accept_len=3.21,
                      gen_throughput=1800.55, queue_req=0)),
    8: ("0.4.5", dict(running_req=16, num_tokens=9000, token_usage=0.04, accept_len=3.21,
                      gen_throughput=1800.55, queue_req=0)),
    9: ("0.4.6", dict(running_req=48, num_tokens=30000, token_usage=0.15, accept_len=2.87,
                      gen_throughput=3012.40, queue_req=12)),
    10: ("0.4.8", dict(running_req=48, num_tokens=30000, token_usage=0.15, accept_len=2.87,
                       gen_throughput=3012.40, queue_req=12, cuda_graph=True)),
    14: ("0.5.2", dict(running_req=64, num_tokens=81920, token_usage=0.40, accept_len=3.05,
                       gen_throughput=5120.77, queue_req=0, cuda_graph=True)),
    19: ("0.5.4", dict(running_req=16, num_tokens=9000, token_usage=0.04, accept_len=3.21,
                       accept_rate=0.80, gen_throughput=1800.55, queue_req=0, forward_ct=1234)),
    21: ("0.5.8", dict(running_req=16, num_tokens=9000, token_usage=0.04, accept_len=3.21,
                       accept_rate=0.80, gen_throughput=1800.55, queue_req=0)),
    23: ("0.5.23", dict(running_req=16, num_tokens=9000, token_usage=0.04, accept_len=3.21,
                        accept_rate=0.80, gen_throughput=1800.55, queue_req=0)),
}  # fmt: skip

PREFILL_SAMPLES = {
    4: ("0.4.3", dict(new_seq=2, new_token=4096, cached_token=1024, cache_hit_rate=35.17,
                      token_usage=0.05, running_req=6, queue_req=1)),
    7: ("0.4.4", dict(new_seq=1, new_token=8192, cached_token=0, token_usage=0.03,
                      running_req=0, queue_req=3)),
    12: ("0.4.9", dict(new_seq=1, new_token=1024, cached_token=0, num_tokens=1024,
                       token_usage=0.0, running_req=0, queue_req=0)),
    16: ("0.5.2", dict(new_seq=1, new_token=2048, cached_token=0, token_usage=0.01,
                       running_req=2, queue_req=0)),
    20: ("0.5.4", dict(new_seq=1, new_token=512, cached_token=128, token_usage=0.01,
                       running_req=15, queue_req=0, forward_ct=1200)),
    22: ("0.5.8", dict(new_seq=1, new_token=512, cached_token=128, token_usage=0.01,
                       running_req=3, queue_req=0)),
    24: ("0.5.9", dict(new_seq=1, new_token=512, cached_token=128, token_usage=0.01,
                       running_req=3, queue_req=0, input_throughput=8123.45)),
    25: ("0.5.10", dict(new_seq=1, new_token=512, cached_token=128, token_usage=0.01,
                        running_req=3, queue_req=0, input_throughput=8123.45)),
    26: ("0.5.23", dict(new_seq=1, new_token=512, cached_token=128, token_usage=0.01,
                        running_req=3, queue_req=0, pending_token=0, input_throughput=8123.45)),
}  # fmt: skip


@pytest.mark.parametrize("num", sorted(DECODE_SAMPLES))
def test_decode_message_matches_doc_sample_byte_for_byte(num):
    version, fields = DECODE_SAMPLES[num]
    _, _, expected = split(doc_samples()[num])
    assert formats.decode_message(version, **fields) == expected


@pytest.mark.parametrize("num", sorted(PREFILL_SAMPLES))
def test_prefill_message_matches_doc_sample_byte_for_byte(num):
    version, fields = PREFILL_SAMPLES[num]
    _, _, expected = split(doc_samples()[num])
    assert formats.prefill_message(version, **fields) == expected


def test_doc_has_the_samples_we_compare_against():
    samples = doc_samples()
    assert set(DECODE_SAMPLES) | set(PREFILL_SAMPLES) <= set(samples)
    assert samples[6].endswith("#queue-req: 0, ")  # trailing ', ' survived extraction


@pytest.mark.parametrize(
    ("version", "tp", "tag", "title"),
    [
        ("0.3.0", 1, " TP0", None),
        ("0.4.3", 8, " TP0", "sglang::scheduler"),
        ("0.4.6", 1, " TP0", "sglang::scheduler_TP0"),
        ("0.4.8", 1, "", "sglang::scheduler"),
        ("0.5.2", 8, " TP0", "sglang::scheduler_TP0"),
        ("0.5.23", 8, " TP0 EP0", "sglang::scheduler_TP0_EP0"),
        ("0.5.23", 1, "", "sglang::scheduler"),
    ],
)
def test_rank_tags_and_process_titles_follow_the_version(version, tp, tag, title):
    assert formats.rank_tag(version, tp_size=tp, tp_rank=0) == tag
    assert formats.proc_title(version, tp_size=tp, tp_rank=0) == title


def test_timestamp_forms():
    t = 1_780_000_000.25
    assert re.fullmatch(r"\d\d:\d\d:\d\d", formats.timestamp("0.3.2", t))
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", formats.timestamp("0.5.23", t))
    assert formats.timestamp("0.5.23", t, log_ms=True).endswith(".250")
    assert "." not in formats.timestamp("0.5.5", t, log_ms=True)  # SGLANG_LOG_MS is 0.5.6+


def test_accept_rate_denominator_changes():
    assert formats.accept_rate("0.5.4", 2.4, 2, 3) == pytest.approx(0.8)
    assert formats.accept_rate("0.5.8", 2.4, 2, 4) == pytest.approx(0.6)
    assert formats.accept_rate("0.5.23", 2.4, 2, 3) == pytest.approx(0.7)


def test_startup_messages_by_version():
    args = {"model_path": "m", "tp_size": 8, "speculative_algorithm": None}
    assert formats.server_args_message("0.5.18", args) == (
        "server_args=ServerArgs(model_path='m', tp_size=8, speculative_algorithm=None)"
    )
    assert formats.server_args_message("0.5.20", args) == (
        "server_args={'model_path': 'm', 'tp_size': 8, 'speculative_algorithm': None}"
    )
    assert formats.capture_begin_message("0.5.9", [1, 2], 20.0)[1] == "Capture cuda graph bs [1, 2]"
    assert formats.capture_begin_message("0.5.23", [1, 2], 20.0)[0].startswith(
        "Capture target decode CUDA graph begin. backend="
    )
    kw = dict(max_total_num_tokens=10, chunked_prefill_size=8192, max_prefill_tokens=16384,
              max_running_requests=48, context_len=4096, available_gpu_mem=1.5)  # fmt: skip
    assert formats.max_tokens_message("0.4.6", **kw).endswith("context_len=4096")
    assert formats.max_tokens_message("0.5.23", **kw).endswith(", available_gpu_mem=1.50 GB")


# A small parser following sglang-observables.md section 10, independent of the sim code.
HEADER = re.compile(
    r"^\[(?P<ts>(?:\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2}(?:\.\d{3})?)(?P<tags>(?: [A-Z_]+\d+)*)\] "
    r"(?P<msg>.*)$"
)
KIND = re.compile(r"^(?P<kind>Decode|Prefill) batch(?: \[(?P<iter>\d+)\])?[.,] (?P<body>.*)$")


def parse(line: str) -> tuple[str, dict]:
    m = HEADER.match(line)
    assert m, line
    k = KIND.match(m.group("msg"))
    assert k, line
    fields = {}
    for piece in k.group("body").rstrip().rstrip(",").split(", "):
        key, _, val = piece.partition(": ")
        val = val.rstrip("%")
        fields[key] = True if val == "True" else False if val == "False" else float(val)
    return k.group("kind"), fields


@pytest.mark.parametrize("version", formats.VERSIONS)
def test_every_version_renders_lines_that_parse_back(version):
    spec = SpecConfig() if formats.has_spec_fields(version) else None
    dec = DecodeRecord(t=1_780_000_000.0, running_req=3, num_tokens=4567, token_usage=0.0123,
                       gen_throughput=261.456, queue_req=2, cuda_graph=True, forward_ct=800,
                       accept_len=2.41 if spec else None)  # fmt: skip
    pre = PrefillRecord(t=1_780_000_000.0, new_seq=1, new_token=1000, cached_token=24,
                        num_tokens=1024, token_usage=0.004, running_req=2, queue_req=0,
                        pending_token=0, input_throughput=5000.5, cache_hit_rate=2.3,
                        forward_ct=801)  # fmt: skip
    tag = formats.rank_tag(version, tp_size=8)
    kind, f = parse(render(dec, version, tag, spec=spec))
    assert kind == "Decode"
    assert f["#running-req"] == 3 and f["#token"] == 4567 and f["#queue-req"] == 2
    assert f["gen throughput (token/s)"] == 261.46
    assert f["token usage"] == 0.01
    if spec is not None:
        assert f["accept len"] == 2.41
    else:
        assert "accept len" not in f
    graph = [k for k in f if k.endswith(" graph")]
    assert graph == (["cuda graph"] if formats.ge(version, "0.4.6.post1") else [])
    kind, f = parse(render(pre, version, tag))
    assert kind == "Prefill"
    assert f["#new-seq"] == 1 and f["#new-token"] == 1000 and f["#cached-token"] == 24
    assert f["#running-req"] == 2 and f["#queue-req"] == 0
    if formats.ge(version, "0.3.2"):
        assert f["token usage"] == 0.0
    if formats.ge(version, "0.5.9"):
        assert f["input throughput (token/s)"] == 5000.5


@pytest.mark.parametrize("version", formats.VERSIONS)
def test_trailing_comma_rules(version):
    msg = formats.decode_message(version, running_req=1, num_tokens=1, token_usage=0.0,
                                 gen_throughput=1.0, queue_req=0)  # fmt: skip
    v = formats.vkey(version)
    trailing = (0, 4, 4, 0) <= v < (0, 4, 6, 0) or (0, 4, 9, 1) <= v < (0, 5, 9, 0)
    assert msg.endswith("#queue-req: 0, ") == trailing
    assert msg.endswith("#queue-req: 0") == (not trailing)


def test_unknown_version_is_rejected():
    with pytest.raises(ValueError, match="0.9.9"):
        formats.check_version("0.9.9")
