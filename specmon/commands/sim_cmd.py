"""`specmon sim ...`: run a simulated SGLang or vLLM server, inspect or change the simulated GPUs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from specmon.errors import CliError


def run_server(args: argparse.Namespace) -> int:
    from specmon.sim.server import SimError, SimServer

    vllm = getattr(args, "engine", "sglang") == "vllm"
    if args.port is None:
        args.port = 8000 if vllm else 30000
    try:
        if vllm:
            from specmon.sim.vllm_server import VllmSimServer

            server: SimServer = VllmSimServer(args)
        else:
            server = SimServer(args)
    except SimError as exc:
        raise CliError(str(exc)) from None
    try:
        return server.run()
    except SimError as exc:
        raise CliError(str(exc)) from None


def _host(args: argparse.Namespace):  # noqa: ANN202 - lazy import keeps the CLI light
    from specmon.sim.gpu_model import SimGpuHost, default_sim_dir

    return SimGpuHost(Path(args.sim_dir) if args.sim_dir else default_sim_dir(), args.n_gpus)


def run_gpus(args: argparse.Namespace) -> int:
    """Print the simulated GPUs (one JSON object per GPU and line)."""
    for g in _host(args).snapshot():
        print(json.dumps(g))
    return 0


def run_power_limit(args: argparse.Namespace) -> int:
    if args.watts <= 0:
        raise CliError(f"power limit must be positive, got {args.watts}")
    if args.gpu is not None and not 0 <= args.gpu < args.n_gpus:
        raise CliError(f"--gpu {args.gpu} is not one of the {args.n_gpus} simulated GPUs")
    _host(args).set_power_limit(args.gpu, args.watts)
    return 0
