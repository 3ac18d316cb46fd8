"""The Textual app: baseline and speculative servers side by side, speedup, GPUs, logs.

The app does not know where data comes from: a feed (demo, SSH connect, replay) pushes batches
through a sink that posts messages; handlers update the session; widgets refresh from the session
on a timer at a few Hz, so 1,000 log lines per second per server cost a handful of repaints.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.css.query import NoMatches
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Header, Input, Static, TabbedContent, TabPane
from textual.worker import Worker

from specmon.analysis.window import DEFAULT_WINDOW_S, speedup
from specmon.feed import Feed, LineItem
from specmon.resources import stylesheet
from specmon.session.baselines import Baseline, BaselineExists, BaselineStore
from specmon.session.drift import DriftWatcher, NotEnoughSamples, alert_lines, record_baseline
from specmon.session.state import Session
from specmon.ui.control_keys import ServerControlMixin
from specmon.ui.messages import (
    BaselineRequest,
    ConnectionChanged,
    GpuUpdate,
    ServerDeclared,
    ServerExited,
    ServerLines,
    ServerNotice,
    ServerPids,
)
from specmon.ui.safe import plain
from specmon.ui.snapshot_keys import SnapshotKeysMixin
from specmon.ui.widgets import (
    GpuPanel,
    HostsPanel,
    LogView,
    ServerPanel,
    SpeedupBar,
    safe_id,
)

WINDOWS_S = (30.0, 60.0, 300.0)

HELP_TEXT = """\
[b]specmon[/b] — live, honest numbers for speculative decoding on SGLang

[b]What the numbers are[/b]
• decode tok/s is SGLang's own [i]gen throughput (token/s)[/i]: decode-only, one value per
  log interval (40 decode steps by default), idle and prefill time inside the interval included.
  It is not a benchmark's end-to-end tok/s, which includes prefill.
• Medians are over the window shown (w cycles 30 s / 60 s / 300 s) at the server's current
  #running-req (batch size); n and the p10–p90 spread are always shown.
• speedup = speculative ÷ baseline median at the [i]same[/i] #running-req; the 95% interval comes
  from both medians' standard errors. N/A when there is no common batch size with ≥3 samples.
• accept rate is recomputed as (accept len − 1) / (draft tokens − 1), because SGLang changed the
  printed rate's definition twice.
• N/A means specmon did not measure it; it never shows a guess.

[b]Keys[/b]
{keys}

The command palette (ctrl+p) lists every action and the themes.
Press escape or q to close this help.
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close help", id="help.close")]

    def __init__(self, keys: str) -> None:
        super().__init__()
        self.keys = keys

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(HELP_TEXT.format(keys=self.keys), id="help-text")


class _Sink:
    """FeedSink that turns feed calls into app messages (same event loop)."""

    def __init__(self, app: SpecmonApp) -> None:
        self.app = app

    def declare_server(self, server: str, role: str | None, path: str | None) -> None:
        self.app.post_message(ServerDeclared(server, role, path))

    def lines(self, server: str, items: list[LineItem]) -> None:
        if items:
            self.app.post_message(ServerLines(server, items))

    def gpus(self, samples: list[Any], error: str | None = None) -> None:
        self.app.post_message(GpuUpdate(samples, error))

    def server_exited(self, server: str, code: int | None) -> None:
        self.app.post_message(ServerExited(server, code))

    def notice(self, server: str, text: str) -> None:
        self.app.post_message(ServerNotice(server, text))

    def connection(self, text: str) -> None:
        self.app.post_message(ConnectionChanged(text))

    def server_pids(self, server: str, pids: list[int]) -> None:
        self.app.post_message(ServerPids(server, pids))

    def request_baseline(self, server: str) -> None:
        self.app.post_message(BaselineRequest(server))


