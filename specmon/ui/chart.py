"""The throughput chart: both servers on one time axis, the recorded baseline as a reference.

Drawn by `textual-plotext` (Textualize's Plotext widget; it works with the pinned Textual). The
chart is rebuilt only when its data changed (a new decode line, another metric or window, a
resize), at most at the app's refresh rate; Plotext renders it once per change.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from textual.app import ComposeResult
from textual.color import Color
from textual.containers import Vertical
from textual_plotext import PlotextPlot

from specmon.session.state import DecodePoint, ServerState
from specmon.ui.safe import plain
from specmon.ui.widgets import Lines, Piece

METRICS = ("tok/s", "accept len", "t_cycle")
MAX_POINTS = 400  # per series: about two points per braille column of a wide terminal


@dataclass(frozen=True)
class Series:
    name: str
    role: str | None
    xs: tuple[float, ...]  # seconds (the decode points' time)
    ys: tuple[float, ...]


@dataclass(frozen=True)
class ChartModel:
    metric: str
    series: tuple[Series, ...]
    reference: tuple[tuple[str, str | None, float], ...]  # (label, role, value): recorded
    boundaries: tuple[float, ...]  # run starts inside the span
    window: tuple[float, float]  # the statistics window, shaded
    span: tuple[float, float]
    unit: str = ""
    log_time: bool = True  # x is the time SGLang printed (else the time specmon received)
    notes: tuple[str, ...] = field(default_factory=tuple)
    y_range: tuple[float, float] = (0.0, 1.0)  # from the data (robust) and the references
    clipped: int = 0  # points beyond y_range, drawn at its edge


def _quantile(sorted_vals: Sequence[float], q: float) -> float:
    i = (len(sorted_vals) - 1) * q
    lo = math.floor(i)
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (i - lo)


def y_scale(groups: Sequence[Sequence[float]], refs: Sequence[float]) -> tuple[float, float]:
    """The y range: each group's points (one server's run, between silences) between Tukey's
    far-out fences (quartiles -/+ 3 IQR), so a few outliers (a t_cycle interval with a prefill
    inside, 188 ms beside 11-26 ms) do not flatten the rest while a level shift at a restart
    (two groups) stays in range; the recorded references always in range; a small margin."""
    los: list[float] = list(refs)
    his: list[float] = list(refs)
    for g in groups:
        vals = sorted(v for v in g if math.isfinite(v))
        if not vals:
            continue
        q1, q3 = _quantile(vals, 0.25), _quantile(vals, 0.75)
        iqr = q3 - q1
        los.append(max(vals[0], q1 - 3 * iqr))
        his.append(min(vals[-1], q3 + 3 * iqr))
    if not los:
        return 0.0, 1.0
    lo, hi = min(los), max(his)
    pad = max((hi - lo) * 0.08, abs(hi) * 0.01, 1e-6)
    return (max(0.0, lo - pad) if lo >= 0 else lo - pad), hi + pad


def metric_value(rec: object, metric: str) -> float | None:
    """A decode record's value of `metric`; t_cycle = accept len x ms/token per request (one
    draft+verify round; a plain decode step for a non-speculative server)."""
    thr = getattr(rec, "gen_throughput", None)
    if metric == "tok/s":
        v = thr
    elif metric == "accept len":
        v = getattr(rec, "accept_len", None)
    else:
        rr = getattr(rec, "running_req", None)
        if not thr or not rr:
            return None
        v = (getattr(rec, "accept_len", None) or 1.0) * 1000.0 * rr / thr
    return float(v) if v is not None and math.isfinite(v) and v > 0 else None


def newest_point(s: ServerState) -> DecodePoint | None:
    """The server's newest server-level decode point (its newest run that has one)."""
    for run in reversed(s.runs):
        if run.decode:
            return run.decode[-1]
    return None


def _points(s: ServerState, metric: str, span_s: float, end: float | None
            ) -> tuple[list[tuple[float, float]], bool]:
    """(x, value) of the server's server-level decode points over the last `span_s` of record
    time (the time SGLang printed; receive time for lines without one), oldest first; and
    whether the newest point carries SGLang's own time. Server-level: each run's `decode`, what
    the panel's medians are made of (a DP server's groups or vLLM engines summed per interval),
    never one group's own line."""
    out: list[tuple[float, float]] = []
    newest = newest_point(s)
    use_log = newest is not None and newest.t_log
    last = end if end is not None else (newest.t if newest is not None else None)
    for run in reversed(s.runs):
        for p in reversed(run.decode):
            if last is not None and p.t < last - span_s:
                break
            v = metric_value(p.rec, metric)
            if v is not None:
                out.append((p.t, v))
        else:
            continue
        break  # (a point before the span: older runs are older still)
    out.reverse()
    return out, use_log


