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


def test_compact_log_shows_a_vllm_spec_line_as_its_counts():
    """Compact mode showed a vLLM spec line raw, cut at the panel's edge after "SpecDecoding
    metrics: Mean" (every other line of a speculative server's pane): now its counts, as
    printed (V0: since the server started), checked on the real lines users pasted."""
    import json
    import re

    from kit.paths import ROOT

    from specmon.parse.sglang import parse_line
    from specmon.ui.widgets import compact_line

    rows = [json.loads(x) for x in (ROOT / "tests/data/vllm-logs/real-lines.jsonl").open()]
    specs = [r for r in rows if r["kind"] == "spec"]
    assert len(specs) >= 6
    for r in specs:
        text, want = compact_line(r["line"], parse_line(r["line"])), r["expect"]
        hhmmss = re.search(r"\d\d:\d\d:\d\d", r["line"]).group(0)  # the time it printed
        if want.get("accepted") is not None:
            assert text == f"{hhmmss} drafts: {want['accepted']} accepted of {want['drafted']}"
        else:
            assert text == (f"{hhmmss} drafts since start: {want['accepted_total']} accepted "
                            f"of {want['drafted_total']}")


def test_compact_accept_length_is_on_the_spec_line_whatever_the_redraw_order():
    """Live, the panel drew a vLLM engine line with "acc" only when its spec line had arrived
    before the redraw (seen: some intervals with it, some without). The length is the spec
    line's figure: it is shown there, as the session joined it, and never on the engine line.
    The pair is real (pid 92107, tests/data/vllm-logs/real-lines.jsonl)."""
    import json

    from kit.paths import ROOT

    from specmon.parse.sglang import parse_line
    from specmon.session.state import ServerState
    from specmon.ui.widgets import compact_line

    rows = [json.loads(x) for x in (ROOT / "tests/data/vllm-logs/real-lines.jsonl").open()]
    engine, spec = (next(r["line"] for r in rows if "pid=92107)" in r["line"]
                         and r["kind"] == kind) for kind in ("decode", "spec"))
    s = ServerState("spec", role="speculative")
    s.hold_vllm = True
    s.apply(engine, parse_line(engine), 1.0)
    eng_rec = s.log_records[-1]
    before = compact_line(engine, eng_rec)  # drawn before the spec line came
    s.apply(spec, parse_line(spec), 1.1)
    after = compact_line(engine, eng_rec)
    assert before == after and " acc " not in after and "28.4 tok/s" in after
    joined = [p.rec for p in s.run.decode]
    assert len(joined) == 1 and joined[0].accept_len == 2.2  # vLLM's mean, bonus included
    assert compact_line(spec, s.log_records[-1]) == "16:21:55 drafts: 78 accepted of 195 · acc 2.20"
