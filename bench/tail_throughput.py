"""Tail throughput over SSH: specmon's agent pipeline vs raw `ssh HOST tail -c +1 FILE`.

Starts a private sshd on 127.0.0.1 (tests/kit/sshd.py), writes N SGLang-like decode lines to a file,
then measures, in the same run and against the same file:
  * raw:     the system ssh client running `tail -c +1 FILE`, lines counted on our side;
  * specmon: LogTailer over SshHost (agent framing, JSON events, offsets, decode) to LogLines.
Usage: python bench/tail_throughput.py [--lines N] [--repeat R]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from kit.sshd import Sshd  # noqa: E402

from specmon.hosts.ssh import SshHost  # noqa: E402
from specmon.sources.tail import LogLine, LogTailer, TailSpec  # noqa: E402

LINE = (
    "[2025-06-01 12:00:00 TP0] Decode batch, #running-req: 8, #token: 12345, token usage: 0.05, "
    "accept len: 2.71, accept rate: 0.68, cuda graph: True, gen throughput (token/s): 612.34, "
    "#queue-req: 0, "
)


def raw_ssh(sshd: Sshd, kh: Path, path: Path, n: int) -> float:
    return ssh_lines(sshd, kh, f"tail -c +1 {path}", n)


def ssh_lines(sshd: Sshd, kh: Path, remote: str, n: int) -> float:
    """Seconds until `ssh HOST REMOTE` has printed n lines (then it is stopped)."""
    cmd = sshd.ssh_argv(kh, remote)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    count = 0
    for _ in proc.stdout:
        count += 1
        if count == n:
            break
    dt = time.perf_counter() - t0
    proc.terminate()
    proc.wait()
    assert count == n, count
    return dt


async def specmon_tail(sshd: Sshd, cfg: Path, path: Path, n: int) -> tuple[float, float]:
    host = SshHost("benchbox", ssh_config=cfg)
    t0 = time.perf_counter()
    await host.connect()
    t1 = time.perf_counter()
    tailer = LogTailer(host, [TailSpec("b", str(path))], history_lines=None)
    count = 0
    async for ev in tailer.events():
        if isinstance(ev, LogLine):
            count += 1
            if count == n:
                break
    dt = time.perf_counter() - t0
    tailer.stop()
    await host.close()
    return dt, t1 - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        sshd = Sshd(root).start()
        try:
            kh = sshd.write_known_hosts(root / "known_hosts")
            cfg = sshd.write_client_config(root / "ssh_config", kh, alias="benchbox")
            path = root / "server.log"
            path.write_text((LINE + "\n") * args.lines)
            size = path.stat().st_size
            raw, ours = [], []
            for _ in range(args.repeat):
                raw.append(raw_ssh(sshd, kh, path, args.lines))
                ours.append(asyncio.run(specmon_tail(sshd, cfg, path, args.lines)))
            r = min(raw)
            s, conn = min(ours)
            print(f"{args.lines} lines, {size / 1e6:.1f} MB, best of {args.repeat} "
                  "(each includes connecting)")
            print(f"raw ssh tail -c +1 : {r:6.2f} s  {args.lines / r:10.0f} lines/s")
            print(f"specmon LogTailer  : {s:6.2f} s  {args.lines / s:10.0f} lines/s "
                  f"(connect {conn:.2f} s)")
            print(f"ratio specmon/raw  : {s / r:6.2f}x the time")
        finally:
            sshd.stop()


if __name__ == "__main__":
    main()
