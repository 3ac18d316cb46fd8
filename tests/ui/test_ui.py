"""Pilot tests of the app on deterministic data: numbers, labels, escaping, sticky tail, filter."""

from __future__ import annotations

import asyncio

from kit.ui import T0, ScriptFeed, decode_line, populated_session
from kit.wait import wait_for
from textual.widgets import Input

from specmon.session.state import HostState
from specmon.ui.app import HelpScreen, SpecmonApp
from specmon.ui.widgets import LogView, ServerPanel, SpeedupBar, StickyLog

SIZE = (160, 50)


def rendered(content, width: int = 120) -> str:
    from rich.console import Console

    console = Console(width=width, record=True, file=open("/dev/null", "w"))
    console.print(content)
    return console.export_text()


def text_of(widget) -> str:
    return rendered(widget.content)


async def test_panels_show_labelled_numbers_and_matched_speedup():
    session = populated_session(30)
    app = SpecmonApp(session, clock=lambda: T0 + 31, show_clock=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        panels = {p.server: p for p in app.query(ServerPanel)}
        assert set(panels) == {"baseline", "speculative"}
        # baseline on the left
        assert [p.server for p in app.query(ServerPanel)] == ["baseline", "speculative"]
        out = rendered(app.query_one("#summary-speculative").content)
        assert "tok/s · bs 1 · queue 0 · decode-only" in out
        assert "(recomputed, 3 draft tokens)" in out
        bar = rendered(app.query_one(SpeedupBar).content, width=200)
        base = session.server("baseline")
        spec = session.server("speculative")
        from specmon.session.window import speedup

        sp = speedup(base, spec, T0 + 31, 60)
        assert f"speedup {sp.ratio:.2f}x vs live baseline" in bar
        assert f"95% {sp.low:.3f}–{sp.high:.3f} · bs 1" in bar
        assert "decode-only" in bar and "n spec 30 / base 30" in bar


async def test_speedup_na_when_no_common_batch_size():
    session = HostState()
    session.server("b").role = "baseline"
    session.server("s").role = "speculative"
    app = SpecmonApp(session, clock=lambda: T0 + 5, show_clock=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert "speedup N/A" in text_of(app.query_one(SpeedupBar))


async def test_remote_text_is_shown_literally():
    evil = ["[bold red]x[/] \x1b[31mred\x1b[0m \x07bell", "[link=http://evil]click[/link]"]
    feed = ScriptFeed([("base", evil)])
    app = SpecmonApp(HostState(), feed, show_clock=False)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.lines_received == 2)
        await wait_for(pilot, lambda: app.query(StickyLog) and app.query_one(StickyLog).line_count == 2)
        log = app.query_one(StickyLog)
        lines = list(log.lines)
        assert lines[0] == "[bold red]x[/] \\x1b[31mred\\x1b[0m \\x07bell"
        assert lines[1] == "[link=http://evil]click[/link]"
        rendered = "".join(seg.text for seg in log.render_line(0))
        assert "[bold red]x[/]" in rendered and "\x1b" not in rendered


async def test_sticky_tail_pauses_counts_and_resumes():
    lines = [decode_line(i, 88.0) for i in range(200)]
    feed = ScriptFeed([("base", lines[:100])])
    app = SpecmonApp(HostState(), feed, show_clock=False)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.query(StickyLog) and app.query_one(StickyLog).line_count == 100)
        log = app.query_one(StickyLog)
        view = app.query_one(LogView)
        await wait_for(pilot, lambda: log.scroll_y == log.max_scroll_y)
        log.focus()
        await pilot.press("pageup")
        assert log.auto_scroll is False
        y = log.scroll_y
        from specmon.parse.sglang import parse_line
        from specmon.session.events import LineItem

        app.sink.lines("local", "base", [LineItem(x, parse_line(x), T0) for x in lines[100:130]])
        await wait_for(pilot, lambda: view.new_while_paused == 30)
        await pilot.pause(0.3)
        assert log.scroll_y == y  # did not jump to the end
        assert "+30 new" in text_of(app.query_one("#badge-base"))
        await pilot.press("end")
        await wait_for(pilot, lambda: log.auto_scroll and log.scroll_y == log.max_scroll_y)
        assert view.new_while_paused == 0


async def test_live_filter_shows_only_matching_lines():
    lines = [decode_line(i, 88.0) for i in range(5)] + ["WARNING KV cache pool is full", "other"]
    feed = ScriptFeed([("base", lines)])
    app = SpecmonApp(HostState(), feed, show_clock=False)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.query(StickyLog) and app.query_one(StickyLog).line_count == 7)
        app.query_one(ServerPanel).focus()
        await pilot.press("slash")
        box = app.query_one(Input)
        assert box.has_focus
        await pilot.press(*"kv cache")
        log = app.query_one(StickyLog)
        await wait_for(pilot, lambda: log.line_count == 1)
        assert list(log.lines) == ["WARNING KV cache pool is full"]
        await pilot.press("escape")
        await wait_for(pilot, lambda: log.line_count == 7)


