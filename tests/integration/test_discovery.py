"""Finding SGLang servers: pure grouping of a process table, then real fake processes."""

from __future__ import annotations

import subprocess
import sys

from kit.discovery import FAKE_SERVER, run_discovery, wait_log

from specmon.hosts.agent_client import AgentClient
from specmon.hosts.local import LocalHost
from specmon.sources.discovery import (
    LOG_NOT_READABLE,
    Proc,
    discover,
    find_servers,
    log_from_fds,
)

PY = "/usr/bin/python3"


def test_find_servers_groups_workers_and_reads_flags():
    procs = [
        Proc(1, 0, 0, ["/sbin/init"]),
        Proc(10, 1, 0, ["bash"]),
        Proc(100, 10, 0, [PY, "-m", "sglang.launch_server", "--model-path", "m/llama",
                          "--port", "30001", "--tp-size", "2",
                          "--speculative-algorithm", "EAGLE3",
                          "--speculative-num-steps=3", "--enable-metrics"]),
        Proc(101, 100, 0, ["sglang::scheduler_TP0"]),
        Proc(102, 100, 0, ["sglang::scheduler_TP1"]),
        Proc(103, 100, 0, ["sglang::detokenizer"]),
        Proc(200, 10, 0, [PY, "/usr/local/bin/sglang", "serve", "--model-path", "m"]),
        Proc(201, 200, 0, [PY, "-c", "from multiprocessing.spawn import spawn_main"]),
        Proc(202, 201, 0, ["sglang::scheduler"]),  # a grandchild still belongs to 200
        Proc(300, 10, 0, [PY, "/venv/bin/specmon", "sim", "server", "--port", "31000",
                          "--speculative-algorithm", "NONE"]),
        Proc(400, 10, 0, ["grep", "sglang.launch_server"]),
        Proc(401, 10, 0, ["tail", "-F", "/logs/sglang.launch_server.log"]),
        Proc(402, 10, 0, [PY, "-m", "specmon", "record", "local"]),
        Proc(500, 1, 0, ["sglang::scheduler_TP0"]),  # orphan worker: no launcher above it
    ]
    servers = {s.pid: s for s in find_servers(procs)}
    assert set(servers) == {100, 200, 300}
    spec, serve, sim = servers[100], servers[200], servers[300]
    assert (spec.port, spec.port_from_args, spec.kind, spec.tp_size) == (30001, True,
                                                                         "speculative", 2)
    assert spec.spec_args == {"--speculative-algorithm": "EAGLE3",
                              "--speculative-num-steps": "3"}
    assert spec.model == "m/llama" and spec.name == "sglang-30001"
    assert spec.workers == [(101, "sglang::scheduler_TP0"), (102, "sglang::scheduler_TP1")]
    assert (serve.port, serve.port_from_args, serve.kind) == (30000, False, "baseline")
    assert serve.workers == [(202, "sglang::scheduler")]
    assert sim.simulated and sim.kind == "baseline" and sim.port == 31000


def test_workers_are_listed_by_rank_even_when_the_pids_wrapped():
    """pid_max wraps: TP0 at 32760, TP1 at 310. Ranks count as numbers (TP2 before TP10), and
    a title with 5,000 digits (anyone's text) is ordered too, not an int() error."""
    huge = "sglang::scheduler_DP0_TP" + "9" * 5000
    procs = [Proc(300, 1, 0, [PY, "-m", "sglang.launch_server", "--tp-size", "4"])]
    procs += [Proc(pid, 300, 0, [title]) for pid, title in (
        (301, huge), (305, "sglang::scheduler_DP0_TP10"), (310, "sglang::scheduler_DP0_TP1"),
        (320, "sglang::scheduler_DP0_TP2"), (32760, "sglang::scheduler_DP0_TP0"))]
    (server,) = find_servers(procs)
    assert server.workers == [(32760, "sglang::scheduler_DP0_TP0"),
                              (310, "sglang::scheduler_DP0_TP1"),
                              (320, "sglang::scheduler_DP0_TP2"),
                              (305, "sglang::scheduler_DP0_TP10"), (301, huge)]


