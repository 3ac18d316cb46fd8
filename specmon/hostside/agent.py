"""The host agent run as a file: `python specmon/hostside/agent.py [gpu ARGS | probe [DIST]]`.

The agent is this folder's modules (protocol, tail, procs, control, nvml, main; see
protocol.py), which specmon ships over the host channel and loads with protocol.LOADER. Run as a
file (benchmarks, manual checks, a host with a copy of this folder), this script loads the same
modules from its folder with the same loader and runs main.main(): the standalone GPU sampler
(`gpu --interval 1`), the one-shot probe (`probe`), or the JSON-lines agent on stdin/stdout.
Imported as a module it does nothing.
"""

import os
import sys


def _run_from_folder():
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "protocol.py")
    with open(path, "rb") as f:
        proto = {"__file__": path, "__name__": "specmon_hostside_protocol_bootstrap"}  # type: dict
        exec(compile(f.read(), path, "exec"), proto)
    exec(proto["LOADER"], {"B": proto["bundle"](here)})
    sys.modules[proto["PACKAGE"] + ".main"].main()


if __name__ == "__main__" and not __package__:
    _run_from_folder()
