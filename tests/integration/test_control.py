"""Server control against the simulated SGLang server on this machine (LocalHost).

Real processes throughout: `specmon sim server` launched by the controller (setsid + env on the
command), TP workers titled with setproctitle, /health through the port, GPUs from the sim dir.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys

import httpx
import pytest
from kit.control import (
    alive,
    cleanup_pidfiles,
    cmdline,
    group_alive,
    host_profile,
    kill_group,
    sim_profile,
    start_decoy,
    starttime,
)

from specmon.control.benchmark import BenchConfig
from specmon.control.server import (
    GpuBusy,
    NotOurs,
    ServerController,
    StartFailed,
    StartTimeout,
    SwapFailed,
    swap,
)
from specmon.hosts.local import LocalHost
from specmon.sim.gpu_model import register_server

TUNED = {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring"}


@pytest.fixture
def hp(tmp_path):
    prof = host_profile(tmp_path)
    yield prof
    cleanup_pidfiles(tmp_path / "run")


def ctl(hp, prof) -> ServerController:
    return ServerController(LocalHost(), prof, hp)


async def sim_state(c: ServerController) -> dict:
    async with httpx.AsyncClient(base_url=await c.base_url()) as h:
        return (await h.get("/sim/state")).json()


async def test_start_with_env_audit_benchmark_stop_spares_decoy(hp, tmp_path):
    prof = sim_profile(tmp_path, "base", [0, 1], env=TUNED)
    events = []
    async with ctl(hp, prof) as c:
        res = await c.start(events.append)
        rec = await c.read_record()
        try:
            # progress came from the start-up lines, in order, then readiness
            phases = [e.phase for e in events]
            for ph in ("launching", "weights", "kv_cache", "cuda_graphs", "ready"):
                assert ph in phases, phases
            assert phases.index("weights") < phases.index("cuda_graphs") < phases.index("ready")
            graphs = next(e for e in events if e.phase == "cuda_graphs")
            assert graphs.batch_sizes[:3] == [1, 2, 4]
            assert [e.fraction for e in events] == sorted(e.fraction for e in events)

            # pidfile: 0600, the group we started, the command the leader really runs
            pidfile = await c.pidfile()
            assert stat.S_IMODE(os.stat(pidfile).st_mode) == 0o600
            assert rec["pid"] == rec["pgid"] == rec["sid"] == res.pid == os.getpgid(res.pid)
            assert rec["cmdline"] == cmdline(res.pid) == prof.launch_argv(sys.executable)
            assert rec["chain"][:3] == ["setsid", "env", "--"]
            assert "NCCL_ALGO=Ring" in rec["chain"] and "SPT_NOENV=1" in rec["chain"]

            # every worker really has the profile's variables (audit and the sim agree)
            audit = res.audit
            assert [p.role for p in audit.processes] == ["launcher", "worker", "worker"]
            assert [p.title for p in audit.workers] == ["sglang::scheduler_TP0_EP0",
                                                        "sglang::scheduler_TP1_EP0"]
            for p in audit.processes:
                assert p.status == "ok" and p.missing == [] and p.differs == {}
                assert p.env["NCCL_ALGO"] == "Ring" and p.env["NCCL_PROTO"] == "LL"
                assert p.env["SPT_NOENV"] == "1"
            assert "CUDA_DEVICE_MAX_CONNECTIONS" in audit.workers[0].env  # set by the launcher
            assert audit.problems() == []
            state = await sim_state(c)
            for rank in state["ranks"]:
                assert rank["nccl"]["NCCL_ALGO"] == "Ring"
            assert sorted(p.pid for p in audit.workers) == sorted(
                r["pid"] for r in state["ranks"])

            st = await c.status()
            assert st.state == "ready" and st.healthy and st.pid == res.pid
            assert await c.gpu_holders() == {0: [state["ranks"][0]["pid"]],
                                             1: [state["ranks"][1]["pid"]]}

            # built-in benchmark: consistent with the simulated bs-1 step time
            b = await c.benchmark(BenchConfig(num_prompts=2, output_len=24))
            step = state["bs1_step_ms"]
            assert b.kind == "builtin" and b.completed == 2 and b.failed == 0
            assert b.total_output_tokens == 48
            assert b.mean_itl_ms == pytest.approx(step, rel=0.35)
            assert b.output_tok_s == pytest.approx(b.total_output_tokens / b.duration_s)
            assert b.output_tok_s < 1000 / step * 1.15  # end-to-end includes TTFT: not faster
            assert b.output_tok_s > 1000 / step * 0.6
            assert b.mean_ttft_ms is not None and b.accept_length is None  # not speculative
            assert c.benchmarks == [b]

            # a decoy with exactly the same command line, not started by specmon
            decoy = start_decoy(tmp_path, rec["cmdline"])
            try:
                assert cmdline(decoy.pid) == cmdline(res.pid)
                out = await c.stop(grace=10)
                assert out.ok and out.signals == ["SIGTERM"] and out.gpus_free is True
                assert group_alive(res.pid) == []
                assert alive(decoy.pid)
                assert not os.path.exists(pidfile)
                assert (await c.status()).state == "stopped"

                # a pidfile pointing at the decoy (pid reuse): refused, nothing signalled
                fake = {**rec, "pid": decoy.pid, "pgid": decoy.pid, "sid": decoy.pid}
                await c.agent_op({"op": "write", "path": pidfile, "text": json.dumps(fake)})
                with pytest.raises(NotOurs, match="start time differs"):
                    await c.stop(grace=1)
                assert (await c.status()).state == "stale"
                assert alive(decoy.pid)
            finally:
                kill_group(decoy.pid)
                decoy.wait(10)
        finally:
            kill_group(rec["pgid"])


async def test_pidfile_with_matching_start_time_but_other_command_is_refused(hp, tmp_path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                               start_new_session=True)
    try:
        prof = sim_profile(tmp_path, "x", [0])
        async with ctl(hp, prof) as c:
            chain = ["setsid", "env", "--", *prof.launch_argv(sys.executable)]
            rec = {"pid": sleeper.pid, "pgid": sleeper.pid, "sid": sleeper.pid,
                   "starttime": starttime(sleeper.pid), "chain": chain, "cmdline": None}
            await c.agent_op({"op": "write", "path": await c.pidfile(), "text": json.dumps(rec)})
            with pytest.raises(NotOurs, match="not the command specmon started"):
                await c.stop(grace=1)
            assert alive(sleeper.pid)
            st = await c.status()
            assert st.state == "stale" and "not the command" in st.detail
    finally:
        sleeper.kill()
        sleeper.wait(10)


async def test_missing_in_worker_flag_and_unreadable_is_not_missing(hp, tmp_path):
    # The launcher sets NCCL_ALGO only after spawning its workers (profile says Ring).
    late = sim_profile(tmp_path, "late", [0, 1], env=TUNED)
    late.command = ["env", "-u", "NCCL_ALGO", *late.launch_argv(sys.executable),
                    "--set-env-after-spawn", "NCCL_ALGO=Ring"]
    # Without SPT_NOENV=1 setproctitle wipes the workers' environ: unreadable, not missing.
    wiped = sim_profile(tmp_path, "wiped", [2, 3], env=TUNED, spt_noenv=False)
    async with ctl(hp, late) as a, ctl(hp, wiped) as b:
        ra, rb = await asyncio.gather(a.start(), b.start())
        try:
            for w in ra.audit.workers:
                assert w.status == "ok" and w.missing == ["NCCL_ALGO"]
                assert w.env["NCCL_PROTO"] == "LL" and "NCCL_ALGO" not in w.env
            problems = ra.audit.problems()
            assert any("sglang::scheduler_TP1_EP0" in p and "missing in worker: NCCL_ALGO=Ring" in p
                       for p in problems)
            state = await sim_state(a)
            assert state["launcher_nccl_env"]["NCCL_ALGO"] == "Ring"  # the launcher believes it
            assert all("NCCL_ALGO" not in r["nccl"] for r in state["ranks"])  # workers never saw it

            launcher, *workers = rb.audit.processes
            assert launcher.status == "ok" and "SPT_NOENV" not in launcher.env
            assert len(workers) == 2
            for w in workers:
                assert w.status == "unreadable" and w.env is None and w.missing == []
                assert "setproctitle" in w.reason
            text = "\n".join(rb.audit.problems())
            assert "unreadable" in text and "missing" not in text

            # the exec chain (env -u ...) does not confuse the command-line check
            out = await a.stop(grace=10)
            assert out.ok and group_alive(ra.pid) == []
            out = await b.stop(grace=10)
            assert out.ok and group_alive(rb.pid) == []
        finally:
            kill_group(ra.pid)
            kill_group(rb.pid)


async def test_the_audit_lists_workers_by_rank_not_by_pid(hp, tmp_path):
    """Process-table order is pid order; once the pid counter wraps (pid_max 32768) TP1 can
    have a lower pid than TP0, and the audit listed it first (a CI run saw exactly that). Real
    processes: a leader whose workers start in the order TP10, TP1, TP2, TP0."""
    titles = ["sglang::scheduler_TP10", "sglang::scheduler_TP1", "sglang::scheduler_TP2",
              "sglang::scheduler_TP0"]
    script = "".join(f"exec -a {t} sleep 60 & " for t in titles) + "wait"
    leader = subprocess.Popen(["bash", "-c", script], start_new_session=True)
    try:
        def children() -> int:
            with open(f"/proc/{leader.pid}/task/{leader.pid}/children") as f:
                kids = f.read().split()
            return sum(cmdline(int(k))[:1] in ([t] for t in titles) for k in kids)

        deadline = asyncio.get_running_loop().time() + 20
        while children() < len(titles):
            assert asyncio.get_running_loop().time() < deadline, "the workers did not start"
            await asyncio.sleep(0.05)
        async with ctl(hp, sim_profile(tmp_path, "ranks", [0])) as c:
            audit = await c.audit_env({"pid": leader.pid})
        assert audit is not None
        assert [p.title for p in audit.workers] == [
            "sglang::scheduler_TP0", "sglang::scheduler_TP1", "sglang::scheduler_TP2",
            "sglang::scheduler_TP10"]
        assert audit.processes[0].role == "launcher" and audit.processes[0].pid == leader.pid
    finally:
        kill_group(leader.pid)
        leader.wait(10)


async def test_crash_during_start_returns_log_tail_and_traceback(hp, tmp_path):
    prof = sim_profile(tmp_path, "crash", [0])
    prof.command = [sys.executable, "-c",
                    "import sys; print('Load weight begin. avail mem=139.12 GB', flush=True)\n"
                    "def load():\n    raise RuntimeError('CUDA out of memory (simulated)')\n"
                    "load()"]
    async with ctl(hp, prof) as c:
        with pytest.raises(StartFailed) as info:
            await c.start(timeout=30)
        exc = info.value
        assert not isinstance(exc, StartTimeout)
        assert "exited during start-up" in str(exc) and "CUDA out of memory" in str(exc)
        assert exc.traceback[0].startswith("Traceback (most recent call last)")
        assert exc.traceback[-1] == "RuntimeError: CUDA out of memory (simulated)"
        assert any("Load weight begin" in ln for ln in exc.last_lines)
        assert (await c.status()).state == "exited"
        # a stale pidfile does not block the next start attempt (it fails the same way)
        with pytest.raises(StartFailed):
            await c.start(timeout=30)


async def test_readiness_timeout_leaves_it_running_then_stop(hp, tmp_path):
    prof = sim_profile(tmp_path, "slow", [1], extra=["--startup-s", "60"])
    async with ctl(hp, prof) as c:
        with pytest.raises(StartTimeout) as info:
            await c.start(timeout=1.5)
        rec = await c.read_record()
        try:
            assert "not ready after 1.5 s" in str(info.value)
            st = await c.status()
            assert st.state == "starting" and st.healthy is False
            out = await c.stop(grace=10)
            assert out.ok and group_alive(rec["pgid"]) == []
        finally:
            kill_group(rec["pgid"])


async def test_busy_gpus_refused_with_owner_then_swap(hp, tmp_path):
    base = sim_profile(tmp_path, "base", [0, 1], env=TUNED)
    spec = sim_profile(tmp_path, "spec", [0, 1], env=TUNED, role="speculative",
                       extra=["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "2",
                              "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens",
                              "3"])
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                               start_new_session=True)
    pids = []
    try:
        async with ctl(hp, base) as a, ctl(hp, spec) as b:
            ra = await a.start()
            pids.append(ra.pid)
            with pytest.raises(GpuBusy) as info:
                await b.start()
            owners = info.value.owners
            assert [o.gpu for o in owners] == [0, 1]
            assert {o.server for o in owners} == {"base"}
            assert {o.pid for o in owners} == {w.pid for w in ra.audit.workers}
            assert "swap with 'base'" in str(info.value)
            assert (await b.status()).state == "stopped"  # nothing was launched

            events = []
            res = await swap(a, b, events.append)
            pids.append(res.started.pid)
            assert res.stopped.ok and group_alive(ra.pid) == []
            assert (await a.status()).state == "stopped"
            assert (await b.status()).state == "ready"
            holders = await b.gpu_holders()
            assert set(holders[0] + holders[1]) == {w.pid for w in res.started.audit.workers}
            bench = await b.benchmark(BenchConfig(num_prompts=1, output_len=16))
            assert bench.accept_length is not None and 1.0 <= bench.accept_length <= 3.0
            assert (await b.stop(grace=10)).ok

            # a process specmon knows nothing about holds GPU 3 (simulated NVML process)
            register_server(tmp_path / "sim", "foreign", {
                "name": "foreign", "pid": sleeper.pid, "gpus": [3],
                "worker_pids": {"3": sleeper.pid}, "mem_used_mib": 1000})
            other = sim_profile(tmp_path, "other", [2, 3])
            async with ctl(hp, other) as o:
                with pytest.raises(GpuBusy) as info:
                    await o.start()
                (owner,) = info.value.owners
                assert owner.gpu == 3 and owner.pid == sleeper.pid and owner.server is None
                assert "python" in owner.title and str(sleeper.pid) in str(info.value)
            assert alive(sleeper.pid)
    finally:
        for p in pids:
            kill_group(p)
        sleeper.kill()
        sleeper.wait(10)


CRASH = [sys.executable, "-c", "import sys; print('boom: no such model', file=sys.stderr); "
         "sys.exit(3)"]


async def test_swap_whose_start_fails_after_the_stop_starts_the_stopped_server_again(
        hp, tmp_path):
    """a is stopped for b, b crashes at start: a is started again (ready, same profile) and
    the error says so, with b's last log lines."""
    base = sim_profile(tmp_path, "base", [0, 1], env=TUNED)
    bad = sim_profile(tmp_path, "bad", [0, 1], command=CRASH)
    pids = []
    try:
        async with ctl(hp, base) as a, ctl(hp, bad) as b:
            ra = await a.start()
            pids.append(ra.pid)
            with pytest.raises(SwapFailed) as info:
                await swap(a, b)
            err = info.value
            assert err.restarted is not None and err.down == ()
            pids.append(err.restarted.pid)
            assert str(err).startswith("swap failed: bad did not start")
            assert str(err).endswith("base was started again")
            assert any("boom: no such model" in ln for ln in err.last_lines)
            assert group_alive(ra.pid) == [] and err.restarted.pid != ra.pid
            assert (await a.status()).state == "ready"
            assert (await b.status()).state == "exited"
    finally:
        for p in pids:
            kill_group(p)


