"""No window reaches across a break of log time, a jump ahead included: 60 lines at 88 tok/s,
the log's clock jumps 121 s ahead, 60 lines at 60 tok/s. The 300 s window read 74.00 with n 120
(a value the server never ran at) while the panel said "time segment 2". The whole run still
counts both sides of a jump (each gen throughput is the server's own interval)."""

from __future__ import annotations

import time

import pytest

from specmon.parse.sglang import parse_line
from specmon.session.runs import WHOLE_RUN
from specmon.session.state import ServerState
from specmon.session.window import current_stats, group_rows

T0 = time.mktime(time.strptime("2026-05-28 09:00:00", "%Y-%m-%d %H:%M:%S"))


def _line(t: float, gt: float) -> str:
    return (time.strftime("[%Y-%m-%d %H:%M:%S TP0] ", time.localtime(t))
            + "Decode batch, #running-req: 1, #token: 100, token usage: 0.01, "
            f"gen throughput (token/s): {gt:.2f}, #queue-req: 0, ")


@pytest.mark.parametrize("jump_s", [91, 121, 200])
def test_a_window_starts_again_after_a_jump_ahead(jump_s: int) -> None:
    st = ServerState("s")
    for i in range(60):
        x = _line(T0 + i, 88.0)
        st.apply(x, parse_line(x), T0 + i)
    for i in range(60):
        x = _line(T0 + 59 + jump_s + i, 60.0)
        st.apply(x, parse_line(x), T0 + 100 + i)
    assert st.runs[-1].segment_text() is not None  # the break is said
    for window in (30.0, 60.0, 300.0):
        w = current_stats(st, None, window)
        assert w is not None and (w.median, w.n) == (60.0, min(60, int(window) + 1)), window
    (row,) = group_rows(st, 300.0)
    assert row.stats is not None and (row.stats.median, row.stats.n) == (60.0, 60)
    whole = current_stats(st, None, WHOLE_RUN)
    assert whole is not None and (whole.median, whole.n) == (74.0, 120)
