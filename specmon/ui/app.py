"""The Textual app: baseline and speculative servers side by side, speedup, GPUs, logs.

The app does not know where data comes from: a feed (demo, SSH connect, replay) calls a sink
that applies each event to the session model directly (the feed runs on the app's loop) and
posts one replaceable "session changed" message; what the UI does about an event comes from
the session's listeners (lines, notices, alerts). Widgets refresh from the session on a timer
at a few Hz, so 1,000 log lines per second per server cost a handful of repaints.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from rich.markup import escape
from textual import events
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.content import Content
from textual.css.query import NoMatches
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Header, Static, TabbedContent, TabPane
from textual.worker import Worker

from specmon.analysis.drift import Alert
from specmon.control.server import ServerControls
from specmon.keymap import ACTIONS, GROUPS
from specmon.parse.sglang import Record
from specmon.redact import redact_fingerprint
from specmon.resources import stylesheet
from specmon.session.baselines import Baseline, BaselineStore, StoreError
from specmon.session.drift_watch import alert_lines
from specmon.session.events import Feed, FeedSink, LineItem
from specmon.session.fleet import FleetSession
from specmon.session.state import HostState
from specmon.session.window import DEFAULT_WINDOW_S
from specmon.ui.advisor_screen import AdvisorKeys
from specmon.ui.chart import METRICS, ThroughputChart, chart_model
from specmon.ui.control_keys import ConfirmScreen, ServerControl
from specmon.ui.headline import HeadlineModel, headline_model
from specmon.ui.keys import bindings
from specmon.ui.safe import plain, plain_lines
from specmon.ui.snapshot_keys import SnapshotKeys
from specmon.ui.widgets import (
    BigFigure,
    DriftPanel,
    GpuPanel,
    HostsPanel,
    Lines,
    LogView,
    ServerPanel,
    SpeedupBar,
    fit,
    safe_id,
)

if TYPE_CHECKING:
    from specmon.export.prometheus import MetricsServer
    from specmon.hosts.base import Host

WINDOWS_S = (30.0, 60.0, 300.0)

HELP_INTRO = """\
[b]specmon[/b] — live, honest numbers for speculative decoding on SGLang

