"""On a real GPU host: the agent at 1 Hz against `nvidia-smi --query-gpu=... -l 1`, same run.

    python bench/gpu_minute.py [--idle 60] [--load 60] [--out DIR]

Both run side by side for idle+load seconds; during the second part a bf16 matmul loop (torch)
loads GPU 0. Prints each one's CPU seconds per minute (child rusage) and the ratio (issue 5's
target: the agent costs at most 0.3x of nvidia-smi), and writes the agent's JSON lines (a test
fixture: idle, then the load's clock and power changes) and nvidia-smi's CSV to --out.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specmon.parse.gpu_sample import SMI_DEFAULT_FIELDS  # noqa: E402

AGENT = ROOT / "specmon" / "hostside" / "agent.py"

LOAD = """
import time, torch, sys
a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
"""


def cpu_now(pid: int) -> float:
    """utime + stime of a running child so far (/proc/PID/stat), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_of(pid: int) -> float:
    _, _, ru = os.wait4(pid, 0)
    return ru.ru_utime + ru.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--idle", type=float, default=60.0)
    ap.add_argument("--load", type=float, default=60.0)
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    smi = shutil.which("nvidia-smi")
    if smi is None:
        print("nvidia-smi not found: this benchmark needs a GPU host", file=sys.stderr)
        return 2
    total = args.idle + args.load
    fa = open(out / "gpu_agent_1hz.jsonl", "w")
    fs = open(out / "nvidia_smi_1hz.csv", "w")
    agent = subprocess.Popen([sys.executable, str(AGENT), "gpu", "--interval", "1.0",
                              "--count", str(int(total) + 20), "--watch-stdin", "no"],
                             stdout=fa, stdin=subprocess.DEVNULL)
    ref = subprocess.Popen([smi, f"--query-gpu={','.join(SMI_DEFAULT_FIELDS)}",
                            "--format=csv,noheader,nounits", "-l", "1"],
                           stdout=fs, stdin=subprocess.DEVNULL)
    warm = 10.0  # start-up (interpreter, NVML init) is excluded from the steady-state figure
    time.sleep(warm)
    t0 = time.monotonic()
    a0, s0 = cpu_now(agent.pid), cpu_now(ref.pid)
    time.sleep(max(0.0, args.idle - warm))
    load = subprocess.Popen([sys.executable, "-c", LOAD, str(args.load)])
    load.wait()
    time.sleep(5)
    a1, s1 = cpu_now(agent.pid), cpu_now(ref.pid)
    steady = time.monotonic() - t0
    t_agent = cpu_of(agent.pid)  # exits by itself after --count samples
    ref.terminate()
    t_smi = cpu_of(ref.pid)
    fa.close()
    fs.close()
    per_min = 60.0 / total
    total += 20  # the agent ran 20 samples more, to cover torch's start-up before the load
    print(f"run: {total:.0f} s at 1 Hz ({args.idle:.0f} s idle, {args.load:.0f} s bf16 matmul load)")
    print(f"steady state ({steady:.0f} s, start-up excluded):")
    print(f"  agent (NVML, 1 Hz):          {(a1 - a0) * 60 / steady:.3f} CPU s/min")
    print(f"  nvidia-smi --query-gpu -l 1: {(s1 - s0) * 60 / steady:.3f} CPU s/min")
    print(f"  ratio agent / nvidia-smi:    {(a1 - a0) / (s1 - s0):.3f}x  (target <= 0.3x)")
    print("whole run, start-up included:")
    print(f"  agent (NVML, 1 Hz):          {t_agent * per_min:.3f} CPU s/min")
    print(f"  nvidia-smi --query-gpu -l 1: {t_smi * per_min:.3f} CPU s/min")
    print(f"  ratio agent / nvidia-smi:    {t_agent / t_smi:.3f}x")
    _ = resource  # rusage comes from wait4
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
