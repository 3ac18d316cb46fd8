"""`specmon sim ...`: run a simulated SGLang or vLLM server, inspect or change the simulated GPUs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from specmon.errors import CliError


def add_arguments(p: argparse.ArgumentParser) -> None:
    from specmon.sim.cli_args import add_server_arguments

    simsub = p.add_subparsers(dest="sim_command", metavar="SIMCOMMAND", required=True)
    srv = simsub.add_parser(
        "server", help="run a simulated `python -m sglang.launch_server` (or `vllm serve`: --engine vllm)",
        description="Behaves like sglang.launch_server from outside: TP worker processes, "
        "version-exact log lines, /health, /get_server_info, /metrics, /generate. With "
        "--engine vllm like `vllm serve`: VLLM::EngineCore/Worker processes, vLLM's stats lines "
        "per release, /health, /metrics (vllm: counters), /v1/completions.")
    add_server_arguments(srv)
    srv.set_defaults(func=run_server, parser=srv)
    for name, func, help_ in (
        ("gpus", run_gpus, "print the simulated GPUs as JSON lines"),
        ("power-limit", run_power_limit, "set a simulated power limit (like nvidia-smi -pl)"),
    ):
        q = simsub.add_parser(name, help=help_)
        q.add_argument("--sim-dir", default=None, help="default $SPECMON_SIM_DIR")
        q.add_argument("--n-gpus", type=int, default=8)
        if name == "power-limit":
            q.add_argument("watts", type=float)
            q.add_argument("--gpu", type=int, default=None, help="one GPU (default: all)")
        q.set_defaults(func=func, parser=q)


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
        return server.run()
    except SimError as exc:
        raise CliError(str(exc)) from None
    except OSError as exc:  # its --log-file (a missing folder, no permission): one line
        where = exc.filename if exc.filename is not None else "its files"
        raise CliError(f"simulated server: cannot write {where}: "
                       f"{exc.strerror or exc}") from None


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
