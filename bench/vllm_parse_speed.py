"""Benchmark: `specmon parse` (summary) of a vLLM log against `grep -c 'Avg prompt throughput'`.

    python bench/vllm_parse_speed.py [--intervals 20000] [--requests 8] [--repeat 3]

Builds a vLLM 0.11-style log (config line; per 10 s interval one `Engine 000:` line, its
`SpecDecoding metrics` line and `--requests` access-log lines), checks that the summary counts
every interval, then times both commands end to end (process start included) in the same run and
prints the ratio. vLLM logs are read by the general per-line parser (with the spec-line join):
there is no fast path for them.
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

ENG = ("(APIServer pid=7) INFO 11-20 {h:02d}:{m:02d}:{s:02d} [loggers.py:127] Engine 000: Avg prompt "
       "throughput: 0.0 tokens/s, Avg generation throughput: {g:.1f} tokens/s, Running: 16 reqs, "
       "Waiting: 0 reqs, GPU KV cache usage: 20.0%, Prefix cache hit rate: 50.0%")
SPEC = ("(APIServer pid=7) INFO 11-20 {h:02d}:{m:02d}:{s:02d} [metrics.py:96] SpecDecoding metrics: "
        "Mean acceptance length: 2.82, Accepted throughput: 512.10 tokens/s, Drafted throughput: "
        "851.10 tokens/s, Accepted: 5121 tokens, Drafted: 8511 tokens, Per-position acceptance "
        "rate: 0.793, 0.586, 0.426, Avg Draft acceptance rate: 60.2%")
REQ = '(APIServer pid=7) INFO:     127.0.0.1:5555 - "POST /v1/completions HTTP/1.1" 200 OK'
CFG = ("(EngineCore_DP0 pid=8) INFO 11-20 00:00:00 [core.py:93] Initializing a V1 LLM engine "
       "(v0.11.0) with config: model='m', speculative_config=SpeculativeConfig(method='eagle3', "
       "model='d', num_spec_tokens=3), tokenizer='m', tensor_parallel_size=1")


def write_log(path: Path, intervals: int, requests: int) -> int:
    n = 0
    with path.open("w") as f:
        f.write(CFG + "\n")
        n += 1
        for i in range(intervals):
            t = 10 * (i % 8000)  # stays inside one day: clock only
            h, m, s = t // 3600, (t // 60) % 60, t % 60
            f.write(ENG.format(h=h, m=m, s=s, g=800.0 + i % 97) + "\n")
            f.write(SPEC.format(h=h, m=m, s=s) + "\n")
            for _ in range(requests):
                f.write(REQ + "\n")
            n += 2 + requests
    return n


def best_of(cmd: list[str], repeat: int) -> tuple[float, str]:
    best, out = float("inf"), ""
    for _ in range(repeat):
        t = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True, check=True)
        best = min(best, time.perf_counter() - t)
        out = r.stdout
    return best, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--intervals", type=int, default=20000)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    grep = shutil.which("grep")
    if grep is None:
        print("grep not found", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "vllm.log"
        lines = write_log(log, a.intervals, a.requests)
        env_py = [sys.executable, "-m", "specmon", "parse", str(log)]
        t_spec, out = best_of(env_py, a.repeat)
        want = f"recognised: {a.intervals:,} vLLM engine intervals"
        if want not in out:
            print(f"summary did not count every interval ({want!r} missing)", file=sys.stderr)
            return 1
        t_grep, _ = best_of([grep, "-c", "Avg prompt throughput", str(log)], a.repeat)
        size = os.path.getsize(log) / 1e6
    print(f"vLLM log: {lines:,} lines ({size:.1f} MB, {a.intervals:,} intervals with a spec line)")
    print(f"specmon parse: {t_spec:.3f} s   grep -c: {t_grep:.3f} s   ratio {t_spec / t_grep:.1f}x "
          f"(best of {a.repeat}, process start included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