def run_starts(s: ServerState) -> tuple[float, ...]:
    """Where the server's runs began, on the record-time axis (the session model's runs)."""
    return tuple(r.start_t for r in s.runs if r.start_t is not None)


def chart_model(servers: Sequence[ServerState], metric: str, now: float, window_s: float,
                span_s: float, recorded: dict[str, tuple[float | None, float | None]]
                ) -> ChartModel:
    """What the chart shows. `recorded`: server -> (tok/s, accept len) of its recorded baseline;
    run boundaries are the session model's run starts.

    x is record time (the session model's `DecodePoint.t`); the shaded window is what the
    statistics cover: the last `window_s` of each server's current run.
    """
    newest = [newest_point(s) for s in servers]
    ends = [p.t for p in newest if p is not None]
    end = max(ends) if ends else None
    out = []
    any_log = False
    win_lo: float | None = None
    boundaries: list[float] = []
    for s, top in zip(servers, newest, strict=True):
        pts, use_log = _points(s, metric, span_s, end)
        any_log = any_log or use_log
        if metric == "accept len" and not pts:
            continue
        step = max(1, math.ceil(len(pts) / MAX_POINTS))
        kept = pts[::step]
        if pts and kept[-1] is not pts[-1]:
            kept.append(pts[-1])
        out.append(Series(s.name, s.role, tuple(t for t, _ in kept), tuple(v for _, v in kept)))
        # the statistics window: the last window_s of the current run's record time
        if top is not None:
            x = top.t - window_s
            if s.run.start_t is not None:
                x = max(x, s.run.start_t)
            win_lo = x if win_lo is None else min(win_lo, x)
        boundaries.extend(run_starts(s))
    xs = [x for se in out for x in se.xs]
    lo, hi = (min(xs), max(xs)) if xs else (now - span_s, now)
    if hi - lo < 10:
        lo = hi - 10
    refs = []
    for s in servers:
        thr, acc = recorded.get(s.name, (None, None))
        v = thr if metric == "tok/s" else (acc if metric == "accept len" else None)
        if v is not None:
            refs.append((f"{s.name} recorded {v:.1f}" if metric == "tok/s" else
                         f"{s.name} recorded {v:.2f}", s.role, v))
    unit = {"tok/s": "decode tok/s", "accept len": "accept len (tokens/round)",
            "t_cycle": "t_cycle ms (accept len × ms/token)"}[metric]
    window = (win_lo if win_lo is not None else hi, hi)
    ys = [y for se in out for y in se.ys]
    bounds = tuple(sorted(b for b in boundaries if lo <= b <= hi))
    y_lo, y_hi = y_scale([seg_ys for se in out for _, seg_ys in _segments(se, bounds)],
                         [v for _, _, v in refs])
    clipped = sum(1 for y in ys if y < y_lo or y > y_hi)
    notes: list[str] = []
    if clipped:
        why = " (intervals with a prefill inside run long)" if metric == "t_cycle" else ""
        notes.append(f"{clipped} of {len(ys)} points beyond the scale, drawn at its edge{why}")
    return ChartModel(metric, tuple(out), tuple(refs), bounds, window, (lo, hi), unit,
                      any_log or not xs, tuple(notes), (y_lo, y_hi), clipped)


def _segments(s: Series, boundaries: Sequence[float], gap_s: float = 30.0
              ) -> list[tuple[list[float], list[float]]]:
    """The series cut at run starts and at silences: no line is drawn across a restart."""
    out: list[tuple[list[float], list[float]]] = []
    xs: list[float] = []
    ys: list[float] = []
    for x, y in zip(s.xs, s.ys, strict=True):
        if xs and (x - xs[-1] > gap_s or any(xs[-1] < b <= x for b in boundaries)):
            out.append((xs, ys))
            xs, ys = [], []
        xs.append(x)
        ys.append(y)
    if xs:
        out.append((xs, ys))
    return out


