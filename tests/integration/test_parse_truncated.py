"""A log truncated while `specmon parse` reads it (logrotate's copytruncate) ends the command
with what it read, never a SIGBUS: the file is read, never mapped (touching a mapped page past
a truncated file's end kills the process)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from kit.snapshots import BASE_ARGS, decode_line


def test_parse_of_a_log_truncated_and_regrown_while_read_never_dies_of_sigbus(
        tmp_path: Path) -> None:
    log = tmp_path / "s.log"
    run = "\n".join([BASE_ARGS] + [decode_line(80.0 + (i % 7) * 0.5) for i in range(20_000)])
    with open(log, "w") as f:
        for _ in range(40):  # 40 runs, ~100 MB: the scans for server_args= take a while
            f.write(run + "\n")
    size = log.stat().st_size
    stop = threading.Event()

    def churn() -> None:  # truncated, then regrown (sparse: no rewrite), again and again
        while not stop.is_set():
            os.truncate(log, 4096)
            time.sleep(0.0005)
            os.truncate(log, size)
            time.sleep(0.002)

    codes = []
    thread = threading.Thread(target=churn)
    thread.start()
    try:
        for _ in range(3):
            res = subprocess.run([sys.executable, "-m", "specmon", "parse", str(log)],
                                 capture_output=True, text=True, timeout=120)
            codes.append((res.returncode, res.stderr[-300:]))
    finally:
        stop.set()
        thread.join()
    for code, err in codes:
        assert code not in (-signal.SIGBUS, 128 + signal.SIGBUS), err
        assert code in (0, 2, 3) and "Traceback" not in err, (code, err)
