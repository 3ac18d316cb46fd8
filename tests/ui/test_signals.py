"""`exit_on_signals`: SIGTERM and SIGHUP end a full-screen app like its quit key."""

from __future__ import annotations

import asyncio
import signal
import threading

from specmon.ui import signals


class _App:
    def __init__(self) -> None:
        self.exits = 0

    def exit(self) -> None:
        self.exits += 1


async def test_a_second_signal_in_the_middle_of_the_first_handler_is_no_traceback(monkeypatch):
    """`timeout 30 make demo` in a terminal that then closed: SIGTERM, and SIGHUP while its
    handler was still making the watchdog. The second handler started its watchdog, and the
    first then set `daemon` on that running thread: "RuntimeError: cannot set daemon status
    of active thread", a traceback instead of a clean exit. Here the second signal comes at
    that moment for sure (when the first handler makes its timer)."""
    app = _App()
    made: list[threading.Timer] = []

    class Timer(threading.Timer):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)
            if len(made) == 1:  # the second signal arrives now
                signal.getsignal(signal.SIGHUP)(signal.SIGHUP, None)  # type: ignore[operator]

    monkeypatch.setattr(signals.threading, "Timer", Timer)
    with signals.exit_on_signals(app, grace=60.0) as got:
        signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)  # type: ignore[operator]
        await asyncio.sleep(0.05)  # the scheduled app.exit calls run
        assert got == [signal.SIGTERM, signal.SIGHUP]
        assert app.exits == 2
        assert len(made) == 2 and all(t.is_alive() and t.daemon for t in made)
    for t in made:  # the app ended: no watchdog is left to kill the process
        t.join(5)
        assert not t.is_alive()


async def test_an_app_that_ended_on_an_error_exits_non_zero():
    """A crash in the UI printed Textual's traceback and the command exited 0 (connect, demo,
    replay): a script or a supervisor read that as a clean quit."""
    from textual.app import App

    class Crashes(App[None]):
        def on_mount(self) -> None:
            raise ZeroDivisionError("float division by zero")

    app = Crashes()
    await app.run_async(headless=True, size=(80, 24))  # as the commands run it: no re-raise
    assert signals.exit_code(app, []) == 1
    assert signals.exit_code(app, [signal.SIGTERM]) == 128 + signal.SIGTERM

    class Quits(App[None]):
        def on_mount(self) -> None:
            self.exit()

    ok = Quits()
    await ok.run_async(headless=True, size=(80, 24))
    assert signals.exit_code(ok, []) == 0
