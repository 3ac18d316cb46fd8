"""The UI's actions in one Textual-free table: id, key, description, help group, target.

The Textual bindings (specmon/ui/keys.py), the help screen's groups, the command palette and the
config's `[keys]` check are all generated from `ACTIONS`, so an action is added in one place, and
a `[keys]` entry naming an id that does not exist is an error at load time, not a silently
ignored line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Action:
    """One user action: its binding id (the `[keys]` name), default key(s) in Textual's form,
    the action it runs, the short text of the footer, the help group and the help text, where
    its binding lives (`target`: "app", "panel" (a server panel: the focused server), "log"
    (a log view, and the panel around it), "replay", "help", "confirm", "advisor"; "builtin":
    a Textual key listed in the help only), whether the footer shows it, and its command-palette
    title (None: not in the palette)."""

    id: str | None
    key: str
    action: str
    description: str
    group: str
    help: str
    target: str = "app"
    show: bool = True
    palette: str | None = None


#: the help screen's groups, in order
GROUPS = ("Move around", "Logs", "Numbers", "Servers", "Replay", "Files")

ACTIONS: tuple[Action, ...] = (
    # in footer order (the help lists each group's actions in this order too)
    Action(None, "tab", "focus_next", "Next", "Move around",
           "next panel (the focused one has a bright border)", "builtin"),
    Action(None, "shift+tab", "focus_previous", "Previous", "Move around", "previous panel",
           "builtin"),
    Action("quit", "q", "quit", "Quit", "Files", "quit"),  # (Textual's palette has "Quit")
    Action("help", "question_mark", "help", "Help", "Move around", "this help",
           palette="Help"),
    Action("log.filter", "slash", "filter", "Filter", "Logs",
           "filter the focused log (plain text)", palette="Filter log", target="log"),
    Action("log.follow", "end", "follow", "Follow log", "Logs", "follow the end again",
           show=False, palette="Follow log", target="log"),
    Action("log.pause", "p", "pause", "Pause log", "Logs",
           "pause following (scrolling up pauses too)", show=False, palette="Pause log", target="log"),
    Action("window.cycle", "w", "cycle_window", "Window", "Numbers",
           "statistics window: 30 s, 60 s, 300 s", palette="Cycle window"),
    Action("baseline.record", "b", "record_baseline", "Baseline", "Numbers",
           "record the focused server's run as its baseline", palette="Record baseline", target="panel"),
    Action("host.next", "h", "next_host", "Next host", "Move around",
           "next host tab (several hosts)", palette="Next host"),
    Action("log.full", "l", "toggle_log_full", "Log", "Move around",
           "the focused server's log full screen, and back", palette="Log full screen", target="log"),
    Action("log.compact", "c", "toggle_compact", "Compact log", "Logs",
           "compact lines (time, bs, tok/s, accept len) or raw lines", show=False,
           palette="Compact / raw log"),
    Action("chart.metric", "t", "chart_metric", "Chart", "Numbers",
           "chart: decode tok/s, accept len, t_cycle", show=False, palette="Chart metric"),
    Action("gpus.toggle", "d", "toggle_gpus", "GPU rows", "Move around",
           "every GPU's row, or one summary row per server", palette="GPU rows"),
    Action("snapshot.export", "e", "export_snapshot", "Export", "Files",
           "export the session to a snapshot file", show=False, palette="Export snapshot"),
    Action("snapshot.screenshot", "s", "screenshot", "Screenshot", "Files",
           "save an SVG screenshot", show=False),  # (Textual's palette has "Screenshot")
    Action("server.start", "u", "server_start", "Start", "Servers",
           "start the focused server from its profile", palette="Start server", target="panel"),
    Action("server.stop", "x", "server_stop", "Stop", "Servers", "stop it (asks first)",
           palette="Stop server", target="panel"),
    Action("server.restart", "r", "server_restart", "Restart", "Servers", "restart it",
           show=False, palette="Restart server", target="panel"),
    Action("server.swap", "o", "server_swap", "Swap", "Servers",
           "stop it and start the other", show=False, palette="Swap servers", target="panel"),
    Action("server.bench", "m", "server_bench", "Benchmark", "Servers",
           "a short end-to-end benchmark", show=False, palette="Benchmark", target="panel"),
    Action("advisor.show", "a", "advisor", "Advisor", "Numbers",
           "the advisor: best speculative settings, break-even accept len", show=False,
           palette="Advisor"),
    Action("log.clear_filter", "escape", "clear_filter", "Clear filter", "Logs",
           "clear the filter", show=False, palette="Clear filter", target="log"),
    Action(None, "ctrl+p", "command_palette", "Palette", "Move around",
           "every action, and the themes", "builtin"),
    Action("replay.toggle", "space", "toggle_play", "Play/pause", "Replay", "play / pause",
           "replay"),
    Action("replay.back", "comma", "seek(-10)", "−10 s", "Replay", "back 10 s", "replay"),
    Action("replay.forward", "full_stop", "seek(10)", "+10 s", "Replay", "forward 10 s",
           "replay"),
    Action("replay.back_long", "less_than_sign", "seek(-60)", "−60 s", "Replay", "back 60 s",
           "replay", show=False),
    Action("replay.forward_long", "greater_than_sign", "seek(60)", "+60 s", "Replay",
           "forward 60 s", "replay", show=False),
    Action("replay.slower", "left_square_bracket", "slower", "Slower", "Replay", "slower",
           "replay"),
    Action("replay.faster", "right_square_bracket", "faster", "Faster", "Replay", "faster",
           "replay"),
    Action("replay.start", "g", "seek_start", "Start", "Replay", "to the start", "replay",
           show=False),
    Action("replay.end", "G", "seek_end", "End", "Replay", "to the end", "replay", show=False),
    Action("help.close", "escape,q,question_mark", "dismiss", "Close help", "Files",
           "close this help", "help"),
    Action("confirm.yes", "y", "answer(True)", "Yes", "Servers", "yes", "confirm"),
    Action("confirm.no", "n,escape", "answer(False)", "No", "Servers", "no", "confirm"),
    Action("advisor.close", "escape,q,a", "dismiss", "Close advisor", "Numbers",
           "close the advisor", "advisor"),
)

#: binding id -> what it does (the footer text): the ids a `[keys]` table may name
BINDING_IDS: dict[str, str] = {a.id: a.description for a in ACTIONS if a.id is not None}


def actions_for(target: str) -> list[Action]:
    """The actions whose bindings live on `target` ("app", "replay", "help", ...)."""
    return [a for a in ACTIONS if a.target == target]


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
