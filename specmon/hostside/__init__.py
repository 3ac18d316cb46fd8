"""Code that runs ON the observed host: the one specmon host agent (agent.py).

Nothing in this folder imports specmon: agent.py is streamed to the host's Python over the SSH
channel (see specmon/hosts/agent_client.py) and must run with only the standard library (plus
pynvml when the host has it), on Python 3.6+. specmon may import it (LocalNvmlSource uses its
NVML collector in-process); it never imports specmon.
"""
