"""`specmon sim server --engine vllm` from outside: titles, env, log lines, /metrics, OpenAI API."""

import json
import os
import re
import signal
import time
from pathlib import Path

import httpx
import pytest
from kit.sim_server import alive, children, cmdline, launch  # noqa: F401
from kit.wait import wait_until

ANSI = re.compile(r"\x1b\[[0-9;]*m")
# the header regex of shared/vllm-observables.md section 5 (what a parser of real logs uses)
HEADER = re.compile(r"^(?:\((?P<proc>[^()]+?) pid=(?P<pid>\d+)\)\s+)?(?P<level>DEBUG|INFO|WARNING|"
                    r"ERROR|CRITICAL)\s+(?P<md>\d{2}-\d{2}) (?P<hms>\d{2}:\d{2}:\d{2})\s+\[?"
                    r"(?P<file>[^\]\s]+?):(?P<lineno>\d+)\]\s(?P<msg>.*)$")
SPEC = '{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-70B", ' \
       '"num_speculative_tokens": 3}'


def counter(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for ln in text.splitlines():
        if ln.startswith(name + "{") and all(f'{k}="{v}"' in ln for k, v in labels.items()):
            total += float(ln.rsplit(" ", 1)[1])
    return total


def test_vllm_tree_log_metrics_and_completions(launch, tmp_path):  # noqa: F811 (fixture)
    p, port, log = launch(
        "--engine", "vllm", "--format-version", "0.10.2", "--tp-size", "2",
        "--startup-s", "0.5", "--load-concurrency", "3", "--load-output-len", "200",
        "--speculative-config", SPEC, "--set-env-after-spawn", "NCCL_P2P_LEVEL=NVL",
        env_extra={"SPT_NOENV": "1", "NCCL_PROTO": "LL128", "VLLM_LOG_STATS_INTERVAL": "0.4"},
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"

    def health():
        try:
            return httpx.get(base + "/health", timeout=2).status_code
        except httpx.TransportError:
            return None

    wait_until(lambda: health() == 200, what="ready")
    kids = [k for k in children(p.pid) if b"resource_tracker" not in
            Path(f"/proc/{k}/cmdline").read_bytes()]
    titles = sorted(cmdline(k) for k in kids)
    assert titles == ["VLLM::EngineCore_DP0", "VLLM::Worker_TP0", "VLLM::Worker_TP1"]
    for k in kids:  # SPT_NOENV=1: the environment stays readable; the late variable is absent
        env = Path(f"/proc/{k}/environ").read_bytes().split(b"\0")
        assert b"NCCL_PROTO=LL128" in env and b"NCCL_CUMEM_ENABLE=0" in env
        assert not any(e.startswith(b"NCCL_P2P_LEVEL=") for e in env)

    r = httpx.post(base + "/v1/completions", json={"model": "x", "prompt": "a"}, timeout=30)
    assert r.status_code == 404 and "The model `x` does not exist." in r.text
    body = {"model": "meta-llama/Llama-3.1-70B-Instruct", "prompt": "hello there world",
            "max_tokens": 7, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", base + "/v1/completions", json=body, timeout=30) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [ln[6:] for ln in r.iter_lines() if ln.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[-1]["usage"]["completion_tokens"] == 7 and chunks[-1]["choices"] == []
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    r = httpx.post(base + "/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 2},
                   timeout=30)
    assert r.json()["usage"] == {"prompt_tokens": 3, "total_tokens": 5, "completion_tokens": 2,
                                 "prompt_tokens_details": None}
    r = httpx.post(base + "/v1/completions", json={"prompt": 5}, timeout=30)
    assert r.status_code == 400 and "prompt" in r.json()["error"]["message"]
    assert httpx.get(base + "/v1/models", timeout=5).json()["data"][0]["owned_by"] == "vllm"

    def spec_lines():
        return [m for m in (HEADER.match(ANSI.sub("", ln)) for ln in log.read_text()
                            .splitlines()) if m and m["msg"].startswith("SpecDecoding")]

    wait_until(lambda: len(spec_lines()) >= 3, what="three spec lines")
    metrics = httpx.get(base + "/metrics", timeout=5).text
    p.send_signal(signal.SIGTERM)
    assert p.wait(20) == 0
    for pid in [p.pid, *kids]:
        wait_until(lambda pid=pid: not alive(pid), 10, f"pid {pid} to exit")

    raw = log.read_text()
    lines = raw.splitlines()
    parsed = [HEADER.match(ANSI.sub("", ln)) for ln in lines]
    # every logger line has vLLM's header; the rest are uvicorn's prints, tagged as in 0.10
    for ln, m in zip(lines, parsed, strict=True):
        assert m is not None or ANSI.sub("", ln).startswith(f"(APIServer pid={p.pid}) INFO:  "), ln
    assert lines[0].startswith(f"\x1b[1;36m(APIServer pid={p.pid})\x1b[0;0m INFO ")
    cfg = [m for m in parsed if m and m["msg"].startswith("Initializing a V1 LLM engine")]
    assert len(cfg) == 1 and cfg[0]["proc"] == "EngineCore_DP0"
    assert "SpeculativeConfig(method='eagle3'" in cfg[0]["msg"]
    assert int(cfg[0]["pid"]) in kids
    # pairing: each spec line comes right after an Engine line of the same process
    msgs = [m for m in parsed if m]
    engines = 0
    accepted = 0
    for i, m in enumerate(msgs):
        if m["msg"].startswith("SpecDecoding metrics: "):
            prev = msgs[i - 1]
            assert prev["msg"].startswith("Engine 000: ") and prev["pid"] == m["pid"]
            assert m["proc"] == "APIServer" and m["file"] == "metrics.py" and m["lineno"] == "96"
            acc = int(re.search(r"Accepted: (\d+) tokens", m["msg"]).group(1))
            drafted = int(re.search(r"Drafted: (\d+) tokens", m["msg"]).group(1))
            pp = [float(x) for x in re.search(r"rate: ([\d., ]+), Avg", m["msg"]).group(1)
                  .split(", ")]
            assert len(pp) == 3 and pp == sorted(pp, reverse=True)
            mal = float(re.search(r"Mean acceptance length: ([\d.]+)", m["msg"]).group(1))
            assert mal == pytest.approx(1 + sum(pp), abs=0.011)  # bonus included (0.9+)
            assert drafted % 3 == 0
            accepted += acc
        if m["msg"].startswith("Engine 000: "):
            engines += 1
    assert engines >= 3
    # the counters at scrape time hold at least what the lines printed before it
    acc_total = counter(metrics, "vllm:spec_decode_num_accepted_tokens_total")
    assert acc_total > 0
    assert counter(metrics, "vllm:spec_decode_num_accepted_tokens_per_pos_total") == acc_total
    assert counter(metrics, "vllm:spec_decode_num_draft_tokens_total") == 3 * counter(
        metrics, "vllm:spec_decode_num_drafts_total")
    assert "Shutting down" in raw
    # parsed back by specmon's vLLM parser: every Engine line a decode record of engine 0 with
    # its spec line joined (accept length normalised, here as printed: 0.10.2 includes the bonus)
    from specmon.parse.vllm import SpecJoiner, VllmDecodeRecord, parse_vllm_line

    joiner = SpecJoiner()
    recs = [r for ln in lines for r in joiner.push(parse_vllm_line(ln))] + joiner.flush()
    decs = [r for r in recs if isinstance(r, VllmDecodeRecord)]
    assert len(decs) == engines and all(d.dp_rank == 0 for d in decs)
    joined = [d for d in decs if d.accept_len is not None]
    assert len(joined) == len([m for m in msgs if m["msg"].startswith("SpecDecoding")])
    assert all(1.0 <= d.accept_len <= 4.0 for d in joined)


def test_vllm_idle_server_prints_no_stats_and_old_versions_untagged(launch):  # noqa: F811 (fixture)
    p, port, log = launch("--engine", "vllm", "--format-version", "0.9.2", "--startup-s", "0",
                          "--log-stats-interval", "0.2")
    wait_until(lambda: log.exists() and "Application startup complete." in log.read_text(),
             what="ready")
    time.sleep(1.0)  # five intervals without a request
    text = log.read_text()
    assert "Engine 000:" not in text  # 0.8.5+: an idle engine logs at DEBUG
    assert text.startswith("INFO ")  # 0.9: the API server is untagged
    assert "(EngineCore" not in text  # no tag without DP before 0.10
    httpx.post(f"http://127.0.0.1:{port}/v1/completions", json={"prompt": "a b", "max_tokens": 30},
               timeout=30)
    wait_until(lambda: "Engine 000:" in log.read_text(), what="an Engine line after a request")
    os.kill(p.pid, signal.SIGTERM)
    assert p.wait(20) == 0


def test_vllm_bad_options_one_line(launch):  # noqa: F811 (fixture)
    for args in (["--format-version", "0.5.23"], ["--speculative-config", "{nope"],
                 ["--speculative-config", '{"method": "eagle3", "num_speculative_tokens": 3}'],
                 ["--speculative-algorithm", "EAGLE3"]):
        p, _, _ = launch("--engine", "vllm", *args)
        assert p.wait(30) == 2
        err = p.stderr.read().strip().splitlines()
        assert len(err) == 1 and "Traceback" not in err[0], err


def test_vllm_worker_crash_logs_a_tagged_traceback_and_exits_1(launch):  # noqa: F811 (fixture)
    p, _, log = launch("--engine", "vllm", "--format-version", "0.11.0", "--tp-size", "2",
                       "--startup-s", "0", "--crash-after", "0.3", "--load-concurrency", "1")
    assert p.wait(30) == 1
    raw = log.read_bytes().decode()
    start = raw.index("WorkerProc hit an exception.")
    block = raw[raw.rfind("\n", 0, start) + 1:].split("\n")
    tb = [ln for ln in block if "multiproc_executor.py:527" in ln]
    # one record: continuation lines end in \r and repeat the worker's tag and header
    assert all(ln.endswith("\r") for ln in tb[:-1]) and not tb[-1].endswith("\r")
    assert all(re.match(r"\x1b\[1;36m\(Worker_TP0 pid=\d+\)\x1b\[0;0m ERROR ", ln) for ln in tb)
    assert any("Traceback (most recent call last):" in ln for ln in tb)
    assert any("RuntimeError: CUDA error: an illegal memory access" in ln for ln in tb)
    assert "died unexpectedly, shutting down executor." in raw


def test_specmon_counters_reads_the_sims_vllm_counters(launch):  # noqa: F811 (fixture)
    """The log-free path end to end: `specmon counters` on the simulated server's /metrics."""
    import subprocess
    import sys

    p, port, log = launch("--engine", "vllm", "--startup-s", "0", "--load-concurrency", "2",
                          "--speculative-config", SPEC, "--accept-prob", "0.8")
    wait_until(lambda: log.exists() and "Application startup complete." in log.read_text(),
             what="ready")
    out = subprocess.run([sys.executable, "-m", "specmon", "counters",
                          f"http://127.0.0.1:{port}", "--interval", "1.5", "--json"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    rows = [json.loads(ln) for ln in out.stdout.splitlines() if ln.strip()]
    assert rows, out.stdout
    row = rows[-1]
    assert row["engine"] == "0" and row["restart"] is False and row["drafts"] > 0, row
    assert row["draft_tokens"] == 3 * row["drafts"] and row["mean_draft_len"] == 3.0  # k = 3
    assert row["accept_len"] == pytest.approx(1 + row["accepted_tokens"] / row["drafts"])
    pp = row["per_position"]
    assert len(pp) == 3 and pp == sorted(pp, reverse=True)  # a chain: never up with position
    assert row["accepted_tokens"] == pytest.approx(sum(pp) * row["drafts"])
    assert row["generation_tokens"] >= row["accepted_tokens"]
    os.kill(p.pid, signal.SIGTERM)
    assert p.wait(20) == 0
