"""Every key works (issue 23): `l` log full screen, `p` pause without duplicates, the palette
lists every action once, `n spec / base` labelled, the empty-baseline hint."""

from __future__ import annotations

import asyncio

from kit.ui import T0, decode_line, populated_session
from kit.wait import wait_for

from specmon.parse.sglang import parse_line
from specmon.session.events import LineItem
from specmon.session.state import HostState
from specmon.ui.app import SpecmonApp
from specmon.ui.widgets import LogView, ServerPanel, StickyLog

SIZE = (160, 50)


class ManualFeed:
    """A feed the test drives: it hands the app's sink to the test and idles."""

    host = "local"

    def __init__(self) -> None:
        self.sink = None
        self.ready = asyncio.Event()

    async def run(self, sink) -> None:  # noqa: ANN001
        self.sink = sink
        self.ready.set()
        await asyncio.Event().wait()

    def lines(self, server: str, texts: list[str]) -> None:
        self.sink.lines(self.host, server, [LineItem(x, parse_line(x), T0) for x in texts])


async def test_pause_key_shows_no_line_twice():
    feed = ManualFeed()
    app = SpecmonApp(HostState(), feed, show_clock=False)
    lines = [decode_line(i, 88.0 + i % 7) for i in range(160)]
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: feed.ready.is_set())
        feed.lines("base", lines[:100])
        await wait_for(pilot, lambda: app.query(StickyLog) and app.query_one(StickyLog).line_count == 100)
        app.query_one(ServerPanel).focus()
        await pilot.press("p")
        view = app.query_one(LogView)
        assert not view.following
        feed.lines("base", lines[100:130])
        await wait_for(pilot, lambda: view.new_while_paused == 30)
        await pilot.pause(0.5)  # a few refresh ticks while paused
        log = app.query_one(StickyLog)
        shown = list(log.lines)
        assert len(shown) == 130 and len(set(shown)) == 130, "a line is shown twice"
        await pilot.press("end")
        feed.lines("base", lines[130:160])
        await wait_for(pilot, lambda: log.line_count == 160)
        await pilot.pause(0.3)
        assert len(set(log.lines)) == log.line_count == 160


async def test_l_shows_the_focused_log_full_screen_and_it_keeps_following():
    feed = ManualFeed()
    app = SpecmonApp(HostState(), feed, show_clock=False)
    lines = [decode_line(i, 88.0) for i in range(60)]
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: feed.ready.is_set())
        feed.lines("base", lines[:30])
        await wait_for(pilot, lambda: app.query(StickyLog) and app.query_one(StickyLog).line_count == 30)
        app.query_one(ServerPanel).focus()
        await pilot.press("l")
        assert isinstance(app.screen.maximized, LogView)
        feed.lines("base", lines[30:])
        log = app.query_one(StickyLog)
        await wait_for(pilot, lambda: log.line_count == 60)  # lines still arrive full screen
        await pilot.press("l")
        assert app.screen.maximized is None


async def test_palette_lists_every_action_once():
    app = SpecmonApp(populated_session(5), clock=lambda: T0 + 6, show_clock=False)
    async with app.run_test(size=SIZE):
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert len(titles) == len(set(titles)), sorted(titles)
        for t in ("Advisor", "Chart metric", "GPU rows", "Compact / raw log", "Log full screen",
                  "Record baseline", "Start server", "Benchmark", "Screenshot", "Help"):
            assert t in titles, t


class FakeControl:
    """A server control (the demo's and the real controller's methods) that records calls."""

    def __init__(self, running: bool) -> None:
        self.running = running
        self.calls: list[str] = []

    async def stop(self) -> None:
        self.calls.append("stop")
        self.running = False

    async def start(self, progress=None) -> None:  # noqa: ANN001
        self.calls.append("start")
        self.running = True

    async def benchmark(self) -> None:
        self.calls.append("benchmark")
        raise ConnectionResetError("[Errno 104] Connection reset by peer\nTraceback (most recent "
                                   "call last):\n  File x")


def control_app() -> tuple[SpecmonApp, FakeControl, FakeControl]:
    base, spec = FakeControl(True), FakeControl(True)
    app = SpecmonApp(populated_session(30), clock=lambda: T0 + 31, show_clock=False,
                     actions={("test-host", "baseline"): base, ("test-host", "speculative"): spec})
    return app, base, spec


async def test_swap_to_a_running_server_stops_nothing():
    app, base, spec = control_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.2)
        app.query_one("#panel-speculative", ServerPanel).focus()
        await pilot.press("o")
        await pilot.pause(0.2)
        assert base.calls == [] and spec.calls == []  # the speculative server is not stopped
        text, severity = app.status_text
        assert "baseline is already running" in text and severity == "warning"


async def test_a_failed_benchmark_is_one_line_in_the_status_area():
    app, base, _ = control_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.2)
        app.query_one("#panel-baseline", ServerPanel).focus()
        await pilot.press("m")
        await wait_for(pilot, lambda: app.status_text is not None and "failed" in app.status_text[0])
        text, severity = app.status_text
        assert severity == "error" and "\n" not in text and "Traceback" not in text
        assert text == "baseline: benchmark failed: [Errno 104] Connection reset by peer"
        assert app.control_status[("test-host", "baseline")] == \
            "benchmark failed: [Errno 104] Connection reset by peer"
        status = app.query_one("#status")
        assert status.display and "benchmark failed" in str(status.content)


async def test_empty_baseline_hint_names_the_key_and_the_temporary_store():
    app = SpecmonApp(populated_session(30), clock=lambda: T0 + 31, show_clock=False,
                     keymap={"baseline.record": "ctrl+b"},
                     store_note="demo: temporary store, deleted at exit")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.3)
        text = str(app.query_one("#alerts").content)
        assert "^b records this run as the baseline (demo: temporary store" in text, text


async def test_the_baseline_hint_sits_under_the_server_b_records():
    """"b records this run as the baseline" sat under the first server without a recording,
    whichever panel had the focus: with the baseline recorded and its panel focused (the
    default), it stood under the speculative server while `b` would re-record the baseline.
    It now follows the server `b` acts on."""
    from specmon.ui.widgets import ServerPanel

    app = SpecmonApp(populated_session(30), clock=lambda: T0 + 31, show_clock=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause(0.3)

        def under() -> str:
            lines = str(app.query_one("#alerts").content).splitlines()
            i = next(i for i, line in enumerate(lines) if "records this run" in line)
            return lines[i - 1].split()[0]

        assert app.focused_server()[1] == "baseline" and under() == "baseline"
        spec = next(p for p in app.query(ServerPanel) if p.server == "speculative")
        spec.focus()
        await pilot.pause(0.3)
        app.refresh_view()
        await pilot.pause(0.1)
        assert app.focused_server()[1] == "speculative" and under() == "speculative"
