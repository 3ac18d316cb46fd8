"""vLLM's /metrics counters: exact windowed acceptance and throughput from two scrapes."""

from __future__ import annotations

import pytest

from specmon.parse.sglang_metrics import MetricsError
from specmon.parse.vllm_metrics import parse_vllm_metrics, server_window, windows


def scrape(engines: dict[str, tuple[float, float, float, float, list[float]]]) -> str:
    """Exposition text as prometheus_client writes vLLM's counters (HELP/TYPE, _total, _created)."""
    out = []
    fams = (("spec_decode_num_drafts", 0), ("spec_decode_num_draft_tokens", 1),
            ("spec_decode_num_accepted_tokens", 2), ("generation_tokens", 3))
    for fam, i in fams:
        out.append(f"# HELP vllm:{fam}_total Number of {fam}.")
        out.append(f"# TYPE vllm:{fam}_total counter")
        for eng, vals in engines.items():
            out.append(f'vllm:{fam}_total{{engine="{eng}",model_name="Qwen/Qwen3-8B"}} {vals[i]}')
            out.append(f'vllm:{fam}_created{{engine="{eng}",model_name="Qwen/Qwen3-8B"}} 1.7e9')
    out.append("# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted per position.")
    out.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter")
    for eng, vals in engines.items():
        for pos, v in enumerate(vals[4]):
            out.append('vllm:spec_decode_num_accepted_tokens_per_pos_total'
                       f'{{engine="{eng}",model_name="Qwen/Qwen3-8B",position="{pos}"}} {v}')
    out.append("# HELP vllm:num_requests_running Running.")
    out.append("# TYPE vllm:num_requests_running gauge")
    for eng in engines:
        out.append(f'vllm:num_requests_running{{engine="{eng}",model_name="Qwen/Qwen3-8B"}} 16.0')
    return "\n".join(out) + "\n"


def test_window_from_counter_deltas() -> None:
    a = parse_vllm_metrics(scrape({"0": (1000, 3000, 1800, 5000, [800, 600, 400])}))
    b = parse_vllm_metrics(scrape({"0": (4000, 12000, 7000, 16000, [3200, 2250, 1550])}))
    assert a.speculative and b.engines["0"].running == 16.0
    w = server_window(a, b, 10.0)
    assert w is not None and not w.restart
    assert (w.drafts, w.draft_tokens, w.accepted_tokens) == (3000, 9000, 5200)
    assert w.accept_rate == pytest.approx(5200 / 9000)
    assert w.accept_len == pytest.approx(1 + 5200 / 3000)
    assert w.per_position == pytest.approx([2400 / 3000, 1650 / 3000, 1150 / 3000])
    assert w.mean_draft_len == pytest.approx(3.0)
    assert w.gen_tok_s == pytest.approx(11000 / 10.0)
    assert sum(w.per_position) == pytest.approx(w.accept_len - 1)  # the same counts, two ways


def test_engines_summed_and_restart_has_no_window() -> None:
    a = parse_vllm_metrics(scrape({"0": (100, 300, 150, 500, [80, 50, 20]),
                                   "1": (200, 600, 300, 900, [160, 100, 40])}))
    b = parse_vllm_metrics(scrape({"0": (200, 600, 300, 1000, [160, 100, 40]),
                                   "1": (400, 1200, 500, 1500, [310, 160, 30 + 40])}))
    ws = windows(a, b, 5.0)
    assert [w.engine for w in ws] == ["0", "1", "all"]
    assert ws[2].drafts == 300 and ws[2].accepted_tokens == 350
    assert ws[2].accept_len == pytest.approx(1 + 350 / 300)
    assert ws[2].gen_tok_s == pytest.approx((500 + 600) / 5.0)
    restarted = parse_vllm_metrics(scrape({"0": (10, 30, 15, 50, [8, 5, 2]),
                                           "1": (400, 1200, 500, 1500, [310, 160, 70])}))
    w = server_window(b, restarted, 5.0)
    assert w is not None and w.restart and w.accept_len is None and w.gen_tok_s is None


def test_no_drafts_in_window_is_none_not_nan() -> None:
    a = parse_vllm_metrics(scrape({"0": (100, 300, 150, 500, [80, 50, 20])}))
    w = server_window(a, a, 10.0)
    assert w is not None and w.accept_len is None and w.accept_rate is None
    assert w.gen_tok_s == 0.0


