"""Widgets. Each refreshes from the session on the app's timer, never once per log line.

Cost rules (issue 15): a widget repaints only when what it shows changed (`Lines.put` compares
the pieces it is given), and asks for a new layout only when its number of lines changed; text
is laid out to the widget's width here, so nothing is measured twice and nothing wraps.
Colours are theme variables (`$warning`, ...) resolved by Textual, never literal colours.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from rich.table import Table
from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import Digits, Input, Log, Static

from specmon.analysis.stats import median
from specmon.numfmt import NA, num, spec_config_text
from specmon.parse.gpu import SEVERE_REASONS, GpuSample, is_clock_limited
from specmon.parse.sglang import BatchRecord, parse_line
from specmon.parse.vllm import VllmDecodeRecord, throughput_label
from specmon.session.ownership import owned_gpus
from specmon.session.speedup import format_speedup
from specmon.session.state import ServerState
from specmon.session.window import (
    MIN_N,
    WindowStats,
    current_stats,
    interval_text,
    recomputed_accept_rate,
    run_stats_text,
    window_points,
)
from specmon.ui.headline import HeadlineModel
from specmon.ui.safe import plain

Piece = tuple[str, str]  # (text, Textual style: "bold $warning", "" for none)

STATUS_MARK = {
    "ready": ("●", "status-ready"),
    "starting": ("◐", "status-starting"),
    "stopped": ("○", "status-stopped"),
    "crashed": ("✖", "status-crashed"),
    "unknown": ("?", "status-unknown"),
}


def safe_id(name: str) -> str:
    """A widget id for a server name (`host/server` has characters ids may not hold)."""
    out = "".join(c if c.isalnum() or c in "-_" else "_" for c in name) or "server"
    return out if not out[0].isdigit() else f"s{out}"


def fit(text: str, width: int) -> str:
    """`text` in `width` columns, never cut mid-word: trailing " · " parts are dropped whole;
    a first part still too long is cut at a word boundary, with an ellipsis."""
    if len(text) <= width:
        return text
    parts = text.split(" · ")
    while len(parts) > 1:
        parts.pop()
        joined = " · ".join(parts)
        if len(joined) <= width:
            return joined
    text = parts[0]
    if width <= 1:
        return "…"[:max(width, 0)]
    cut = text[:width - 1]
    sp = max(cut.rfind(" "), cut.rfind("·"), cut.rfind(","))
    if sp <= 0:
        return ""
    cut = cut[:sp].rstrip(" ·,")
    return cut + "…" if cut else ""


def wrap_words(text: str, width: int, rows: int) -> list[str]:
    """`text` over at most `rows` lines of `width`, broken between words; the last line ends
    with an ellipsis (at a word boundary) when the text does not fit."""
    out: list[str] = []
    words = text.split()
    line = ""
    while words and len(out) < rows:
        word = words[0]
        cand = f"{line} {word}" if line else word
        if len(cand) <= width:
            line = cand
            words.pop(0)
            continue
        if not line:  # a single word wider than the line
            line = word[:width]
            words.pop(0)
        out.append(line)
        line = ""
    if line and len(out) < rows:
        out.append(line)
    if words and out:
        out[-1] = fit(out[-1] + " " + " ".join(words), width) or out[-1]
    return out


class Lines(Static):
    """A Static that repaints only when its content changed and relayouts only when needed."""

    DEFAULT_CSS = """
    Lines { text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def __init__(self, content: str = "", **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._key: tuple[Piece, ...] | None = None
        self._nlines = -1

    @property
    def avail(self) -> int:
        """Columns to lay text out in (before the first layout: a generous guess)."""
        return self.content_size.width or 200

    def put(self, pieces: Iterable[Piece]) -> bool:
        key = tuple(pieces)
        if key == self._key:
            return False
        n = 1 + sum(t.count("\n") for t, _ in key)
        self.update(Content.assemble(*key), layout=n != self._nlines)
        self._key, self._nlines = key, n
        return True

    def on_resize(self, _event: events.Resize) -> None:
        self._key, self._nlines = None, -1  # laid out for another width: redraw, relayout
        request = getattr(self.app, "request_refresh", None)
        if request is not None:
            request()  # now, not at the next tick: text is laid out to the new width


def _spark(vals: Sequence[float | None], top: float | None, width: int) -> str:
    """Bars on a fixed 0..top scale (a constant 1980 MHz is full height, not zero)."""
    bars = "▁▂▃▄▅▆▇█"
    vals = list(vals)[-width:] if width > 0 else []
    if not top or top <= 0 or not any(v is not None and math.isfinite(v) for v in vals):
        return ""
    out = []
    for v in vals:
        if v is None or not math.isfinite(v):
            out.append(" ")
        else:
            out.append(bars[max(0, min(7, int(v / top * 8 - 1e-9)))])
    return "".join(out)


def nice_ceiling(x: float) -> float:
    """A round scale top at or above x (100, 120, 150, 200, ...)."""
    if x <= 0 or not math.isfinite(x):
        return 1.0
    e = 10 ** math.floor(math.log10(x))
    for m in (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0):
        if m * e >= x:
            return m * e
    return 10 * e


# --- headline ---------------------------------------------------------------------------------

STATE_STYLE = {"win": "bold $success", "lose": "bold $error", "tie": "bold $warning",
               "na": "bold $text-muted"}
DRIFT_STYLE = {"drift": "bold $error", "improved": "bold $success", "ok": "$success",
               "none": "$text-muted"}


class SpeedupDigits(Digits):
    """The speedup as the biggest text on screen, coloured by state through CSS classes."""

    def show(self, model: HeadlineModel) -> None:
        value = model.ratio_text if model.speedup is not None else "-•--"
        if value != self.value:
            self.update(value)
        for st in STATE_STYLE:
            self.set_class(st == model.state, f"-{st}")


class SpeedupBar(Lines):
    """Beside the digits: the speedup line of the runs model (current runs, drift, differences),
    its interval, batch size, medians and what it implies."""

    def show(self, model: HeadlineModel, rows: int = 4) -> None:
        sp = model.speedup
        w = self.avail
        p: list[Piece] = []
        view = model.view
        if sp is None:
            p.append(("speedup N/A", STATE_STYLE["na"]))
            p.append(("\n" + fit(model.reason or "", w), "$text-muted"))
            self.put(p)
            return
        parts = format_speedup(view).split(" · ") if view is not None else [f"{sp.ratio:.2f}x"]
        head = "speedup " + parts[0]  # "speedup 1.50x vs live baseline 62.9 (run 2)"
        p.append((fit(head, w) or head[:w], STATE_STYLE[model.state]))
        verdict = {"win": "speculation wins", "lose": "speculation loses",
                   "tie": "no clear difference (the interval holds 1)",
                   "na": "no verdict (no interval)"}[model.state]
        lines: list[tuple[str, str]] = []
        # what makes the number suspect comes first, each statement on its own line: the
        # drift against the recorded baseline, the runs' differences, an ended run's age
        drift = [x for x in parts[1:] if "DRIFT" in x or "vs recorded" in x]
        if drift:
            lines.append((" · ".join(drift), "bold $warning"))
        lines.extend((x, "bold $warning") for x in parts[1:] if x not in drift)
        lines.append((f"95% {interval_text(sp)} · bs {sp.running_req} · {verdict} · "
                      f"spec {sp.spec.median:.1f} / base {sp.base.median:.1f} tok/s", ""))
        lines.append((f"medians, {throughput_label(model.engine)}, last {model.window_s:.0f} s "
                      f"of each run · n {sp.spec.n}/{sp.base.n}", "$text-muted"))
        cyc, be = sp.verify_cycle_ms, sp.break_even_accept_len
        if cyc is not None and be is not None and sp.spec.accept_len is not None:
            lines.append((f"verify cycle {cyc:.1f} ms · break-even accept len {be:.2f} "
                          f"(now {sp.spec.accept_len:.2f})", "$text-muted"))
        else:
            lines.append((f"ms/token {sp.spec_ms_per_token:.1f} spec vs "
                          f"{sp.base_ms_per_token:.1f} base", "$text-muted"))
        for line, style in lines[:max(rows - 1, 0)]:
            p.append(("\n" + fit(line, w), style))
        self.put(p)


class DriftPanel(Lines):
    """Each compared server against its recorded baseline: OK, or DRIFT with its first cause."""

    def show(self, model: HeadlineModel, rows: int = 4) -> None:
        w = self.avail
        p: list[Piece] = []
        left = rows - len(model.drift)  # rows left for causes
        for i, d in enumerate(model.drift):
            name = plain(d.server)
            if i:
                p.append(("\n", ""))
            p.append((name + " ", "bold"))
            text = d.text
            if len(name) + 1 + len(text) > w:
                text = text.replace(" vs recorded ", " vs rec. ")
            if len(name) + 1 + len(text) > w:
                text = text.split(" vs ")[0]  # "DRIFT -29%": the essential
            p.append((fit(text, max(w - len(name) - 1, 4)), DRIFT_STYLE[d.state]))
            if d.cause and left > 0:
                lines = wrap_words("cause: " + plain(d.cause), w - 2, left)
                left -= len(lines)
                for line in lines:
                    p.append(("\n  " + line, "$warning"))
        if not p:
            p.append(("drift: no servers yet", "$text-muted"))
        self.put(p)
        self.set_class(any(d.state == "drift" for d in model.drift), "-drift")


# --- server panels ----------------------------------------------------------------------------


class ServerSummary(Lines):
    """The numbers of one server, most important first, each labelled once."""

    def show(self, state: ServerState, now: float, window_s: float) -> None:
        rows = summary_rows(state, now, window_s)
        w = self.avail
        lw = max(len(r[0]) for r in rows)
        vw = max(len(r[1]) for r in rows)
        p: list[Piece] = []
        for i, (label, value, hint, style) in enumerate(rows):
            lead = "\n" if i else ""
            p.append((f"{lead}{label:<{lw}} ", "$text-muted"))
            p.append((f"{value:>{vw}}", style or "bold"))
            room = w - lw - vw - 2
            if hint and room >= 6:
                p.append((" " + fit(hint, room), "$text-muted"))
        self.put(p)


def summary_rows(state: ServerState, now: float, window_s: float
                 ) -> list[tuple[str, str, str, str]]:
    """(label, value, how it was measured, value style) rows of a server panel."""
    last = state.last_decode
    bs = last.running_req if last else None
    rows: list[tuple[str, str, str, str]] = []
    w: WindowStats | None = current_stats(state, now, window_s)
    label = f"median {window_s:.0f} s"
    run_txt = plain(run_stats_text(state, w))  # "run 3 since 14:02:11, n 4"
    if w is not None and w.n >= MIN_N:
        cv = f" · CV {w.robust_cv * 100:.1f}%" if w.robust_cv is not None else ""
        rows.append((label, num(w.median), f"tok/s · bs {w.running_req} · {run_txt} · "
                     f"p10–p90 {w.p10:.1f}–{w.p90:.1f}{cv}", "bold"))
    else:
        rows.append((label, NA, f"{run_txt} · too few decode lines" if w is not None else
                     f"{run_txt} · no decode lines in the window", "$text-muted"))
    stale = "stale · " if state.stale else ""
    rows.append(("last interval", num(last.gen_throughput if last else None),
                 f"{stale}tok/s · bs {num(bs, '{}')} · queue "
                 f"{num(last.queue_req if last else None, '{}')} · {throughput_label(state.engine)}",
                 "$warning" if state.stale else ""))
    if state.is_speculative and state.engine == "vllm":
        rows.extend(_vllm_spec_rows(state, w))
    elif state.is_speculative:
        al = last.accept_len if last else None
        med_al = w.accept_len if w else None
        ndt = state.num_draft_tokens
        rate = recomputed_accept_rate(med_al if med_al is not None else al, ndt)
        rows.append(("accept len", num(med_al if med_al is not None else al),
                     f"median · rate {num(rate)} (recomputed, {num(ndt, '{}')} draft tokens) · "
                     f"last {num(al)}", ""))
    if last is not None and bs and last.gen_throughput:
        rows.append(("ms/token", f"{1000.0 * bs / last.gen_throughput:.1f}",
                     "per request · last interval", ""))
    rows.append(_kv_row(state))
    rows.append(_graph_row(last))
    return rows


def _vllm_spec_rows(state: ServerState, w: WindowStats | None) -> list[tuple[str, str, str, str]]:
    """vLLM prints its acceptance counts: the rate and per-position rates are measured."""
    last = state.last_decode
    al = last.accept_len if last else None
    med_al = w.accept_len if w else None
    spec = last.spec if isinstance(last, VllmDecodeRecord) else None
    pp = spec.get("per_position") if spec else None
    pos = " ".join(num(x) for x in pp) if isinstance(pp, list) else "N/A"
    note = " · bonus added (0.8.5)" if last is not None and getattr(last, "accept_len_note", None) \
        and "0.8.5" in str(getattr(last, "accept_len_note", "")) else ""
    rows = [("accept len", num(med_al if med_al is not None else al),
             f"median · last {num(al)} · bonus included{note}", "")]
    if isinstance(last, VllmDecodeRecord):
        rows.append(("accepted", num(last.accept_rate),
                     f"of drafted · per position {pos} · "
                     f"{num(last.accepted_tok_s, '{:.1f}')} accepted tok/s (last interval)", ""))
    return rows


def _kv_row(state: ServerState) -> tuple[str, str, str, str]:
    """KV cache use from #token and the pool size: SGLang prints `token usage` with two
    decimals, so a bs-1 server on a 1.2M-token pool always reads 0.00."""
    last = state.last_decode
    if isinstance(last, VllmDecodeRecord):
        return ("KV cache", num(last.kv_cache_usage_pct, "{:.1f}%"),
                f"{last.kv_device or 'GPU'} usage · prefix cache hit "
                f"{num(last.prefix_cache_hit_pct, '{:.1f}%')}", "")
    tokens = last.tokens if last else None
    pool = state.args.get("max_total_num_tokens")
    pool = pool if isinstance(pool, int) and not isinstance(pool, bool) and pool > 0 else None
    if tokens is not None and pool:
        return ("KV cache", f"{tokens:,}", f"tokens · {100.0 * tokens / pool:.2f}% of {pool:,}", "")
    usage = last.token_usage if last else None
    return ("KV cache", num(tokens, "{:,}"), f"tokens · usage {num(usage)} · pool size unknown"
            if tokens is not None else "", "")


def _graph_row(last: BatchRecord | None) -> tuple[str, str, str, str]:
    if last is None or last.cuda_graph is None:
        return ("cuda graph", NA, "", "$text-muted")
    if last.cuda_graph:
        kind = f" ({last.graph_kind})" if last.graph_kind and last.graph_kind != "cuda" else ""
        return ("cuda graph", "on", f"replayed{kind}", "")
    return ("cuda graph", "off", "not replayed · bs above cuda-graph-max-bs?", "$warning")


class StickyLog(Log):
    """A Log that stops following as soon as the user scrolls up, and says so."""

    def _pause(self) -> None:
        if self.auto_scroll:
            self.auto_scroll = False
            self.post_message(StickyLog.Paused())

    class Paused(Message):
        pass

    class Resumed(Message):
        pass

    def action_scroll_end(self) -> None:
        """End resumes following (the Log's own End binding wins while it has focus)."""
        super().action_scroll_end()
        if not self.auto_scroll:
            self.auto_scroll = True
            self.post_message(StickyLog.Resumed())

    def _on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self._pause()
        super()._on_mouse_scroll_up(event)

    def action_scroll_up(self) -> None:
        self._pause()
        super().action_scroll_up()

    def action_page_up(self) -> None:
        self._pause()
        super().action_page_up()

    def action_scroll_home(self) -> None:
        self._pause()
        super().action_scroll_home()


def compact_line(line: str) -> str:
    """A log line reduced to what matters (time, bs, tok/s, accept len as "acc"); others
    unchanged."""
    rec = parse_line(line)
    if not isinstance(rec, BatchRecord):
        return plain(line)
    ts = rec.timestamp[11:] if rec.timestamp and len(rec.timestamp) > 11 else (
        rec.timestamp or rec.time_of_day or "--:--:--")
    dp = f" DP{rec.dp_rank}" if rec.dp_rank is not None else ""
    if rec.kind == "decode":
        out = (f"{ts}{dp} bs {num(rec.running_req, '{}')} "
               f"{num(rec.gen_throughput, '{:.1f}')} tok/s")
        if rec.accept_len is not None:
            out += f" acc {rec.accept_len:.2f}"
        if rec.queue_req:
            out += f" queue {rec.queue_req}"
        if rec.cuda_graph is False:
            out += " no cuda graph"
        return out
    return (f"{ts}{dp} prefill new {num(rec.new_token, '{}')} cached "
            f"{num(rec.cached_token, '{}')} queue {num(rec.queue_req, '{}')}")


class LogView(Vertical):
    """A sticky tail: scrolling up pauses it, End resumes, a badge counts what arrived since.

    Compact mode (the default, `c` toggles) shows decode and prefill lines as their fields, so a
    line is never cut before `gen throughput`; `l` shows the log full screen.
    """

    DEFAULT_CLASSES = "logview"
    filter_text: reactive[str] = reactive("")

    def __init__(self, server: str, *, id: str | None = None, compact: bool = True) -> None:
        super().__init__(id=id)
        self.server = server
        self.new_while_paused = 0
        self.filled = False
        self.compact = compact
        self._source: Iterable[str] = ()

    def compose(self) -> ComposeResult:
        yield Input(placeholder="filter (plain text)", id=f"filter-{safe_id(self.server)}",
                    classes="filter")
        yield StickyLog(max_lines=5000, auto_scroll=True, id=f"log-{safe_id(self.server)}")
        yield Static("", classes="badge", id=f"badge-{safe_id(self.server)}")

    @property
    def log_widget(self) -> Log:
        return self.query_one(Log)

    @property
    def following(self) -> bool:
        log = self.log_widget
        return log.auto_scroll

    def on_mount(self) -> None:
        self.query_one(Input).display = False
        self.set_class(self.compact, "-compact")

    def set_source(self, lines: Iterable[str]) -> None:
        self._source = lines

    def set_compact(self, compact: bool) -> None:
        if compact != self.compact:
            self.compact = compact
            self.set_class(compact, "-compact")
            if self.is_mounted:
                self.refill()

    def _matches(self, line: str) -> bool:
        return not self.filter_text or self.filter_text.lower() in line.lower()

    def _show(self, line: str) -> str:
        return compact_line(line) if self.compact else plain(line)

    def append(self, lines: list[str]) -> None:
        lines = [self._show(x) for x in lines if self._matches(x)]
        if not lines:
            return
        log = self.log_widget
        if not log.auto_scroll:
            self.new_while_paused += len(lines)
        # Log only follows while already at the end; following is our decision, not layout's
        log.write_lines(lines, scroll_end=False)
        if log.auto_scroll:
            log.scroll_end(animate=False, immediate=True, x_axis=False)
        self._update_badge()

    def _update_badge(self) -> None:
        badge = self.query_one(".badge", Static)
        if self.new_while_paused:
            badge.update(f"paused · +{self.new_while_paused} new · End resumes")
            badge.display = True
        elif badge.display:
            badge.update("")
            badge.display = False

    def keep_following(self) -> None:
        """Layout changes (a panel growing) can leave a following log short of its end."""
        log = self.log_widget
        if log.auto_scroll and log.scroll_y < log.max_scroll_y:
            log.scroll_end(animate=False, immediate=True, x_axis=False)

    def on_sticky_log_resumed(self, _msg: StickyLog.Resumed) -> None:
        self.resume()

    def on_sticky_log_paused(self, _msg: StickyLog.Paused) -> None:
        self._update_badge()
        self.query_one(".badge", Static).update("paused · End resumes")
        self.query_one(".badge", Static).display = True

    def pause(self) -> None:
        self.log_widget._pause()

    def resume(self) -> None:
        log = self.log_widget
        log.auto_scroll = True
        self.new_while_paused = 0
        log.scroll_end(animate=False)
        self._update_badge()

    def watch_filter_text(self, _old: str, _new: str) -> None:
        if self.is_mounted:
            self.refill()

    def refill(self) -> None:
        """Re-render the log from the server's kept lines (filter change, or a late mount)."""
        self.filled = True
        log = self.log_widget
        log.clear()
        log.write_lines([self._show(x) for x in self._source if self._matches(x)],
                        scroll_end=False)
        if log.auto_scroll:
            log.scroll_end(animate=False, immediate=True, x_axis=False)
        self.new_while_paused = 0
        self._update_badge()

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.filter_text = event.value

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.log_widget.focus()


def title_pieces(state: ServerState, width: int) -> list[Piece]:
    """`● name [role] status · tp 8 · EAGLE3 2/1/3`: the name once, the role as a badge."""
    mark, _ = STATUS_MARK.get(state.status, STATUS_MARK["unknown"])
    name = plain(state.name)
    role = state.role
    p: list[Piece] = [(f"{mark} ", "bold"), (name, "bold")]
    if role and role != state.name:
        p.append((" ", ""))
        p.append((f" {role} ", "reverse"))
    p.append((f" {state.status}", ""))
    extras = []
    if state.args.get("tp_size"):
        extras.append(f"tp {state.args['tp_size']}")
    spec_cfg = spec_config_text(state.args, " · ")
    if spec_cfg:
        extras.append(spec_cfg)
    used = sum(len(t) for t, _ in p)
    if extras:
        p.append((fit(" · " + " · ".join(plain(str(e)) for e in extras),
                      max(width - used - (6 if state.stale else 0), 0)), "$text-muted"))
    if state.stale:
        p.append((" STALE", "bold $warning"))
    return p


class ServerPanel(Vertical):
    """One server: title, start-up/control state, labelled numbers, a fixed-scale trend, its log."""

    host: str = ""  # which host's server (the app sets it: servers are keyed (host, server))

    DEFAULT_CLASSES = "server-panel"

    def __init__(self, server: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.server = server
        self.can_focus = True
        self._status_cls: str | None = None

    def compose(self) -> ComposeResult:
        sid = safe_id(self.server)
        yield Lines("", classes="panel-title", id=f"title-{sid}")
        yield Lines("", classes="startup", id=f"startup-{sid}")
        yield ServerSummary("", classes="summary", id=f"summary-{sid}")
        yield Lines("", classes="spark", id=f"spark-{sid}")
        yield LogView(self.server, id=f"logview-{sid}")

    @property
    def log_view(self) -> LogView:
        return self.query_one(LogView)

    def refresh_from(self, state: ServerState, now: float, window_s: float,
                     recorded: float | None = None) -> None:
        _, cls = STATUS_MARK.get(state.status, STATUS_MARK["unknown"])
        if cls != self._status_cls:
            for c in STATUS_MARK.values():
                self.set_class(c[1] == cls, c[1])
            self._status_cls = cls
        title = self.query_one(".panel-title", Lines)
        title.put(title_pieces(state, title.avail))
        startup = self.query_one(".startup", Lines)
        pieces = _startup_pieces(state, startup.avail)
        startup.display = bool(pieces)
        startup.put(pieces)
        self.query_one(ServerSummary).show(state, now, window_s)
        spark = self.query_one(".spark", Lines)
        if spark.display:  # (non-finite values are drawn as gaps: _spark skips them)
            spark.put(_throughput_spark(state, now, window_s, recorded, spark.avail))


def _throughput_spark(state: ServerState, now: float, window_s: float, recorded: float | None,
                      width: int) -> list[Piece]:
    """Decode tok/s at the current bs on a fixed 0..top scale (top: a round number above the
    recorded baseline and the data)."""
    bs = state.last_decode.running_req if state.last_decode else None
    span = max(window_s, 1.0) * 5
    pts = window_points(state, now, span)
    data = [p.rec.gen_throughput for p in pts
            if p.rec.gen_throughput is not None and p.rec.running_req == bs]
    finite = [v for v in data if math.isfinite(v)]
    top = nice_ceiling(max(finite + ([recorded] if recorded else []))) if finite else None
    label = f"tok/s 0–{top:.0f} " if top else "tok/s "
    bars = _spark(data, top, max(width - len(label) - 14, 0))
    if not bars:
        return [(label, "$text-muted"), (f"no decode lines at bs {num(bs, '{}')} yet", "$text-muted")]
    return [(label, "$text-muted"), (bars, "$primary"),
            (f" bs {num(bs, '{}')} · {span:.0f} s", "$text-muted")]


def _startup_pieces(state: ServerState, width: int = 200) -> list[Piece]:
    p: list[Piece] = []

    def line(text: str, style: str = "") -> None:
        p.append((("\n" if p else "") + (fit(text, width) or text[:width]), style))

    if state.control_text:
        line(plain(state.control_text), "italic")
    if state.tail_status:  # why no line arrives: "no such file: ... (waiting)", a silent file
        line(plain(state.tail_status), "bold")
    audit = state.env_audit
    if audit is not None:
        problems = audit.problems()
        if problems:
            line("env audit: " + "; ".join(plain(x) for x in problems), "bold $warning")
        else:
            line(f"env audit: ok ({len(audit.workers)} workers read)", "$text-muted")
    bench = state.last_bench
    if bench is not None:
        line(plain(f"benchmark (end-to-end, c={bench.concurrency}, out={bench.output_len}, "
                   f"n={bench.completed}): {num(bench.output_tok_s, '{:.1f}')} tok/s, "
                   f"TTFT {num(bench.mean_ttft_ms, '{:.0f}')} ms, ITL "
                   f"{num(bench.mean_itl_ms, '{:.2f}')} ms, accept len "
                   f"{num(bench.accept_length)}"))
    if state.status == "crashed":
        code = f" (exit {state.exit_code})" if state.exit_code is not None else ""
        line(f"crashed{code}", "bold $error")
        tb = state.traceback
        shown = tb if len(tb) <= 7 else [tb[0], "  …", *tb[-5:]]
        for x in shown:
            line(plain(x))
        return p
    if state.status != "starting":
        return p
    s = state.startup
    steps = [("args", s.server_args), ("KV cache", s.kv_allocated),
             ("CUDA graphs", s.graph_capture == "done"), ("ready", s.ready)]
    text = "loading: " + "  ".join(("✔ " if done else "… ") + label for label, done in steps)
    if s.graph_capture == "capturing" and s.graph_batch_sizes:
        text += f"  capturing bs {s.graph_batch_sizes[0]}–{s.graph_batch_sizes[-1]}"
    line(text, "$warning")
    return p


# --- GPUs -------------------------------------------------------------------------------------


def reason_style(name: str) -> str:
    """Severity of a clock-event reason: thermal / HW slowdown, power cap, idle, other."""
    if name in SEVERE_REASONS:
        return "bold $error"
    if name == "SwPowerCap":
        return "bold $warning"
    if name == "GpuIdle":
        return "$text-muted"
    return "bold"


def gpu_groups(gpus: Sequence[Any], servers: Iterable[ServerState]
               ) -> list[tuple[str, list[Any]]]:
    """GPUs grouped by the server that owns them (specmon.session.ownership: its processes,
    else its arguments), in server order; the rest in an "unowned" group."""
    owned: dict[int, str] = {}
    order: list[str] = []
    for s in servers:
        order.append(s.name)
        own = set(owned_gpus(gpus, s.pids, s.args).indices)
        for g in gpus:
            if getattr(g, "index", None) in own:
                owned.setdefault(id(g), s.name)
    groups: dict[str, list[Any]] = {name: [] for name in order}
    rest: list[Any] = []
    for g in gpus:
        name = owned.get(id(g))
        (groups[name] if name is not None else rest).append(g)
    out = [(name, gs) for name, gs in groups.items() if gs]
    if rest:
        out.append(("unowned" if out else "GPUs", rest))
    return out


def _reasons_of(gs: Sequence[Any]) -> dict[str, list[Any]]:
    """reason -> the GPU indices that report it."""
    out: dict[str, list[Any]] = {}
    for g in gs:
        if getattr(g, "clocks_event_reasons", None) is None:
            continue
        for r in g.reasons:
            out.setdefault(r, []).append(g.index)
    return out


def _fmt_int(v: float | None) -> str:
    return num(v, "{:,.0f}")


def _cells(cols: Sequence[tuple[str, str, int]], w: int) -> list[Piece]:
    """Columns (text, style, width) left to right while they fit `w`; a column that does not
    fit is left out whole (the ones after it too), so nothing is cut."""
    p: list[Piece] = []
    used = 0
    for text, style, cw in cols:
        cell = text.ljust(cw) if cw else text
        if used + len(cell.rstrip()) > w:
            break
        p.append((cell, style))
        used += len(cell) + 1
        p.append((" ", ""))
    if p:
        p.pop()
    return p


class GpuPanel(Lines):
    """GPUs grouped by server: one summary row per group, `d` expands every GPU's row.

    A GPU is marked (▶) when its SM clock is under 90% of max while a server decodes: that is
    when a clock limit costs tokens. Reasons are coloured by severity (power cap: warning;
    thermal and HW slowdowns: error); the trends use fixed scales (0..max clock, 0..power limit).
    """

    expanded: bool = False

    def show(self, gpus: list[Any], history: dict[int, Any], error: str | None,
             decoding: bool = False, extra: Sequence[tuple[str, Any, list[Any]]] = (),
             servers: Iterable[ServerState] = ()) -> None:
        """`extra`: (host, sample, its history) of GPUs on other nodes of a multi-node server."""
        w = self.avail
        if error and not gpus:
            self.put([(fit(f"no GPU telemetry: {plain(error)}", w) or "no GPU telemetry",
                       "$warning")])
            return
        if not gpus:
            self.put([("GPUs: N/A (no samples yet)", "$text-muted")])
            return
        hist_of = {id(g): list(history.get(g.index, [])) for g in gpus}
        labels = {id(g): f"GPU {num(g.index, '{}')}" for g in gpus}
        for host, g, hist in extra:
            hist_of[id(g)] = hist
            labels[id(g)] = f"{plain(host)}:{num(g.index, '{}')}"
        allg = list(gpus) + [g for _, g, _ in extra]
        groups = gpu_groups(allg, servers)
        nw = max(12, *(len(plain(n)) + 2 for n, _ in groups))
        p: list[Piece] = _cells([(f"{len(allg)} GPUs", "bold", nw), ("", "", 6),
                                 ("SM min/med/max", "$text-muted", 15),
                                 ("°C", "$text-muted", 4), ("W/limit", "$text-muted", 12),
                                 ("clock-event reasons" + ("" if self.expanded else
                                                           " · d: every GPU"), "$text-muted", 0)],
                                w)
        for name, gs in groups:
            p.append(("\n", ""))
            p.extend(self._group_row(name, gs, decoding, w, nw))
            if self.expanded:
                for g in gs:
                    p.append(("\n", ""))
                    p.extend(self._gpu_row(labels[id(g)], g, hist_of.get(id(g), []), decoding,
                                           w, nw))
        if error:
            p.append(("\n" + (fit(plain(error), w) or "GPU telemetry error"), "$warning"))
        self.put(p)

    def _group_row(self, name: str, gs: Sequence[Any], decoding: bool, w: int, nw: int
                   ) -> list[Piece]:
        clocks = [g.clock_sm for g in gs if g.clock_sm is not None]
        maxc = max((g.max_clock_sm for g in gs if g.max_clock_sm), default=None)
        temps = [g.temp_gpu for g in gs if g.temp_gpu is not None]
        power = [g.power_w for g in gs if g.power_w is not None]
        limit = [g.power_limit_w for g in gs if g.power_limit_w is not None]
        limited = decoding and any(_clock_limited(g) for g in gs)
        mark = "▶" if limited else " "
        clock = (f"{min(clocks)}/{median([float(c) for c in clocks]):.0f}/{num(maxc, '{}')}"
                 if clocks else NA)
        temp = f"{max(temps):.0f}" if temps else NA
        pw = (f"{sum(power):,.0f}/{sum(limit):,.0f}" if power and len(limit) == len(power)
              else (f"{sum(power):,.0f}" if power else NA))
        counts = _reasons_of(gs)
        cols: list[tuple[str, str, int]] = [
            (mark + plain(name), "bold reverse" if limited else "bold", nw),
            (f"{len(gs)} GPU{'s' if len(gs) != 1 else ''}", "", 6),
            (clock, "bold $warning" if limited else "", 15), (temp, "", 4), (pw, "", 12)]
        p = _cells(cols, w)
        used = sum(len(t) for t, _ in p)
        if len(p) < 2 * len(cols) - 1:
            return p
        if not counts:
            note = ("reasons N/A" if all(g.clocks_event_reasons is None for g in gs)
                    else "no clock limit")
            if used + 1 + len(note) <= w:
                p.append((" " + note, "$text-muted"))
            return p
        for i, (r, idx) in enumerate(sorted(counts.items(), key=lambda kv: (-len(kv[1]), kv[0]))):
            which = (f" (all {len(gs)})" if len(idx) == len(gs) and len(gs) > 1 else
                     f" (GPU {','.join(str(x) for x in idx)})" if len(idx) <= 3 else
                     f" ({len(idx)} of {len(gs)})")
            txt = (" " if i == 0 else ", ") + r + which
            if used + len(txt) > w - 2:
                p.append((" …", "$text-muted"))
                break
            p.append((txt, reason_style(r)))
            used += len(txt)
        return p

    def _gpu_row(self, label: str, g: Any, hist: list[Any], decoding: bool, w: int, nw: int
                 ) -> list[Piece]:
        limited = decoding and _clock_limited(g)
        reasons = g.reasons if g.clocks_event_reasons is not None else None
        rtxt = ("N/A" if reasons is None else (",".join(reasons) if reasons else "none"))
        cols: list[tuple[str, str, int]] = [
            (("▶ " if limited else "  ") + label, "bold reverse" if limited else "", nw),
            ("", "", 6),
            (f"{num(g.clock_sm, '{}')}/{num(g.max_clock_sm, '{}')}",
             "bold $warning" if limited else "", 15),
            (num(g.temp_gpu, "{:.0f}"), "", 4),
            (f"{num(g.power_w, '{:.0f}')}/{num(g.power_limit_w, '{:.0f}')}", "", 12),
        ]
        p = _cells(cols, w)
        if len(p) < 2 * len(cols) - 1:
            return p
        used = sum(len(t) for t, _ in p)
        rw = max(12, len(rtxt) + 1)
        if used + rw > w:
            return p
        if reasons:
            for i, r in enumerate(reasons):
                p.append(((" " if i == 0 else ",") + r, reason_style(r)))
        else:
            p.append((" " + rtxt, "$text-muted"))
        p.append((" " * (rw - len(rtxt) - 1), ""))
        used += rw
        hist = hist[-16:]
        extras: list[Piece] = []
        mem = (f"mem {_fmt_int(g.mem_used_mib)}/{_fmt_int(g.mem_total_mib)} MiB"
               if getattr(g, "mem_total_mib", None) else f"mem {_fmt_int(g.mem_used_mib)} MiB")
        extras.append((mem, ""))
        extras.append((f"HBM {num(g.temp_mem, '{:.0f}')} °C · util {num(g.util_gpu, '{:.0f}')}%",
                       "$text-muted"))
        clk = _spark([h.clock_sm for h in hist], g.max_clock_sm, 16)
        pwr = _spark([h.power_w for h in hist], g.power_limit_w, 16)
        if clk:
            extras.append((f"clock 0–{num(g.max_clock_sm, '{}')} {clk}", "$primary"))
        if pwr:
            extras.append((f"power 0–{num(g.power_limit_w, '{:.0f}')} {pwr}", "$primary"))
        for text, style in extras:
            if used + 2 + len(text) > w:
                break
            p.append(("  " + text, style))
            used += 2 + len(text)
        return p


def _clock_limited(g: Any) -> bool:
    return isinstance(g, GpuSample) and is_clock_limited(g)


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


__all__ = ["NA", "DriftPanel", "GpuPanel", "HostsPanel", "LogView", "ServerPanel",
           "ServerSummary", "SpeedupBar", "SpeedupDigits", "StickyLog", "compact_line",
           "fit", "gpu_groups", "safe_id", "summary_rows"]
