"""`specmon demo --engine vllm`: the same live demo over simulated `vllm serve` servers."""

from __future__ import annotations

import time

from kit.demo import fast, group_gone
from kit.wait import wait_for

from specmon.feeds.demo import DemoFeed, default_servers
from specmon.session.state import HostState
from specmon.session.window import speedup
from specmon.ui.app import SpecmonApp


async def test_vllm_demo_both_servers_live_speedup_and_clean_stop(tmp_path):
    feed = DemoFeed(fast(default_servers(engine="vllm")), workdir=tmp_path)
    assert feed.engine == "vllm"
    app = SpecmonApp(HostState(host="demo"), feed, show_clock=False)
    async with app.run_test(size=(160, 50)) as pilot:
        base = app.session.server("baseline")
        spec = app.session.server("speculative")
        await wait_for(pilot, lambda: len(base.decode) >= 3 and len(spec.decode) >= 3)
        assert base.status == spec.status == "ready"
        assert "SpecDecoding metrics" in (tmp_path / "speculative.log").read_text()
        assert all(p.rec.accept_len is None for p in base.decode)
        assert any(p.rec.accept_len is not None for p in spec.decode)
        # EAGLE-3 k=2 at bs 1 against the tuned baseline: both ~88-95 tok/s
        await wait_for(pilot, lambda: speedup(base, spec, time.time(), 60) is not None)
        sp = speedup(base, spec, time.time(), 60)
        assert 0.85 < sp.ratio < 1.35, sp
        srv = feed.servers[1]
        pgid = srv.proc.pid
        await feed.stop_server(srv)
        await wait_for(pilot, lambda: spec.status == "stopped", timeout=20)
        assert group_gone(pgid)
    assert all(s.proc.returncode is not None for s in feed.servers)
    assert group_gone(feed.servers[0].proc.pid)