async def test_swap_that_cannot_restart_the_stopped_server_says_loudly_it_is_down(hp, tmp_path):
    base = sim_profile(tmp_path, "base", [0, 1], env=TUNED)
    bad = sim_profile(tmp_path, "bad", [0, 1], command=CRASH)
    pids = []
    try:
        async with ctl(hp, base) as a, ctl(hp, bad) as b:
            ra = await a.start()
            pids.append(ra.pid)

            def progress(p) -> None:
                if "waiting for" in p.describe():  # a is stopped now: its profile breaks
                    a.profile.command = CRASH

            with pytest.raises(SwapFailed) as info:
                await swap(a, b, progress)
            assert info.value.down == ("base",) and info.value.restarted is None
            assert str(info.value).endswith("base IS DOWN")
            assert "starting base again failed too" in str(info.value)
            assert (await a.status()).state == "exited"
            assert (await b.status()).state == "exited"
    finally:
        for p in pids:
            kill_group(p)


def test_server_cli_start_status_stop(hp, tmp_path):
    cfg = tmp_path / "specmon.toml"
    prof = sim_profile(tmp_path, "base", [0, 1], env=TUNED)
    extra = json.dumps(prof.extra_args)
    cfg.write_text(
        f'[hosts.local]\npython = "{sys.executable}"\nrun_dir = "{hp.run_dir}"\n'
        f'sim_dir = "{hp.sim_dir}"\nn_gpus = 4\n'
        f'[servers.base]\nrole = "baseline"\nlauncher = "sim"\nmodel_path = "m"\ntp = 2\n'
        f'port = {prof.port}\ngpus = [0, 1]\nextra_args = {extra}\n'
        f'env = {{ NCCL_PROTO = "LL" }}\n'
        f'[servers.crash]\nrole = "baseline"\nport = 1\n'
        f'command = ["{sys.executable}", "-c", "raise SystemExit(\\"boom: no GPU\\")"]\n')

    def specmon(*args):
        return subprocess.run([sys.executable, "-m", "specmon", *args, "--config", str(cfg)],
                              capture_output=True, text=True, timeout=120)

    r = specmon("server", "start", "base")
    try:
        assert r.returncode == 0, r.stderr
        assert "base: ready in" in r.stdout and "capturing CUDA graphs" in r.stderr
        assert "sglang::scheduler_TP1_EP0" in r.stdout and "NCCL_PROTO=LL" in r.stdout
        r = specmon("server", "status", "base")
        assert r.returncode == 0 and "base: ready" in r.stdout
        r = specmon("server", "stop", "base")
        assert r.returncode == 0 and "no process left; GPUs free" in r.stdout
        r = specmon("server", "status", "base")
        assert "base: stopped" in r.stdout
        r = specmon("server", "start", "crash")
        assert r.returncode == 1 and "boom: no GPU" in r.stderr and "Traceback" not in r.stderr
    finally:
        cleanup_pidfiles(tmp_path / "run")