async def test_help_screen_and_command_palette_entries():
    app = SpecmonApp(populated_session(5), clock=lambda: T0 + 6, show_clock=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        assert "decode-only" in text_of(app.screen.query_one("#help-text"))
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for t in ("Help", "Filter log", "Follow log", "Pause log", "Cycle window", "Quit"):
            assert any(t.lower() in x.lower() for x in titles), t


async def test_keys_are_remappable_by_binding_id():
    app = SpecmonApp(populated_session(5), clock=lambda: T0 + 6, show_clock=False,
                     keymap={"window.cycle": "ctrl+w"})
    async with app.run_test(size=SIZE) as pilot:
        assert app.window_s == 60.0
        await pilot.press("ctrl+w")
        assert app.window_s == 300.0


async def test_thousand_lines_per_second_per_server_is_batched():
    n = 1000
    batches = []
    for k in range(10):  # 2 servers x 1,000 lines in 0.5 s of feed time
        batches.append(("b", [decode_line(k * 100 + i, 88.0) for i in range(100)]))
        batches.append(("s", [decode_line(k * 100 + i, 94.0, 2.4) for i in range(100)]))
    feed = ScriptFeed(batches, delay=0.05)
    app = SpecmonApp(HostState(), feed, show_clock=False, refresh_hz=4)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.lines_received == 2 * n)
        await pilot.pause(0.5)
        assert app.session.server("b").decode_total == n
        assert app.session.server("s").decode_total == n
        # widgets refresh on the timer, not per line
        assert app.refreshes < 40
        logs = {lv.server: lv.log_widget.line_count for lv in app.query(LogView)}
        assert logs == {"b": n, "s": n}


async def test_reconnecting_host_keeps_values_marked_stale():
    import time

    from specmon.hosts.base import ConnectionState

    session = populated_session(10)
    app = SpecmonApp(session, clock=lambda: T0 + 11, show_clock=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        before = rendered(app.query_one("#summary-baseline").content)
        app.sink.host_state("test-host", ConnectionState(
            "reconnecting", reason="connection lost", retry_at=time.monotonic() + 600))
        await wait_for(pilot, lambda: app.query_one("#connection").display)
        await pilot.pause(0.4)
        conn = text_of(app.query_one("#connection"))
        assert "test-host: reconnecting in " in conn and "s (connection lost; last values kept" in conn
        assert session.server("baseline").stale
        after = rendered(app.query_one("#summary-baseline").content)
        assert "stale ·" in after and "stale" not in before
        assert "STALE" in rendered(app.query_one("#title-baseline").content)
        # the last good values are still shown
        last = f"{session.server('baseline').last_decode.gen_throughput:.2f}"
        assert last in after
        app.sink.host_state("test-host", ConnectionState("connected"))
        await wait_for(pilot, lambda: not app.query_one("#connection").display)
        assert not session.server("baseline").stale


async def test_several_hosts_show_one_summary_row_each():
    from kit.ui import apply

    from specmon.hosts.base import ConnectionState
    from specmon.session.fleet import FleetSession

    fleet = FleetSession(["box-a", "box-b"], clock=lambda: T0 + 31)
    fleet.host_state("box-a", ConnectionState("connected"))
    fleet.host_state("box-b", ConnectionState("reconnecting", retry_at=None))
    for i in range(10):
        apply(fleet.host("box-a").session, "base", decode_line(i, 88.0 + (i % 3)), T0 + 21 + i)
    app = SpecmonApp(fleet, clock=lambda: T0 + 31, show_clock=False)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "box-b" in text_of(app.query_one("#hosts")))
        out = rendered(app.query_one("#hosts").content, width=160)
        row_a = next(r for r in out.splitlines() if "box-a" in r)
        row_b = next(r for r in out.splitlines() if "box-b" in r)
        assert "connected" in row_a and "89.0@bs1" in row_a
        assert "reconnecting" in row_b and "(stale)" in row_b


