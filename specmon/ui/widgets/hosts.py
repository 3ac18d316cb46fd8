"""Several hosts in one session: one summary row per host."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from textual.widgets import Static

from specmon.ui.safe import plain
from specmon.ui.widgets.text import NA, num


class HostsPanel(Static):
    """One summary row per host (several hosts in one session): state, servers, alerts, GPUs."""

    _last: Any = None

    def show(self, rows: list[Any]) -> None:
        key = repr(rows)
        if key == self._last:
            return  # unchanged: no measuring, no repaint
        self._last = key
        t = Table(expand=True, box=None, padding=(0, 1), header_style="bold")
        for col in ("host", "state", "servers (decode tok/s median, bs)", "alerts",
                    "hottest GPU", "slowest clock", "last data"):
            t.add_column(col, no_wrap=True)
        for r in rows:
            servers = ", ".join(
                f"{plain(s.name)} {num(s.tok_s, '{:.1f}')}@bs{num(s.running_req, '{}')}"
                + (f" [{s.alert_level}]" if s.alert_level else "") for s in r.servers) or NA
            hot = r.hottest_gpu
            slow = r.slowest_clock
            state = plain(r.state_text) + (" (stale)" if r.stale else "")
            t.add_row(
                plain(r.host), state, servers, str(r.alerts),
                f"GPU {hot.index} {num(hot.temp_gpu, '{:.0f}')} °C" if hot else NA,
                (f"GPU {slow.index} {num(slow.clock_sm, '{}')}/{num(slow.max_clock_sm, '{}')} MHz"
                 + (f" {','.join(slow.reasons)}" if slow.reasons else "")) if slow else NA,
                f"{r.age_s:.0f} s ago" if r.age_s is not None else NA,
                style="bold" if r.alerts else ("dim" if r.stale else ""),
            )
        self.update(t)
