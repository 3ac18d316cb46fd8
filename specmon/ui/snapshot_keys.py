"""Export (e) and SVG screenshot (s) keys, shared by the live app and replay (the app's
`action_export_snapshot` and `action_screenshot` delegate to `SnapshotKeys`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from specmon.export.snapshot import (
    atomic_write_bytes,
    file_label,
    snapshot_from_session,
    snapshot_path,
    write_snapshot,
)
from specmon.redact import redact_svg
from specmon.session.state import HostState


def _stamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S")


class SnapshotApp(Protocol):
    """What the export keys need of the app."""

    @property
    def session(self) -> HostState: ...

    def notify(self, message: str, *, title: str = "", severity: Any = "information",
               timeout: float | None = None, markup: bool = True) -> None: ...

    def call_from_thread(self, callback: Callable[..., Any], *args: Any,
                         **kwargs: Any) -> Any: ...

    def run_worker(self, work: Callable[[], None], *, thread: bool, group: str,
                   exit_on_error: bool) -> object: ...

    def export_screenshot(self) -> str: ...


class SnapshotKeys:
    """Export (e) and SVG screenshot (s) of the app's shown host, into `export_dir`."""

    def __init__(self, app: SnapshotApp, export_dir: Path) -> None:
        self.app = app
        self.export_dir = export_dir

    def export(self) -> None:
        """Copy the session on the UI loop (it is mutated there), encode and write in a thread."""
        app = self.app
        try:
            path = snapshot_path(app.session.host, self.export_dir)
        except OSError as exc:
            app.notify(f"export failed: {exc.strerror or exc} ({self.export_dir})",
                       severity="error", markup=False)
            return
        snap = snapshot_from_session(app.session)

        def write() -> None:
            try:
                write_snapshot(snap, path)
            except OSError as exc:
                app.call_from_thread(app.notify, f"export failed: {exc.strerror or exc} ({path})",
                                     severity="error", markup=False)
                return
            app.call_from_thread(app.notify, f"snapshot written: {path}", markup=False)

        app.run_worker(write, thread=True, group="export", exit_on_error=False)

    def screenshot(self) -> None:
        """Save an SVG screenshot into the export folder."""
        app = self.app
        try:
            self.export_dir.mkdir(parents=True, exist_ok=True)
            out = self.export_dir / f"specmon-{file_label(app.session.host)}-{_stamp()}.svg"
            # the screen shows raw log lines: the file gets every secret masked
            atomic_write_bytes(out, redact_svg(app.export_screenshot()).encode("utf-8"))
        except OSError as exc:
            app.notify(f"screenshot failed: {exc.strerror or exc} ({self.export_dir})",
                       severity="error", markup=False)
            return
        app.notify(f"screenshot written: {out}", markup=False)
