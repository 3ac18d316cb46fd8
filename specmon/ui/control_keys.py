"""Server control from the keyboard: start, stop (confirmed), restart, swap, benchmark.

The app holds one *actions* object per server: a `specmon.control.ServerController` on a real
host, or the demo's adapter on the simulated host; both offer `start(progress)`, `stop()`,
`restart(progress)` and `benchmark()`. Every action runs in a worker; progress and results come
back to the panel, failures as one-line notifications.
"""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

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


class ServerControlMixin:
    """Needs `self.actions: dict[(host, server), Any]`, `self.fleet`, `_focused_server()`,
    `server_label()`, notify."""

    actions: dict[Key, Any]
    # what the panel's status line says about the last start/stop/... from the keyboard (UI
    # text: the session model holds none of it)
    control_status: dict[Key, str]

    # --- helpers --------------------------------------------------------------------------------

    def _ctl_state(self, key: Key) -> Any:
        app: Any = self
        return app.fleet.server(*key)

    def _ctl_name(self, key: Key) -> str:
        app: Any = self
        return str(app.server_label(key))

    def _target(self) -> tuple[Key | None, Any]:
        app: Any = self
        key = app._focused_server()
        ctl = self.actions.get(key) if key else None
        if ctl is None:
            app.notify("no server control here: start specmon with a config that has this "
                       "server's profile (specmon connect TARGET --config FILE), or run the demo",
                       severity="warning", markup=False)
            return None, None
        return key, ctl

    def _progress(self, server: Key) -> Any:
        def cb(p: Any) -> None:
            self.control_status[server] = p.describe() if hasattr(p, "describe") else str(p)

        return cb

    def _run(self, server: Key, what: str, coro: Any, done: Any = None) -> None:
        app: Any = self
        state = self._ctl_state(server)
        self.control_status[server] = f"{what}…"

        async def work() -> None:
            try:
                result = await coro
            except Exception as exc:  # noqa: BLE001 - every control failure is one line
                why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                self.control_status[server] = f"{what} failed: {why}"
                app.notify(f"{self._ctl_name(server)}: {what} failed: {why}", severity="error",
                           markup=False, timeout=10)
                last = getattr(exc, "last_lines", None)
                if last:
                    state.notices.extend(last[-5:])
                self._say_down(exc)
                self._offer_swap(server, exc)
                return
            # superseded: the panel's own state says what follows (loading, ready, stopped)
            self.control_status.pop(server, None)
            app.notify(f"{self._ctl_name(server)}: {what} done", markup=False, timeout=4)
            if done is not None:
                done(result)

        app.run_worker(work(), group=f"control-{server[0]}/{server[1]}", exclusive=True,
                       exit_on_error=False)

    # --- actions --------------------------------------------------------------------------------

    def action_server_start(self) -> None:
        server, ctl = self._target()
        if server is not None:
            self._run(server, "start", ctl.start(self._progress(server)), self._after_start(server))

    def action_server_restart(self) -> None:
        app: Any = self
        server, ctl = self._target()
        if server is None:
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._run(server, "restart", ctl.restart(self._progress(server)),
                          self._after_start(server))

        app.push_screen(ConfirmScreen(f"Restart {self._ctl_name(server)}? It is stopped (SIGTERM, "
                                      "then SIGKILL after the grace period) and started again."),
                        answered)

    def action_server_stop(self) -> None:
        app: Any = self
        server, ctl = self._target()
        if server is None:
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._run(server, "stop", ctl.stop(), lambda r: self._stopped(server, r))

        app.push_screen(ConfirmScreen(f"Stop {self._ctl_name(server)}? Its process group gets SIGTERM, then "
                                      "SIGKILL after the grace period."), answered)

    def action_server_swap(self) -> None:
        app: Any = self
        server, ctl = self._target()
        if server is None:
            return
        # the other server on the same host (a swap frees this host's GPUs)
        others = [k for k in self.actions if k != server and k[0] == server[0]]
        if not others:
            app.notify("swap needs a second server profile", severity="warning")
            return
        other = self.actions[others[0]]
        if getattr(other, "running", False):
            # nothing to swap to: stopping this one would only leave it stopped
            app.notify(f"swap: {self._ctl_name(others[0])} is already running; nothing was "
                       f"stopped (x stops {self._ctl_name(server)})", severity="warning",
                       markup=False)
            return

        async def do_swap() -> Any:
            from specmon.control.server import swap

            return await swap(ctl, other, self._progress(others[0]))

        def answered(yes: bool | None) -> None:
            if yes:
                self._run(others[0], f"swap ({self._ctl_name(server)} -> "
                          f"{self._ctl_name(others[0])})", do_swap(), self._after_start(others[0]))

        app.push_screen(ConfirmScreen(f"Swap: stop {self._ctl_name(server)}, wait for the GPUs, "
                                      f"start {self._ctl_name(others[0])}?"), answered)

    def action_server_bench(self) -> None:
        server, ctl = self._target()
        if server is not None:
            self._run(server, "benchmark", ctl.benchmark(), lambda r: self._bench_done(server, r))

    def _say_down(self, exc: Exception) -> None:
        """A failed swap left a server down: its panel says so until a control action
        replaces the text, and the toast stays."""
        app: Any = self
        down = getattr(exc, "down", None) or ()
        for key, ctl in self.actions.items():
            if getattr(ctl, "name", None) in down:
                self.control_status[key] = f"DOWN: {exc}"
                app.notify(f"{self._ctl_name(key)} IS DOWN: {exc}", severity="error",
                           markup=False, timeout=3600)

    def _offer_swap(self, server: Key, exc: Exception) -> None:
        """GPUs busy with another server we control: offer to stop it and start this one."""
        app: Any = self
        owners = [(server[0], o.server) for o in getattr(exc, "owners", None) or [] if o.server]
        other = next((o for o in owners if o in self.actions and o != server), None)
        if other is None:
            return
        start_ctl, stop_ctl = self.actions[server], self.actions[other]

        def answered(yes: bool | None) -> None:
            if not yes:
                return

            async def do_swap() -> Any:
                from specmon.control.server import swap

                return await swap(stop_ctl, start_ctl, self._progress(server))

            self._run(server, f"swap ({self._ctl_name(other)} -> {self._ctl_name(server)})", do_swap(),
                      self._after_start(server))

        me, them = self._ctl_name(server), self._ctl_name(other)
        app.push_screen(ConfirmScreen(f"{me}: its GPUs are used by {them}. Swap: stop "
                                      f"{them}, wait for the GPUs, start {me}?"), answered)

    # --- results --------------------------------------------------------------------------------

    def _after_start(self, server: Key) -> Any:
        app: Any = self

        def done(result: Any) -> None:
            audit = getattr(result, "audit", None) or getattr(getattr(result, "started", None),
                                                              "audit", None)
            state = self._ctl_state(server)
            if audit is not None:
                state.env_audit = audit
                for problem in audit.problems():
                    app.notify(f"{self._ctl_name(server)}: {problem}", severity="warning",
                               markup=False, timeout=10)

        return done

    def _stopped(self, server: Key, result: Any) -> None:
        app: Any = self
        remaining = getattr(result, "remaining", None)
        if remaining:
            app.notify(f"{self._ctl_name(server)}: processes still running after stop: {remaining}",
                       severity="error", markup=False)
        else:
            app.notify(f"{self._ctl_name(server)}: stopped; no process of its group remains",
                       markup=False)

    def _bench_done(self, server: Key, result: Any) -> None:
        app: Any = self
        state = self._ctl_state(server)
        state.last_bench = result
        state.last_bench_run = state.runs[-1].index if state.runs else None  # shown in that run
        data = result.to_json() if hasattr(result, "to_json") else dict(result)
        data.pop("raw", None)
        app.fleet.host(server[0]).session.benchmarks.append(data)
        app.notify(result.describe() if hasattr(result, "describe") else str(result),
                   markup=False, timeout=10)
