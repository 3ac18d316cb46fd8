"""`replay` and `connect` told SIGTERM or SIGHUP end as their quit key ends them: Textual leaves
the alternate screen and turns mouse reporting off, and the command exits 128 + the signal.
Their default action killed them on the spot and left the user's terminal broken (the audit's
4 of 4 runs)."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from kit.snapshots import decode_line, reference_session, timed

from specmon.export.snapshot import export_session

ALT_ON, ALT_OFF, MOUSE_OFF = b"\x1b[?1049h", b"\x1b[?1049l", b"\x1b[?1000l"


def _in_a_terminal(argv: list[str], tmp_path: Path, sig: int) -> tuple[int, bytes]:
    """Run `specmon ARGV` in a real pty until it has drawn, send `sig`, return (exit status,
    everything it wrote to the terminal)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "HOME": str(tmp_path),
           "XDG_CONFIG_HOME": str(tmp_path / "cfg"), "XDG_DATA_HOME": str(tmp_path / "data")}
    proc = subprocess.Popen([sys.executable, "-m", "specmon", *argv], stdin=slave, stdout=slave,
                            stderr=slave, env=env, start_new_session=True, cwd=tmp_path)
    os.close(slave)
    out = bytearray()

    def read(until: float) -> None:
        while time.monotonic() < until:
            if select.select([master], [], [], 0.1)[0]:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: the other side closed
                    return
                if not data:
                    return
                out.extend(data)
            elif proc.poll() is not None:
                return

    try:
        deadline = time.monotonic() + 60
        while b"tok/s" not in out and time.monotonic() < deadline and proc.poll() is None:
            read(time.monotonic() + 0.2)
        assert b"tok/s" in out and ALT_ON in out, bytes(out[-2000:])
        read(time.monotonic() + 0.5)  # (a terminal reads all the time: a full pty blocks)
        proc.send_signal(sig)
        end = time.monotonic() + 30  # (a hang guard, not a timing)
        while proc.poll() is None and time.monotonic() < end:
            read(time.monotonic() + 0.2)
        proc.wait(timeout=5)
        read(time.monotonic() + 0.5)
        return proc.returncode, bytes(out)
    finally:
        os.close(master)
        if proc.poll() is None:  # our own child, still up after a failure
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_replay_told_to_stop_restores_the_terminal(tmp_path: Path, sig: int) -> None:
    rows = timed({"base": [decode_line(88.0 + i % 3) for i in range(60)]})
    snap = export_session(reference_session(rows), tmp_path, compress=False)
    code, out = _in_a_terminal(["replay", str(snap), "--paused"], tmp_path, sig)
    assert code == 128 + sig, code
    assert out.rindex(ALT_OFF) > out.rindex(ALT_ON) and MOUSE_OFF in out


def test_connect_told_sigterm_restores_the_terminal(tmp_path: Path) -> None:
    log = tmp_path / "s.log"
    log.write_text("".join(decode_line(88.0 + i % 3) + "\n" for i in range(40)))
    code, out = _in_a_terminal(["connect", "local", "--log", f"s={log}", "--whole-file"],
                               tmp_path, signal.SIGTERM)
    assert code == 128 + signal.SIGTERM, code
    assert out.rindex(ALT_OFF) > out.rindex(ALT_ON) and MOUSE_OFF in out
