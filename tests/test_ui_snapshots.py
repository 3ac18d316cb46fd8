"""SVG snapshots of the app at a fixed size on deterministic sessions (pytest-textual-snapshot).

Regenerate after an intended visual change with `pytest tests/test_ui_snapshots.py
--snapshot-update` and review the SVGs in tests/__snapshots__ before committing.
"""

from __future__ import annotations

from uikit import T0, apply, populated_session

from specmon.ui.app import SpecmonApp

SIZE = (140, 44)


def make_app(session) -> SpecmonApp:
    return SpecmonApp(session, clock=lambda: T0 + 31, show_clock=False)


def test_snapshot_both_running(snap_compare):
    assert snap_compare(make_app(populated_session(30)), terminal_size=SIZE)


def test_snapshot_one_stopped(snap_compare):
    s = populated_session(30)
    s.server("speculative").process_exited(-15)
    assert snap_compare(make_app(s), terminal_size=SIZE)


def test_snapshot_crashed(snap_compare):
    s = populated_session(30)
    for line in [
        "[2026-11-29 10:00:31 TP0 EP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sglang/srt/managers/scheduler.py", line 2650, in run_scheduler_process',
        "    scheduler.event_loop_overlap()",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
    ]:
        apply(s, "speculative", line, T0 + 31)
    s.server("speculative").process_exited(1)
    assert snap_compare(make_app(s), terminal_size=SIZE)


def test_snapshot_help(snap_compare):
    assert snap_compare(make_app(populated_session(5)), terminal_size=SIZE, press=["question_mark"])
