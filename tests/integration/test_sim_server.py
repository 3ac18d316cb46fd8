"""`specmon sim server` as a process tree: spawned workers, titles, env trap, HTTP, shutdown."""

import json
import signal
from pathlib import Path

import httpx
import pytest
from kit.sim_server import alive, children, cmdline
from kit.wait import wait_until

from specmon.sim.gpu_model import SimGpuHost


def test_server_tree_env_trap_http_and_clean_sigterm(launch, tmp_path):
    p, port, log = launch(
        "--tp-size", "2", "--startup-s", "1.5", "--enable-metrics",
        "--set-env-after-spawn", "NCCL_P2P_LEVEL=NVL",
        env_extra={"NCCL_DEBUG": "INFO", "NCCL_PROTO": "LL128", "NCCL_ALGO": "Tree"},
        env_drop=("SPT_NOENV",),
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"

    def health():
        try:
            return httpx.get(base + "/health", timeout=2).status_code
        except httpx.TransportError:
            return None

    assert wait_until(health, what="HTTP up") == 503  # bound early, not ready yet
    wait_until(lambda: health() == 200, what="ready")
    text = log.read_text()
    assert "The server is fired up and ready to roll!" in text
    assert "server_args={'model_path':" in text  # 0.5.23 dict repr

    # process tree: detokenizer + one titled scheduler per rank, spawned (fresh interpreters)
    kids = all_kids = children(p.pid)
    # multiprocessing's resource tracker is a child too, as under real SGLang
    full = {k: Path(f"/proc/{k}/cmdline").read_bytes() for k in kids}
    kids = [k for k in kids if b"resource_tracker" not in full[k]]
    titles = sorted(cmdline(k) for k in kids)
    assert titles == ["sglang::detokenizer", "sglang::scheduler_TP0_EP0",
                      "sglang::scheduler_TP1_EP0"]  # fmt: skip
    workers = [k for k in kids if cmdline(k).startswith("sglang::scheduler")]
    for w in workers:  # setproctitle wiped the exec-time environment
        assert set(Path(f"/proc/{w}/environ").read_bytes()) <= {0}

    # the NCCL trap: the launcher set NCCL_P2P_LEVEL after spawn; no worker saw it
    state = httpx.get(base + "/sim/state", timeout=5).json()
    assert state["launcher_nccl_env"]["NCCL_P2P_LEVEL"] == "NVL"
    for rank in state["ranks"]:
        assert "NCCL_P2P_LEVEL" not in rank["nccl"] and rank["nccl"]["NCCL_PROTO"] == "LL128"
        assert rank["comm_ms"] == pytest.approx((2.25 + 4.628 * 0.40) / 7)
    nccl = [ln for ln in text.splitlines() if "NCCL INFO" in ln and "set by environment" in ln]
    assert any(ln.endswith("NCCL_PROTO set by environment to LL128") for ln in nccl)
    assert {ln.split()[1] for ln in nccl} == {"[0]", "[1]"}  # one set per rank
    assert not any("NCCL_P2P_LEVEL" in ln for ln in nccl)

    info = httpx.get(base + "/get_server_info", timeout=5).json()
    assert info["tp_size"] == 2 and info["version"] == "0.5.23"
    assert "last_gen_throughput" in info["internal_states"][0]
    assert httpx.get(base + "/server_info", timeout=5).json()["port"] == port
    models = httpx.get(base + "/v1/models", timeout=5).json()
    assert models["data"][0]["owned_by"] == "sglang"

    body = {"text": "hi there", "sampling_params": {"max_new_tokens": 5}, "stream": True}
    with httpx.stream("POST", base + "/generate", json=body, timeout=30) as r:
        events = [ln[6:] for ln in r.iter_lines() if ln.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[-1]["meta_info"]["completion_tokens"] == 5
    assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "length"
    r = httpx.post(base + "/generate", json={"input_ids": [1, 2, 3],
                   "sampling_params": {"max_new_tokens": 3}}, timeout=30)  # fmt: skip
    assert r.json()["meta_info"]["prompt_tokens"] == 3
    metrics = httpx.get(base + "/metrics", timeout=5).text
    for name in ("sglang:gen_throughput{", "sglang:num_running_reqs{", "sglang:num_queue_reqs{",
                 "sglang:spec_accept_length{", "sglang:generation_tokens_total{"):  # fmt: skip
        assert name in metrics
    prefix = "sglang:generation_tokens_total"
    gen_total = [ln for ln in metrics.splitlines() if ln.startswith(prefix)]
    assert float(gen_total[0].rsplit(" ", 1)[1]) >= 8 + 8  # warm-up + our two requests

    reg = json.loads((tmp_path / "host/servers" / f"sim-{port}.json").read_text())
    assert reg["pid"] == p.pid and sorted(reg["worker_pids"].values()) == sorted(workers)
    gpu0 = SimGpuHost(tmp_path / "host").snapshot()[0]
    assert gpu0["processes"][0]["pid"] in workers and gpu0["clock_sm"] == 1980

    p.send_signal(signal.SIGTERM)
    assert p.wait(20) == 0
    for pid in [p.pid, *all_kids]:
        wait_until(lambda pid=pid: not alive(pid), 10, f"pid {pid} to exit")
    assert not (tmp_path / "host/servers" / f"sim-{port}.json").exists()
    assert "Finished server process" in log.read_text()


def test_spt_noenv_keeps_environ_and_crash_writes_traceback(launch, tmp_path):
    p, port, log = launch(
        "--tp-size", "2", "--startup-s", "0", "--crash-after", "0.3",
        "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "2",
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "3",
        "--load-concurrency", "1",
        env_extra={"SPT_NOENV": "1", "NCCL_PROTO": "LL"},
    )  # fmt: skip
    workers = wait_until(
        lambda: [k for k in children(p.pid) if cmdline(k).startswith("sglang::scheduler_TP")]
        if len(children(p.pid)) >= 3 else None, what="workers")  # fmt: skip
    environ = Path(f"/proc/{workers[0]}/environ").read_bytes().split(b"\0")
    assert b"NCCL_PROTO=LL" in environ  # readable: SPT_NOENV=1 kept it
    assert p.wait(30) == 1
    text = log.read_text()
    assert "Scheduler hit an exception: Traceback (most recent call last):" in text
    assert "RuntimeError: CUDA error: an illegal memory access was encountered" in text
    assert "Received sigquit from a child process." in text
    for pid in workers:
        wait_until(lambda pid=pid: not alive(pid), 10, f"pid {pid} to exit")
    assert not (tmp_path / "host/servers" / f"sim-{port}.json").exists()


def test_bad_options_give_one_line_and_exit_2(launch, tmp_path):
    p, _, _ = launch("--format-version", "0.9.9")
    assert p.wait(30) == 2
    err = p.stderr.read().strip().splitlines()
    assert len(err) == 1 and "0.9.9" in err[0]
    # a --log-file in a folder that is not there: a FileNotFoundError traceback before
    missing = tmp_path / "no-such-folder" / "x.log"
    p, _, _ = launch("--log-file", str(missing))
    assert p.wait(30) == 2
    err = p.stderr.read().strip().splitlines()
    assert len(err) == 1 and f"cannot write {missing}" in err[0], err
    p, _, _ = launch("--format-version", "0.4.0", "--speculative-algorithm", "EAGLE")
    assert p.wait(30) == 2