def _rgb(value: str | None, fallback: tuple[int, int, int]) -> tuple[int, int, int]:
    try:
        return Color.parse(value).rgb if value else fallback
    except Exception:  # noqa: BLE001 - a theme without that variable
        return fallback


class ThroughputChart(Vertical):
    """Title line + the Plotext plot; `show(model)` redraws only on a changed model."""

    DEFAULT_CLASSES = "chart"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._key: object = None
        self.draws = 0

    def compose(self) -> ComposeResult:
        yield Lines("", classes="chart-title", id="chart-title")
        yield PlotextPlot(id="chart-plot")

    def on_resize(self) -> None:
        self._key = None

    def show(self, model: ChartModel) -> None:
        key = (model, self.size)
        if key == self._key:
            return
        self._key = key
        self.draws += 1
        title: list[Piece] = [(model.unit, "bold"), (" over log time · " if model.log_time else
                                                     " over receive time · ", "$text-muted")]
        for s in model.series:
            title.append((f"━ {plain(s.name)} ", SERIES_STYLE.get(s.role or "", "$text-muted")))
        for label, role, _ in model.reference:
            title.append((f"┄ {plain(label)} ", REFERENCE_STYLE.get(role or "", "$text-muted")))
        shaded = self._shaded(model)
        title.append(("│ run start" + ("  ░ window" if shaded else "  (window: all data shown)")
                      + " · t switches metric", "$text-muted"))
        for note in model.notes:
            title.append((" · " + note, "$warning"))
        self.query_one(".chart-title", Lines).put(title)
        self._draw(model, shaded)

    @staticmethod
    def _shaded(model: ChartModel) -> tuple[float, float] | None:
        """The statistics window over the data: nothing when it covers every point shown (a
        band over the whole plot says nothing)."""
        lo, hi = model.span
        x0, x1 = model.window
        xs = [x for s in model.series for x in s.xs]
        if not xs or x0 <= min(xs) or x1 <= x0:
            return None
        return max(x0, lo), min(x1, max(xs))

    def _draw(self, model: ChartModel, shaded: tuple[float, float] | None) -> None:
        widget = self.query_one(PlotextPlot)
        plt = widget.plt
        tv = self.app.theme_variables
        colours = {"baseline": _rgb(tv.get("primary"), (0, 120, 215)),
                   "speculative": _rgb(tv.get("success"), (78, 191, 113))}
        refs = {"baseline": _rgb(tv.get("warning"), (254, 166, 43)),
                "speculative": _rgb(tv.get("accent"), (255, 0, 102))}
        muted = _rgb(tv.get("text-muted"), (128, 128, 128))
        shade = _rgb(tv.get("panel"), (60, 60, 60))
        plt.clear_figure()
        lo, hi = model.span
        bottom, top = model.y_range
        # the current window, shaded over the data only: a filled band drawn first
        if shaded is not None:
            plt.plot([shaded[0], shaded[1]], [top, top], fillx=True, color=shade, marker="░")
        for b in model.boundaries:
            plt.vline(b, muted)
        # the recorded references: dashed, in their own colours (not the live series')
        for _, role, v in model.reference:
            plt.plot([lo, hi], [v, v], color=refs.get(role or "", muted), marker="┄")
        # one line per server and run: cut at run starts and silences, never drawn across them
        for s in model.series:
            for xs, ys in _segments(s, model.boundaries):
                clipped = [min(max(y, bottom), top) for y in ys]
                plt.plot(xs, clipped, color=colours.get(s.role or "", muted), marker="braille")
        plt.xlim(lo, hi)
        plt.ylim(bottom, top)
        ticks = [lo + (hi - lo) * i / 4 for i in range(5)]
        # record times are SGLang's naive local stamps (or receive times): shown as printed
        plt.xticks(ticks, [time.strftime("%H:%M:%S", time.localtime(t)) for t in ticks])
        plt.xfrequency(5)
        widget.refresh()


SERIES_STYLE = {"baseline": "$primary", "speculative": "$success"}
REFERENCE_STYLE = {"baseline": "$warning", "speculative": "$accent"}


__all__ = ["METRICS", "ChartModel", "Series", "ThroughputChart", "chart_model", "metric_value",
           "y_scale"]