async def test_several_hosts_get_one_tab_each_with_their_own_speedup_and_gpus():
    from kit.ui import apply

    from specmon.hosts.base import ConnectionState
    from specmon.parse.gpu_sample import GpuSample
    from specmon.session.fleet import FleetSession

    fleet = FleetSession(["box-a", "box-b"], clock=lambda: T0 + 31)
    for h in fleet.hosts:
        fleet.host_state(h, ConnectionState("connected"))
    fleet.host("box-a").session.set_gpus([GpuSample(index=0, clock_sm=1980, max_clock_sm=1980)])
    fleet.host("box-b").session.set_gpus([GpuSample(index=0, clock_sm=1111, max_clock_sm=1980)])
    for host, base, spec in (("box-a", 88.0, 94.0), ("box-b", 60.0, 90.0)):
        s = fleet.host(host).session  # servers keyed (host, server): the same names on both
        s.server("base").role = "baseline"
        s.server("spec").role = "speculative"
        for i in range(10):
            apply(s, "base", decode_line(i, base), T0 + 21 + i)
            apply(s, "spec", decode_line(i, spec, 2.4), T0 + 21 + i)
    app = SpecmonApp(fleet, clock=lambda: T0 + 31, show_clock=False)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: len(app.panels()) == 4)
        in_a = {(p.host, p.server) for p in app.query_one("#servers-0").query(ServerPanel)}
        in_b = {(p.host, p.server) for p in app.query_one("#servers-1").query(ServerPanel)}
        assert in_a == {("box-a", "base"), ("box-a", "spec")}
        assert in_b == {("box-b", "base"), ("box-b", "spec")}
        await pilot.pause(0.3)
        assert app.active_host() == "box-a"
        assert f"{94.0 / 88.0:.2f}x vs live baseline" in text_of(app.query_one(SpeedupBar))
        assert "1980" in rendered(app.query_one("#gpus").content, 200)
        await pilot.press("h")
        await wait_for(pilot, lambda: app.active_host() == "box-b")
        await pilot.pause(0.3)
        assert f"{90.0 / 60.0:.2f}x vs live baseline" in text_of(app.query_one(SpeedupBar))
        assert "1111" in rendered(app.query_one("#gpus").content, 200)


async def test_replay_shows_only_replay_keys_and_never_records_a_baseline(tmp_path):
    from specmon.export.snapshot import snapshot_from_session
    from specmon.session.baselines import BaselineStore
    from specmon.ui.replay_app import ReplayApp

    snap = snapshot_from_session(populated_session(30))
    store_path = tmp_path / "baselines.sqlite3"
    app = ReplayApp(snap, playing=False, show_clock=False,
                    baseline_store=BaselineStore(store_path))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        shown = {b.binding.action for b in app.active_bindings.values() if b.binding.show
                 and app.check_action(b.binding.action, ()) is not False}
        for action in ("server_start", "server_stop", "server_restart", "server_swap",
                       "server_bench", "record_baseline"):
            assert action not in shown
            assert app.check_action(action, ()) is False
        assert "toggle_play" in shown
        # every key does one thing: the live app's keys never shadow a replay key
        by_key: dict[str, set[str]] = {}
        for b in (b for bs in app._bindings.key_to_bindings.values() for b in bs):
            by_key.setdefault(b.key, set()).add(b.action)
        assert {k: a for k, a in by_key.items() if len(a) > 1} == {}
        app.query_one(ServerPanel).focus()
        await pilot.press("b")
        await pilot.pause(0.2)
        app.record_baseline(app.active_host() or "", "baseline")  # a snapshot asking for one
        assert app.session.baselines == [] and not app.fleet.watches
        assert not store_path.exists() or BaselineStore(store_path).list() == []
        keys = app.help_keys()
        assert "Replay" in keys and "space" in keys and "Servers" not in keys
        assert "record the focused" not in keys
        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert "Record baseline" not in titles and "Stop server" not in titles


async def test_help_lists_readable_keys_grouped_by_task():
    app = SpecmonApp(populated_session(5), clock=lambda: T0 + 6, show_clock=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        keys = app.help_keys()
        for raw in ("question_mark", "slash", "escape"):
            assert raw not in keys
        assert "Move around" in keys and "tab" in keys and "shift+tab" in keys
        lines = keys.splitlines()
        assert any(line.strip().startswith("[b]?") for line in lines)
        assert any(line.strip().startswith("[b]/") for line in lines)
        assert any(line.strip().startswith("[b]esc") for line in lines)


async def test_confirm_dialog_keeps_the_screen_visible_behind_it():
    from specmon.ui.control_keys import ConfirmScreen

    app = SpecmonApp(populated_session(30), clock=lambda: T0 + 31, show_clock=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.push_screen(ConfirmScreen("Stop baseline?"))
        await pilot.pause(0.2)
        assert isinstance(app.screen, ConfirmScreen)
        assert app.screen.styles.background.a < 1.0  # translucent: the panels show through
        text = "\n".join("".join(seg.text for seg in strip)
                         for strip in app.screen._compositor.render_strips())
        assert "median 60 s" in text and "Stop baseline?" in text


async def test_control_status_line_clears_when_the_action_is_done():
    class Actions:
        def __init__(self) -> None:
            self.release = asyncio.Event()

        async def start(self, progress=None):  # noqa: ANN001, ANN201
            await self.release.wait()

    ctl = Actions()
    app = SpecmonApp(populated_session(30), clock=lambda: T0 + 31, show_clock=False,
                     actions={("test-host", "baseline"): ctl})
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.query_one("#panel-baseline").focus()
        await pilot.press("u")
        await pilot.pause(0.3)
        startup = app.query_one("#startup-baseline")
        assert "start…" in str(startup.content) and startup.display
        ctl.release.set()
        await wait_for(pilot, lambda: ("test-host", "baseline") not in app.control_status)
        await pilot.pause(0.4)
        assert "start" not in str(startup.content) and not startup.display
