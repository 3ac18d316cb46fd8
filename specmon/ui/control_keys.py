"""Server control from the keyboard: start, stop (confirmed), restart, swap, benchmark.

`ServerControl` is an object the app holds (its `action_server_*` methods delegate to it): one
controller per server, typed by `specmon.control.server.ServerControls` (a
`ServerController` on a real host, the demo's `DemoActions` on the simulated one), and what it
needs of the app typed by `ControlApp`. Every action runs in a worker; progress and results
come back to the panel, failures as one-line notifications.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Protocol, TypeVar

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from specmon.control.benchmark import BenchResult
from specmon.control.progress import StartProgress
from specmon.control.server import (
    GpuBusy,
    ServerControls,
    StartFailed,
    StartResult,
    StopResult,
    SwapFailed,
    SwapResult,
    swap,
)
from specmon.session.fleet import FleetSession
from specmon.ui.keys import bindings
from specmon.ui.safe import plain


class ConfirmScreen(ModalScreen[bool]):
    BINDINGS = bindings("confirm")

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            yield Static(plain(self.question) + "\n\n[y] yes   [n] no", id="confirm-text",
                         markup=False)

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


Key = tuple[str, str]  # (host, server), as every server is keyed
T = TypeVar("T")


class ControlApp(Protocol):
    """What server control needs of the app."""

    @property
    def fleet(self) -> FleetSession: ...

    def server_label(self, key: Key) -> str: ...

    def focused_server(self) -> Key | None: ...

    def notify(self, message: str, *, title: str = "", severity: Any = "information",
               timeout: float | None = None, markup: bool = True) -> None: ...

    def push_screen(self, screen: ConfirmScreen,
                    callback: Callable[[bool | None], None]) -> object: ...

    def run_worker(self, work: Coroutine[Any, Any, None], *, group: str, exclusive: bool,
                   exit_on_error: bool) -> object: ...


class ServerControl:
    """The control keys' actions on the focused server, and the panel's status line about the
    last one (UI text: the session model holds none of it)."""

    def __init__(self, app: ControlApp, controllers: Mapping[Key, ServerControls]) -> None:
        self.app = app
        self.controllers = dict(controllers)
        self.status: dict[Key, str] = {}
        # servers a control action is working on, and what it is: a second action there is
        # refused, not run over it (Textual's exclusive workers cancelled a swap mid-start,
        # leaving the stopped server down without a word)
        self.busy: dict[Key, str] = {}

    # --- helpers --------------------------------------------------------------------------------

    def _name(self, key: Key) -> str:
        return self.app.server_label(key)

    def _target(self) -> tuple[Key, ServerControls] | None:
        key = self.app.focused_server()
        ctl = self.controllers.get(key) if key else None
        if key is None or ctl is None:
            self.app.notify("no server control here: start specmon with a config that has this "
                            "server's profile (specmon connect TARGET --config FILE), or run the "
                            "demo", severity="warning", markup=False)
            return None
        return key, ctl

    def _progress(self, server: Key) -> Callable[[StartProgress], None]:
        def cb(p: StartProgress) -> None:
            self.status[server] = p.describe()

        return cb

    def _run(self, server: Key, what: str, coro: Coroutine[Any, Any, T],
             done: Callable[[T], None] | None = None, also: Key | None = None) -> None:
        """Run `coro` for `server` (and `also`, the server a swap stops), unless an action is
        already working on either: then nothing runs over it, and the user is told."""
        app = self.app
        keys = [k for k in (server, also) if k is not None]
        held = next((k for k in keys if k in self.busy), None)
        if held is not None:
            coro.close()  # (never started)
            app.notify(f"{self._name(held)}: {self.busy[held]} is in progress; wait for it to "
                       "end", severity="warning", markup=False)
            return
        state = app.fleet.server(*server)
        self.status[server] = f"{what}…"
        for k in keys:
            self.busy[k] = what

        async def work() -> None:
            try:
                await guarded()
            finally:
                for k in keys:
                    self.busy.pop(k, None)

        async def guarded() -> None:
            try:
                result = await coro
            except Exception as exc:  # noqa: BLE001 - every control failure is one line
                why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                self.status[server] = f"{what} failed: {why}"
                app.notify(f"{self._name(server)}: {what} failed: {why}", severity="error",
                           markup=False, timeout=10)
                if isinstance(exc, (StartFailed, SwapFailed)) and exc.last_lines:
                    state.notices.extend(exc.last_lines[-5:])
                if isinstance(exc, SwapFailed):
                    self._say_down(exc)
                if isinstance(exc, GpuBusy):
                    self._offer_swap(server, exc)
                return
            # superseded: the panel's own state says what follows (loading, ready, stopped)
            self.status.pop(server, None)
            app.notify(f"{self._name(server)}: {what} done", markup=False, timeout=4)
            if done is not None:
                done(result)

        app.run_worker(work(), group=f"control-{server[0]}/{server[1]}", exclusive=True,
                       exit_on_error=False)

    # --- actions --------------------------------------------------------------------------------

    def start(self) -> None:
        target = self._target()
        if target is not None:
            server, ctl = target
            self._run(server, "start", ctl.start(self._progress(server)), self._after_start(server))

    def restart(self) -> None:
        target = self._target()
        if target is None:
            return
        server, ctl = target

        def answered(yes: bool | None) -> None:
            if yes:
                self._run(server, "restart", ctl.restart(self._progress(server)),
                          self._after_start(server))

        self.app.push_screen(ConfirmScreen(
            f"Restart {self._name(server)}? It is stopped (SIGTERM, then SIGKILL after the grace "
            "period) and started again."), answered)

    def stop(self) -> None:
        target = self._target()
        if target is None:
            return
        server, ctl = target

        def answered(yes: bool | None) -> None:
            if yes:
                self._run(server, "stop", ctl.stop(), lambda r: self._stopped(server, r))

        self.app.push_screen(ConfirmScreen(
            f"Stop {self._name(server)}? Its process group gets SIGTERM, then SIGKILL after the "
            "grace period."), answered)

    def swap(self) -> None:
        target = self._target()
        if target is None:
            return
        server, ctl = target
        # the other server on the same host (a swap frees this host's GPUs)
        others = [k for k in self.controllers if k != server and k[0] == server[0]]
        if not others:
            self.app.notify("swap needs a second server profile", severity="warning")
            return
        to = others[0]
        other = self.controllers[to]
        if other.running:
            # nothing to swap to: stopping this one would only leave it stopped
            self.app.notify(f"swap: {self._name(to)} is already running; nothing was stopped "
                            f"(x stops {self._name(server)})", severity="warning", markup=False)
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._run(to, f"swap ({self._name(server)} -> {self._name(to)})",
                          swap(ctl, other, self._progress(to)), self._after_start(to),
                          also=server)

        self.app.push_screen(ConfirmScreen(f"Swap: stop {self._name(server)}, wait for the GPUs, "
                                           f"start {self._name(to)}?"), answered)

    def bench(self) -> None:
        target = self._target()
        if target is not None:
            server, ctl = target
            self._run(server, "benchmark", ctl.benchmark(), lambda r: self._bench_done(server, r))

    def _say_down(self, exc: SwapFailed) -> None:
        """A failed swap left a server down: its panel says so until a control action
        replaces the text, and the toast stays."""
        for key, ctl in self.controllers.items():
            if ctl.name in exc.down:
                self.status[key] = f"DOWN: {exc}"
                self.app.notify(f"{self._name(key)} IS DOWN: {exc}", severity="error",
                                markup=False, timeout=3600)

    def _offer_swap(self, server: Key, exc: GpuBusy) -> None:
        """GPUs busy with another server we control: offer to stop it and start this one."""
        owners = [(server[0], o.server) for o in exc.owners if o.server]
        other = next((o for o in owners if o in self.controllers and o != server), None)
        if other is None:
            return
        start_ctl, stop_ctl = self.controllers[server], self.controllers[other]
        me, them = self._name(server), self._name(other)

        def answered(yes: bool | None) -> None:
            if yes:
                self._run(server, f"swap ({them} -> {me})",
                          swap(stop_ctl, start_ctl, self._progress(server)),
                          self._after_start(server), also=other)

        self.app.push_screen(ConfirmScreen(f"{me}: its GPUs are used by {them}. Swap: stop "
                                           f"{them}, wait for the GPUs, start {me}?"), answered)

    # --- results --------------------------------------------------------------------------------

    def _after_start(self, server: Key) -> Callable[[StartResult | SwapResult | None], None]:
        def done(result: StartResult | SwapResult | None) -> None:
            started = result.started if isinstance(result, SwapResult) else result
            audit = started.audit if started is not None else None
            if audit is not None:
                self.app.fleet.server(*server).env_audit = audit
                for problem in audit.problems():
                    self.app.notify(f"{self._name(server)}: {problem}", severity="warning",
                                    markup=False, timeout=10)

        return done

    def _stopped(self, server: Key, result: StopResult | None) -> None:
        remaining = result.remaining if result is not None else None
        if remaining:
            self.app.notify(f"{self._name(server)}: processes still running after stop: "
                            f"{remaining}", severity="error", markup=False)
        else:
            self.app.notify(f"{self._name(server)}: stopped; no process of its group remains",
                            markup=False)

    def _bench_done(self, server: Key, result: BenchResult) -> None:
        state = self.app.fleet.server(*server)
        state.last_bench = result
        state.last_bench_run = state.runs[-1].index if state.runs else None  # shown in that run
        data = result.to_json()
        data.pop("raw", None)
        self.app.fleet.host(server[0]).session.benchmarks.append(data)
        self.app.notify(result.describe(), markup=False, timeout=10)
