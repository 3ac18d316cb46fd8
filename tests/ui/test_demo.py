"""The demo on the real simulated host: processes, tails, GPU model, app — no fakes."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kit.demo import fast, group_gone
from kit.paths import ROOT
from kit.wait import wait_for

from specmon.feeds.demo import DemoFeed, default_servers
from specmon.session.state import HostState
from specmon.session.window import speedup
from specmon.ui.app import SpecmonApp
from specmon.ui.widgets import ServerPanel


async def test_demo_both_servers_live_then_one_stopped(tmp_path):
    feed = DemoFeed(fast(default_servers()), workdir=tmp_path)
    app = SpecmonApp(HostState(host="demo"), feed, show_clock=False)
    async with app.run_test(size=(160, 50)) as pilot:
        base = app.session.server("baseline")
        spec = app.session.server("speculative")
        await wait_for(pilot, lambda: len(base.decode) >= 3 and len(spec.decode) >= 3)
        assert base.status == spec.status == "ready"
        assert base.role == "baseline" and spec.role == "speculative"
        assert spec.args["speculative_algorithm"] == "EAGLE3" and spec.num_draft_tokens == 3
        assert all(p.rec.accept_len is None for p in base.decode)
        assert all(p.rec.accept_len is not None for p in spec.decode)
        await wait_for(pilot, lambda: speedup(base, spec, time.time(), 60) is not None)
        sp = speedup(base, spec, time.time(), 60)
        assert 0.9 < sp.ratio < 1.3  # EAGLE-3 2-step ~94 vs ~88.8 tok/s at bs 1
        await wait_for(pilot, lambda: len(app.session.gpus) == 16)
        assert {p.server for p in app.query(ServerPanel)} == {"baseline", "speculative"}
        srv = feed.servers[1]
        pgid = srv.proc.pid
        await feed.stop_server(srv)
        await wait_for(pilot, lambda: spec.status == "stopped", timeout=20)
        assert group_gone(pgid)
        assert base.status == "ready"
    # leaving the app stops what the demo started
    assert all(s.proc.returncode is not None for s in feed.servers)
    assert group_gone(feed.servers[0].proc.pid)


async def test_demo_crash_shows_traceback(tmp_path):
    servers = fast(default_servers())[:1]
    servers[0].args += ["--crash-after", "1"]
    feed = DemoFeed(servers, workdir=tmp_path)
    app = SpecmonApp(HostState(host="demo"), feed, show_clock=False)
    async with app.run_test(size=(160, 50)) as pilot:
        st = app.session.server("baseline")
        # the exit and the last log lines come by different ways (process wait, log tail)
        await wait_for(pilot, lambda: st.status == "crashed" and st.traceback)
        assert "Traceback (most recent call last)" in st.traceback[0]
        assert st.exit_code not in (0, None)
        await pilot.pause(0.3)
        text = str(app.query_one("#startup-baseline").content)
        assert "crashed" in text and "Traceback" in text


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is installed by `make test`")
def test_demo_in_a_real_terminal(tmp_path):
    """`specmon demo` under tmux: both panels show numbers, q quits, nothing is left running."""
    session = "demo"
    sock = f"specmon-test-{os.getpid()}"
    tmux = ["tmux", "-L", sock, "-f", "/dev/null"]
    env_tmp = tmp_path / "t"
    env_tmp.mkdir()
    cmd = (f"cd {ROOT} && env -u COLUMNS -u LINES TMPDIR={env_tmp} {sys.executable} -m specmon demo; "
           f"echo DEMO-EXIT=$? > {tmp_path}/exit")
    subprocess.run([*tmux, "new-session", "-d", "-s", session, "-x", "180", "-y", "50", cmd],
                   check=True)
    try:
        screen = ""
        deadline = time.monotonic() + 90
        pat = re.compile(r"speedup\s+\d+\.\d+x vs live baseline")
        while time.monotonic() < deadline:
            screen = subprocess.run([*tmux, "capture-pane", "-p", "-t", session],
                                    capture_output=True, text=True).stdout
            rows = [r for r in screen.splitlines() if "last interval" in r]
            if pat.search(screen) and rows and len(re.findall(r"\d+\.\d\d ", rows[0])) == 2:
                break
            time.sleep(0.5)
        assert pat.search(screen), screen
        assert "baseline ready" in screen and "speculative ready" in screen, screen
        assert rows and len(re.findall(r"\d+\.\d\d ", rows[0])) == 2, screen
        subprocess.run([*tmux, "send-keys", "-t", session, "q"], check=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (tmp_path / "exit").exists():
            time.sleep(0.2)
        assert (tmp_path / "exit").read_text().strip() == "DEMO-EXIT=0"
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
    # no simulated server of this demo is left (they ran with paths under env_tmp)
    left = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if str(env_tmp).encode() in (p / "cmdline").read_bytes():
                    left.append(p.name)
            except OSError:
                pass
    assert not left
