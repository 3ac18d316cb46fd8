"""SGLang /metrics text -> speculative gauges (prometheus_client's parser), per version."""

from __future__ import annotations

import pytest

from specmon.parse.sglang_metrics import MetricsError, parse_spec_metrics

# shaped like a 0.5.23 multiprocess registry: labels in any order, a pid label on `all` gauges,
# the counter exposed with _total, and DP ranks as separate series
TEXT = """# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{tp_rank="0",model_name="m",engine_type="unified",dp_rank="0"} 2.9
sglang:spec_accept_length{model_name="m",engine_type="unified",tp_rank="0",dp_rank="1"} 3.1
# TYPE sglang:spec_num_steps gauge
sglang:spec_num_steps{model_name="m",engine_type="unified"} 3.0
# TYPE sglang:spec_num_draft_tokens gauge
sglang:spec_num_draft_tokens{model_name="m",engine_type="unified"} 4.0
# TYPE sglang:spec_verify_calls counter
sglang:spec_verify_calls_total{model_name="m",engine_type="unified"} 1234.0
# TYPE sglang:spec_cap_length gauge
sglang:spec_cap_length{model_name="m",pid="77"} 4.0
# TYPE sglang:spec_block_accept_length gauge
sglang:spec_block_accept_length{model_name="m"} NaN
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{model_name="m"} 180.5
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m"} 4.0
"""


def test_spec_gauges_by_name_not_position():
    m = parse_spec_metrics(TEXT)
    assert m.get("accept_length") is None  # two DP ranks: no single value invented
    assert m.first_rank("accept_length") == 2.9
    assert m.get("num_steps") == 3.0 and m.get("num_draft_tokens") == 4.0
    assert m.get("verify_calls_total") == 1234.0 and m.get("cap_length") == 4.0
    assert m.get("block_accept_length") is None  # NaN dropped
    assert m.get("gen_throughput") == 180.5 and "num_running_reqs" not in m.values
    assert m.speculative is True


def test_older_server_without_spec_gauges():
    m = parse_spec_metrics('# TYPE sglang:gen_throughput gauge\n'
                           'sglang:gen_throughput{model_name="m"} 88.0\n')
    assert m.get("num_steps") is None and m.speculative is None
    assert parse_spec_metrics('sglang:spec_accept_length{model_name="m"} 0.0\n').speculative \
        is False


def test_not_prometheus_text_is_one_error():
    with pytest.raises(MetricsError):
        parse_spec_metrics('<html>{"detail": "Not Found"} 1 2 3\n')
