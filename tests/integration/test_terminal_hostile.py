"""What reaches a real terminal: `specmon replay` of a hostile snapshot (host, server names,
paths, log lines and alerts full of OSC 52/0/8, SGR, BEL, C1 and U+2028) runs on a pty with
Textual's real Linux driver; the byte stream must hold none of those sequences, only their
visible `\\x1b` forms."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kit.hostile import CONTROL_TEXT
from kit.snapshots import BASE_ARGS, T0, decode_line, write_record

from specmon.export.snapshot import snapshot_from_record, write_snapshot
from specmon.textsafe import visible

OSC52 = "\x1b]52;c;SGVsbG8gd29ybGQ=\x07"
OSC0 = "\x1b]0;pwned-title\x07"
OSC8 = "\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\"
SGR = "\x1b[5;7;31m"
C1 = "\x9b31m\x9d0;c1title\x9c"
HOSTILE = OSC52 + OSC0 + OSC8 + SGR + C1 + "\u2028[bold red]markup[/]"
# byte sequences Textual never writes itself; any of them means file text reached the tty
# (Textual itself writes OSC 22 "\x1b]22;default\x07", the pointer shape, so BEL alone is no
# sign; the hostile payloads are.)
FORBIDDEN = [b"\x1b]52", b"\x1b]0;", b"\x1b]8;", b"SGVsbG8gd29ybGQ=\x07", b"\x1b[5;7;31m",
             b"\xc2\x9b", b"\xc2\x9d", b"\xc2\x9c", b"\xe2\x80\xa8", b"pwned-title\x07"]


def _hostile_snapshot(tmp_path: Path, hostile: bool) -> Path:
    evil = HOSTILE if hostile else "plain"
    rows = [("base", BASE_ARGS, T0)]
    rows += [("base", decode_line(88.0 + i % 3), T0 + 1 + i) for i in range(20)]
    rows += [("base", f"[2026-02-26 19:17:00] worker said {evil} ok", T0 + 22)]
    rows += [("base", decode_line(89.0) + " " + evil, T0 + 23)]
    snap = snapshot_from_record(write_record(tmp_path / "r.jsonl", rows), host="host-" + evil)
    snap.servers[0].name = "base-" + evil[:60]
    snap.servers[0].path = "/var/log/" + evil
    snap.servers[0].notices.append("notice " + evil)
    snap.alerts = [{"t": T0 + 10, "server": snap.servers[0].name, "kind": "drift",
                    "message": "alert " + evil, "cause": evil}]
    return write_snapshot(snap, tmp_path / "hostile.json", redact=False)


def _run_on_pty(args: list[str], until: bytes, timeout: float = 90.0) -> bytes:
    """Run specmon on a 200x50 pty (Textual's real driver), read until `until`, press q."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "200", "LINES": "50"}
    proc = subprocess.Popen([sys.executable, "-m", "specmon", *args], stdin=slave, stdout=slave,
                            stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + timeout
    sent_quit = False

    def drain(wait: float) -> bool:
        if not select.select([master], [], [], wait)[0]:
            return False
        try:
            chunk = os.read(master, 65536)
        except OSError:
            return False
        out.extend(chunk)
        return bool(chunk)

    try:
        while time.monotonic() < deadline and proc.poll() is None:
            drain(0.2)
            if until in out:
                end = time.monotonic() + 1.5  # the last frames (toasts, log) paint
                while time.monotonic() < end:
                    drain(0.1)
                os.write(master, b"q")
                sent_quit = True
                break
        while drain(0.5):
            pass
    finally:
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()  # our own child, by its handle
            proc.wait(10)
        os.close(master)
    assert sent_quit, f"never saw {until!r} on the terminal ({len(out)} bytes): {bytes(out[-400:])!r}"
    return bytes(out)


def test_replay_of_a_hostile_snapshot_puts_no_escape_on_the_terminal(tmp_path):
    clean = _run_on_pty(["replay", str(_hostile_snapshot(tmp_path, False)), "--speed", "128"],
                        until=b"worker")
    for seq in FORBIDDEN:  # the check would be meaningless if Textual wrote these itself
        assert seq not in clean, seq
    (tmp_path / "h").mkdir()
    out = _run_on_pty(["replay", str(_hostile_snapshot(tmp_path / "h", True)), "--speed", "128"],
                      until=b"\\x1b]52")
    for seq in FORBIDDEN:
        assert seq not in out, f"{seq!r} reached the terminal"
    assert b"host-\\x1b]52" in out  # the header's sub-title shows the host as text
    assert b"worker" in out  # the hostile log line is on screen


@settings(max_examples=60, suppress_health_check=list(HealthCheck), deadline=None)
@given(CONTROL_TEXT, st.text(max_size=20))
def test_visible_leaves_no_control_character(a: str, b: str) -> None:
    out = visible(a + b)
    assert not any(ord(c) < 0x20 and c != "\t" or 0x7f <= ord(c) <= 0x9f
                   or c in "\u2028\u2029" for c in out)


def test_record_and_snapshot_files_send_nothing_to_a_terminal_but_keep_the_text(tmp_path):
    """`tail -f` of a recording and `zcat` of a snapshot reach a terminal: their JSON holds C1
    controls, DEL, line separators and bidi overrides from a log as \\u escapes (the same
    JSON value), while other non-ASCII text (a prompt in Chinese) stays readable."""
    import json

    from specmon.export.snapshot import read_snapshot

    evil = C1 + "\u2028 \u202eevil\u202c \x7f \u4e2d\u6587"
    log = tmp_path / "s.log"
    log.write_text(f"[2026-02-26 19:17:00] worker said {evil} ok\n" + decode_line(88.0) + "\n",
                   encoding="utf-8")
    rec = tmp_path / "r.jsonl"
    r = subprocess.run([sys.executable, "-m", "specmon", "record", "local", "--log",
                        f"base={log}", "--whole-file", "--out", str(rec), "--duration", "2"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    snap = write_snapshot(snapshot_from_record(rec), tmp_path / "s.json")
    raw = [b"\xc2\x9b", b"\xc2\x9d", b"\xc2\x9c", b"\xe2\x80\xa8", b"\xe2\x80\xae", b"\x7f",
           b"\x1b"]
    for path in (rec, snap):
        data = path.read_bytes()
        assert not [b for b in raw if b in data], path
        assert "\u4e2d\u6587".encode() in data  # readable, not \u escaped
    lines = [json.loads(x)["line"] for x in rec.read_text().splitlines() if '"line"' in x]
    assert f"worker said {evil} ok" in lines[0]  # the same text, read back
    assert any(f"worker said {evil} ok" in (e.line or "")
               for e in read_snapshot(snap).servers[0].entries)


def test_every_record_row_is_written_terminal_safe(tmp_path):
    """The writer makes each row safe, whatever made it (a GPU row holds the host's GPU names,
    which are host text too)."""
    import json

    from specmon.commands.record import RecordOut, gpu_json
    from specmon.parse.gpu_sample import GpuSample

    path = tmp_path / "r.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        out = RecordOut(fd, str(path))
        gpu = GpuSample(index=0, name="H200" + C1 + "\u202e", ts=T0)
        out.write(gpu_json("box", [gpu], multi=False))
        out.flush()
    finally:
        os.close(fd)
    data = path.read_bytes()
    assert b"\xc2\x9b" not in data and b"\xe2\x80\xae" not in data, data
    assert json.loads(data)["gpus"][0]["name"] == "H200" + C1 + "\u202e"
