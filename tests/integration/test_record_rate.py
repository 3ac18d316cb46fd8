"""`specmon record` over SSH at 20k lines/s: every line recorded exactly once.

Issue 22: at 5k lines/s 57 % of the lines were not yet recorded when record stopped. Here a
writer appends 60,000 decode lines at 20k lines/s to a log on a real sshd; record must end
with exactly those rows, offsets contiguous (nothing lost, nothing twice). The rate itself is
measured by bench/record_rate.py (tests never assert a wall time).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time

from kit import sshd
from kit.ssh_host import make_host, record_cmd

sshd_server = sshd.sshd_server

LINE = ("[2025-06-01 12:00:00 TP0] Decode batch, #running-req: 8, #token: 12345, token usage: "
        "0.05, accept len: 2.71, accept rate: 0.68, cuda graph: True, gen throughput (token/s): "
        "612.34, #queue-req: 0, ")


def _writer(path, total: int, rate: int, done: threading.Event) -> None:
    block = (LINE + "\n") * (rate // 10)
    with open(path, "a") as f:
        t0 = time.monotonic()
        for i in range(total // (rate // 10)):
            f.write(block)
            f.flush()
            time.sleep(max(0.0, t0 + (i + 1) * 0.1 - time.monotonic()))
    done.set()


def _rows(path) -> int:
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


def test_record_at_20k_lines_per_second_loses_nothing(sshd_server, tmp_path):
    make_host(sshd_server, tmp_path)  # writes ssh_config + known_hosts
    log = tmp_path / "fast.log"
    log.write_bytes(b"")
    out = tmp_path / "rec.jsonl"
    total, rate = 60_000, 20_000
    proc = subprocess.Popen(record_cmd(tmp_path / "ssh_config", out, "--log", f"srv={log}",
                                       "--whole-file"),  # lines written before it opened too
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "SPECMON_DATA_DIR": str(tmp_path / "data")})
    try:
        deadline = time.monotonic() + 60
        while "tailing" not in (err := _peek_stderr(proc)) and time.monotonic() < deadline:
            assert proc.poll() is None, err
        done = threading.Event()
        threading.Thread(target=_writer, args=(log, total, rate, done), daemon=True).start()
        assert done.wait(120)
        deadline = time.monotonic() + 300  # a hang detector, not a speed limit
        while _rows(out) < total and time.monotonic() < deadline:
            assert proc.poll() is None
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    step = len(LINE) + 1
    assert len(rows) == total, (len(rows), total)
    assert [r["offset"] for r in rows] == [i * step for i in range(total)]
    assert all(r["record"]["gen_throughput"] == 612.34 for r in rows)


_seen: dict[int, str] = {}


def _peek_stderr(proc: subprocess.Popen) -> str:
    """Record's stderr so far (its first lines say when it is tailing)."""
    assert proc.stderr is not None
    line = proc.stderr.readline()
    _seen[proc.pid] = _seen.get(proc.pid, "") + line
    return _seen[proc.pid]