[b]What the numbers are[/b]
• [b]decode tok/s[/b] is SGLang's own [i]gen throughput (token/s)[/i]: decode-only, one value per \
log interval (40 decode steps by default), idle and prefill time inside the interval included. \
It is not a benchmark's end-to-end tok/s, which includes prefill.
• [b]Medians[/b] are over the window shown (w cycles 30 s / 60 s / 300 s) at the server's current \
#running-req (batch size, "bs"); n and the p10–p90 spread are always shown.
• [b]speedup[/b] = speculative ÷ baseline median at the [i]same[/i] bs; the 95% interval comes \
from both medians' standard errors. Green: speculation wins (the interval is above 1), red: it \
loses, yellow: the interval holds 1. N/A when no batch size has ≥3 samples on both servers.
• [b]DRIFT[/b] beside a server compares it with its recorded baseline (b records one); the first \
likely cause is shown under it.
• [b]accept rate[/b] is recomputed as (accept len − 1) / (draft tokens − 1), because SGLang \
changed the printed rate's definition twice.
• N/A means specmon did not measure it; it never shows a guess.
"""

class HelpScreen(ModalScreen[None]):
    BINDINGS = bindings("help")

    def __init__(self, keys: str) -> None:
        super().__init__()
        self.keys = keys

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(HELP_INTRO + "\n" + self.keys + "\n[dim]escape, q or ? closes "
                         "this help[/dim]", id="help-text")


class SessionChanged(Message):
    """A feed event was applied to the session model; one waits in the queue at a time (a
    newer one replaces it): the handler redraws once for a burst of events."""

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, SessionChanged)


class _AppSink:
    """The TUI's FeedSink: each event is the session model's method of the same name, applied
    directly (the feed runs on the app's own loop), then one replaceable `SessionChanged`.

    A new feed event needs no code here: the protocol (session/events.py) and the session
    (`FleetSession`) are its two edits; what the UI does about it comes from the session's
    listeners (lines, notices, alerts) and from the redraw."""

    def __init__(self, app: SpecmonApp) -> None:
        self._app = app

    def __getattr__(self, name: str) -> Callable[..., None]:
        apply = getattr(self._app.fleet, name)

        def event(*args: Any, **kwargs: Any) -> None:
            apply(*args, **kwargs)
            self._app.post_message(SessionChanged())

        return event


ServerKey = tuple[str, str]


def _redact_baseline(b: Baseline) -> None:
    b.fingerprint = redact_fingerprint(b.fingerprint)  # the store keeps no secret


class SpecmonApp(App[None]):
    """The one app of every path (connect 1..N hosts, demo, replay): built on the session
    model (`FleetSession`; a plain `HostState` is a fleet of one), fed by one `Feed`.

    Its key groups are objects it holds (server control, export, advisor); its `action_*`
    methods delegate to them (Textual runs actions on the app or the focused widget)."""

    CSS_PATH = str(stylesheet())
    TITLE = "specmon"
    BINDINGS = bindings("app")  # from the action table (specmon/keymap.py), remappable by id
    # window sizes at which parts appear (issue 15): the chart from 160x48, logs from 28 rows
    CHART_MIN = (160, 48)

    def __init__(self, session: FleetSession | HostState, feed: Feed | None = None, *,
                 window_s: float = DEFAULT_WINDOW_S, refresh_hz: float = 4.0,
                 keymap: dict[str, str] | None = None, clock: Callable[[], float] = time.time,
                 show_clock: bool = True, export_dir: Path | None = None,
                 baseline_store: BaselineStore | None = None,
                 actions: Mapping[ServerKey, ServerControls] | None = None,
                 title: str | None = None, store_note: str | None = None,
                 metrics_server: MetricsServer | None = None, hosts: Sequence[Host] = (),
                 startup_warnings: Sequence[str] = ()) -> None:
        super().__init__()
        self.fleet = session if isinstance(session, FleetSession) else \
            FleetSession.of(session, clock=clock)
        if baseline_store is not None:
            self.fleet.store = baseline_store
        self.fleet.prepare_baseline = _redact_baseline  # the store keeps no secret
        self.feed = feed
        self.window_s = window_s
        self.refresh_hz = refresh_hz
        self._keymap = keymap or {}
        self.clock = clock
        self.show_clock = show_clock
        self.control = ServerControl(self, actions or {})
        self.control_status = self.control.status  # the panels' control status lines
        self.snapshot_keys = SnapshotKeys(self, export_dir or Path.cwd())
        self.advisor_keys = AdvisorKeys(self)
        self._panel_focused = False  # the first panel got the focus once (_default_focus)
        self._pending: dict[ServerKey, list[tuple[str, Record | None]]] = {}
        self._panels: dict[ServerKey, ServerPanel] = {}
        self._feed_worker: Worker[None] | None = None
        self._multi = len(self.fleet.hosts) > 1
        self.metrics_server = metrics_server  # what the command opened (it closes them)
        self.hosts = list(hosts)
        self.startup_warnings = list(startup_warnings)  # toasts on mount (no drift watching)
        self.lines_received = 0
        self.sink: FeedSink = cast(FeedSink, _AppSink(self))  # what the feed is given
        self.refreshes = 0
        self.chart_metric = METRICS[0]
        self._refresh_requested = False
        self._chart_sig: object = None
        self.compact_logs = True
        self.sub_title = plain(title or ", ".join(self.fleet.hosts))
        self.store_note = store_note  # e.g. the demo's "temporary store, deleted at exit"
        self.status_text: tuple[str, str] | None = None  # (the newest notification, severity)
        self._status_timer: Any = None

    @property
    def window_s(self) -> float:
        """The session's one window: panels, headline, chart, the "pays" alert and /metrics
        all read it (`w` sets it)."""
        return self.fleet.window_s

    @window_s.setter
    def window_s(self, value: float) -> None:
        self.fleet.window_s = value

    def notify(self, message: str, *, title: str = "", severity: Any = "information",
               timeout: float | None = None, markup: bool = True) -> None:
        """One line in the status area under the headline, replaced by the next (no toast over
        the panels: at 80x24 a toast hid the speculative panel's numbers). The text passes
        `plain`: it may hold a host's or a file's words."""
        lines = [x.strip() for x in plain_lines(message).splitlines() if x.strip()]
        text = " · ".join(([plain(title)] if title else []) + lines)
        self.status_text = (text, str(severity))
        self._show_status()
        if self._status_timer is not None:
            self._status_timer.stop()
        wait = timeout if timeout is not None else 6.0
        self._status_timer = self.set_timer(wait, self._clear_status) if self.is_running else None

    def _clear_status(self) -> None:
        self.status_text = None
        self._status_timer = None
        self._show_status()

    def _show_status(self) -> None:
        try:
            line = self.query_one("#status", Lines)
        except NoMatches:
            return
        if self.status_text is None:
            line.display = False
            return
        text, severity = self.status_text
        style = {"error": "bold $error", "warning": "bold $warning"}.get(severity, "")
        line.display = True
        line.put([(fit(text, line.avail) or text[:line.avail], style)])

    @property
    def session(self) -> HostState:
        """The shown host's HostState (the only one with a single host): export, control."""
        host = self.active_host()
        if host is None:
            host = next(iter(self.fleet.hosts), "local")
        return self.fleet.host(host).session

    def server_label(self, key: ServerKey) -> str:
        """How a server is named to the user: its name, with its host when there are several."""
        return f"{key[0]}/{key[1]}" if self._multi else key[1]

    # --- layout -------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header(show_clock=self.show_clock)
        yield Static("", id="connection")
        yield Lines("", id="status")
        with Horizontal(id="headline"):
            yield BigFigure("", id="speedup-big")
            yield SpeedupBar("", id="speedup")
            yield DriftPanel("", id="alerts")
        if self._multi:
            yield HostsPanel("", id="hosts")
            # one tab per host; its servers go in its pane
            with TabbedContent(id="host-tabs"):
                for i, host in enumerate(self.fleet.hosts):
                    with TabPane(Content(plain(host)), id=f"tab-{i}"):  # not markup
                        yield Horizontal(id=f"servers-{i}", classes="servers")
        else:
            yield Horizontal(id="servers", classes="servers")
        yield ThroughputChart(id="chart")
        with VerticalScroll(id="gpu-box"):
            yield GpuPanel("", id="gpus")
        yield Footer()

    def on_resize(self, event: events.Resize) -> None:
        self._apply_size(event.size.width, event.size.height)

    PANEL_MIN_W = 40

    def _fit_panels(self, width: int | None = None) -> None:
        """Panels share the width while each gets PANEL_MIN_W columns; beyond that they keep
        that width and the row scrolls (fr units would give each the whole viewport there)."""
        width = width or self.size.width
        for box in self.query(".servers"):
            panels = [p for p in box.children if isinstance(p, ServerPanel)]
            fixed = len(panels) * self.PANEL_MIN_W > width
            for p in panels:
                want = f"{self.PANEL_MIN_W}" if fixed else "1fr"
                if str(p.styles.width) != want:
                    p.styles.width = want

    def _apply_size(self, width: int, height: int) -> None:
        """Responsive layout through classes on the app: TCSS says what each size shows."""
        self._fit_panels(width)
        self.set_class(width >= self.CHART_MIN[0] and height >= self.CHART_MIN[1], "-chart")
        self.set_class(height < 30, "-short")
        self.set_class(width < 100, "-narrow")
        with contextlib.suppress(NoMatches):
            footer = self.query_one(Footer)
            footer.compact = width < 130
            footer.show_command_palette = width >= 100

    def on_mount(self) -> None:
        if self._keymap:
            self.set_keymap(self._keymap)  # the config's [keys], ids checked when it was read
        self._apply_size(self.size.width, self.size.height)
        self._show_status()  # a message from before the first frame
        for host, st in self.fleet.servers():
            self._ensure_panel(host, st.name)
        self.fleet.alert_listeners.append(self._alert_changed)
        self.fleet.record_listeners.append(self._line_applied)
        self.fleet.notice_listeners.append(self._notice)
        self.set_interval(1.0 / self.refresh_hz, self.refresh_view)
        self.set_interval(1.0, self.drift_tick)
        if self.feed is not None:
            self._feed_worker = self.run_worker(self.feed.run(self.sink), name="feed",
                                                group="feed", exit_on_error=False)
        self.refresh_view()
        for note in self.startup_warnings:  # e.g. a broken baseline store: no drift watching
            self.notify(note, severity="warning", markup=False, timeout=30)

    async def stop_feed(self) -> None:
        """Cancel the feed and wait for its cleanup (it stops what it started)."""
        worker, self._feed_worker = self._feed_worker, None
        if worker is None:
            return
        worker.cancel()
        with contextlib.suppress(Exception):
            await worker.wait()

    async def action_quit(self) -> None:
        busy = sorted(set(self.control.busy.values()))
        if busy:  # quitting ends it half-way: a swap leaves the server it stopped down
            def answered(yes: bool | None) -> None:
                if yes:
                    self.run_worker(self._quit_now(), group="quit", exclusive=True)

            self.push_screen(ConfirmScreen(
                f"{'; '.join(busy)} is in progress. Quitting ends it half-way (a swap leaves "
                "the server it stopped down). Quit anyway?"), answered)
            return
        await self._quit_now()

    async def _quit_now(self) -> None:
        await self.stop_feed()
        self.exit()

    async def on_unmount(self) -> None:
        for listeners, fn in ((self.fleet.alert_listeners, self._alert_changed),
                              (self.fleet.record_listeners, self._line_applied),
                              (self.fleet.notice_listeners, self._notice)):
            with contextlib.suppress(ValueError):
                listeners.remove(fn)  # type: ignore[arg-type]
        await self.stop_feed()

    def _ensure_panel(self, host: str, name: str) -> ServerPanel | None:
        key = (host, name)
        panel = self._panels.get(key)
        if panel is not None:
            return panel
        try:
            container = self.query_one(self._container_for(host), Horizontal)
        except NoMatches:  # the app is shutting down
            return None
        pid = f"panel-{safe_id(name)}" if not self._multi else f"panel-{safe_id(host + '/' + name)}"
        panel = self._panels[key] = ServerPanel(name, host=host, id=pid)
        state = self.fleet.server(host, name)
        # baseline on the left, speculative on the right
        if state.role == "baseline" and container.children:
            container.mount(panel, before=0)
        else:
            container.mount(panel)
        self._fit_panels()
        self.call_after_refresh(self.refresh_view)
        return panel

    def _container_for(self, host: str) -> str:
        if not self._multi:
            return "#servers"
        hosts = list(self.fleet.hosts)
        return f"#servers-{hosts.index(host) if host in hosts else 0}"

    def active_host(self) -> str | None:
        """The host of the selected tab (several hosts), else the only host."""
        hosts = list(self.fleet.hosts)
        if not self._multi:
            return hosts[0] if hosts else None
        try:
            active = self.query_one("#host-tabs", TabbedContent).active
        except NoMatches:
            return hosts[0] if hosts else None
        if active and active.startswith("tab-") and active[4:].isdigit():
            i = int(active[4:])
            return hosts[i] if i < len(hosts) else None
        return hosts[0] if hosts else None

    def _other_node_gpus(self, host: str) -> list[tuple[str, Any, list[Any]]]:
        """GPUs on other hosts of the multi-node servers whose node 0 is `host`."""
        out: list[tuple[str, Any, list[Any]]] = []
        for ls in self.fleet.logical_servers():
            if ls.host != host or not ls.multi_node:
                continue
            for h, g in self.fleet.server_gpus(ls):
                if h != host:
                    hist = list(self.fleet.host(h).session.gpu_history.get(g.index, []))
                    out.append((h, g, hist))
        return out

    def panels(self) -> list[ServerPanel]:
        return [p for p in self._panels.values() if p.is_mounted]

    # --- the session model changed: its listeners and one redraw ----------------------------

    def on_session_changed(self, _msg: SessionChanged) -> None:
        """New servers get their panel (the widgets read the rest at the next refresh)."""
        for host, st in self.fleet.servers():
            if (host, st.name) not in self._panels:
                self._ensure_panel(host, st.name)

    def _line_applied(self, host: str, server: str, item: LineItem) -> None:
        """A record listener: the line goes to its panel's log at the next refresh."""
        self._pending.setdefault((host, server), []).append((item.text, item.record))
        self.lines_received += 1

    def _notice(self, host: str, server: str, text: str) -> None:
        who = host if server == "*" else self.server_label((host, server))
        if self.store_note and text.startswith("baseline recorded"):
            text += f"; {self.store_note}"  # where it went (the demo's store is temporary)
        self.notify(f"{who}: {text}", markup=False)

    # --- periodic refresh ---------------------------------------------------------------------

    def request_refresh(self) -> None:
        """A refresh after the current layout (a resize); several requests make one."""
        if not self._refresh_requested:
            self._refresh_requested = True
            self.call_after_refresh(self._requested_refresh)

    def _requested_refresh(self) -> None:
        self._refresh_requested = False
        self.refresh_view()

    def refresh_view(self) -> None:
        try:
            self._refresh_view()
        except NoMatches:  # a refresh racing the app's shutdown
            pass

    def connection_text(self) -> str:
        """'connected', or each host that is not, with its countdown and why (and a connected
        host with no server to show says its last notice, e.g. nothing found to tail)."""
        down = []
        for h, hv in self.fleet.hosts.items():
            if not hv.stale:
                if not hv.session.servers and hv.notices:
                    down.append(f"{h}: {hv.notices[-1]}")
                continue
            text = f"{h}: {hv.state.describe()}"
            if hv.state.state == "reconnecting" and hv.state.reason:
                text += f" ({hv.state.reason}; last values kept, marked stale)"
            down.append(text)
        return "; ".join(down) if down else "connected"

    def _default_focus(self) -> None:
        """A server's keys (control, baseline, log) live on its panel: the leftmost panel gets
        the focus once, when it appears (Textual focused the first focusable widget before any
        panel existed); after that the user moves it (tab)."""
        if self._panel_focused or len(self.screen_stack) != 1:
            return
        first = next(iter(self.query(ServerPanel)), None)
        if first is not None and first.is_mounted:
            first.focus()
            self._panel_focused = True

    def _refresh_view(self) -> None:
        self._default_focus()
        now = self.clock()
        self.refreshes += 1
        host = self.active_host()
        hs = self._host_session(host)
        base = hs.by_role("baseline")  # like with like: the same host's servers
        spec = hs.by_role("speculative")
        recorded = self._recorded(host)
        for panel in self.panels():
            key = (panel.host, panel.server)
            state = self.fleet.server(*key)
            pending = self._pending.pop(key, None)
            view = panel.log_view
            if not self._visible(panel):
                # scrolled out of view (many servers): no work; its log refills when it shows
                view.filled = False
                continue
            rec = recorded.get(panel.server, (None,))[0] if panel.host == host else None
            panel.refresh_from(state, now, self.window_s, rec, self.control_status.get(key))
            view.set_source(state)
            if not view.filled:
                view.refill()  # a panel mounted after lines arrived starts with what is kept
            elif pending:
                view.append(pending)
            view.keep_following()
        self._show_headline(host, base, spec, now)
        chart = self.query_one(ThroughputChart)
        if chart.display and self.has_class("-chart"):
            shown = [s for s in (base, spec) if s is not None]
            # the model is rebuilt only when a decode line arrived or a setting changed
            sig = (tuple((s.name, s.decode_total) for s in shown), self.chart_metric,
                   self.window_s, tuple(sorted(recorded.items())), chart.size)
            if sig != self._chart_sig:
                self._chart_sig = sig
                span = max(self.window_s * 10, 600.0)
                chart.show(chart_model(shown, self.chart_metric, now, self.window_s, span,
                                       recorded))
        decoding = any(st.last_line_t is not None and st.decode
                       and now - (st.decode[-1].received or st.decode[-1].t) < 15
                       for st in hs.servers.values())
        servers = sorted(hs.servers.values(),
                         key=lambda st: {"baseline": 0, "speculative": 1}.get(st.role or "", 2))
        self.query_one(GpuPanel).show(hs.gpus, hs.gpu_history, hs.gpu_error, decoding,
                                      self._other_node_gpus(host) if self._multi and host else (),
                                      servers=servers)
        if self._multi:
            self.query_one(HostsPanel).show(self.fleet.summary(now))
        conn = self.query_one("#connection", Static)
        text = self.connection_text()
        if conn.display != (text != "connected"):
            conn.display = text != "connected"
        if text != "connected" and str(conn.content) != plain(text):
            conn.update(plain(text))

    def _visible(self, widget: Any) -> bool:
        """On screen now: the refresh cost follows the visible panels, not the tailed logs."""
        if not widget.display or widget.parent is None:
            return False
        shown = self.screen.maximized
        if shown is not None:  # `l`: only the maximized log is on screen
            return isinstance(widget, ServerPanel) and shown is widget.log_view
        try:
            container = widget.parent
            box = container.scrollable_content_region if hasattr(
                container, "scrollable_content_region") else container.region
            r = widget.region
        except NoMatches:
            return False
        return r.area > 0 and box.overlaps(r)

    def _host_session(self, host: str | None) -> HostState:
        return self.fleet.host(host).session if host is not None else HostState()

    def shown_watches(self, host: str | None) -> dict[str, Any]:
        """The shown host's drift watches, by server name."""
        return {s: w for (h, s), w in self.fleet.watches.items() if h == host}

    def _recorded(self, host: str | None) -> dict[str, tuple[float | None, float | None]]:
        """server -> (decode tok/s, accept len) medians of its recorded baseline."""
        out: dict[str, tuple[float | None, float | None]] = {}
        for server, w in self.shown_watches(host).items():
            best = w.baseline.stats.best()
            if best is not None:
                out[server] = (best.median_thr, best.median_accept)
        return out

    def headline(self) -> HeadlineModel:
        """The headline's model right now (tests read it; the widgets render it)."""
        host = self.active_host()
        hs = self._host_session(host)
        return headline_model(hs, hs.by_role("baseline"), hs.by_role("speculative"),
                              self.shown_watches(host), self.clock(), self.window_s)

    def _baseline_hint(self) -> tuple[str | None, str]:
        """(the server `b` acts on now: the focused panel's, or the host's baseline; "b records
        this run as the baseline", with the key as bound now (the config's remap) and where the
        recording goes). The headline says it under that server only: under another one,
        "this run" would name a run that `b` does not record. Nothing in a replay."""
        if self.check_action("record_baseline", ()) is False:
            return None, ""
        target = self.focused_server()
        act = next(a for a in ACTIONS if a.id == "baseline.record")
        key = self._keymap.get("baseline.record", act.key).split(",")[0].strip()
        where = f" ({self.store_note})" if self.store_note else ""
        return (target[1] if target is not None and target[0] == self.active_host() else None,
                f"{self.get_key_display(Binding(key, act.action))} records this run as the "
                f"baseline{where}")

    def _show_headline(self, host: str | None, base: Any, spec: Any, now: float) -> None:
        model = headline_model(self._host_session(host), base, spec, self.shown_watches(host), now,
                               self.window_s)
        rows = 3 if self.has_class("-short") and not self.has_class("-narrow") else 4
        self.query_one(BigFigure).show(model)
        self.query_one(SpeedupBar).show(model, rows)
        self.query_one(DriftPanel).show(model, rows, *self._baseline_hint())

    # --- baselines and drift (the session model owns them; the UI shows and stores) -----------

    @property
    def baseline_store(self) -> BaselineStore:
        if self.fleet.store is None:
            self.fleet.store = BaselineStore.open_default()
        store = self.fleet.store
        assert isinstance(store, BaselineStore)
        return store

    def record_baseline(self, host: str, server: str) -> None:
        """Record the server's current run as its baseline, store it, and watch for drift:
        the session model's `request_baseline` (its result comes back as a notice)."""
        try:
            _ = self.baseline_store  # the default store, unless one was given
        except StoreError as exc:  # a broken store: one line, monitoring goes on
            self.notify(f"baseline not saved: {exc}", severity="error", markup=False)
            return
        self.fleet.request_baseline(host, server)

    def drift_tick(self) -> None:
        now = self.clock()
        self.fleet.tick(now)  # drift and "no longer pays": changes come back via _alert_changed
        self._show_alerts()

    def _alert_changed(self, host: str, server: str, alert: Alert) -> None:
        if not self.fleet.should_notify(host, server, alert):
            return  # the same alert with refreshed causes: the banner shows it
        name = self.server_label((host, server))
        if alert.cleared:
            self.notify(f"{name}: cleared: {alert.text}", markup=False)
        else:
            sev: Literal["information", "warning", "error"] = (
                "error" if alert.level == "critical" else
                "warning" if alert.level == "warning" else "information")
            self.notify("\n".join(alert_lines(name, alert)), severity=sev, markup=False,
                        timeout=10)

    def _show_alerts(self) -> None:
        """Alerts are part of the headline (no banner over the logs): redraw it now."""
        try:
            host = self.active_host()
            hs = self._host_session(host)
            self._show_headline(host, hs.by_role("baseline"), hs.by_role("speculative"),
                                self.clock())
        except NoMatches:
            return

    def focused_server(self) -> ServerKey | None:
        node = self.focused
        while node is not None:
            if isinstance(node, ServerPanel):
                return (node.host, node.server)
            node = node.parent  # type: ignore[assignment]
        host = self.active_host()
        base = self.fleet.host(host).session.by_role("baseline") if host is not None else None
        return (host, base.name) if host is not None and base is not None else None

    def action_record_baseline(self) -> None:
        key = self.focused_server()
        if key is None:
            self.notify("focus a server panel first (tab)", severity="warning")
            return
        self.record_baseline(*key)

    # --- actions ------------------------------------------------------------------------------

    def _focused_view(self) -> LogView | None:
        node = self.focused
        while node is not None:
            if isinstance(node, ServerPanel):
                return node.log_view
            if isinstance(node, LogView):
                return node
            node = node.parent  # type: ignore[assignment]
        panels = self.panels()
        return panels[0].log_view if panels else None

    def help_keys(self) -> str:
        """Key groups for the help, from the action table: readable key names ("?", "/",
        "esc"), the config's remaps, only keys that work here (a replay drops the control
        keys)."""
        out = []
        for group in GROUPS:
            rows = []
            for a in ACTIONS:
                if a.group != group or a.target not in ("app", "panel", "log", "replay",
                                                        "builtin"):
                    continue
                if self.check_action(a.action, ()) is False:
                    continue
                keys = self._keymap.get(a.id, a.key) if a.id is not None else a.key
                shown = ", ".join(dict.fromkeys(
                    self.get_key_display(Binding(k.strip(), a.action)) for k in keys.split(",")))
                rows.append((shown, a.help))
            if not rows:
                continue
            out.append(f"[b]{group}[/b]")
            out.extend(f"  [b]{escape(k):<10}[/b] {what}" for k, what in rows)
            out.append("")
        return "\n".join(out)

    # the key groups' actions, on their objects
    def action_server_start(self) -> None:
        self.control.start()

    def action_server_stop(self) -> None:
        self.control.stop()

    def action_server_restart(self) -> None:
        self.control.restart()

    def action_server_swap(self) -> None:
        self.control.swap()

    def action_server_bench(self) -> None:
        self.control.bench()

    def action_export_snapshot(self) -> None:
        self.snapshot_keys.export()

    def action_screenshot(self, filename: str | None = None, path: str | None = None) -> None:
        """An SVG screenshot into the export folder (App's signature; both are ignored)."""
        self.snapshot_keys.screenshot()

    def action_advisor(self) -> None:
        self.advisor_keys.show()

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.help_keys()))

    def action_toggle_log_full(self) -> None:
        """(The palette's way in; the key lives on the log view and its panel.)"""
        if self.screen.maximized is not None:
            self.screen.minimize()
            return
        view = self._focused_view()
        if view is not None:
            view.action_toggle_log_full()

    def action_toggle_compact(self) -> None:
        self.compact_logs = not self.compact_logs
        for panel in self.panels():
            panel.log_view.set_compact(self.compact_logs)
        self.notify("log: compact lines (time, bs, tok/s, accept len)" if self.compact_logs
                    else "log: raw lines", timeout=3)

    def action_chart_metric(self) -> None:
        i = METRICS.index(self.chart_metric) if self.chart_metric in METRICS else -1
        self.chart_metric = METRICS[(i + 1) % len(METRICS)]
        if not self.has_class("-chart"):
            self.notify(f"chart: {self.chart_metric} (the chart shows from "
                        f"{self.CHART_MIN[0]}x{self.CHART_MIN[1]})", timeout=3)
        self.refresh_view()

    def action_toggle_gpus(self) -> None:
        panel = self.query_one(GpuPanel)
        panel.expanded = not panel.expanded
        self.set_class(panel.expanded, "-gpus-expanded")
        self.refresh_view()

    # the palette's way into the focused log's actions (their keys live on the log view)
    def action_filter(self) -> None:
        view = self._focused_view()
        if view is not None:
            view.action_filter()

    def action_clear_filter(self) -> None:
        view = self._focused_view()
        if view is not None:
            view.action_clear_filter()

    def action_follow(self) -> None:
        view = self._focused_view()
        if view is not None:
            view.action_follow()

    def action_pause(self) -> None:
        view = self._focused_view()
        if view is not None:
            view.action_pause()

    def action_next_host(self) -> None:
        """Several hosts: show the next host's tab."""
        if not self._multi:
            return
        hosts = list(self.fleet.hosts)
        cur = self.active_host()
        nxt = (hosts.index(cur) + 1) % len(hosts) if cur in hosts else 0
        self.query_one("#host-tabs", TabbedContent).active = f"tab-{nxt}"
        # the server keys act on the focused panel: the shown host's first one
        first = next(iter(self.query_one(f"#servers-{nxt}").query(ServerPanel)), None)
        if first is not None:
            first.focus()
        self.refresh_view()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "next_host" and not self._multi:
            return False  # hidden from the footer with a single host
        return True

    def action_cycle_window(self) -> None:
        i = WINDOWS_S.index(self.window_s) if self.window_s in WINDOWS_S else -1
        self.window_s = WINDOWS_S[(i + 1) % len(WINDOWS_S)]
        self.notify(f"window: last {self.window_s:.0f} s")
        self.refresh_view()

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Textual's commands, then every action of the table that has a palette title and
        can run here (a replay hides the control keys, one host hides "next host")."""
        yield from super().get_system_commands(screen)
        for a in ACTIONS:
            if a.palette and a.target in ("app", "panel", "log") \
                    and self.check_action(a.action, ()) is not False:
                yield SystemCommand(a.palette, a.help[:1].upper() + a.help[1:],
                                    partial(self.run_action, a.action))



__all__ = ["HelpScreen", "SpecmonApp"]
