"""Discovery of the simulated SGLang server (`specmon sim server`) behind the test sshd, its
output redirected to a file as users run it under nohup (tests/sshd.py has the sshd)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys

from kit import sshd
from kit.paths import ROOT
from kit.ssh_host import make_host
from kit.wait import until

from specmon.analysis.conditions import acceptance_not_measured
from specmon.analysis.fingerprint import env_snapshots, fingerprint_from
from specmon.feeds.host import HostFeed
from specmon.hosts.agent_client import AgentClient
from specmon.session.fleet import FleetSession
from specmon.sim.dist import install, patch_file
from specmon.sources.discovery import discover

sshd_server = sshd.sshd_server
REPO = ROOT


async def test_discovery_finds_the_simulated_server_and_its_log(sshd_server, tmp_path):
    port = sshd.free_port()
    out = tmp_path / "sim.log"
    # the server imports an SGLang install with one locally patched file: `connect` probes it
    site = install(tmp_path / "simdir")
    patched = patch_file(tmp_path / "simdir")
    # a benchmark recipe's simulated acceptance and an NCCL tuning variable, in the workers'
    # environment (SPT_NOENV=1: setproctitle leaves it readable)
    env = {**os.environ, "SPECMON_SIM_DIR": str(tmp_path / "simdir"),
           "PYTHONPATH": os.pathsep.join([str(REPO), str(site)]), "SPT_NOENV": "1",
           "NCCL_PROTO": "LL", "SGLANG_SIMULATE_ACC_LEN": "2.5"}
    # the way users run it: output redirected to a file (discovery reads /proc/PID/fd/2)
    with open(out, "ab") as f:
        sim = subprocess.Popen(
            [sys.executable, "-m", "specmon", "sim", "server", "--port", str(port),
             "--startup-s", "0.5", "--speculative-algorithm", "EAGLE", "--tp-size", "2",
             "--load-concurrency", "1", "--decode-log-interval", "10"],
            stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env=env, cwd=tmp_path,
        )
    host = make_host(sshd_server, tmp_path)
    try:
        await until(lambda: b"fired up" in out.read_bytes() or sim.poll() is not None,
                    timeout=60, what="simulated server ready")
        assert sim.poll() is None, out.read_text()[-2000:]
        await host.connect()
        agent = AgentClient(host)
        await agent.start()
        try:
            servers = {s.pid: s for s in await discover(agent)}
        finally:
            await agent.close()
        assert sim.pid in servers, [s.describe() for s in servers.values()]
        s = servers[sim.pid]
        assert s.simulated and s.port == port and s.name == f"sglang-{port}"
        assert (s.kind, s.kind_source, s.tp_size) == ("speculative", "args", 2)
        assert s.log_path == str(out) and s.log_problem is None
        assert len(s.workers) == 2, s.workers
        # `specmon connect` (its feed into the session model, without the UI) finds it too
        fleet = FleetSession([host.name])
        items = []
        fleet.record_listeners.append(lambda h, srv, it: items.append((srv, it)))
        task = asyncio.create_task(HostFeed(host, []).run(fleet))
        try:
            name = f"sglang-{port}"
            await until(lambda: any(s == name and "fired up" in it.text for s, it in items)
                        or task.done(), what="connect feed tailing the sim log")
            st = fleet.server(host.name, name)
            assert (st.role, st.path) == ("speculative", str(out))
            # the decode lines it logs are parsed on the way in
            await until(lambda: st.decode_total > 0 or task.done(), what="a parsed decode record")
            assert not task.done()
            # the agent probed the running server's own install (nothing of it was run): the
            # patched file is on its current run, where a drift cause can name it
            await until(lambda: st.runs and st.runs[-1].probe or task.done(),
                        what="the connect feed's RECORD probe")
            probe = st.runs[-1].probe
            assert probe["dist"] == "sglang" and probe["version"]
            assert probe["modified_files"] == [str(patched.relative_to(site))]
            # ... and read the environment its launcher and TP workers run with, which a
            # fingerprint of the run it was read from holds (the probe is delivered once the
            # history's lines are in: the run of the process probed is the current one then;
            # tests/unit/test_probe_env.py covers which run gets it)
            launcher, workers = env_snapshots(st.probe.get("env"))
            assert launcher is not None and launcher.vars["NCCL_PROTO"] == "LL"
            assert sorted(w.title for w in workers) == [t for _, t in s.workers]
            assert all(w.readable and w.vars["NCCL_PROTO"] == "LL" for w in workers)
            fp = fingerprint_from(server_args=st.args, launcher=launcher, workers=workers)
            assert any("accept length is simulated (SGLANG_SIMULATE_ACC_LEN=2.5" in c
                       for c in acceptance_not_measured(fp))
            assert (st.runs[-1].probe or {}).get("env") == st.probe["env"]
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    finally:
        await host.close()
        stop_group(sim)


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the group we created (the sim shuts its workers down), then SIGKILL whatever
    of that group is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(5)


def launch_sim(tmp_path, out, env_extra: dict, *args: str) -> subprocess.Popen:  # noqa: ANN001
    """`specmon sim server ARGS` in a process group of its own, its output appended to `out`
    (as users run it under nohup)."""
    env = {**os.environ, "SPECMON_SIM_DIR": str(tmp_path / "simdir"), "PYTHONPATH": str(REPO),
           "SPT_NOENV": "1", **env_extra}
    with open(out, "ab") as f:
        return subprocess.Popen([sys.executable, "-m", "specmon", "sim", "server", *args],
                                stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=env, cwd=tmp_path)


@contextlib.asynccontextmanager
async def connect_feed(host):  # noqa: ANN001, ANN201
    """`specmon connect`'s feed of `host` into a session model (no UI), cancelled at the end."""
    fleet = FleetSession([host.name])
    task = asyncio.create_task(HostFeed(host, []).run(fleet))
    try:
        yield fleet, task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def declared(fleet: FleetSession, host, name: str, task: asyncio.Task):  # noqa: ANN001, ANN201
    """The server's state once the connect feed has declared it."""
    await until(lambda: name in fleet.host(host.name).session.servers or task.done(),
                what=f"connect feed declaring {name}")
    return fleet.server(host.name, name)


