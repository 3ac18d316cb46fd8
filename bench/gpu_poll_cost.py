"""Per-sample CPU cost of the GPU agent, against a reference measured in the same run.

    python bench/gpu_poll_cost.py [--mode auto|nvml|fake] [--samples N] [--gpus N]

Modes (printed on the first line of output):
  nvml  real NVML (a GPU is present). Two measurements:
        - in-process: NvmlCollector.sample() + JSON emit, CPU per sample;
        - subprocess: the agent file vs `nvidia-smi --query-gpu=... -lms` (the fallback), each
          run for two sample counts; CPU per sample = the slope of child CPU time (getrusage),
          so start-up (Python import, nvmlInit, nvidia-smi's driver init) cancels out.
  fake  no GPU here: the agent's collector over tests/nvml_shim/fake_nvml.py (H200-like values), i.e.
        the Python overhead of the agent without driver time, against a Python loop that only
        emits an equally large JSON line (the no-op reference).
Slow tiers are amortised as at 1 Hz: a fake clock advances one interval per sample.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specmon.hostside.nvml import NvmlCollector  # noqa: E402
from specmon.parse.gpu_sample import SMI_DEFAULT_FIELDS, choose_smi_fields  # noqa: E402

AGENT = ROOT / "specmon" / "hostside" / "agent.py"


def _real_nvml():
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return pynvml
    except Exception:
        return None


class _Tick:
    """Fake monotonic clock: one interval per sample, so slow tiers run at their 1 Hz share."""

    def __init__(self, interval: float = 1.0) -> None:
        self.t = 0.0
        self.interval = interval

    def __call__(self) -> float:
        return self.t


def _in_process(nvml, n: int) -> tuple[float, float, dict]:
    tick = _Tick()
    col = NvmlCollector(nvml, slow_interval=30.0, proc_interval=5.0, clock=tick)
    out = open(os.devnull, "w")
    rec = col.sample()
    out.write(json.dumps(rec, separators=(",", ":")) + "\n")
    c0, w0 = time.process_time(), time.perf_counter()
    for _ in range(n):
        tick.t += 1.0
        rec = col.sample()
        out.write(json.dumps(rec, separators=(",", ":")) + "\n")
        out.flush()
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    col.close()
    out.close()
    return cpu / n * 1e6, wall / n * 1e6, rec


def _emit_only(rec: dict, n: int) -> float:
    """Reference: a Python loop that emits the same record without reading anything."""
    out = open(os.devnull, "w")
    c0 = time.process_time()
    for i in range(n):
        rec["ts"] = float(i)
        out.write(json.dumps(rec, separators=(",", ":")) + "\n")
        out.flush()
    cpu = time.process_time() - c0
    out.close()
    return cpu / n * 1e6


def _child_cpu(argv: list[str], lines: int) -> float:
    """Run argv until it printed `lines` lines (or exited); return its CPU seconds."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    got = 0
    for _ in proc.stdout:
        got += 1
        if got >= lines:
            break
    if proc.poll() is None:
        proc.terminate()
    proc.stdout.close()
    _, _, ru = os.wait4(proc.pid, 0)
    proc.returncode = 0
    return ru.ru_utime + ru.ru_stime


def _slope(make_argv, lines_for, k1: int, k2: int) -> float:
    c1 = _child_cpu(make_argv(k1), lines_for(k1))
    c2 = _child_cpu(make_argv(k2), lines_for(k2))
    return (c2 - c1) / (k2 - k1) * 1e6


def _subprocess_compare(n_gpus: int, k1: int, k2: int) -> tuple[float, float | None]:
    ms = 50
    speed = 1000 / ms  # the 1 Hz tier ratios, compressed into 50 ms samples

    def agent_argv(k: int) -> list[str]:
        return [sys.executable, str(AGENT), "gpu", "--interval", str(ms / 1000), "--count", str(k),
                "--slow-interval", str(30 / speed), "--proc-interval", str(5 / speed),
                "--watch-stdin", "no"]

    # the agent prints a hello line first, then k samples, then exits by itself
    agent = _slope(agent_argv, lambda k: k + 1, k1, k2)
    smi_path = shutil.which("nvidia-smi")
    if not smi_path:
        return agent, None
    try:
        help_text = subprocess.run([smi_path, "--help-query-gpu"], capture_output=True,
                                   text=True, timeout=30).stdout
        fields = choose_smi_fields(help_text)
    except Exception:
        fields = SMI_DEFAULT_FIELDS

    def smi_argv(k: int) -> list[str]:
        return [smi_path, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits",
                "-lms", str(ms)]

    smi = _slope(smi_argv, lambda k: k * n_gpus, k1, k2)
    return agent, smi


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["auto", "nvml", "fake"], default="auto")
    ap.add_argument("--samples", type=int, default=2000, help="in-process samples")
    ap.add_argument("--gpus", type=int, default=8, help="GPUs of the fake NVML (fake mode)")
    args = ap.parse_args()

    nvml = _real_nvml() if args.mode in ("auto", "nvml") else None
    if args.mode == "nvml" and nvml is None:
        print("mode nvml asked but NVML is not available here", file=sys.stderr)
        return 2
    if nvml is None:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "nvml_shim"))
        from fake_nvml import FakeNvml

        print(f"mode: fake-nvml (no GPU/NVML here): agent Python overhead over a stand-in "
              f"pynvml with {args.gpus} H200-like GPUs; driver time NOT included")
        fake = FakeNvml(n_gpus=args.gpus, state="load")
        cpu, wall, rec = _in_process(fake, args.samples)
        ref = _emit_only(rec, args.samples)
        print(f"agent      CPU per sample: {cpu:9.1f} us   (wall {wall:.1f} us)")
        print(f"reference  CPU per sample: {ref:9.1f} us   (python loop emitting the same "
              f"JSON line, no reads)")
        print(f"ratio agent/reference: {cpu / ref:.2f}x")
        print(f"at 1 Hz the agent would use {cpu / 1e4:.4f} % of one core (plus driver time)")
        return 0

    n_gpus = nvml.nvmlDeviceGetCount() if _init(nvml) else 0
    print(f"mode: nvml (real NVML, {n_gpus} GPU(s), driver "
          f"{_text(nvml.nvmlSystemGetDriverVersion())})")
    cpu, wall, rec = _in_process(nvml, min(args.samples, 500))
    ref = _emit_only(rec, min(args.samples, 500))
    print(f"in-process agent  CPU per sample: {cpu:9.1f} us  (wall {wall:.1f} us)")
    print(f"in-process emit-only reference:   {ref:9.1f} us")
    agent, smi = _subprocess_compare(n_gpus, 10, 60)
    print(f"subprocess agent CPU per sample (slope):      {agent:9.1f} us")
    if smi is None:
        print("nvidia-smi not found: no nvidia-smi reference; ratio vs emit-only: "
              f"{agent / ref:.2f}x")
    else:
        print(f"subprocess nvidia-smi -lms CPU per sample:    {smi:9.1f} us")
        print(f"ratio agent/nvidia-smi: {agent / smi:.2f}x")
    return 0


def _init(nvml) -> bool:
    nvml.nvmlInit()
    return True


def _text(v):
    return v.decode() if isinstance(v, bytes) else v


if __name__ == "__main__":
    sys.exit(main())
