"""Arguments of `specmon sim server`: SGLang's launch_server flags that matter plus sim knobs.

Kept separate (stdlib only) so building the CLI parser stays cheap.
"""

from __future__ import annotations

import argparse
import os

DEFAULT_MODEL = "meta-llama/Llama-3.1-70B-Instruct"
NEWEST_VERSION = "0.5.23"
NEWEST_VLLM = "0.33.0"


def add_server_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", choices=["sglang", "vllm"], default="sglang",
                   help="imitate `python -m sglang.launch_server` (default) or `vllm serve`")
    g = p.add_argument_group("SGLang launch_server / vllm serve flags (same names)")
    g.add_argument("--model-path", "--model", default=DEFAULT_MODEL)
    g.add_argument("--served-model-name", default=None)
    g.add_argument("--tp-size", "--tp", "--tensor-parallel-size", type=int, default=1)
    g.add_argument("--host", default="127.0.0.1")
    g.add_argument("--port", type=int, default=None, help="default 30000 (SGLang), 8000 (vLLM)")
    g.add_argument("--base-gpu-id", type=int, default=0)
    g.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    g.add_argument("--enable-metrics", action="store_true")
    g.add_argument("--enable-mfu-metrics", action="store_true",
                   help="est. TFLOPS/BW suffixes on decode lines (0.5.10+, with --enable-metrics)")
    g.add_argument("--decode-log-interval", type=int, default=40)
    g.add_argument("--max-running-requests", type=int, default=None)
    g.add_argument("--cuda-graph-max-bs", type=int, default=None)
    g.add_argument("--disable-cuda-graph", action="store_true")
    g.add_argument("--mem-fraction-static", type=float, default=0.88)
    g.add_argument("--random-seed", type=int, default=None)
    g.add_argument("--speculative-algorithm", default=None)
    g.add_argument("--speculative-draft-model-path", "--speculative-draft-model", default=None)
    g.add_argument("--speculative-num-steps", type=int, default=None)
    g.add_argument("--speculative-eagle-topk", type=int, default=None)
    g.add_argument("--speculative-num-draft-tokens", type=int, default=None)
    g.add_argument("--speculative-adaptive", action="store_true",
                   help="adapt the step count at run time (candidates 1, 3, 7; EAGLE/EAGLE3, "
                   "topk 1; modelled from --format-version 0.5.23)")
    g.add_argument("--speculative-config", default=None,
                   help='vLLM: JSON, e.g. {"method": "eagle3", "model": "DRAFT", '
                   '"num_speculative_tokens": 3}')
    g.add_argument("--disable-log-stats", action="store_true", help="vLLM: no stats lines")
    g.add_argument("--enable-nccl-nvls", action="store_true")
    g.add_argument("--enable-symm-mem", action="store_true")
    g.add_argument("--disable-custom-all-reduce", action="store_true")

    s = p.add_argument_group("simulator")
    s.add_argument(
        "--format-version",
        default=None,
        help=f"release whose log/HTTP formats to imitate (default: SGLang {NEWEST_VERSION}, "
        f"vLLM {NEWEST_VLLM})",
    )
    s.add_argument("--log-stats-interval", type=float, default=None, metavar="SECONDS",
                   help="vLLM: stats interval (default 10 s, or $VLLM_LOG_STATS_INTERVAL from "
                   "0.10.1 as vLLM reads it)")
    s.add_argument("--log-file", default=None, help="append the server log here (default stderr)")
    s.add_argument(
        "--sim-dir",
        default=None,
        help="sim host directory shared with the GPU model (default $SPECMON_SIM_DIR, "
        "else the user cache dir)",
    )
    s.add_argument("--name", default=None, help="registration name (default sim-PORT)")
    s.add_argument("--load-concurrency", type=int, default=0, help="built-in clients in flight")
    s.add_argument("--load-input-len", type=int, default=1024)
    s.add_argument("--load-output-len", type=int, default=1024)
    s.add_argument("--accept-prob", type=float, default=0.785,
                   help="per-draft-token acceptance of the simulated draft model")  # fmt: skip
    s.add_argument(
        "--patch-overhead",
        type=float,
        default=float(os.environ.get("SPECMON_SIM_PATCH_OVERHEAD", "0") or 0),
        help="extra step time of a patched SGLang file, e.g. 0.07 "
        "(default $SPECMON_SIM_PATCH_OVERHEAD or 0)",
    )
    s.add_argument(
        "--set-env-after-spawn",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set this in the launcher's os.environ AFTER the workers were spawned "
        "(it will not reach them: the NCCL inheritance trap)",
    )
    s.add_argument("--startup-s", type=float, default=3.0, help="simulated start-up time")
    s.add_argument(
        "--crash-after",
        type=float,
        default=None,
        metavar="SECONDS",
        help="crash the TP0 scheduler this long after ready (traceback in the log)",
    )
    s.add_argument("--seed", type=int, default=None, help="noise/workload seed")
    s.add_argument("--n-gpus", type=int, default=8, help="GPUs on the simulated host")