async def test_discovery_and_nccl_env_probe_of_the_simulated_vllm_server(sshd_server, tmp_path):
    """`specmon sim server --engine vllm` behind sshd: found as vllm-PORT with its log (stdout
    redirected, as `vllm serve > log 2>&1`), its Worker_TP<r> ranks, and their NCCL env."""
    from specmon.analysis.fingerprint import worker_nccl_env
    from specmon.feeds.probe import collect

    port = sshd.free_port()
    out = tmp_path / "vllm.log"
    env = {**os.environ, "SPECMON_SIM_DIR": str(tmp_path / "simdir"), "PYTHONPATH": str(REPO),
           "SPT_NOENV": "1", "NCCL_PROTO": "LL128", "VLLM_LOG_STATS_INTERVAL": "0.5"}
    spec = '{"method": "eagle3", "model": "d/eagle3", "num_speculative_tokens": 2}'
    with open(out, "ab") as f:
        sim = subprocess.Popen(
            [sys.executable, "-m", "specmon", "sim", "server", "--engine", "vllm", "--port",
             str(port), "--startup-s", "0.3", "--tensor-parallel-size", "2",
             "--speculative-config", spec, "--set-env-after-spawn", "NCCL_ALGO=Tree",
             "--load-concurrency", "1"],
            stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env=env, cwd=tmp_path,
        )
    host = make_host(sshd_server, tmp_path)
    try:
        await until(lambda: b"Application startup complete." in out.read_bytes()
                    or sim.poll() is not None, timeout=60, what="simulated vLLM server ready")
        assert sim.poll() is None, out.read_text()[-2000:]
        await host.connect()
        agent = AgentClient(host)
        await agent.start()
        try:
            servers = {s.pid: s for s in await discover(agent)}
            assert sim.pid in servers, [s.describe() for s in servers.values()]
            s = servers[sim.pid]
            assert (s.engine, s.name, s.port, s.simulated) == ("vllm", f"vllm-{port}", port, True)
            assert (s.kind, s.kind_source, s.tp_size) == ("speculative", "args", 2)
            assert s.log_path == str(out) and s.log_problem is None
            assert [t for _, t in s.workers] == ["VLLM::Worker_TP0", "VLLM::Worker_TP1"]
            fp = await collect(agent, launcher_pid=s.pid, argv=s.argv, workers=s.workers)
        finally:
            await agent.close()
        env_by_rank, source = worker_nccl_env(fp)
        assert source == "worker environ"
        assert env_by_rank is not None and set(env_by_rank) == {"rank 0", "rank 1"}
        for rank_env in env_by_rank.values():  # inherited at spawn; the late NCCL_ALGO is not
            assert rank_env["NCCL_PROTO"] == "LL128" and "NCCL_ALGO" not in rank_env
        # `specmon connect` finds it and parses its Engine/SpecDecoding lines on the way in
        fleet = FleetSession([host.name])
        task = asyncio.create_task(HostFeed(host, []).run(fleet))
        try:
            st = await declared(fleet, host, f"vllm-{port}", task)
            assert (st.role, st.path) == ("speculative", str(out))
            await until(lambda: any(p.rec.accept_len for p in st.decode) or task.done(),
                        what="a parsed Engine line with its spec line joined")
            assert not task.done()
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    finally:
        await host.close()
        stop_group(sim)