class SpecmonApp(ServerControlMixin, SnapshotKeysMixin, App[None]):
    CSS_PATH = str(stylesheet())
    TITLE = "specmon"
    BINDINGS = [
        Binding("q", "quit", "Quit", id="quit"),
        Binding("question_mark", "help", "Help", id="help"),
        Binding("slash", "filter", "Filter log", id="log.filter"),
        Binding("end", "follow", "Follow log", id="log.follow"),
        Binding("p", "pause", "Pause log", id="log.pause"),
        Binding("w", "cycle_window", "Window", id="window.cycle"),
        Binding("b", "record_baseline", "Record baseline", id="baseline.record"),
        Binding("h", "next_host", "Next host", id="host.next"),
        *SnapshotKeysMixin.SNAPSHOT_BINDINGS,
        *ServerControlMixin.CONTROL_BINDINGS,
        Binding("escape", "clear_filter", "Clear filter", show=False, id="log.clear_filter"),
    ]

    def __init__(self, session: Session, feed: Feed | None = None, *, window_s: float =
                 DEFAULT_WINDOW_S, refresh_hz: float = 4.0,
                 keymap: dict[str, str] | None = None, clock: Any = time.time,
                 show_clock: bool = True, export_dir: Path | None = None,
                 baselines: dict[str, Baseline] | None = None,
                 baseline_store: BaselineStore | None = None,
                 actions: dict[str, Any] | None = None, fleet: Any = None) -> None:
        super().__init__()
        self.session = session
        self.feed = feed
        self.window_s = window_s
        self.refresh_hz = refresh_hz
        self._keymap = keymap or {}
        self.clock = clock
        self.show_clock = show_clock
        self.export_dir = export_dir or Path.cwd()
        self.drift = DriftWatcher(session)
        self._initial_baselines = dict(baselines or {})
        self._store = baseline_store
        self.actions = dict(actions or {})
        self.fleet = fleet  # a FleetSession when several hosts are watched
        self._pending: dict[str, list[str]] = {}
        self._panels: dict[str, ServerPanel] = {}
        self._feed_worker: Worker[None] | None = None
        self.lines_received = 0
        self.refreshes = 0
        self.sub_title = session.host

    # --- layout -------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header(show_clock=self.show_clock)
        yield Static("", id="connection")
        yield Static("", id="alerts")
        if self.fleet is not None:
            yield HostsPanel("", id="hosts")
            # one tab per host; its servers (named host/server) go in its pane
            with TabbedContent(id="host-tabs"):
                for i, host in enumerate(self.fleet.hosts):
                    with TabPane(host, id=f"tab-{i}"):
                        yield Horizontal(id=f"servers-{i}", classes="servers")
        else:
            yield Horizontal(id="servers", classes="servers")
        yield SpeedupBar("", id="speedup")
        with VerticalScroll(id="gpu-box"):
            yield GpuPanel("", id="gpus")
        yield Footer()

    def on_mount(self) -> None:
        if self._keymap:
            self.set_keymap(self._keymap)
        for name in self.session.servers:
            self._ensure_panel(name)
        self.set_interval(1.0 / self.refresh_hz, self.refresh_view)
        self.set_interval(1.0, self.drift_tick)
        for server, b in self._initial_baselines.items():
            self._watch(server, b)
        if self.feed is not None:
            self._feed_worker = self.run_worker(self.feed.run(_Sink(self)), name="feed",
                                                group="feed", exit_on_error=False)
        self.refresh_view()

    async def stop_feed(self) -> None:
        """Cancel the feed and wait for its cleanup (it stops what it started)."""
        worker, self._feed_worker = self._feed_worker, None
        if worker is None:
            return
        worker.cancel()
        with contextlib.suppress(Exception):
            await worker.wait()

    async def action_quit(self) -> None:
        await self.stop_feed()
        self.exit()

    async def on_unmount(self) -> None:
        await self.stop_feed()

    def _ensure_panel(self, name: str) -> ServerPanel | None:
        panel = self._panels.get(name)
        if panel is not None:
            return panel
        try:
            container = self.query_one(self._container_for(name), Horizontal)
        except NoMatches:  # the app is shutting down
            return None
        panel = self._panels[name] = ServerPanel(name, id=f"panel-{safe_id(name)}")
        state = self.session.server(name)
        # baseline on the left, speculative on the right
        if state.role == "baseline" and container.children:
            container.mount(panel, before=0)
        else:
            container.mount(panel)
        self.call_after_refresh(self.refresh_view)
        return panel

    def _host_of(self, server: str) -> str | None:
        if self.fleet is None:
            return None
        host = server.split("/", 1)[0] if "/" in server else None
        return host if host in self.fleet.hosts else next(iter(self.fleet.hosts), None)

    def _container_for(self, server: str) -> str:
        host = self._host_of(server)
        if host is None:
            return "#servers"
        return f"#servers-{list(self.fleet.hosts).index(host)}"

    def active_host(self) -> str | None:
        """The host of the selected tab (several hosts), else None."""
        if self.fleet is None:
            return None
        try:
            active = self.query_one("#host-tabs", TabbedContent).active
        except NoMatches:
            return None
        hosts = list(self.fleet.hosts)
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

    def _role_on(self, role: str, host: str | None) -> Any:
        for s in self.session.servers.values():
            if s.role == role and (host is None or self._host_of(s.name) == host):
                return s
        return None

    def panels(self) -> list[ServerPanel]:
        return [p for p in self._panels.values() if p.is_mounted]

    # --- messages from the feed ---------------------------------------------------------------

    @on(ServerDeclared)
    def _declared(self, msg: ServerDeclared) -> None:
        s = self.session.server(msg.server)
        if msg.role:
            s.role = msg.role
        s.path = msg.path
        if s.status == "unknown":
            s.status = "starting"
        self._ensure_panel(msg.server)

    @on(ServerLines)
    def _lines(self, msg: ServerLines) -> None:
        s = self.session.server(msg.server)
        pending = self._pending.setdefault(msg.server, [])
        for text, rec, t in msg.items:
            s.apply(text, rec, t)
            pending.append(text)
        s.stale = False
        self.lines_received += len(msg.items)
        self._ensure_panel(msg.server)

    @on(GpuUpdate)
    def _gpus(self, msg: GpuUpdate) -> None:
        if msg.samples:
            self.session.set_gpus(msg.samples)
        self.session.gpu_error = msg.error

    @on(ServerExited)
    def _exited(self, msg: ServerExited) -> None:
        self.session.server(msg.server).process_exited(msg.code)

    @on(ServerNotice)
    def _notice(self, msg: ServerNotice) -> None:
        self.session.server(msg.server).notices.append(msg.text)
        self.notify(f"{msg.server}: {msg.text}", markup=False)

    @on(ServerPids)
    def _pids(self, msg: ServerPids) -> None:
        self.session.server(msg.server).pids = set(msg.pids)

    @on(BaselineRequest)
    def _baseline_request(self, msg: BaselineRequest) -> None:
        self.record_baseline(msg.server)

    @on(ConnectionChanged)
    def _connection(self, msg: ConnectionChanged) -> None:
        self.session.connection = msg.text
        stale = msg.text != "connected"
        for s in self.session.servers.values():
            s.stale = stale

    # --- periodic refresh ---------------------------------------------------------------------

    def refresh_view(self) -> None:
        try:
            self._refresh_view()
        except NoMatches:  # a refresh racing the app's shutdown
            pass

    def _refresh_view(self) -> None:
        now = self.clock()
        self.refreshes += 1
        for panel in self.panels():
            state = self.session.server(panel.server)
            panel.refresh_from(state, now, self.window_s)
            pending = self._pending.pop(panel.server, None)
            view = panel.log_view
            view.set_source(state.log)
            if not view.filled:
                view.refill()  # a panel mounted after lines arrived starts with what is kept
            elif pending:
                view.append(pending)
            view.keep_following()
        host = self.active_host()
        base = self._role_on("baseline", host)  # like with like: the same host's servers
        spec = self._role_on("speculative", host)
        sp = speedup(base, spec, now, self.window_s) if base and spec else None
        self.query_one(SpeedupBar).show(sp, bool(base and spec), self.window_s)
        decoding = any(st.last_line_t is not None and st.decode and now - st.decode[-1].t < 15
                       for st in self.session.servers.values())
        if host is not None and self.fleet is not None:
            hs = self.fleet.host(host).session  # the selected host's own GPUs
            self.query_one(GpuPanel).show(hs.gpus, hs.gpu_history, hs.gpu_error, decoding,
                                          self._other_node_gpus(host))
        else:
            self.query_one(GpuPanel).show(self.session.gpus, self.session.gpu_history,
                                          self.session.gpu_error, decoding)
        if self.fleet is not None:
            self.query_one(HostsPanel).show(self.fleet.summary(now))
        conn = self.query_one("#connection", Static)
        conn.display = self.session.connection != "connected"
        conn.update(self.session.connection)

    # --- baselines and drift ------------------------------------------------------------------

    @property
    def baseline_store(self) -> BaselineStore:
        if self._store is None:
            self._store = BaselineStore.open_default()
        return self._store

    def _watch(self, server: str, b: Baseline) -> None:
        self.session.server(server).fingerprint = b.fingerprint
        self.drift.watch(server, b)
        best = b.stats.best()
        self.session.baselines.append({
            "name": b.name, "server": server, "host": b.host, "created_at": b.created_at,
            "median_tok_s": best.median_thr if best else None, "n": best.n if best else None,
            "stratum": best.stratum.describe() if best else None,
        })

    def record_baseline(self, server: str) -> Baseline | None:
        """Record the server's current run as its baseline, store it, and watch for drift."""
        state = self.session.server(server)
        try:
            b = record_baseline(self.session, state)
            self.baseline_store.save(b)
        except NotEnoughSamples as exc:
            self.notify(str(exc), severity="warning", markup=False)
            return None
        except (OSError, sqlite3.Error, BaselineExists) as exc:
            self.notify(f"baseline not saved: {exc}", severity="error", markup=False)
            return None
        self._watch(server, b)
        best = b.stats.best()
        what = (f"{best.median_thr:.1f} tok/s, n={best.n}, {best.stratum.describe()}"
                if best and best.median_thr is not None else "")
        self.notify(f"baseline recorded: {b.name} ({what})", markup=False)
        return b

    def drift_tick(self) -> None:
        now = self.clock()
        if self.fleet is not None:
            self.fleet.update_alerts(now)  # the exporter's alert gauges follow at 1 Hz too
        for server, alert in self.drift.tick(now):
            self.session.alerts.append({
                "t": now, "server": server, "level": alert.level, "kind": alert.kind,
                "text": alert.text, "causes": list(alert.causes),
                "cause": "; ".join(alert.causes) or None, "cleared": alert.cleared,
            })
            if alert.cleared:
                self.notify(f"{server}: cleared: {alert.text}", markup=False)
            else:
                sev = "error" if alert.level == "critical" else (
                    "warning" if alert.level == "warning" else "information")
                self.notify("\n".join(alert_lines(server, alert)), severity=sev, markup=False,
                            timeout=10)
        self._show_alerts()

    def _show_alerts(self) -> None:
        try:
            banner = self.query_one("#alerts", Static)
        except NoMatches:
            return
        active = self.drift.active()
        banner.display = bool(active)
        t = Text()
        for i, (server, alert) in enumerate(active):
            if i:
                t.append("\n")
            t.append(f"{alert.level.upper()} ", style="bold")
            t.append(plain("\n".join(alert_lines(server, alert))))
        banner.update(t)
        banner.set_class(any(a.level == "critical" for _, a in active), "critical")

    def _focused_server(self) -> str | None:
        node = self.focused
        while node is not None:
            if isinstance(node, ServerPanel):
                return node.server
            node = node.parent  # type: ignore[assignment]
        base = self.session.by_role("baseline")
        return base.name if base else None

    def action_record_baseline(self) -> None:
        server = self._focused_server()
        if server is None:
            self.notify("focus a server panel first (tab)", severity="warning")
            return
        self.record_baseline(server)

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

    def action_help(self) -> None:
        keys = "\n".join(
            f"  {b.key_display or b.key:<12} {b.description}"
            for b in self.BINDINGS if isinstance(b, Binding) and b.description
            and self.check_action(b.action, ()) is not False
        )
        self.push_screen(HelpScreen(keys))

    def action_filter(self) -> None:
        view = self._focused_view()
        if view is None:
            return
        box = view.query_one(Input)
        box.display = True
        box.focus()

    def action_clear_filter(self) -> None:
        view = self._focused_view()
        if view is None:
            return
        box = view.query_one(Input)
        box.value = ""
        box.display = False
        view.filter_text = ""

    def action_follow(self) -> None:
        view = self._focused_view()
        if view is not None:
            view.resume()

    def action_pause(self) -> None:
        view = self._focused_view()
        if view is not None:
            view.pause()

    def action_next_host(self) -> None:
        """Several hosts: show the next host's tab."""
        if self.fleet is None or not self.fleet.hosts:
            return
        hosts = list(self.fleet.hosts)
        cur = self.active_host()
        nxt = (hosts.index(cur) + 1) % len(hosts) if cur in hosts else 0
        self.query_one("#host-tabs", TabbedContent).active = f"tab-{nxt}"
        self.refresh_view()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "next_host" and self.fleet is None:
            return False  # hidden from the footer with a single host
        return True

    def action_cycle_window(self) -> None:
        i = WINDOWS_S.index(self.window_s) if self.window_s in WINDOWS_S else -1
        self.window_s = WINDOWS_S[(i + 1) % len(WINDOWS_S)]
        self.notify(f"window: last {self.window_s:.0f} s")
        self.refresh_view()

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Help", "What every number means, and the keys", self.action_help)
        yield SystemCommand("Filter log", "Show only log lines containing a text",
                            self.action_filter)
        yield SystemCommand("Follow log", "Resume the sticky tail of the focused log",
                            self.action_follow)
        yield SystemCommand("Pause log", "Stop following the focused log", self.action_pause)
        yield SystemCommand("Cycle window", "Statistics window: 30 s, 60 s, 300 s",
                            self.action_cycle_window)
        yield SystemCommand("Record baseline", "Record the focused server's current run as its "
                            "baseline and watch for drift", self.action_record_baseline)
        yield SystemCommand("Export snapshot", "Write the session to a snapshot file",
                            self.action_export_snapshot)
        yield SystemCommand("Screenshot", "Save an SVG screenshot", self.action_screenshot)
        for name, desc, fn in (
            ("Start server", "Start the focused server from its profile", self.action_server_start),
            ("Stop server", "Stop the focused server (confirmation)", self.action_server_stop),
            ("Restart server", "Restart the focused server", self.action_server_restart),
            ("Swap servers", "Stop the focused server, start the other", self.action_server_swap),
            ("Benchmark", "Run a short end-to-end benchmark on the focused server",
             self.action_server_bench),
        ):
            yield SystemCommand(name, desc, fn)




__all__ = ["HelpScreen", "SpecmonApp"]