def test_log_from_fds_prefers_stderr_file_and_rejects_pipes_ttys_deleted():
    assert log_from_fds({"1": {"target": "/x/out.log", "regular": True},
                         "2": {"target": "/x/err.log", "regular": True}})[0] == "/x/err.log"
    for target in ("pipe:[1234]", "/dev/pts/3", "socket:[9]", "/x/gone.log (deleted)"):
        path, problem, raw = log_from_fds({"1": {"target": target, "regular": False},
                                           "2": {"target": target, "regular": False}})
        assert path is None and problem == LOG_NOT_READABLE and raw == target
    assert log_from_fds({"2": {"target": "/dev/null", "regular": False},
                         "1": {"target": "/x/o.log", "regular": True}})[0] == "/x/o.log"












async def test_discovery_of_fake_servers_locally(fakes, tmp_path):
    host = LocalHost()
    await host.connect()
    await run_discovery(host, fakes, tmp_path)


async def test_log_file_argument_wins_over_redirected_stderr(fakes, tmp_path):
    """`... --log-file base.log > base.out 2>&1` (issue 16): tail base.log, relative to the
    server's working directory, not the stderr file; a --log-file that is not there is a
    problem that names it, not a silent fall back to stderr."""
    (tmp_path / "base.log").write_text("Decode batch, #running-req: 1\n")
    out = open(tmp_path / "base.out", "ab")
    procs = []
    for port, log in ((30011, "base.log"), (30012, "gone.log")):
        p = subprocess.Popen([sys.executable, "-c", FAKE_SERVER, "hello", "sglang.launch_server",
                              "--port", str(port), f"--log-file={log}" if port == 30012 else
                              "--log-file", *([] if port == 30012 else [log])],
                             stdout=out, stderr=out, cwd=tmp_path, start_new_session=True)
        fakes.procs.append(p)
        procs.append(p.pid)
    await wait_log(tmp_path / "base.out", b"ready")
    async with AgentClient(LocalHost()) as agent:
        servers = {s.pid: s for s in await discover(agent)}
    base, gone = servers[procs[0]], servers[procs[1]]
    assert base.log_path == str(tmp_path / "base.log") and base.log_problem is None
    assert base.log_target == str(tmp_path / "base.out")  # where stderr goes, for the record
    assert gone.log_path is None
    assert gone.log_problem == (f"--log-file {tmp_path / 'gone.log'}: not a readable file; "
                                "pass --log NAME=PATH")


