"""A server's fingerprint gathered through its host: the agent's `proc_info`/`read`/`probe` ops
(the probe runs in the agent; no interpreter taken from a process is ever run).

This is the I/O half of fingerprints; `specmon.analysis.fingerprint` stays pure (it builds and
diffs fingerprints from what this module read).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from specmon.analysis.fingerprint import (
    NCCL_CONF_PATHS,
    EnvSnapshot,
    Fingerprint,
    _str,
    env_from_mapping,
    fingerprint_from,
    gpu_states,
    parse_conf,
)
from specmon.parse.gpu_sample import GpuSample
from specmon.sources.discovery import engine_of


async def env_of(agent: Any, pid: int, title: str) -> EnvSnapshot:
    """A process's environment as the fingerprint keeps it (tracked variables, the rest
    hashed), read by the agent from /proc/PID/environ; an error snapshot when it cannot be."""
    try:
        info = await agent.request("proc_info", pid=pid, fds=[], environ_prefixes=[""])
    except Exception as exc:  # noqa: BLE001 - the process may be gone; say so
        return EnvSnapshot(pid, title, f"error: {exc}")
    return env_from_mapping(info.get("environ"), pid, title, info.get("environ_status"))


async def collect(agent: Any, *, launcher_pid: int, argv: Sequence[str] | None = None,
                  workers: Sequence[tuple[int, str]] = (), server_info: Mapping[str, Any] | None = None,
                  nccl_lines: Iterable[str] = (), gpus: Sequence[GpuSample] = (),
                  probe: bool = False, python: str | None = None,
                  engine: str | None = None) -> Fingerprint:
    """Gather a fingerprint through the host agent (`proc_info`, `read`, and with `probe` the
    agent's RECORD probe: the engine's version, modified files, host info).

    `engine`: whose distribution the probe hashes ("sglang" | "vllm"); by default the one
    the server's command line `argv` runs.

    `agent.request(op, **args)` is specmon.hosts.agent_client.AgentClient's call. `python`: an
    interpreter the user configured; without it the probe reads where the launcher (if it is
    the user's own process) imports from. argv[0] is never run.
    """
    launcher = await env_of(agent, launcher_pid, "launcher")
    worker_envs = [await env_of(agent, pid, title) for pid, title in workers]
    conf: dict[str, dict[str, str] | None] = {}
    home = None
    # HOME is hashed in the snapshot; ask for it directly
    try:
        info = await agent.request("proc_info", pid=launcher_pid, fds=[], environ_prefixes=["HOME"])
        home = (info.get("environ") or {}).get("HOME")
    except Exception:  # noqa: BLE001
        home = None
    for spec in NCCL_CONF_PATHS:
        path: str | None = spec
        if spec == "$NCCL_CONF_FILE":
            path = launcher.vars.get("NCCL_CONF_FILE")
        elif spec.startswith("~/"):
            path = f"{home}/{spec[2:]}" if home else None
        if not path:
            continue
        conf[spec] = await _read_conf(agent, path)
    found: dict[str, Any] = {}
    if probe:
        from specmon.sources.fp_probe import probe as agent_probe

        try:
            dist = engine or (engine_of(list(argv)) if argv else "sglang")
            found = await agent_probe(agent, python, dist=dist, pid=launcher_pid)
        except Exception:  # noqa: BLE001 - the fingerprint is still useful without it
            found = {}
    return fingerprint_from(
        server_args=server_info, argv=argv, version=_str((server_info or {}).get("version")) or found.get(
            "version"), nccl_lines=nccl_lines, launcher=launcher, workers=worker_envs, nccl_conf=conf,
        modified_files=found.get("modified_files"), modified_method=found.get("method"),
        modified_dist=_str(found.get("dist")), gpus=gpu_states(gpus), host=found.get("host"),
        server_pids=[launcher_pid] + [p for p, _ in workers], collected_at=time.time())


async def _read_conf(agent: Any, path: str) -> dict[str, str] | None:
    import base64

    try:
        res = await agent.request("read", path=path, offset=0, size=1 << 16)
    except Exception:  # noqa: BLE001 - absent or unreadable: no file
        return None
    return parse_conf(base64.b64decode(res["b64"]).decode("utf-8", "replace"))


async def run_probe(host: Any, pythonpath: str | None = None,
                    dist: str = "sglang") -> dict[str, Any]:
    """The RECORD probe of distribution `dist` (the server's engine: "sglang" | "vllm") in the
    host's agent (its configured interpreter); {} on failure.

    `pythonpath`: folders (os.pathsep-separated) where the server's engine is installed, which
    the probe reads instead of the agent's own sys.path (it must see the install the server
    imports, not another one).
    """
    import os

    from specmon.hosts.agent_client import AgentClient
    from specmon.sources.fp_probe import probe

    path = [d for d in pythonpath.split(os.pathsep) if d] if pythonpath is not None else None
    try:
        async with AgentClient(host) as agent:
            return await probe(agent, dist=dist, path=path)
    except Exception:  # noqa: BLE001 - the fingerprint is still useful without it
        return {}


async def probe_pid(host: Any, pid: int, dist: str = "sglang",
                    workers: Sequence[tuple[int, str]] = ()) -> dict[str, Any]:
    """The RECORD probe of a running server (`pid`, the user's own) in the host's agent: `dist`
    where that process imports from; and the environment its launcher and `workers` (pid,
    title) run with ("env": `env_snapshots` reads it), the NCCL variables the TP workers really
    have. {} on failure (the fingerprint is still useful without)."""
    from specmon.hosts.agent_client import AgentClient
    from specmon.sources.fp_probe import probe

    out: dict[str, Any] = {}
    with contextlib.suppress(Exception):  # one line of the panel is lost, nothing else
        async with AgentClient(host) as agent:
            with contextlib.suppress(Exception):  # the environment is still worth reading
                out = await probe(agent, dist=dist, pid=pid)
            out["env"] = {"launcher": asdict(await env_of(agent, pid, "launcher")),
                          "workers": [asdict(await env_of(agent, w, t)) for w, t in workers]}
    return out
