"""Phases an interrupt may end on the spot.

Python runs a signal handler between bytecodes, so one long C call holds Ctrl-C and SIGTERM
back until it returns: `json.loads` of a 160 MB snapshot took 2-3 s, `json.dumps` and
`gzip.compress` of an export ~7 s, and unwinding an export's 1.6 GB of objects another 1-2 s
after the handler ran. A phase that writes nothing (reading, decoding, building, encoding)
loses nothing if the process ends mid-way, so there SIGINT and SIGTERM take their default
action: the process ends at once (the shell sees 130 or 143, as from a handled exit). Writes
run outside such a phase, under the handlers that remove their temp files."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def killable() -> Iterator[None]:
    """SIGINT and SIGTERM end the process at once while the block runs (main thread only:
    elsewhere signal handlers cannot be set, and the block runs as it is)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, signal.SIG_DFL) for sig in SIGNALS}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
