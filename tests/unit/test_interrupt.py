"""`killable`: inside it SIGINT and SIGTERM end the process at once, even during one long C
call (a Python handler waits for the call to return); outside it the handlers are back."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

CHILD = """
import json, os, signal, sys, threading
from specmon.interrupt import killable
seen = []
signal.signal(signal.SIGTERM, lambda *a: seen.append("handled"))
signal.signal(signal.SIGINT, lambda *a: seen.append("handled"))
sig = getattr(signal, sys.argv[1])
if sys.argv[2] == "inside":
    with killable():
        os.kill(os.getpid(), sig)  # delivered at once: the default action ends the process
        seen.append("ran on")
else:
    with killable():
        pass
    os.kill(os.getpid(), sig)  # the handler again
print(",".join(seen) or "-")
"""


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_inside_the_signal_ends_the_process_and_outside_the_handler_is_back(sig):
    num = getattr(signal, sig)
    inside = subprocess.run([sys.executable, "-c", CHILD, sig, "inside"], capture_output=True,
                            text=True, timeout=60)
    assert inside.returncode == -num and inside.stdout == "", (inside.returncode, inside.stdout)
    outside = subprocess.run([sys.executable, "-c", CHILD, sig, "outside"], capture_output=True,
                             text=True, timeout=60)
    assert outside.returncode == 0 and outside.stdout.strip() == "handled", outside
