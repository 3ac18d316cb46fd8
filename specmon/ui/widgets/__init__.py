"""The app's widgets, one module per concept (text layout, headline, server panel, log, GPUs,
hosts). Each refreshes from the session on the app's timer, never once per log line."""

from specmon.ui.widgets.gpus import GpuPanel, gpu_groups, reason_style
from specmon.ui.widgets.headline import BigFigure, DriftPanel, SpeedupBar, big_text
from specmon.ui.widgets.hosts import HostsPanel
from specmon.ui.widgets.log import LogView, StickyLog, compact_line
from specmon.ui.widgets.server import (
    ServerPanel,
    ServerSummary,
    run_age_text,
    startup_pieces,
    summary_rows,
    title_pieces,
)
from specmon.ui.widgets.text import NA, Lines, Piece, fit, nice_ceiling, num, safe_id, wrap_words

__all__ = ["NA", "BigFigure", "DriftPanel", "GpuPanel", "HostsPanel", "Lines", "LogView", "Piece",
           "ServerPanel", "ServerSummary", "SpeedupBar", "StickyLog", "big_text", "compact_line",
           "fit", "gpu_groups", "nice_ceiling", "num", "reason_style", "run_age_text", "safe_id",
           "startup_pieces", "summary_rows", "title_pieces", "wrap_words"]