def test_bad_text_is_one_error() -> None:
    with pytest.raises(MetricsError):
        parse_vllm_metrics('vllm:generation_tokens_total{engine="0" 5\n')
    baseline = parse_vllm_metrics("# TYPE vllm:generation_tokens_total counter\n"
                                  'vllm:generation_tokens_total{engine="0"} 5\n')
    assert not baseline.speculative and baseline.engines["0"].generation_tokens == 5.0


def test_bench_scrape_over_http() -> None:
    """The built-in benchmark's scrape of a real HTTP /metrics endpoint (a local server)."""
    import asyncio
    import http.server

    import httpx
    from kit.http_server import answer, local_server

    from specmon.control.benchmark import vllm_scrape

    texts = [scrape({"0": (1000, 3000, 1800, 5000, [800, 600, 400])}),
             scrape({"0": (1600, 4800, 2700, 8000, [1280, 900, 520])})]

    def respond(h: http.server.BaseHTTPRequestHandler) -> None:
        body = texts.pop(0).encode() if h.path == "/metrics" and texts else b"no"
        answer(h, body, 200 if body != b"no" else 404)

    with local_server(respond) as base:
        async def go() -> tuple:
            async with httpx.AsyncClient(base_url=base) as c:
                return await vllm_scrape(c), await vllm_scrape(c), await vllm_scrape(c)
        a, b, gone = asyncio.run(go())
    assert gone is None  # 404: not a vLLM server (or metrics off)
    w = server_window(a, b, 2.0)
    assert w is not None and w.accept_len == pytest.approx(1 + 900 / 600)
    assert w.per_position == pytest.approx([480 / 600, 300 / 600, 120 / 600])


def _serve(texts: list[str]):
    import http.server
    import threading

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body = (texts.pop(0) if len(texts) > 1 else texts[0]).encode()
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    return srv, th


def test_counters_command_prints_exact_windows() -> None:
    import json
    import subprocess
    import sys

    texts = [scrape({"0": (1000, 3000, 1800, 5000, [800, 600, 400])}),
             scrape({"0": (1600, 4800, 2700, 8000, [1280, 900, 520])}),
             scrape({"0": (10, 30, 10, 50, [5, 3, 2])})]  # restarted
    srv, th = _serve(texts)
    try:
        r = subprocess.run([sys.executable, "-m", "specmon", "counters",
                            f"http://127.0.0.1:{srv.server_port}", "--interval", "0.2",
                            "--count", "2", "--json"], capture_output=True, text=True, timeout=60)
    finally:
        srv.shutdown()
        srv.server_close()
        th.join(5)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    assert [x["window"] for x in rows] == [1, 2]
    assert rows[0]["accept_len"] == pytest.approx(1 + 900 / 600) and not rows[0]["restart"]
    assert rows[0]["dt_s"] >= 0.2 and rows[0]["gen_tok_s"] == pytest.approx(3000 / rows[0]["dt_s"])
    assert rows[1]["restart"] and rows[1]["accept_len"] is None


def _counters_error(body: str) -> str:
    """`specmon counters` against a server answering `body`: its one-line error (exit 2)."""
    import subprocess
    import sys

    srv, th = _serve([body])
    try:
        r = subprocess.run([sys.executable, "-m", "specmon", "counters",
                            f"http://127.0.0.1:{srv.server_port}", "--interval", "0.1"],
                           capture_output=True, text=True, timeout=60)
    finally:
        srv.shutdown()
        srv.server_close()
        th.join(5)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    return r.stderr


def test_counters_command_one_line_errors() -> None:
    assert "no vllm: counters" in _counters_error("# nothing from vLLM here\nup 1\n")


def test_counters_that_are_all_unreadable_are_said_so() -> None:
    """A scrape whose vllm: counters are NaN, infinite or negative is a vLLM server whose
    numbers cannot be read, not "not a vLLM server"."""
    body = ('vllm:spec_decode_num_drafts_total{engine="0"} +Inf\n'
            'vllm:spec_decode_num_accepted_tokens_total{engine="0"} NaN\n'
            'vllm:generation_tokens_total{engine="0"} -5\n')
    assert parse_vllm_metrics(body).unreadable == 3
    assert "no readable vllm: counters (3 sample(s) NaN, infinite or negative)" in \
        _counters_error(body)
