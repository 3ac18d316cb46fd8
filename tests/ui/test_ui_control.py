"""Server control keys in the real app on the simulated host: stop (confirmed), start, benchmark."""

from __future__ import annotations

from kit.wait import wait_control_idle, wait_for

from specmon.control.local import group_members
from specmon.feeds.demo import DemoFeed, default_servers, demo_actions
from specmon.session.state import HostState
from specmon.ui.app import SpecmonApp
from specmon.ui.control_keys import ConfirmScreen


async def test_stop_confirm_start_and_benchmark_from_the_keyboard(tmp_path):
    servers = default_servers()[:1]
    servers[0].args += ["--startup-s", "0.3"]
    feed = DemoFeed(servers, workdir=tmp_path)
    app = SpecmonApp(HostState(host="demo"), feed, show_clock=False, actions=demo_actions(feed))
    async with app.run_test(size=(160, 50)) as pilot:
        st = app.session.server("baseline")
        await wait_for(pilot, lambda: len(st.decode) >= 2)
        app.query_one("#panel-baseline").focus()
        pgid = servers[0].proc.pid
        await pilot.press("x")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), 5)
        await pilot.press("n")  # "no" leaves it running
        await pilot.pause(0.5)
        assert st.status == "ready" and group_members(pgid)
        await pilot.press("x")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), 5)
        await pilot.press("y")
        await wait_for(pilot, lambda: st.status == "stopped", 30)
        await wait_for(pilot, lambda: not group_members(pgid), 10)
        await wait_control_idle(pilot, app)
        n = st.decode_total
        await pilot.press("u")
        await wait_for(pilot, lambda: st.decode_total >= n + 2, 60)
        assert st.status == "ready" and servers[0].proc.pid != pgid
        await wait_control_idle(pilot, app)
        await pilot.press("m")
        await wait_for(pilot, lambda: st.last_bench is not None, 90)
        bench = st.last_bench
        assert bench.completed == 4 and bench.failed == 0
        # end-to-end output tok/s includes prefill and TTFT: below the ~88.8 decode-only tok/s
        assert 20 < bench.output_tok_s < 95
        assert app.session.benchmarks and app.session.benchmarks[-1]["server"] == "baseline"
