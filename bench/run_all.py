"""`make bench`: run every benchmark briefly and print one table of their ratios.

Each benchmark measures specmon against a reference in the same run and prints its own
report; this runs them one after another (short settings: the machine may be shared), keeps
their reports, and ends with one table: benchmark, ratio, what the ratio is, reference. A
benchmark that cannot run here (no tmux, no sshd) shows N/A and why.

    python bench/run_all.py [--against VERSION_OR_PATH] [--only parse,ui_cost,record,...]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


def usable_cpus() -> int:
    """CPUs this process may run on (taskset), as specmon parse counts them."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


BENCH = Path(__file__).resolve().parent


@dataclass
class Ratio:
    pattern: str  # regex with one group: the ratio in the benchmark's output
    what: str


@dataclass
class Bench:
    name: str
    args: list[str]
    ratios: list[Ratio]


BENCHES = [
    Bench("parse", ["parse_speed.py", "--lines", "1000000", "--repeat", "3"], [
        Ratio(r"ratio parse_wall_vs_grep ([\d.]+)", "specmon parse wall / grep -c wall, 1M lines"),
        Ratio(r"ratio parse_cpu_vs_grep ([\d.]+)", "specmon parse CPU / grep -c CPU, 1M lines"),
        Ratio(r"ratio floor_cpu_vs_grep ([\d.]+)",
              "floor: python finds the batch lines (bench/parse_floor.py) CPU / grep CPU"),
        Ratio(r"ratio parse_cpu_vs_against ([\d.]+)", "specmon parse CPU / --against's CPU"),
        Ratio(r"ratio json_wall_vs_reference ([\d.]+)",
              "parse --json wall / json_reference.py wall, 100k lines"),
        Ratio(r"ratio json_cpu_vs_against ([\d.]+)", "parse --json CPU / --against's CPU"),
    ]),
    Bench("ui_cost", ["ui_cost.py", "--seconds", "8", "--warmup", "4", "--logs", "2,8"], [
        Ratio(r"^\s*2\s+\d+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s*$",
              "specmon / bare Textual app CPU, 2 logs"),
        Ratio(r"^\s*8\s+\d+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s*$",
              "specmon / bare Textual app CPU, 8 logs"),
    ]),
    Bench("tail_latency", ["tail_latency.py", "--busy", "300", "--sparse", "10"], [
        Ratio(r"busy .*ratio p50\s+([\d.]+)x", "specmon / raw ssh tail p50 latency, busy"),
        Ratio(r"busy .*ratio p50\s+[\d.]+x p99\s+([\d.]+)x",
              "specmon / raw ssh tail p99 latency, busy"),
    ]),
    Bench("record", ["record_rate.py", "--lines", "100000", "--backlog-lines", "200000",
                     "--paced-seconds", "5"], [
        Ratio(r"ratio record_live_vs_tail ([\d.]+)", "specmon record / ssh tail -F time, 100k lines"),
        Ratio(r"ratio record_backlog_vs_cat ([\d.]+)",
              "specmon record / ssh cat | wc -l time, 200k-line backlog"),
        Ratio(r"ratio floor_parse_vs_cat ([\d.]+)",
              "floor: ssh cat | python parse + JSON row a line / ssh cat | wc -l"),
    ]),
    Bench("drift_cost", ["drift_cost.py"], [
        Ratio(r"ratio ([\d.]+)", "us per record at n_base 15,611 / at n_base 76"),
    ]),
    Bench("agent_cost", ["gpu_poll_cost.py", "--samples", "500"], [
        Ratio(r"ratio agent/(?:reference|nvidia-smi): ([\d.]+)x",
              "GPU agent CPU per sample / reference"),
    ]),
]


def run(bench: Bench, extra: list[str]) -> tuple[str, str, float]:
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, str(BENCH / bench.args[0]), *bench.args[1:], *extra],
                          capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    status = "" if proc.returncode == 0 else (out.strip().splitlines() or ["failed"])[-1][:70]
    return out, status, time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--against", metavar="VERSION_OR_PATH",
                    help="passed to parse_speed.py: a wheel file or a git rev")
    ap.add_argument("--only", help="comma-separated names: " + ",".join(b.name for b in BENCHES))
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else None
    rows: list[tuple[str, str, str]] = []
    load0 = os.getloadavg()[0]
    for bench in BENCHES:
        if only is not None and bench.name not in only:
            continue
        extra = ["--against", args.against] if bench.name == "parse" and args.against else []
        print(f"=== {bench.name}: {' '.join(bench.args + extra)}", flush=True)
        out, status, secs = run(bench, extra)
        print(out.rstrip(), flush=True)
        print(f"({secs:.0f} s)", flush=True)
        for r in bench.ratios:
            m = next((m for line in out.splitlines() if (m := re.search(r.pattern, line))), None)
            if m is not None:
                rows.append((bench.name, f"{float(m.group(1)):.2f}x", r.what))
            elif "against" not in r.pattern or args.against:
                rows.append((bench.name, "N/A", f"{r.what} ({status or 'not in its output'})"))
    load1 = os.getloadavg()[0]
    print(f"\nratios (each against a reference measured in the same run; load average "
          f"{load0:.2f} before, {load1:.2f} after, {usable_cpus()} CPUs)")
    print(f"{'benchmark':14} {'ratio':>8}  what")
    for name, value, what in rows:
        print(f"{name:14} {value:>8}  {what}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
