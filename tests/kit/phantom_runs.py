"""The phantom-baseline scenario's logs, written by the simulator (no live servers): the baseline
server's three runs (tuned ~88.8 tok/s; restarted without the NCCL variables ~62.9; tuning back
with a patched SGLang file and a power-capped clock ~82.2) and the speculative server's one run
(EAGLE-3 steps 2, ~94). The same engine, perf model and line formats as `specmon demo
--scenario phantom-baseline`, time-compressed; NCCL_DEBUG=INFO lines as the sim's workers print.
"""

from __future__ import annotations

from pathlib import Path

from specmon.feeds.demo import NCCL_TUNING
from specmon.sim import formats
from specmon.sim.engine import EngineConfig, simulate
from specmon.sim.perf import SpecConfig, uniform_ranks
from specmon.sim.worker import nccl_debug_lines

VERSION = "0.5.23"
T0 = 1_780_000_000.0
TP = 8
# (env of the workers, patch overhead, SM clock ratio) per baseline run
PHASES = (({**NCCL_TUNING}, 0.0, 1.0), ({}, 0.0, 1.0), ({**NCCL_TUNING}, 0.07, 0.96))


def _run(start: float, seconds: float, env: dict[str, str], patch: float, clock: float,
         spec: SpecConfig | None, seed: int) -> list[str]:
    args = {"model_path": "meta-llama/Llama-3.1-70B-Instruct", "tp_size": TP, "port": 30000,
            "speculative_algorithm": spec.algorithm if spec else None,
            "speculative_num_steps": spec.num_steps if spec else None,
            "speculative_eagle_topk": spec.eagle_topk if spec else None,
            "speculative_num_draft_tokens": spec.num_draft_tokens if spec else None}
    out = [formats.line(VERSION, start, formats.server_args_message(VERSION, args))]
    from specmon.sim.server import sglang_env_edits

    wenv = {**env, "NCCL_DEBUG": "INFO", **sglang_env_edits(VERSION, False, False)}
    for rank in range(TP):
        out += nccl_debug_lines(wenv, rank, 4000 + rank, 4100 + rank, TP)
    cfg = EngineConfig(tp_size=TP, spec=spec, load_concurrency=1, seed=seed, patch_overhead=patch)
    out += [sl.text for sl in simulate(cfg, duration_s=seconds, start=start + 5, version=VERSION,
                                       ranks=uniform_ranks(TP, env, clock))]
    return out


def baseline_lines(seconds: float = 60.0) -> list[str]:
    lines: list[str] = []
    for i, (env, patch, clock) in enumerate(PHASES):
        lines += _run(T0 + i * (seconds + 30), seconds, env, patch, clock, None, 11 + i)
    return lines


def spec_lines(seconds: float = 200.0) -> list[str]:
    return _run(T0, seconds, {**NCCL_TUNING}, 0.0, 1.0, SpecConfig(), 21)


def write_logs(d: Path, seconds: float = 60.0) -> tuple[Path, Path]:
    base, spec = d / "baseline.log", d / "speculative.log"
    base.write_text("\n".join(baseline_lines(seconds)) + "\n")
    spec.write_text("\n".join(spec_lines(3 * seconds + 60)) + "\n")
    return base, spec
