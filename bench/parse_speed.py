"""Benchmark: `specmon parse` (summary mode) against `grep -c 'gen throughput'` on one file.

    python bench/parse_speed.py [--lines 1000000] [--repeat 3]

Builds a log of real SGLang line formats (decode, prefill, access and start-up lines), checks
that the summary fast path agrees exactly with the general parser on the whole file, then times
both commands end to end (process start included) and prints the ratio. The issue's target is
within 10x of grep.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loggen import write_log  # noqa: E402


def best_of(cmd: list[str], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        # stdout must be a pipe: GNU grep stops at the first match when it writes to /dev/null
        subprocess.run(cmd, check=True, stdout=subprocess.PIPE)
        best = min(best, time.perf_counter() - t)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-check", action="store_true", help="skip the fast-path agreement check")
    args = ap.parse_args()
    grep = shutil.which("grep")
    if grep is None:
        print("grep not found: no reference to compare against", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "server.log"
        write_log(path, args.lines)
        size = path.stat().st_size
        if not args.skip_check:
            from specmon.analysis.logfile import summarise, summarise_general

            fast = summarise(str(path))
            slow = summarise_general(path.read_bytes())
            ok = fast.comparable() == slow.comparable()
            print(f"fast path agrees with the general parser on all {args.lines:,} lines: {ok}")
            if not ok:
                return 1
        specmon = [sys.executable, "-m", "specmon", "parse", str(path)]
        t_specmon = best_of(specmon, args.repeat)
        t_grep = best_of([grep, "-c", "gen throughput", str(path)], args.repeat)
    print(f"file: {args.lines:,} lines, {size / 1e6:.1f} MB; cpus: {os.cpu_count()}; "
          f"best of {args.repeat}")
    print(f"grep -c 'gen throughput':   {t_grep:8.3f} s")
    print(f"specmon parse (summary):    {t_specmon:8.3f} s")
    print(f"ratio specmon / grep:       {t_specmon / t_grep:8.1f}x  (target: within 10x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
