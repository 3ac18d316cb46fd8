"""SVG snapshots of the app at fixed sizes on deterministic sessions (pytest-textual-snapshot).

Regenerate after an intended visual change with `pytest tests/ui/test_ui_snapshots.py
--snapshot-update` and review the SVGs in tests/__snapshots__ before committing (convert one
to PNG, e.g. `python -c "import cairosvg; cairosvg.svg2png(url='x.svg', write_to='x.png')"`).

The demo's steady and drift states (tests/uikit.py `demo_app`) are shot at the four sizes the
layout is designed for: 80x24 (headline, key numbers, GPU summary), 120x36 (nothing cut
mid-word), 160x48 and 220x60 (the throughput chart); a restart with no decode line yet and
runs whose conditions differ at 80x24, 120x36 and 160x48.
"""

from __future__ import annotations

import pytest
from kit.ui import T0, apply, demo_app, populated_session

from specmon.ui.app import SpecmonApp

SIZE = (140, 44)
SIZES = [(80, 24), (120, 36), (160, 48), (220, 60)]


def make_app(session) -> SpecmonApp:
    return SpecmonApp(session, clock=lambda: T0 + 31, show_clock=False)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_snapshot_demo_steady(snap_compare, size):
    assert snap_compare(demo_app(drift=False), terminal_size=size)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_snapshot_demo_drift(snap_compare, size):
    assert snap_compare(demo_app(drift=True), terminal_size=size)


NEW_STATES = [(80, 24), (120, 36), (160, 48)]


@pytest.mark.parametrize("size", NEW_STATES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_snapshot_restart_no_decode_yet(snap_compare, size):
    """The drifted baseline restarted (run 3): its rows say N/A for this run, its badge says
    checking, the headline has no figure of the ended run."""
    assert snap_compare(demo_app(drift=True, restart=True), terminal_size=size)


@pytest.mark.parametrize("size", NEW_STATES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_snapshot_conditions_differ(snap_compare, size):
    """No drift, but the speculative run lacks the NCCL tuning the baseline has: the
    headline says the runs' conditions differ."""
    assert snap_compare(demo_app(drift=False, spec_nccl=False), terminal_size=size)


def test_snapshot_demo_gpus_expanded(snap_compare):
    """`d`: every GPU's row, grouped by server (baseline 0-7, speculative 8-15)."""
    assert snap_compare(demo_app(drift=False), terminal_size=(160, 48), press=["d"])


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
