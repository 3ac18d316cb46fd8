"""The sticky log tail of a server panel: it renders the records the session parsed (compact
lines) or the raw lines, redacted; scrolling up pauses it, End resumes, a badge counts new
lines.

Lines are redacted before they are laid out: a screenshot masks what is on screen, and a
secret cut at the panel's edge (`postgresql://u:pw...` without its `@`) no longer has the
shape a rule needs, so its visible part would stay."""

from __future__ import annotations

from collections.abc import Sequence

from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import Input, Log, Static

from specmon.parse.sglang import BatchRecord, EventRecord, Record
from specmon.parse.vllm import VllmDecodeRecord, VllmEventRecord
from specmon.redact import redact_text
from specmon.session.state import ServerState
from specmon.ui.keys import bindings
from specmon.ui.safe import plain
from specmon.ui.widgets.text import num, safe_id


class StickyLog(Log):
    """A Log that stops following as soon as the user scrolls up, and says so."""

    def pause(self) -> None:
        """Stop following (the user scrolled up, or pressed p), and say so."""
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
        self.pause()
        super()._on_mouse_scroll_up(event)

    def action_scroll_up(self) -> None:
        self.pause()
        super().action_scroll_up()

    def action_page_up(self) -> None:
        self.pause()
        super().action_page_up()

    def action_scroll_home(self) -> None:
        self.pause()
        super().action_scroll_home()


def compact_line(line: str, rec: Record | None) -> str:
    """A log line reduced to what matters (time, bs, tok/s, accept len as "acc"), from the
    record the session parsed it into; a vLLM spec line to its counts and the accept length
    of the interval it joins ("acc": on this line, which vLLM prints after the engine line, so
    it never depends on whether both arrived before a redraw); other lines unchanged."""
    if isinstance(rec, VllmEventRecord) and rec.kind == "spec":
        length = rec.joined_accept_len  # as joined onto its engine line's interval
        tail = f" · acc {length:.2f}" if length is not None else ""
        acc, dra = rec.data.get("accepted"), rec.data.get("drafted")
        if acc is not None and dra is not None:
            return f"{_time(rec)} drafts: {acc} accepted of {dra}{tail}"
        tot_a, tot_d = rec.data.get("accepted_total"), rec.data.get("drafted_total")
        if tot_a is not None and tot_d is not None:  # V0: since the server started
            return f"{_time(rec)} drafts since start: {tot_a} accepted of {tot_d}{tail}"
    if not isinstance(rec, BatchRecord):
        return plain(redact_text(line))
    ts = _time(rec)
    dp = f" DP{rec.dp_rank}" if rec.dp_rank is not None else ""
    if rec.kind == "decode":
        out = (f"{ts}{dp} bs {num(rec.running_req, '{}')} "
               f"{num(rec.gen_throughput, '{:.1f}')} tok/s")
        if rec.accept_len is not None and not isinstance(rec, VllmDecodeRecord):
            out += f" acc {rec.accept_len:.2f}"  # (vLLM's: on its spec line, drawn with it)
        if rec.queue_req:
            out += f" queue {rec.queue_req}"
        if rec.cuda_graph is False:
            out += " no cuda graph"
        return out
    return (f"{ts}{dp} prefill new {num(rec.new_token, '{}')} cached "
            f"{num(rec.cached_token, '{}')} queue {num(rec.queue_req, '{}')}")


def _time(rec: BatchRecord | EventRecord) -> str:
    """The record's time of day as the server printed it."""
    return rec.timestamp[11:] if rec.timestamp and len(rec.timestamp) > 11 else (
        rec.timestamp or rec.time_of_day or "--:--:--")


class LogView(Vertical):
    """A sticky tail: scrolling up pauses it, End resumes, a badge counts what arrived since.

    Compact mode (the default, `c` toggles) shows decode and prefill lines as their fields, so a
    line is never cut before `gen throughput`; `l` shows the log full screen.
    """

    DEFAULT_CLASSES = "logview"
    ALLOW_MAXIMIZE = True  # `l` (it is not focusable itself: its Log is)
    BINDINGS = bindings("log")  # log.* (specmon/keymap.py): while its log or filter has focus
    filter_text: reactive[str] = reactive("")

    def __init__(self, server: str, *, id: str | None = None, compact: bool = True) -> None:
        super().__init__(id=id)
        self.server = server
        self.new_while_paused = 0
        self.filled = False
        self.compact = compact
        self._lines: Sequence[str] = ()
        self._records: Sequence[Record | None] = ()

    def compose(self) -> ComposeResult:
        yield Input(placeholder="filter (plain text)", id=f"filter-{safe_id(self.server)}",
                    classes="filter")
        yield StickyLog(max_lines=5000, auto_scroll=True, id=f"log-{safe_id(self.server)}")
        yield Static("", classes="badge", id=f"badge-{safe_id(self.server)}")

    @property
    def log_widget(self) -> StickyLog:
        return self.query_one(StickyLog)

    @property
    def following(self) -> bool:
        log = self.log_widget
        return log.auto_scroll

    def on_mount(self) -> None:
        self.query_one(Input).display = False
        self.set_class(self.compact, "-compact")

    def set_source(self, state: ServerState) -> None:
        """The server's kept lines and the records the session parsed them into."""
        self._lines, self._records = state.log, state.log_records

    def set_compact(self, compact: bool) -> None:
        if compact != self.compact:
            self.compact = compact
            self.set_class(compact, "-compact")
            if self.is_mounted:
                self.refill()

    def _matches(self, line: str) -> bool:
        return not self.filter_text or self.filter_text.lower() in line.lower()

    def _show(self, line: str, rec: Record | None) -> str:
        return compact_line(line, rec) if self.compact else plain(redact_text(line))

    def append(self, items: Sequence[tuple[str, Record | None]]) -> None:
        lines = [self._show(x, rec) for x, rec in items if self._matches(x)]
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
        self.log_widget.pause()

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
        records = self._records if len(self._records) == len(self._lines) else \
            [None] * len(self._lines)  # (a state built without records: raw lines)
        log.write_lines([self._show(x, rec) for x, rec in zip(self._lines, records, strict=True)
                         if self._matches(x)], scroll_end=False)
        if log.auto_scroll:
            log.scroll_end(animate=False, immediate=True, x_axis=False)
        self.new_while_paused = 0
        self._update_badge()

    # --- its keys (the server panel around it forwards them while the panel has focus) ------

    def action_filter(self) -> None:
        box = self.query_one(Input)
        box.display = True
        box.focus()

    def action_clear_filter(self) -> None:
        box = self.query_one(Input)
        box.value = ""
        box.display = False
        self.filter_text = ""

    def action_pause(self) -> None:
        self.pause()

    def action_follow(self) -> None:
        self.resume()

    def action_toggle_log_full(self) -> None:
        """This log alone on the screen (Textual's maximize), and back."""
        if self.screen.maximized is not None:
            self.screen.minimize()
        elif self.screen.maximize(self, container=False):
            self.log_widget.focus()  # the keys (l again, p, /, End) stay with this log

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.filter_text = event.value

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.log_widget.focus()