def test_server_cli_bench_of_a_stopped_server_fails_in_one_line(hp, tmp_path):
    """Every request failing (nothing listens on the port) is the action failing: one line
    with how many failed and the first error, exit 1, not an N/A line and exit 0. An error
    text from the server is one line, redacted, its escapes shown as text."""
    import http.server
    import threading

    prof = sim_profile(tmp_path, "base", [0])  # never started: its port is free
    cfg = tmp_path / "specmon.toml"
    cfg.write_text(
        f'[hosts.local]\npython = "{sys.executable}"\nrun_dir = "{hp.run_dir}"\n'
        f'sim_dir = "{hp.sim_dir}"\nn_gpus = 4\n'
        f'[servers.base]\nrole = "baseline"\nlauncher = "sim"\nmodel_path = "m"\ntp = 1\n'
        f'port = {prof.port}\ngpus = [0]\n')

    def bench(*extra):
        return subprocess.run([sys.executable, "-m", "specmon", "server", "bench", "base",
                               "--builtin", "--num-prompts", "3", "--config", str(cfg), *extra],
                              capture_output=True, text=True, timeout=120)

    r = bench()
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert r.stdout == "" and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("specmon server bench: base: all 3 requests failed (first error: "
                               "ConnectError"), r.stderr
    r = bench("--json")
    assert r.returncode == 1 and "all 3 requests failed" in r.stderr
    out = json.loads(r.stdout)
    assert (out["completed"], out["failed"]) == (0, 3)

    class Refuse(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - /metrics, /server_info: not there
            self.send_error(404)

        def do_POST(self):  # noqa: N802 - /generate: an error whose text is hostile
            body = b"boom\x1b]0;pwned\x07\nHF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz012345"
            self.send_response(500)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", prof.port), Refuse)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        r = bench()
    finally:
        srv.shutdown()
        srv.server_close()
    assert r.returncode == 1 and r.stdout == "" and r.stderr.count("\n") == 1, r.stderr
    assert "all 3 requests failed (first error: HTTP 500: boom\\x1b]0;pwned\\x07 " in r.stderr
    assert "\x1b" not in r.stderr and "hf_abcdef" not in r.stderr and "REDACTED" in r.stderr


async def test_bench_serving_on_the_host_is_preferred_and_parsed(hp, tmp_path, data_dir):
    """When the host's Python has sglang.bench_serving, it runs there and its block is parsed."""
    block = next(json.loads(ln) for ln in
                 (data_dir / "sglang-logs" / "real-sample.jsonl").open()
                 if json.loads(ln).get("kind") == "bench_summary")
    fake = tmp_path / "fake" / "sglang"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "bench_serving.py").write_text(
        "import json, sys\n"
        f"open({str(tmp_path / 'argv.json')!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
        "print('#Input tokens: 1972')\n"
        f"print({block['line']!r})\n")
    wrapper = tmp_path / "py"
    wrapper.write_text(f"#!/bin/sh\nPYTHONPATH={tmp_path / 'fake'} exec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    prof = sim_profile(tmp_path, "real", [0], python=str(wrapper))
    async with ctl(hp, prof) as c:
        b = await c.benchmark(BenchConfig(num_prompts=10, concurrency=1, output_len=300))
        argv = json.loads((tmp_path / "argv.json").read_text())
        assert argv[argv.index("--port") + 1] == str(prof.port)
        assert argv[argv.index("--random-output-len") + 1] == "300"
        assert argv[argv.index("--max-concurrency") + 1] == "1"
        exp = block["expect"]
        assert b.kind == "bench_serving" and b.completed == exp["Successful requests"]
        assert b.output_tok_s == exp["Output token throughput (tok/s)"]
        assert b.mean_ttft_ms == exp["Mean TTFT (ms)"] and b.mean_itl_ms == exp["Mean ITL (ms)"]
        assert b.accept_length == exp["Accept length"]
        assert b.server_gen_throughput is None  # not invented when not measured
        assert "N/A" in b.describe() and c.benchmarks == [b]
