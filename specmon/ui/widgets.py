"""Widgets. Each refreshes from the session on the app's timer, never once per log line."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from rich.table import Table
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import Input, Log, Sparkline, Static

from specmon.parse.gpu import GpuSample, is_clock_limited
from specmon.session.speedup import SpeedupView, format_speedup
from specmon.session.state import ServerState
from specmon.session.window import (
    MIN_N,
    Speedup,
    WindowStats,
    current_stats,
    recomputed_accept_rate,
    run_stats_text,
    window_points,
)
from specmon.ui.safe import plain

NA = "N/A"

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


def num(v: float | int | None, fmt: str = "{:.2f}") -> str:
    return NA if v is None else fmt.format(v)


class ServerSummary(Static):
    """The numbers of one server, each labelled with what it is."""

    def show(self, state: ServerState, now: float, window_s: float) -> None:
        t = Table.grid(padding=(0, 1), expand=True)
        t.add_column("what", ratio=4, no_wrap=True)
        t.add_column("value", ratio=2, justify="right", no_wrap=True)
        t.add_column("how", ratio=4, no_wrap=True, style="dim")
        last = state.last_decode
        bs = last.running_req if last else None
        stale = " (stale)" if state.stale else ""
        t.add_row("decode tok/s, last interval", num(last.gen_throughput if last else None),
                  f"decode-only, bs {num(bs, '{}')}{stale}")
        w: WindowStats | None = current_stats(state, now, window_s)
        run_txt = plain(run_stats_text(state, w))  # "run 3 since 14:02:11, n 4"
        if w is not None and w.n >= MIN_N:
            cv = f", CV {w.robust_cv * 100:.1f}%" if w.robust_cv is not None else ""
            t.add_row(f"median, last {window_s:.0f} s", num(w.median),
                      f"{run_txt}, bs {w.running_req}, p10–p90 {w.p10:.1f}–{w.p90:.1f}{cv}")
        else:
            t.add_row(f"median, last {window_s:.0f} s", NA,
                      f"{run_txt}: too few decode lines" if w is not None else
                      f"{run_txt}: no decode lines in window")
        if last is not None and last.running_req:
            t.add_row("ms/token per request", num(1000.0 * last.running_req / last.gen_throughput
                                                  if last.gen_throughput else None, "{:.1f}"),
                      "last interval")
        t.add_row("#running-req / #queue-req", f"{num(bs, '{}')} / "
                  f"{num(last.queue_req if last else None, '{}')}", "")
        t.add_row("#token / token usage",
                  f"{num(last.tokens if last else None, '{:,}')} / "
                  f"{num(last.token_usage if last else None)}", "KV pool")
        graph = NA
        if last is not None and last.cuda_graph is not None:
            graph = f"{last.cuda_graph} ({last.graph_kind})"
        t.add_row("graph replay", graph, "False: bs above cuda-graph-max-bs?")
        if state.is_speculative:
            al = last.accept_len if last else None
            t.add_row("accept len, last interval", num(al), "tokens per verify round, bonus incl.")
            med_al = w.accept_len if w else None
            t.add_row(f"accept len, median {window_s:.0f} s", num(med_al), "")
            ndt = state.num_draft_tokens
            rate = recomputed_accept_rate(med_al if med_al is not None else al, ndt)
            t.add_row("accept rate (recomputed)", num(rate),
                      f"(len-1)/(draft tokens-1), draft tokens {num(ndt, '{}')}")
        self.update(t)


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


class LogView(Vertical):
    """A sticky tail: scrolling up pauses it, End resumes, a badge counts what arrived since."""

    DEFAULT_CLASSES = "logview"
    filter_text: reactive[str] = reactive("")

    def __init__(self, server: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.server = server
        self.new_while_paused = 0
        self.filled = False
        self._source: Iterable[str] = ()

    def compose(self) -> ComposeResult:
        yield Input(placeholder="filter (plain text)", id=f"filter-{safe_id(self.server)}", classes="filter")
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

    def set_source(self, lines: Iterable[str]) -> None:
        self._source = lines

    def _matches(self, line: str) -> bool:
        return not self.filter_text or self.filter_text.lower() in line.lower()

    def append(self, lines: list[str]) -> None:
        lines = [plain(x) for x in lines if self._matches(x)]
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
        else:
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
        log.write_lines([plain(x) for x in self._source if self._matches(x)], scroll_end=False)
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


class ServerPanel(Vertical):
    """One server: status line, labelled numbers, throughput sparkline, its log."""

    host: str = ""  # which host's server (the app sets it: servers are keyed (host, server))

    DEFAULT_CLASSES = "server-panel"

    def __init__(self, server: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.server = server
        self.can_focus = True

    def compose(self) -> ComposeResult:
        yield Static("", classes="panel-title", id=f"title-{safe_id(self.server)}")
        yield Static("", classes="startup", id=f"startup-{safe_id(self.server)}")
        yield ServerSummary("", classes="summary", id=f"summary-{safe_id(self.server)}")
        yield Static("", classes="spark-label", id=f"sparklabel-{safe_id(self.server)}")
        yield Sparkline([], classes="spark", id=f"spark-{safe_id(self.server)}")
        yield LogView(self.server, id=f"logview-{safe_id(self.server)}")

    @property
    def log_view(self) -> LogView:
        return self.query_one(LogView)

    def refresh_from(self, state: ServerState, now: float, window_s: float) -> None:
        mark, cls = STATUS_MARK.get(state.status, STATUS_MARK["unknown"])
        role = state.role or "role unknown"
        title = Text()
        title.append(f"{mark} ", style="bold")
        title.append(plain(state.name), style="bold")
        title.append(f"  {role} · {state.status}")
        algo = state.args.get("speculative_algorithm")
        extras = []
        if state.args.get("tp_size"):
            extras.append(f"tp {state.args['tp_size']}")
        if algo:
            extras.append(f"{algo} steps {state.args.get('speculative_num_steps')} "
                          f"topk {state.args.get('speculative_eagle_topk')} "
                          f"draft {state.args.get('speculative_num_draft_tokens')}")
        if state.stale:
            extras.append("STALE")
        if extras:
            title.append("  (" + ", ".join(plain(str(e)) for e in extras) + ")", style="dim")
        title_w = self.query_one(".panel-title", Static)
        title_w.update(title)
        for c in STATUS_MARK.values():
            self.set_class(c[1] == cls, c[1])
        self.query_one(".startup", Static).update(_startup_text(state))
        self.query_one(ServerSummary).show(state, now, window_s)
        pts = window_points(state, now, max(window_s, 1.0) * 5)
        bs = state.last_decode.running_req if state.last_decode else None
        data = [p.rec.gen_throughput for p in pts  # finite only: Sparkline dies on NaN/inf
                if p.rec.gen_throughput is not None and p.rec.running_req == bs
                and math.isfinite(p.rec.gen_throughput)][-120:]
        self.query_one(Sparkline).data = data
        self.query_one(".spark-label", Static).update(
            f"decode tok/s at bs {num(bs, '{}')}, last {window_s * 5:.0f} s, n {len(data)}"
        )


def _startup_text(state: ServerState) -> Text:
    t = Text()
    if state.control_text:
        t.append(plain(state.control_text) + "\n", style="italic")
    if state.tail_status:  # why no line arrives: "no such file: ... (waiting)", a silent file
        t.append(plain(state.tail_status) + "\n", style="bold")
    audit = state.env_audit
    if audit is not None:
        problems = audit.problems()
        t.append(("env audit: " + "; ".join(problems)) if problems else
                 f"env audit: ok ({len(audit.workers)} workers read)", style="bold" if problems
                 else "dim")
        t.append("\n")
    bench = state.last_bench
    if bench is not None:
        t.append(plain(f"benchmark (end-to-end, c={bench.concurrency}, out={bench.output_len}, "
                       f"n={bench.completed}): {num(bench.output_tok_s, '{:.1f}')} tok/s, "
                       f"TTFT {num(bench.mean_ttft_ms, '{:.0f}')} ms, ITL "
                       f"{num(bench.mean_itl_ms, '{:.2f}')} ms, accept len "
                       f"{num(bench.accept_length)}") + "\n")
    if state.status == "crashed":
        t.append("crashed", style="bold")
        if state.exit_code is not None:
            t.append(f" (exit {state.exit_code})")
        if state.traceback:
            tb = state.traceback
            shown = tb if len(tb) <= 7 else [tb[0], "  …", *tb[-5:]]
            t.append("\n")
            for line in shown:
                t.append(plain(line) + "\n")
        return t
    if state.status != "starting":
        return t
    s = state.startup
    steps = [("args", s.server_args), ("KV cache", s.kv_allocated),
             ("CUDA graphs", s.graph_capture == "done"), ("ready", s.ready)]
    t.append("loading: ")
    for label, done in steps:
        t.append(("✔ " if done else "… ") + label + "  ")
    if s.graph_capture == "capturing" and s.graph_batch_sizes:
        t.append(f"capturing bs {s.graph_batch_sizes[0]}–{s.graph_batch_sizes[-1]}")
    return t


class SpeedupBar(Static):
    """spec ÷ baseline at the same #running-req, with its uncertainty and what it implies."""

    def show(self, sp: Speedup | None, have_both: bool, window_s: float,
             view: SpeedupView | None = None) -> None:
        t = Text()
        if view is not None:  # the honest line: current runs, drift, fingerprint differences
            sp = view.detail
            if view.value is None:
                t.append(plain(format_speedup(view)))
            else:
                assert sp is not None
                t.append("speedup  ", style="bold")
                t.append(plain(format_speedup(view)), style="bold")
                t.append(f"  (95% {sp.low:.2f}–{sp.high:.2f}, at bs {sp.running_req}, decode-only medians of "
                         f"the last {window_s:.0f} s of each run, n {sp.spec.n}/{sp.base.n})")
        elif not have_both:
            t.append("speedup N/A: needs one baseline and one speculative server")
        elif sp is None:
            t.append(f"speedup N/A: no batch size with ≥3 decode samples on both servers "
                     f"in the last {window_s:.0f} s")
        else:
            t.append("speedup  ", style="bold")
            t.append(f"{sp.ratio:.3f}×", style="bold")
            t.append(f" (95% {sp.low:.3f}–{sp.high:.3f})")
            t.append(f"  at bs {sp.running_req}: spec {sp.spec.median:.1f} / base "
                     f"{sp.base.median:.1f} tok/s, medians, decode-only, last {window_s:.0f} s, "
                     f"n {sp.spec.n}/{sp.base.n}")
        if sp is not None:
            t.append(f"\nms/token {sp.spec_ms_per_token:.1f} spec vs {sp.base_ms_per_token:.1f} "
                     f"base")
            cyc = sp.verify_cycle_ms
            be = sp.break_even_accept_len
            if cyc is not None and be is not None:
                t.append(f" · implied verify cycle {cyc:.1f} ms · break-even accept len {be:.2f}"
                         f" (now {sp.spec.accept_len:.2f})")
        self.update(t)