def test_find_vllm_servers_by_command_line_and_worker_titles():
    spec = '{"method": "eagle3", "model": "d/eagle3", "num_speculative_tokens": 3}'
    procs = [
        Proc(10, 1, 0, ["bash"]),
        Proc(100, 10, 0, [PY, "/venv/bin/vllm", "serve", "m/llama", "--tensor-parallel-size",
                          "2", "--speculative-config", spec]),
        Proc(101, 100, 0, ["VLLM::EngineCore_DP0"]),
        Proc(102, 101, 0, ["VLLM::Worker_TP0"]),  # workers are the EngineCore's children
        Proc(103, 101, 0, ["VLLM::Worker_TP1"]),
        Proc(200, 10, 0, [PY, "-m", "vllm.entrypoints.openai.api_server", "--model", "m/b",
                          "--port", "8001", "-tp", "4"]),
        Proc(201, 200, 0, ["MYPFX::EngineCore"]),  # VLLM_PROCESS_NAME_PREFIX=MYPFX
        Proc(300, 10, 0, [PY, "-m", "specmon", "sim", "server", "--engine", "vllm",
                          "--port", "8002"]),
        Proc(301, 300, 0, ["VLLM::EngineCore_DP0"]),
        Proc(400, 10, 0, ["grep", "vllm serve"]),
        Proc(401, 10, 0, ["less", "vllm.entrypoints.openai.api_server.log"]),
        Proc(402, 10, 0, [PY, "-m", "vllm.entrypoints.cli.main", "bench", "serve"]),
        Proc(500, 1, 0, ["VLLM::Worker_TP0"]),  # orphan: no launcher above it
        Proc(600, 10, 0, [PY, "-m", "specmon", "sim", "server", "--engine=vllm", "--port",
                          "8003", "--format-version", "0.9.2", "--tp-size", "2"]),
        Proc(601, 600, 0, ["VLLM::EngineCore"]),
        Proc(602, 600, 0, ["VLLM::VllmWorker_0"]),  # the sim's title for a 0.9 worker
        Proc(603, 600, 0, ["VLLM::VllmWorker_1"]),
    ]
    servers = {s.pid: s for s in find_servers(procs)}
    assert set(servers) == {100, 200, 300, 600}
    serve, api, sim = servers[100], servers[200], servers[300]
    assert [t for _, t in servers[600].workers] == ["VLLM::VllmWorker_0", "VLLM::VllmWorker_1"]
    assert (serve.engine, serve.name, serve.port, serve.port_from_args) == (
        "vllm", "vllm-8000", 8000, False)
    assert (serve.kind, serve.model, serve.tp_size) == ("speculative", "m/llama", 2)
    assert serve.spec_args["--speculative-algorithm"] == "eagle3"
    assert "eagle3" in serve.describe()
    # TP 2: the GPU ranks are the workers (the EngineCore only drives them); TP 1: the core
    assert serve.workers == [(102, "VLLM::Worker_TP0"), (103, "VLLM::Worker_TP1")]
    assert (api.engine, api.name, api.kind, api.tp_size, api.model) == (
        "vllm", "vllm-8001", "baseline", 4, "m/b")
    assert api.workers == [(201, "MYPFX::EngineCore")]
    assert (sim.engine, sim.simulated, sim.name) == ("vllm", True, "vllm-8002")
    # SGLang's names are unchanged
    sg = find_servers([Proc(1, 0, 0, [PY, "-m", "sglang.launch_server", "--model-path", "m"])])
    assert (sg[0].engine, sg[0].name) == ("sglang", "sglang-30000")


def test_worker_titles_and_near_misses():
    from specmon.sources.discovery import is_worker_title

    for t in ("sglang::scheduler_TP0_EP0", "VLLM::Worker", "VLLM::Worker_DP1_TP3",
              "MYPFX::EngineCore_DP0", "VLLM::DPEngineCore_1", "VLLM::VllmWorker_0",
              "VllmWorker rank=0"):
        assert is_worker_title(t), t
    for t in ("VLLM::WorkerPool", "VLLM::APIServer", "VLLM::DPSupervisor", "bash",
              "python3", "sglang::detokenizer", "Worker_TP0"):
        assert not is_worker_title(t), t


async def test_vllm_log_is_stdout_sglang_log_is_stderr(fakes, tmp_path):
    """`... > out.log 2> err.log`: vLLM's logger writes to stdout, SGLang's to stderr."""
    procs = {}
    for engine, module in (("vllm", "vllm.entrypoints.openai.api_server"),
                           ("sglang", "sglang.launch_server")):
        out, err = open(tmp_path / f"{engine}.out", "ab"), open(tmp_path / f"{engine}.err", "ab")
        p = subprocess.Popen([sys.executable, "-c", FAKE_SERVER, "hello", module, "--port",
                              "30021" if engine == "sglang" else "8021"],
                             stdout=out, stderr=err, start_new_session=True)
        fakes.procs.append(p)
        procs[engine] = p.pid
        await wait_log(tmp_path / f"{engine}.out", b"ready")
    async with AgentClient(LocalHost()) as agent:
        servers = {s.pid: s for s in await discover(agent)}
    v, s = servers[procs["vllm"]], servers[procs["sglang"]]
    assert (v.engine, v.name, v.log_path) == ("vllm", "vllm-8021", str(tmp_path / "vllm.out"))
    assert (s.engine, s.log_path) == ("sglang", str(tmp_path / "sglang.err"))
