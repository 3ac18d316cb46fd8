"""Remote text is data: make any log line safe to put on the screen."""

from __future__ import annotations

import re

from rich.text import Text

# C0 controls except tab, DEL, and C1 controls: shown as visible \xNN escapes, never interpreted.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def plain(line: str) -> str:
    """The line with every control character made visible (an ESC shows as the text \\x1b)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", line)


def plain_text(line: str, style: str = "") -> Text:
    """A Rich Text that never interprets markup: `[bold red]x[/]` stays those characters."""
    return Text(plain(line), style=style, no_wrap=True, end="")
