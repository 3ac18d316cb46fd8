"""Server control from the keyboard: start, stop (confirmed), restart, swap, benchmark.

The app holds one *actions* object per server: a `specmon.control.ServerController` on a real
host, or the demo's adapter on the simulated host; both offer `start(progress)`, `stop()`,
`restart(progress)` and `benchmark()`. Every action runs in a worker; progress and results come
back to the panel, failures as one-line notifications.
"""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from specmon.ui.safe import plain


class ConfirmScreen(ModalScreen[bool]):
    BINDINGS = [Binding("y", "answer(True)", "Yes", id="confirm.yes"),
                Binding("n,escape", "answer(False)", "No", id="confirm.no")]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            yield Static(plain(self.question) + "\n\n[y] yes   [n] no", id="confirm-text",
                         markup=False)

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class ServerControlMixin:
    """Needs `self.actions: dict[str, Any]`, `self.session`, `_focused_server()`, notify."""

    CONTROL_BINDINGS = [
        Binding("u", "server_start", "Start", id="server.start"),
        Binding("x", "server_stop", "Stop", id="server.stop"),
        Binding("r", "server_restart", "Restart", show=False, id="server.restart"),
        Binding("o", "server_swap", "Swap", show=False, id="server.swap"),
        Binding("m", "server_bench", "Benchmark", show=False, id="server.bench"),
    ]
    actions: dict[str, Any]

    # --- helpers --------------------------------------------------------------------------------

    def _target(self) -> tuple[str, Any] | tuple[None, None]:
        app: Any = self
        server = app._focused_server()
        ctl = self.actions.get(server) if server else None
        if ctl is None:
            app.notify("no server control here: start specmon with a config that has this "
                       "server's profile (specmon connect TARGET --config FILE), or run the demo",
                       severity="warning", markup=False)
            return None, None
        return server, ctl

    def _progress(self, server: str) -> Any:
        app: Any = self

        def cb(p: Any) -> None:
            state = app.session.server(server)
            state.control_text = p.describe() if hasattr(p, "describe") else str(p)

        return cb

    def _run(self, server: str, what: str, coro: Any, done: Any = None) -> None:
        app: Any = self
        state = app.session.server(server)
        state.control_text = f"{what}…"

        async def work() -> None:
            try:
                result = await coro
            except Exception as exc:  # noqa: BLE001 - every control failure is one line
                state.control_text = f"{what} failed: {exc}"
                app.notify(f"{server}: {what} failed: {exc}", severity="error", markup=False,
                           timeout=10)
                last = getattr(exc, "last_lines", None)
                if last:
                    state.notices.extend(last[-5:])
                self._offer_swap(server, exc)
                return
            # superseded: the panel's own state says what follows (loading, ready, stopped)
            state.control_text = None
            app.notify(f"{server}: {what} done", markup=False, timeout=4)
            if done is not None:
                done(result)

        app.run_worker(work(), group=f"control-{server}", exclusive=True, exit_on_error=False)

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

        app.push_screen(ConfirmScreen(f"Restart {server}? It is stopped (SIGTERM, then SIGKILL "
                                      "after the grace period) and started again."), answered)

    def action_server_stop(self) -> None:
        app: Any = self
        server, ctl = self._target()
        if server is None:
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._run(server, "stop", ctl.stop(), lambda r: self._stopped(server, r))

        app.push_screen(ConfirmScreen(f"Stop {server}? Its process group gets SIGTERM, then "
                                      "SIGKILL after the grace period."), answered)

    def action_server_swap(self) -> None:
        app: Any = self
        server, ctl = self._target()
        if server is None:
            return
        others = [s for s in self.actions if s != server]
        if not others:
            app.notify("swap needs a second server profile", severity="warning")
            return
        other = self.actions[others[0]]

        async def do_swap() -> Any:
            from specmon.control.server import ServerController, swap

            if isinstance(ctl, ServerController) and isinstance(other, ServerController):
                return await swap(ctl, other, self._progress(others[0]))
            await ctl.stop()
            return await other.start(self._progress(others[0]))

        def answered(yes: bool | None) -> None:
            if yes:
                self._run(others[0], f"swap ({server} -> {others[0]})", do_swap(),
                          self._after_start(others[0]))

        app.push_screen(ConfirmScreen(f"Swap: stop {server}, wait for the GPUs, start "
                                      f"{others[0]}?"), answered)

    def action_server_bench(self) -> None:
        server, ctl = self._target()
        if server is not None:
            self._run(server, "benchmark", ctl.benchmark(), lambda r: self._bench_done(server, r))

    def _offer_swap(self, server: str, exc: Exception) -> None:
        """GPUs busy with another server we control: offer to stop it and start this one."""
        app: Any = self
        owners = [o.server for o in getattr(exc, "owners", None) or [] if o.server]
        other = next((o for o in owners if o in self.actions and o != server), None)
        if other is None:
            return
        start_ctl, stop_ctl = self.actions[server], self.actions[other]

        def answered(yes: bool | None) -> None:
            if not yes:
                return

            async def do_swap() -> Any:
                from specmon.control.server import ServerController, swap

                if isinstance(stop_ctl, ServerController) and isinstance(start_ctl,
                                                                         ServerController):
                    return await swap(stop_ctl, start_ctl, self._progress(server))
                await stop_ctl.stop()
                return await start_ctl.start(self._progress(server))

            self._run(server, f"swap ({other} -> {server})", do_swap(),
                      self._after_start(server))

        app.push_screen(ConfirmScreen(f"{server}: its GPUs are used by {other}. Swap: stop "
                                      f"{other}, wait for the GPUs, start {server}?"), answered)

    # --- results --------------------------------------------------------------------------------

    def _after_start(self, server: str) -> Any:
        app: Any = self

        def done(result: Any) -> None:
            audit = getattr(result, "audit", None) or getattr(getattr(result, "started", None),
                                                              "audit", None)
            state = app.session.server(server)
            if audit is not None:
                state.env_audit = audit
                for problem in audit.problems():
                    app.notify(f"{server}: {problem}", severity="warning", markup=False,
                               timeout=10)

        return done

    def _stopped(self, server: str, result: Any) -> None:
        app: Any = self
        remaining = getattr(result, "remaining", None)
        if remaining:
            app.notify(f"{server}: processes still running after stop: {remaining}",
                       severity="error", markup=False)
        else:
            app.notify(f"{server}: stopped; no process of its group remains", markup=False)

    def _bench_done(self, server: str, result: Any) -> None:
        app: Any = self
        state = app.session.server(server)
        state.last_bench = result
        data = result.to_json() if hasattr(result, "to_json") else dict(result)
        data.pop("raw", None)
        app.session.benchmarks.append(data)
        app.notify(result.describe() if hasattr(result, "describe") else str(result),
                   markup=False, timeout=10)
