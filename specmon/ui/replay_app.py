"""`specmon replay SNAPSHOT`: the live UI, read-only, driven by a snapshot on a virtual clock.

`ReplayApp` is `SpecmonApp` with a `ReplayFeed` (same sink, same handlers, same widgets), the
feed's virtual time as the app clock, a status bar and keys: space play/pause, , and . seek 10 s,
< and > seek 60 s, [ and ] speed, g / G start / end. The export key (e) and the SVG screenshot
key (s) are the live app's (`SnapshotKeys`, on the shown host, into `export_dir`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from textual.app import ComposeResult
from textual.widgets import Footer, Static

from specmon.export.snapshot import (
    Snapshot,
)
from specmon.feeds.replay import ReplayFeed, replay_session
from specmon.ui.app import SpecmonApp
from specmon.ui.keys import bindings


def _clock_text(t: float) -> str:
    t = max(0.0, t)
    return f"{int(t // 3600):02d}:{int(t % 3600 // 60):02d}:{t % 60:04.1f}"


class ReplayApp(SpecmonApp):
    TITLE = "specmon replay"
    BINDINGS = [*SpecmonApp.BINDINGS, *bindings("replay")]  # (specmon/keymap.py)

    def __init__(self, snapshot: Snapshot, *, speed: float = 1.0, playing: bool = True,
                 export_dir: str | Path | None = None, source_name: str = "",
                 **kwargs: Any) -> None:
        self.snapshot = snapshot
        self.replay = ReplayFeed(snapshot, speed=speed, playing=playing, reset=self._request_reset)
        self.source_name = source_name
        super().__init__(replay_session(snapshot), self.replay, clock=self.replay.now,
                         export_dir=Path(export_dir) if export_dir is not None else None,
                         title=f"replay · {snapshot.host}"
                               + (f" · {source_name}" if source_name else ""), **kwargs)
        self.fleet.read_only = True  # a snapshot's scenario may ask for a baseline: refused

    # a replay is read-only: no server control, no baseline recording (the user's baseline
    # store is never written), no host switching of a live fleet
    READ_ONLY_ACTIONS = frozenset({"server_start", "server_stop", "server_restart", "server_swap",
                                   "server_bench", "record_baseline"})


    def drift_tick(self) -> None:
        """The replay's feed ticks the model at each recorded second (as `report` does, so a
        replay raises the report's alerts); the wall clock only redraws them."""
        self._show_alerts()
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in self.READ_ONLY_ACTIONS:
            return False  # hidden from the footer and the help, and not run
        return super().check_action(action, parameters)

    def compose(self) -> ComposeResult:
        for widget in super().compose():
            if isinstance(widget, Footer):
                yield Static("", id="replay-bar")
            yield widget

    # --- reset on backward seek ---------------------------------------------------------------

    def _request_reset(self) -> None:
        """The feed seeks backwards: start the session over now, before the feed pushes the
        lines up to the new position (its events are applied as they come, not queued)."""
        self.fleet.reset_host(self.replay.host, replay_session(self.snapshot))
        self._pending.clear()
        for panel in self.panels():
            view = panel.log_view
            view.log_widget.clear()
            view.set_source(self.session.server(panel.server))

    # --- view ---------------------------------------------------------------------------------

    def replay_status(self) -> str:
        r = self.replay
        state = "▶ playing" if r.playing else ("■ end" if r.at_end else "❚❚ paused")
        wall = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.now()))
        return (f"REPLAY (read-only) {state} {r.speed:g}×  {_clock_text(r.position)} / "
                f"{_clock_text(r.end - r.start)}  [{wall}]   space play/pause · , . seek 10 s · "
                f"< > 60 s · [ ] speed · g/G start/end")

    def refresh_view(self) -> None:
        super().refresh_view()
        try:
            self.query_one("#replay-bar", Static).update(self.replay_status())
        except Exception:  # noqa: BLE001 - shutting down
            pass

    # --- actions ------------------------------------------------------------------------------

    def action_toggle_play(self) -> None:
        self.replay.toggle()
        self.refresh_view()

    def action_seek(self, dt: float) -> None:
        self.replay.seek_by(float(dt))
        self.refresh_view()

    def action_seek_start(self) -> None:
        self.replay.seek(self.replay.start)
        self.refresh_view()

    def action_seek_end(self) -> None:
        self.replay.seek(self.replay.end)
        self.refresh_view()

    def action_faster(self) -> None:
        self.replay.faster()
        self.refresh_view()

    def action_slower(self) -> None:
        self.replay.slower()
        self.refresh_view()