class GpuPanel(Static):
    """Per-GPU clocks, reasons, thermals and power, with short SM-clock and power trends.

    A row is marked when its SM clock is under 90% of max while a server decodes: that is when a
    clock limit costs tokens. Reasons other than GpuIdle are highlighted.
    """

    def show(self, gpus: list[Any], history: dict[int, Any], error: str | None,
             decoding: bool = False, extra: list[tuple[str, Any, list[Any]]] = ()) -> None:
        """`extra`: (host, sample, its history) of GPUs on other nodes of a multi-node server."""
        if error and not gpus:
            self.update(Text(f"no GPU telemetry: {plain(error)}"))
            return
        if not gpus:
            self.update(Text("GPUs: N/A (no samples yet)"))
            return
        t = Table(expand=True, box=None, padding=(0, 1), header_style="bold")
        for col in ("GPU", "SM MHz", "max", "clock reasons", "°C", "HBM °C", "W", "limit W",
                    "util %", "mem MiB", "SM clock (last 30)", "power (last 30)"):
            t.add_column(col, no_wrap=True)
        rows = [(None, g, list(history.get(g.index, []))) for g in gpus] + list(extra)
        for host, g, hist in rows:
            reasons = g.reasons if g.clocks_event_reasons is not None else None
            busy = [r for r in reasons or () if r != "GpuIdle"]
            reasons_txt = Text(",".join(reasons) if reasons else
                               ("none" if reasons is not None else NA),
                               style="bold" if busy else "dim")
            limited = decoding and _clock_limited(g)
            hist = hist[-30:]
            mark = "▶ " if limited else ""
            label = num(g.index, "{}") if host is None else f"{plain(host)}:{num(g.index, '{}')}"
            t.add_row(
                f"{mark}{label}", num(g.clock_sm, "{}"), num(g.max_clock_sm, "{}"),
                reasons_txt, num(g.temp_gpu, "{:.0f}"), num(g.temp_mem, "{:.0f}"),
                num(g.power_w, "{:.0f}"), num(g.power_limit_w, "{:.0f}"),
                num(g.util_gpu, "{:.0f}"), num(g.mem_used_mib, "{:,.0f}"),
                _mini_spark([h.clock_sm for h in hist]), _mini_spark([h.power_w for h in hist]),
                style="reverse" if limited else "",
            )
        if error:
            t.caption = plain(error)
        self.update(t)


def _clock_limited(g: Any) -> bool:
    return isinstance(g, GpuSample) and is_clock_limited(g)


_BARS = "▁▂▃▄▅▆▇█"


def _mini_spark(vals: list[float | None]) -> str:
    xs = [v for v in vals if v is not None]
    if not xs:
        return NA
    lo, hi = min(xs), max(xs)
    span = (hi - lo) or 1.0
    return "".join(" " if v is None else _BARS[int((v - lo) / span * 7)] for v in vals)


class HostsPanel(Static):
    """One summary row per host (several hosts in one session): state, servers, alerts, GPUs."""

    def show(self, rows: list[Any]) -> None:
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
