"""Command lines (as read from /proc/PID/cmdline) -> flags. Pure."""

from __future__ import annotations

from collections.abc import Sequence


def flag_values(argv: Sequence[str]) -> dict[str, str | bool]:
    """`--flag value`, `--flag=value` and bare `--flag` (True) from a command line."""
    out: dict[str, str | bool] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--") and len(arg) > 2:
            if "=" in arg:
                k, v = arg.split("=", 1)
                out[k] = v
            elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                out[arg] = argv[i + 1]
                i += 1
            else:
                out[arg] = True
        i += 1
    return out
