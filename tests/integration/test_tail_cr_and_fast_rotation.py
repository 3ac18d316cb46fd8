"""Through the agent and LogTailer (LocalHost, the SSH code path): a CR-only log is read live
with exact offsets and resumed exactly after the agent dies; two rotations a quarter second
apart under a steady writer lose no line."""

from __future__ import annotations

import os
import signal
import threading
import time

from kit.tail import Collector
from kit.wait import until

from specmon.sources.tail import LogTailer, TailSpec


async def test_cr_only_log_is_read_live_and_resumed_at_the_exact_byte(host, tmp_path):
    log = tmp_path / "cr.log"
    log.write_bytes(b"".join(b"cr %d\r" % i for i in range(40)))
    tailer = LogTailer(host, [TailSpec("c", str(log))], history_lines=None)
    col = Collector(tailer)
    try:
        await col.wait_lines(39)  # the last CR may be a CRLF's first half: "cr 39" waits
        with open(log, "ab") as f:
            f.write(b"cr 40\r")
        await col.wait_lines(40)
        await until(lambda: tailer._client is not None, what="agent")
        os.kill(tailer._client.hello["pid"], signal.SIGKILL)  # the agent we started
        await until(lambda: col.notices("disconnected"), what="disconnect")
        with open(log, "ab") as f:
            f.write(b"cr 41\rcr 42\r\n")
        await col.wait_lines(43)
        await until(lambda: col.notices("resumed"), what="resumed")
        assert [t.rstrip("\r") for t in col.texts()] == [f"cr {i}" for i in range(43)]
        assert not col.notices("truncated")  # the resume check matched the file's bytes
        lines = col.lines
        assert lines[0].offset == 0 and lines[-1].end == log.stat().st_size
        for a, b in zip(lines, lines[1:], strict=False):
            assert b.offset == a.end
    finally:
        await col.close()


async def test_two_rotations_a_quarter_second_apart_lose_no_line(host, tmp_path):
    log, rotated = tmp_path / "rot.log", tmp_path / "rot.log.1"
    log.write_bytes(b"")
    col = Collector(LogTailer(host, [TailSpec("r", str(log))], history_lines=None))
    await until(lambda: col.notices("opened"), what="opened")
    n = [0]

    def write(f, seconds: float) -> None:  # ~8000 lines/s
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            f.write(b"".join(b"line %06d\n" % (n[0] + i) for i in range(80)))
            f.flush()
            n[0] += 80
            time.sleep(0.01)

    def writer() -> None:
        f = open(log, "ab")
        write(f, 0.5)
        for _ in range(2):  # the second rename overwrites the first rotated file
            os.rename(log, rotated)
            f.close()
            f = open(log, "ab")
            write(f, 0.25)
        write(f, 0.25)
        f.write(b"the end\n")
        f.close()

    th = threading.Thread(target=writer)
    th.start()
    try:
        await until(lambda: not th.is_alive(), timeout=30, what="writer")
        await until(lambda: "the end" in col.texts() or col.error, timeout=60,
                    what="the last line")
        assert col.texts() == [f"line {i:06d}" for i in range(n[0])] + ["the end"]
        assert len(col.notices("rotated")) == 2 and not col.notices("lost")
    finally:
        th.join()
        await col.close()


async def test_a_crlf_log_gives_lines_without_their_cr_and_exact_offsets(host, tmp_path):
    """CRLF is one line end: the CR is not part of the line's text (record's rows kept a
    trailing \\r that `parse` does not show), and the offsets still cover every byte."""
    log = tmp_path / "crlf.log"
    log.write_bytes(b"".join(b"crlf %d\r\n" % i for i in range(20)) + b"a\rb\r\n")
    col = Collector(LogTailer(host, [TailSpec("c", str(log))], history_lines=None))
    try:
        await col.wait_lines(22)
        assert col.texts() == [f"crlf {i}" for i in range(20)] + ["a", "b"]
        lines = col.lines
        assert lines[0].offset == 0 and lines[-1].end == log.stat().st_size
        for a, b in zip(lines, lines[1:], strict=False):
            assert b.offset == a.end
        assert all(ln.data + ln.eol == log.read_bytes()[ln.offset:ln.end] for ln in lines)
    finally:
        await col.close()
