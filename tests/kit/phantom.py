"""The phantom-baseline scenario's logs, time-compressed by the simulator (specmon.sim.engine):
the baseline's three runs (NCCL-tuned; restarted without the NCCL variables; tuning back with a
patched SGLang file and a ~7% clock cap) and one speculative run beside them, on 16 GPUs
(baseline GPUs 0-7, speculative 8-15), as two SGLang logs and one `specmon record` file."""

from __future__ import annotations

import json
from pathlib import Path

from specmon.sim import formats
from specmon.sim.engine import EngineConfig, simulate
from specmon.sim.perf import SpecConfig, uniform_ranks
from specmon.sim.worker import nccl_debug_lines

VERSION = "0.5.23"
T0 = 1_780_000_000.0
TUNED = {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_P2P_LEVEL": "NVL", "NCCL_DEBUG": "INFO"}
UNTUNED = {"NCCL_DEBUG": "INFO"}
RUN_S = 150.0  # simulated seconds per baseline run
GAP_S = 20.0  # restart time between two baseline runs


def _args(port: int, base_gpu: int, spec: SpecConfig | None) -> dict:
    a = {"model_path": "meta-llama/Llama-3.1-70B-Instruct", "tp_size": 8, "port": port,
         "base_gpu_id": base_gpu, "disable_custom_all_reduce": False, "mem_fraction_static": 0.85,
         "cuda_graph_max_bs": 48 if spec else 256, "max_running_requests": 48 if spec else 2048,
         "speculative_algorithm": spec.algorithm if spec else None}
    if spec:
        a.update(speculative_num_steps=spec.num_steps, speculative_eagle_topk=spec.eagle_topk,
                 speculative_num_draft_tokens=spec.num_draft_tokens)
    return a


def _run(t: float, args: dict, env: dict, cfg: EngineConfig, seconds: float,
         clock_ratio: float = 1.0) -> list[tuple[float, str]]:
    out = [(t, formats.line(VERSION, t, formats.server_args_message(VERSION, args)))]
    for rank in range(cfg.tp_size):
        out += [(t + 0.5, x) for x in nccl_debug_lines(env, rank, 4242 + rank, 1, cfg.tp_size)]
    out += [(sl.t, sl.text) for sl in simulate(
        cfg, duration_s=seconds, start=t + 1, version=VERSION,
        ranks=uniform_ranks(cfg.tp_size, env, clock_ratio))]
    return out


def scenario() -> dict[str, list[tuple[float, str]]]:
    """(time, line) of each server's log, time-compressed."""
    spec = SpecConfig(num_steps=3, eagle_topk=1, num_draft_tokens=4, accept_prob=0.66)
    base: list[tuple[float, str]] = []
    t = T0
    for i, (env, patch, clock) in enumerate(((TUNED, 0.0, 1.0), (UNTUNED, 0.0, 1.0),
                                             (TUNED, 0.07, 0.93))):
        cfg = EngineConfig(tp_size=8, load_concurrency=1, seed=11 + i, patch_overhead=patch)
        base += _run(t, _args(30000, 0, None), env, cfg, RUN_S, clock)
        t += RUN_S + GAP_S
    cfg = EngineConfig(tp_size=8, load_concurrency=1, seed=7, spec=spec)
    sp = _run(T0, _args(30001, 8, spec), TUNED, cfg, t - T0 - GAP_S)
    return {"baseline": base, "speculative": sp}


def write_logs(d: Path, sc: dict[str, list[tuple[float, str]]]) -> dict[str, Path]:
    out = {}
    for name, rows in sc.items():
        p = d / f"{name}.log"
        p.write_text("".join(x + "\n" for _, x in rows), encoding="utf-8")
        out[name] = p
    return out


def write_record(path: Path, sc: dict[str, list[tuple[float, str]]]) -> Path:
    """What `specmon record` writes for these lines: one JSON row per line, received when
    printed (time-compressed), both servers interleaved in received order."""
    rows = []
    for k, (name, lines) in enumerate(sc.items()):
        off = 0
        for t, text in lines:
            rows.append((t, k, {"server": name, "path": f"/var/log/{name}.log", "offset": off,
                                "line": text, "received_at": t}))
            off += len(text.encode()) + 1
    rows.sort(key=lambda r: (r[0], r[1]))
    path.write_text("".join(json.dumps(r[2]) + "\n" for r in rows), encoding="utf-8")
    return path
