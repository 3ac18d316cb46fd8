"""The phantom-baseline scenario on simulated vLLM servers, end to end through the UI: a tuned
baseline recorded from vLLM's `Engine 000:` lines, a restart whose workers lack the NCCL
variables (an alert naming them, found in the workers' NCCL_DEBUG lines), then the tuning back
under a 330 W power cap with a patched vLLM file (a real edit of the simulated host's
`vllm-<version>.dist-info` install): an alert naming the power limit and the modified vLLM file,
found by the fingerprint's RECORD probe of the server's own engine."""

from __future__ import annotations

import re

from kit.phantom_ui import group_free
from kit.wait import wait_for

from specmon.feeds.demo import DemoFeed, default_servers
from specmon.session.baselines import BaselineStore
from specmon.session.state import HostState
from specmon.sim.dist import VLLM_PATCHED
from specmon.ui.app import SpecmonApp


async def test_phantom_baseline_on_vllm(tmp_path):
    servers = default_servers(engine="vllm")
    for s in servers:
        s.args += ["--startup-s", "0.5"]
        # a stats line every 0.1 s, not the demo's 0.5 s: the scenario's lines 5x sooner
        s.env["VLLM_LOG_STATS_INTERVAL"] = "0.1"
    feed = DemoFeed(servers, workdir=tmp_path, scenario="phantom-baseline", record_after=40,
                    phase_lines=50)
    app = SpecmonApp(HostState(host="demo"), feed, show_clock=False,
                     baseline_store=BaselineStore(tmp_path / "b.sqlite3"))
    async with app.run_test(size=(180, 50)) as pilot:
        state = app.session.server("baseline")
        await wait_for(pilot, lambda: app.session.baselines, timeout=120)
        recorded = app.session.baselines[0]
        assert 80.0 < recorded["median_tok_s"] < 95.0, recorded  # tuned: ~88.8 tok/s at bs 1
        assert state.fingerprint is not None and state.fingerprint.nccl_debug
        assert state.fingerprint.modified_files == []  # vLLM's RECORD probe ran: nothing edited
        assert state.fingerprint.modified_dist == "vllm"
        # phase 2: the workers lack the NCCL variables
        await wait_for(pilot, lambda: state.run.index == 2, timeout=90)
        await wait_for(pilot, lambda: any(not a["cleared"] for a in app.session.alerts),
                       timeout=90)
        first = next(a for a in app.session.alerts if not a["cleared"])
        assert "vs recorded" in first["text"], first
        assert any("NCCL_PROTO=LL" in c and "lack" in c for c in first["causes"]), first
        m = re.search(r"baseline (\d+\.\d) tok/s vs recorded", first["text"])
        assert m and 55.0 < float(m.group(1)) < 72.0, first["text"]  # ~62.9
        # phase 3: tuning back; power cap and patch: ~82 tok/s
        await wait_for(pilot, lambda: state.run.index == 3, timeout=120)
        assert state.run.probe is not None and state.run.probe["dist"] == "vllm"
        assert VLLM_PATCHED in state.run.probe["modified_files"]
        n_before = len(app.session.alerts)

        def capped() -> dict | None:
            return next((a for a in app.session.alerts[n_before:] if not a["cleared"] and any(
                "power limit" in c or "SwPowerCap" in c for c in a["causes"]) and any(
                VLLM_PATCHED in c for c in a["causes"])), None)

        await wait_for(pilot, lambda: capped() is not None, timeout=120)
        third = capped()
        assert third is not None
        files = next(c for c in third["causes"] if VLLM_PATCHED in c)
        assert files.startswith("vLLM files modified"), files
        assert "SGLang" not in " ".join(third["causes"]), third["causes"]
        assert feed.phase == "steady"
    assert group_free(feed)
