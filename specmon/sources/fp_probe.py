"""The RECORD-hash probe (SGLang version, files that differ from the wheel's RECORD, host
facts): client side. The probe itself lives in the host agent (specmon/hostside/agent.py:
`modified_files`, `host_info`, op "probe"); this module asks for it.

- `probe(agent, python)`: through the host's running agent (no new process for the probe;
  the server's interpreter is asked only for its sys.path).
- `probe_source()`: the agent program for a one-shot `python -c SOURCE [DIST]` that prints
  the probe as one JSON line, where no agent handle is at hand.
"""

from __future__ import annotations

from typing import Any

from specmon.hosts.agent_client import AgentClient, agent_source
from specmon.hostside.agent import host_info, modified_files

__all__ = ["host_info", "modified_files", "probe", "probe_source"]


async def probe(agent: AgentClient, python: str | None = None, dist: str = "sglang",
                timeout: float = 60.0) -> dict[str, Any]:
    """{"version", "method", "modified_files", "host"} as `python` (the server's) sees them."""
    res = await agent.request("probe", timeout=timeout, python=python, dist=dist)
    return dict(res) if isinstance(res, dict) else {}


def probe_source() -> str:
    """`python -c` code: the agent run in its one-shot probe mode."""
    return "import sys\nsys.argv[1:1] = ['probe']\n" + agent_source().decode("utf-8")
