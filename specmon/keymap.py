"""Every key binding id of the UI, without Textual: the config's `[keys]` table is checked here.

The UI declares its `Binding(..., id=...)` objects next to their actions; a test keeps this table
and those ids equal, so a `[keys]` entry naming an id that does not exist is an error at load
time, not a silently ignored line.
"""

from __future__ import annotations

import re

#: binding id -> what it does (the Footer/help text of the binding)
BINDING_IDS: dict[str, str] = {
    "quit": "Quit",
    "help": "Help",
    "help.close": "Close help",
    "log.filter": "Filter log",
    "log.follow": "Follow log",
    "log.pause": "Pause log",
    "log.clear_filter": "Clear filter",
    "window.cycle": "Window",
    "baseline.record": "Record baseline",
    "host.next": "Next host",
    "log.full": "Log full screen",
    "log.compact": "Compact log",
    "chart.metric": "Chart metric",
    "gpus.toggle": "GPU rows",
    "snapshot.export": "Export",
    "snapshot.screenshot": "Screenshot",
    "server.start": "Start",
    "server.stop": "Stop",
    "server.restart": "Restart",
    "server.swap": "Swap",
    "server.bench": "Benchmark",
    "confirm.yes": "Yes",
    "confirm.no": "No",
    "replay.toggle": "Play/pause",
    "replay.back": "-10 s",
    "replay.forward": "+10 s",
    "replay.back_long": "-60 s",
    "replay.forward_long": "+60 s",
    "replay.slower": "Slower",
    "replay.faster": "Faster",
    "replay.start": "Start",
    "replay.end": "End",
    "advisor.show": "Advisor",
    "advisor.close": "Close advisor",
}

_MODS = ("ctrl", "shift", "alt", "meta", "super", "hyper")
# a Textual key name (letters, digits, _) or one printable character, after optional modifiers
_KEY = re.compile(r"((?:" + "|".join(_MODS) + r")\+)*([A-Za-z0-9_]+|[!-~])\Z")


def key_problem(keys: str) -> str | None:
    """Why `keys` (Textual form: "ctrl+u", "f5", "a,b") is not a key list; None when it is."""
    if not keys.strip():
        return "is empty"
    for part in keys.split(","):
        p = part.strip()
        if not p or not _KEY.match(p) or p.endswith("+") and len(p) > 1:
            return f"{part.strip() or '(empty)'!r} is not a key (e.g. \"ctrl+u\", \"f5\", \"a\")"
        mods = p.split("+")[:-1]
        if len(set(mods)) != len(mods):
            return f"{p!r} repeats a modifier"
    return None
