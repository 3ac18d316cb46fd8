"""Control under attack: forged pidfiles never get an unrelated process (or PID 1's group, or
specmon's own) signalled; swap checks every precondition before it stops anything; restart
asks first. Every process here is one this test started, in its own session."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from kit.control import (
    alive,
    cleanup_pidfiles,
    cmdline,
    group_alive,
    host_profile,
    kill_group,
    sim_profile,
    starttime,
)

from specmon.control.server import (
    AlreadyRunning,
    GpuBusy,
    NotOurs,
    ServerController,
    record_problem,
    swap,
)
from specmon.hosts.local import LocalHost
from specmon.sim.gpu_model import register_server


@pytest.fixture
def hp(tmp_path):
    prof = host_profile(tmp_path)
    yield prof
    cleanup_pidfiles(tmp_path / "run")


def _sleeper(**kw) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], **kw)
    for _ in range(500):
        if cmdline(p.pid)[-1:] == ["import time; time.sleep(300)"]:
            break
    return p


async def _write(c: ServerController, rec: dict) -> None:
    await c.agent_op({"op": "write", "path": await c.pidfile(), "text": json.dumps(rec)})


async def _unlink(c: ServerController) -> None:
    """Forged pidfiles go before any cleanup reads them (cleanup kills recorded groups)."""
    await c.agent_op({"op": "remove", "path": await c.pidfile()})


async def test_forged_null_starttime_with_chain_ending_in_a_sleepers_argv(hp, tmp_path):
    sleeper = _sleeper(start_new_session=True)
    try:
        async with ServerController(LocalHost(), sim_profile(tmp_path, "x", [0]), hp) as c:
            chain = ["setsid", "env", "--", *cmdline(sleeper.pid)]
            forged = {"pid": sleeper.pid, "pgid": sleeper.pid, "sid": sleeper.pid,
                      "starttime": None, "chain": chain, "cmdline": None}
            await _write(c, forged)
            with pytest.raises(NotOurs, match="no start time"):
                await c.stop(grace=1)
            st = await c.status()
            assert st.state == "stale" and "no start time" in st.detail
            # the host-side check refuses it on its own too (a client that skipped its check)
            res = await c.agent_op({"op": "signal", "signal": "SIGTERM",
                                   **{k: forged[k] for k in ("pid", "pgid", "sid", "starttime",
                                                              "cmdline", "chain")}})
            assert res["signalled"] is False and "no start time" in res["refused"]
            await asyncio.sleep(0.3)
            assert alive(sleeper.pid)
            await _unlink(c)
    finally:
        kill_group(sleeper.pid)
        sleeper.wait(10)


@pytest.mark.parametrize("pgid", [0, 1])
async def test_pid_1_identity_is_refused(hp, tmp_path, pgid):
    async with ServerController(LocalHost(), sim_profile(tmp_path, "x", [0]), hp) as c:
        forged = {"pid": 1, "pgid": pgid, "sid": pgid, "starttime": starttime(1),
                  "chain": cmdline(1) or ["init"], "cmdline": cmdline(1) or ["init"]}
        await _write(c, forged)
        try:
            with pytest.raises(NotOurs, match="<= 1"):
                await c.stop(grace=1)
            res = await c.agent_op({"op": "signal", "signal": "SIGTERM", **forged})
            assert res["signalled"] is False and "<= 1" in res["refused"]
        finally:
            await _unlink(c)
    # still here: killpg(0) would have sent SIGTERM to this test's own process group


async def test_a_group_whose_leader_does_not_lead_its_session_is_refused(hp, tmp_path):
    # its own process group, but the test's session: not something specmon's setsid started
    sleeper = _sleeper(process_group=0)
    try:
        async with ServerController(LocalHost(), sim_profile(tmp_path, "x", [0]), hp) as c:
            forged = {"pid": sleeper.pid, "pgid": sleeper.pid, "sid": sleeper.pid,
                      "starttime": starttime(sleeper.pid), "chain": cmdline(sleeper.pid),
                      "cmdline": cmdline(sleeper.pid)}
            assert record_problem(forged) is None  # it claims everything a record should
            await _write(c, forged)
            with pytest.raises(NotOurs, match="does not lead its own session"):
                await c.stop(grace=1)
            assert alive(sleeper.pid)
            await _unlink(c)
    finally:
        kill_group(sleeper.pid)
        sleeper.wait(10)


@pytest.mark.parametrize("rec, why", [
    ({"pid": 4242, "pgid": 4242, "sid": 4242, "starttime": 5, "chain": ["a"]}, None),
    ({"pid": 4242, "pgid": 4243, "sid": 4242, "starttime": 5, "chain": ["a"]}, "differ"),
    ({"pid": 4242, "pgid": 4242, "sid": 4242, "starttime": True, "chain": ["a"]}, "start time"),
    ({"pid": "4242", "pgid": 4242, "sid": 4242, "starttime": 5, "chain": ["a"]}, "integer"),
    ({"pid": 4242, "pgid": 4242, "sid": 4242, "starttime": 5, "chain": []}, "command line"),
    ({"pid": 4242, "pgid": -1, "sid": 4242, "starttime": 5, "chain": ["a"]}, "<= 1"),
])
def test_record_problem(rec, why):
    got = record_problem(rec)
    assert (got is None) if why is None else (why in got)


async def test_swap_checks_every_precondition_before_stopping(hp, tmp_path):
    base = sim_profile(tmp_path, "base", [0, 1])
    spec = sim_profile(tmp_path, "spec", [2, 3], role="speculative")
    started = []
    foreign = _sleeper(start_new_session=True)
    try:
        async with ServerController(LocalHost(), base, hp) as a, \
                ServerController(LocalHost(), spec, hp) as b:
            ra = await a.start()
            started.append(ra.pid)
            rb = await b.start()
            started.append(rb.pid)
            # the other one is already running: refused, base untouched
            with pytest.raises(AlreadyRunning):
                await swap(a, b)
            assert group_alive(ra.pid) and (await a.status()).state == "ready"
            assert (await b.stop(grace=10)).ok
            # a process specmon does not control holds one of spec's GPUs: refused up front
            register_server(tmp_path / "sim", "foreign", {
                "name": "foreign", "pid": foreign.pid, "gpus": [3],
                "worker_pids": {"3": foreign.pid}, "mem_used_mib": 1000})
            with pytest.raises(GpuBusy) as info:
                await swap(a, b)
            assert [o.pid for o in info.value.owners] == [foreign.pid]
            assert group_alive(ra.pid) and (await a.status()).state == "ready"
            assert alive(foreign.pid)
    finally:
        for p in started:
            kill_group(p)
        kill_group(foreign.pid)
        foreign.wait(10)


async def test_restart_key_asks_first(tmp_path):
    from specmon.control.local import group_members
    from specmon.feeds.demo import DemoFeed, default_servers, demo_actions
    from specmon.session.state import HostState
    from specmon.ui.app import SpecmonApp
    from specmon.ui.control_keys import ConfirmScreen

    servers = default_servers()[:1]
    servers[0].args += ["--startup-s", "0.3"]
    feed = DemoFeed(servers, workdir=tmp_path)
    app = SpecmonApp(HostState(host="demo"), feed, show_clock=False, actions=demo_actions(feed))
    async with app.run_test(size=(160, 50)) as pilot:
        st = app.session.server("baseline")
        loop = asyncio.get_running_loop()
        end = loop.time() + 60
        while len(st.decode) < 2:
            assert loop.time() < end
            await pilot.pause(0.1)
        app.query_one("#panel-baseline").focus()
        pgid = servers[0].proc.pid
        await pilot.press("r")
        end = loop.time() + 5
        while not isinstance(app.screen, ConfirmScreen):
            assert loop.time() < end, "restart did not ask"
            await pilot.pause(0.1)
        await pilot.press("n")
        await pilot.pause(1.0)
        assert servers[0].proc.pid == pgid and group_members(pgid) and st.status == "ready"
