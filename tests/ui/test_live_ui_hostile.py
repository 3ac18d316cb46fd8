"""The live UI survives hostile log lines: non-finite and absurd numbers (which used to kill it
in Textual's Sparkline with `cannot convert float NaN to integer`), controls, huge ints."""

from __future__ import annotations

import math

from kit.hostile import REGRESSION_LINES
from kit.ui import T0, ScriptFeed, decode_line, populated_session

from specmon.parse.sglang import BatchRecord
from specmon.session.state import DecodePoint
from specmon.ui.app import SpecmonApp


async def test_hostile_lines_and_a_nan_point_do_not_kill_the_live_ui() -> None:
    session = populated_session(10)
    lines = [x.replace("2025-07-06 09:10:11", "2026-11-29 10:00:30") for x in REGRESSION_LINES]
    lines += [decode_line(40, 90.0).replace("90.00", "1e400"), decode_line(41, 91.0)]
    feed = ScriptFeed([("baseline", lines)], clock=T0 + 12, host=session.host)
    app = SpecmonApp(session, feed, show_clock=False, clock=lambda: T0 + 12)
    async with app.run_test(size=(160, 50)) as pilot:
        await feed.done.wait()
        await pilot.pause()
        # even a point that bypassed the parser (a NaN from elsewhere) must not reach a trend
        st = app.session.server("baseline")
        st.decode.append(DecodePoint(T0 + 12, BatchRecord("decode", running_req=1,
                                                          gen_throughput=float("nan"))))
        st.last_decode = st.decode[-1].rec
        app.refresh_view()
        await pilot.pause(0.5)
        app.refresh_view()
        await pilot.pause()
        assert app.is_running
        from specmon.ui.chart import ThroughputChart

        model = app.query_one(ThroughputChart)._key[0]  # the chart (160x50): finite points only
        assert model.series and all(math.isfinite(v) for se in model.series for v in se.ys)
        await pilot.resize_terminal(120, 36)  # no chart there: the panel's own trend line
        await pilot.pause(0.3)
        app.refresh_view()
        await pilot.pause()
        trend = str(app.query_one("#panel-baseline").query_one(".spark").content)
        assert "tok/s 0–" in trend and "nan" not in trend.lower() and "inf" not in trend.lower()
        assert app.is_running
        assert st.decode_total >= 10 + len(lines)  # the hostile lines were kept as records


async def test_every_panel_line_shows_host_text_as_data():
    """Lines (every panel, the headline, the banner) passes its text through the one
    text-safety function: a server arg's value carried into a statement (conditions differ)
    shows its ESC as the characters \\x1b, and our own line breaks stay line breaks."""
    from textual.app import App, ComposeResult

    from specmon.ui.widgets.text import Lines

    class Tiny(App[None]):
        def compose(self) -> ComposeResult:
            yield Lines()

    app = Tiny()
    async with app.run_test(size=(80, 5)) as pilot:
        w = app.query_one(Lines)
        w.put([("conditions differ: tp_size: 8 vs \x1b]52;c;ZXZpbA==\x07", "bold"),
               ("\nsecond line", "")])
        await pilot.pause()
        shown = str(w.render())
        assert "\x1b" not in shown and "\x07" not in shown
        assert "\\x1b]52;c;ZXZpbA==\\x07" in shown and "\nsecond line" in shown
