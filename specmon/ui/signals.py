"""SIGTERM (a kill) and SIGHUP (the terminal went away) end a full-screen app the way its quit
key does. Their default action killed the process on the spot: Textual never left the
alternate screen nor turned mouse reporting off, and the user's terminal stayed broken.
If the app has not ended after `grace` s (with its terminal gone, Textual's writer may block
the event loop for good), the process ends there, after `cleanup` (the demo stops the servers
it started)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

SIGNALS = (signal.SIGTERM, signal.SIGHUP)
QUIT_GRACE_S = 2.0


@contextlib.contextmanager
def exit_on_signals(app: Any, *, grace: float = QUIT_GRACE_S,
                    cleanup: Callable[[], None] | None = None) -> Iterator[list[int]]:
    """While the block runs `app`, SIGTERM and SIGHUP ask it to exit; the list it yields
    receives the signal that did (the command then exits with 128 + its number)."""
    got: list[int] = []
    watchdog: list[threading.Timer] = []

    def force(signum: int) -> None:
        if cleanup is not None:
            cleanup()
        os._exit(128 + signum)

    def handler(signum: int, _frame: object) -> None:
        got.append(signum)
        if not watchdog:
            # this timer, not watchdog[0]: a second signal (SIGHUP after SIGTERM as the
            # terminal closes) can run its handler in the middle of this one and start its own
            timer = threading.Timer(grace, force, (signum,))
            timer.daemon = True
            watchdog.append(timer)
            timer.start()
        try:
            asyncio.get_running_loop().call_soon_threadsafe(app.exit)
        except RuntimeError:  # not inside the app's loop (before it runs): stop now
            if cleanup is not None:
                cleanup()
            raise SystemExit(128 + signum) from None

    old = {sig: signal.signal(sig, handler) for sig in SIGNALS}
    try:
        yield got
    finally:
        for timer in watchdog:
            timer.cancel()  # the app ended: the command's own cleanup is the way out
        for sig, h in old.items():
            signal.signal(sig, h)


def exit_code(app: Any, got: list[int]) -> int:
    """The command's exit status: 128 + the signal that ended the app, else the app's own (1
    when it ended on an unhandled error: a crash printed its traceback and exited 0)."""
    return 128 + got[0] if got else app.return_code or 0