async def test_a_relaunch_after_connect_gets_its_own_pids_and_environment(sshd_server, tmp_path):
    """The tuning loop: `connect` runs while the user restarts the server by hand (same port,
    same log, the NCCL variable changed). The new run must carry the new processes' pids (GPU
    ownership) and the environment its own launcher and workers run with, not none (the
    phantom baseline's cause would go unnamed) and never the old process's."""
    port = sshd.free_port()
    out = tmp_path / "sim.log"

    def launch(proto: str) -> subprocess.Popen:
        return launch_sim(tmp_path, out, {"NCCL_PROTO": proto}, "--port", str(port),
                          "--startup-s", "0.3", "--tp-size", "2", "--load-concurrency", "1",
                          "--decode-log-interval", "10")

    def proto_of(run) -> str | None:
        launcher, _ = env_snapshots((run.probe or {}).get("env"))
        return launcher.vars.get("NCCL_PROTO") if launcher is not None else None

    first = launch("LL")
    second = None
    host = make_host(sshd_server, tmp_path)
    try:
        await until(lambda: out.read_bytes().count(b"fired up") == 1 or first.poll() is not None,
                    timeout=60, what="simulated server ready")
        await host.connect()
        async with connect_feed(host) as (fleet, task):
            st = await declared(fleet, host, f"sglang-{port}", task)
            await until(lambda: st.decode_total > 0 and st.runs and proto_of(st.runs[-1]) == "LL"
                        or task.done(), timeout=30, what="the first run's probed environment")
            # the launcher and its two TP workers, as the feed discovered them
            assert first.pid in st.pids and len(st.pids) == 3, st.pids
            stop_group(first)
            # a server stopped by hand says nothing to us: its launcher is seen gone, its run
            # ends (the panel says stopped; a speedup says how long ago, not "live")
            await until(lambda: st.status == "stopped" or task.done(), timeout=30,
                        what="the stopped server's run ended")
            assert st.runs[-1].ended and st.runs[-1].end_reason == "exit" and len(st.runs) == 1
            second = launch("Simple")
            await until(lambda: len(st.runs) >= 2 and proto_of(st.runs[-1]) == "Simple"
                        or task.done(), timeout=60, what="the relaunch's own environment")
            assert not task.done()
            assert second.pid in st.pids and first.pid not in st.pids and len(st.pids) == 3
            assert proto_of(st.runs[0]) == "LL"  # the first run keeps what its processes had
            await until(lambda: st.status == "ready" or task.done(), what="the relaunch's lines")
            assert not st.runs[-1].ended and st.runs[0].end_reason == "exit"
    finally:
        await host.close()
        for proc in (first, second):
            if proc is not None:
                stop_group(proc)


