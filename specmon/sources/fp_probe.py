"""The RECORD-hash probe of the server's engine (SGLang's install, or vLLM's for a vLLM server:
its version, files that differ from the wheel's RECORD, host facts): client side. The probe itself
lives in the host agent (specmon/hostside/procs.py: `modified_files`, `host_info`, op "probe");
this module asks for it.

- `probe(agent, ...)`: through the host's running agent (no new process for the probe). It
  looks in folders the caller names, or the interpreter the user configured, or (read, never
  run) where the user's own server process imports from; never in a path taken from another
  user's process.
- `probe_source()`: the agent program for a one-shot `python -c SOURCE [DIST]` that prints
  the probe as one JSON line, where no agent handle is at hand.
"""

from __future__ import annotations

from typing import Any

from specmon.hosts.agent_client import AgentClient, agent_source
from specmon.hostside.procs import host_info, modified_files
from specmon.hostside.protocol import one_shot_code

__all__ = ["host_info", "modified_files", "probe", "probe_source"]


async def probe(agent: AgentClient, python: str | None = None, dist: str = "sglang",
                timeout: float = 60.0, *, pid: int | None = None,
                path: list[str] | None = None) -> dict[str, Any]:
    """{"version", "method", "modified_files", "host", "dist"}: distribution `dist` ("sglang",
    "vllm": the server's own engine) as found in `path`, else as the
    configured interpreter `python` sees it, else where server process `pid` (the user's own)
    imports from, else in the agent's own interpreter."""
    args: dict[str, Any] = {"python": python, "dist": dist}
    if pid is not None:
        args["pid"] = pid
    if path is not None:
        args["path"] = path
    res = await agent.request("probe", timeout=timeout, **args)
    return dict(res) if isinstance(res, dict) else {}


def probe_source() -> str:
    """`python -c` code: the agent (its bundle embedded) run in its one-shot probe mode."""
    return one_shot_code(agent_source(), ["probe"])
