"""Tail latency over loopback SSH: line appended -> in specmon's session model, vs raw tail -F.

Starts a private sshd on 127.0.0.1 (tests/kit/sshd.py). A writer thread appends numbered SGLang-like
decode lines with random gaps; in the same run the same lines are read by
  * raw:     the system ssh client running `tail -F -n 0 FILE`, read line by line;
  * specmon: LogTailer over SshHost, each line parsed (`parse_line`) and applied to a
             `ServerState` (the session model) -- the latency ends after `apply`.
Latency = time.monotonic() after apply / after readline minus just before the write.
Two traffic patterns: "busy" (gaps 1-30 ms: a server decoding under load) and "sparse"
(gaps 0.3-1.5 s: decode lines of a lightly loaded server).
Usage: python bench/tail_latency.py [--busy N] [--sparse N] [--seed S]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from kit.sshd import Sshd  # noqa: E402

from specmon.hosts.ssh import SshHost  # noqa: E402
from specmon.parse.sglang import parse_line  # noqa: E402
from specmon.session.state import ServerState  # noqa: E402
from specmon.sources.tail import LogLine, LogTailer, TailNotice, TailSpec  # noqa: E402

LINE = (
    "[2025-06-01 12:00:00 TP0] Decode batch, #running-req: 8, #token: 12345, token usage: 0.05, "
    "accept len: 2.71, accept rate: 0.68, cuda graph: True, gen throughput (token/s): 612.34, "
    "#queue-req: 0, seq={seq}"
)


def seq_of(text: str) -> int | None:
    i = text.rfind("seq=")
    return int(text[i + 4:]) if i >= 0 and text[i + 4:].isdigit() else None


class RawTail(threading.Thread):
    """`ssh HOST tail -F -n 0 FILE`, timestamping each line as readline returns it."""

    def __init__(self, sshd: Sshd, kh: Path, path: Path) -> None:
        super().__init__(daemon=True)
        self.seen: dict[int, float] = {}
        self.proc = subprocess.Popen(
            sshd.ssh_argv(kh, f"tail -F -n 0 {path}"),
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )

    def run(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            t = time.monotonic()
            seq = seq_of(raw.decode("utf-8", "replace").rstrip("\n"))
            if seq is not None:
                self.seen.setdefault(seq, t)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(5)


class Writer:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.sent: dict[int, float] = {}
        self.next = 0
        self.f = open(path, "ab", buffering=0)

    def write(self) -> int:
        seq = self.next
        self.next += 1
        data = (LINE.format(seq=seq) + "\n").encode()
        self.sent[seq] = time.monotonic()
        self.f.write(data)
        return seq


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(p / 100 * len(xs)) - 1))]


async def run(args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        sshd = Sshd(root).start()
        raw: RawTail | None = None
        host: SshHost | None = None
        try:
            kh = sshd.write_known_hosts(root / "known_hosts")
            cfg = sshd.write_client_config(root / "ssh_config", kh, alias="benchbox")
            path = root / "server.log"
            path.write_bytes(b"")
            writer = Writer(path)
            host = SshHost("benchbox", ssh_config=cfg)
            await host.connect()
            tailer = LogTailer(host, [TailSpec("b", str(path))], history_lines=0,
                               poll_interval=args.poll_ms / 1e3, watch=not args.poll_only)
            state = ServerState("b")
            ours: dict[int, float] = {}
            ready = asyncio.Event()

            async def consume() -> None:
                async for ev in tailer.events():
                    if isinstance(ev, LogLine):
                        state.apply(ev.text, parse_line(ev.text), ev.received_at)
                        t = time.monotonic()
                        seq = seq_of(ev.text)
                        if seq is not None:
                            ours.setdefault(seq, t)
                    elif isinstance(ev, TailNotice) and ev.kind == "history_end":
                        ready.set()

            task = asyncio.create_task(consume())
            await asyncio.wait_for(ready.wait(), 30)
            raw = RawTail(sshd, kh, path)
            raw.start()
            # warm-up lines until both readers are known to follow the file
            while True:
                seq = writer.write()
                await asyncio.sleep(0.05)
                if seq in raw.seen and seq in ours:
                    break
            warm = writer.next

            results = {}
            for name, n, lo, hi in (("busy", args.busy, 0.001, 0.030),
                                    ("sparse", args.sparse, 0.3, 1.5)):
                if n <= 0:
                    continue
                first = writer.next
                for _ in range(n):
                    await asyncio.sleep(rng.uniform(lo, hi))
                    writer.write()  # a few microseconds: fine on the loop thread
                last = writer.next
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and not all(
                    s in ours and s in raw.seen for s in range(first, last)
                ):
                    await asyncio.sleep(0.05)
                ms_raw = [(raw.seen[s] - writer.sent[s]) * 1e3 for s in range(first, last)
                          if s in raw.seen]
                ms_ours = [(ours[s] - writer.sent[s]) * 1e3 for s in range(first, last)
                           if s in ours]
                results[name] = (n, lo, hi, ms_raw, ms_ours)
            tailer.stop()
            task.cancel()
            print(f"tail latency over loopback SSH, write -> in model (specmon) / -> readline "
                  f"(raw); agent: {tailer.watch_modes.get('b')}, poll {args.poll_ms:g} ms; "
                  f"{warm} warm-up lines; model saw {state.lines_total} lines, "
                  f"{state.decode_total} decode records")
            for name, (n, lo, hi, ms_raw, ms_ours) in results.items():
                if len(ms_raw) < n or len(ms_ours) < n:
                    print(f"{name}: MISSING lines: raw {len(ms_raw)}/{n}, specmon "
                          f"{len(ms_ours)}/{n}")
                r50, r99 = statistics.median(ms_raw), pct(ms_raw, 99)
                o50, o99 = statistics.median(ms_ours), pct(ms_ours, 99)
                verdict = "OK" if o99 <= r99 + 20 else "MISSED"
                print(f"{name:6} ({n} lines, gaps {lo * 1e3:.0f}-{hi * 1e3:.0f} ms): "
                      f"raw p50 {r50:6.2f} p99 {r99:6.2f} ms | specmon p50 {o50:6.2f} "
                      f"p99 {o99:6.2f} ms | ratio p50 {o50 / r50:5.1f}x p99 {o99 / r99:5.1f}x | "
                      f"target p99 <= raw + 20 ms: {verdict}")
        finally:
            if raw is not None:
                raw.stop()
            if host is not None:
                await host.close()
            sshd.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--busy", type=int, default=1000, help="lines with 1-30 ms gaps")
    ap.add_argument("--sparse", type=int, default=60, help="lines with 0.3-1.5 s gaps")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--poll-ms", type=float, default=100.0, help="agent poll interval")
    ap.add_argument("--poll-only", action="store_true", help="agent without inotify")
    asyncio.run(run(ap.parse_args()))


if __name__ == "__main__":
    main()