async def test_record_keeps_what_the_feed_learned_of_the_server_for_the_report(sshd_server,
                                                                               tmp_path, capsys):
    """`record` over the real sshd with a simulated server: besides its lines, the file keeps
    the feed's events a report needs (its pids, the probe with the workers' environment, its
    exit when it is stopped), and `export` gives the run those: the report compares the same
    conditions the live screen did. They were lost: only lines and GPU polls were written."""
    from specmon.commands.hostargs import HostPlan
    from specmon.commands.record import RecordOut, record_fleet
    from specmon.export.report import report_model
    from specmon.export.snapshot import snapshot_from_record

    port = sshd.free_port()
    out = tmp_path / "sim.log"
    sim = launch_sim(tmp_path, out, {"NCCL_PROTO": "LL"}, "--port", str(port), "--startup-s",
                     "0.3", "--tp-size", "2", "--load-concurrency", "1",
                     "--decode-log-interval", "10")
    host = make_host(sshd_server, tmp_path)
    rec_path = tmp_path / "rec.jsonl"
    stop = asyncio.Event()
    try:
        await until(lambda: b"fired up" in out.read_bytes() or sim.poll() is not None,
                    timeout=60, what="simulated server ready")
        fd = os.open(rec_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        rec_out = RecordOut(fd, str(rec_path))
        task = asyncio.create_task(record_fleet([HostPlan(host)], rec_out, listen=None,
                                                stop=stop))
        name = f"sglang-{port}"

        def rows() -> list[dict]:
            rec_out.flush()
            return [json.loads(x) for x in rec_path.read_text().splitlines()
                    if x.strip() and json.loads(x).get("server") == name]

        await until(lambda: any("probe" in r for r in rows()) or task.done(), timeout=30,
                    what="the probe row")
        stop_group(sim)
        await until(lambda: any("exit" in r for r in rows()) or task.done(), timeout=30,
                    what="the exit row")
        # the log's own stop line (uvicorn's, printed by a SIGTERMed server) is said too
        await until(lambda: any("Finished server process" in r.get("line", "") for r in rows())
                    or task.done(), timeout=30, what="the stop line")
        stop.set()
        await asyncio.wait_for(task, 30)
        os.close(fd)
    finally:
        stop.set()
        await host.close()
        stop_group(sim)
    got = rows()
    said = capsys.readouterr().err
    assert f"{name}: its log says the server stopped at " in said and "its run ended" in said
    pids = next(r["pids"] for r in got if "pids" in r)
    assert sim.pid in pids and len(pids) == 3
    probe = next(r for r in got if "probe" in r)
    assert probe["running"] is True
    launcher, workers = env_snapshots(probe["probe"]["env"])
    assert launcher.vars["NCCL_PROTO"] == "LL" and len(workers) == 2
    assert next(r for r in got if "exit" in r)["exit"] is None  # nobody knows its code
    # export, then the report's model: the run has the probe, the pids and the exit
    snap = snapshot_from_record(rec_path)
    s = next(x for x in snap.servers if x.name == name)
    assert set(s.pids) == set(pids) and s.status == "stopped" and len(s.probes) == 1
    st = report_model(snap).states[name]
    assert st.runs[-1].end_reason == "exit"
    assert env_snapshots(st.runs[-1].probe["env"])[0].vars["NCCL_PROTO"] == "LL"
