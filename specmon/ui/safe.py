"""Remote text is data: make any log line safe to put on the screen."""

from __future__ import annotations

import re

from rich.text import Text

# C0 controls except tab, DEL, C1 controls, the Unicode line/paragraph separators and the bidi
# overrides (they reorder what the terminal shows): visible escapes, never interpreted.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c <= 0xFF else f"\\u{c:04x}"


def plain(line: str) -> str:
    """The line with every control character made visible (an ESC shows as the text \\x1b)."""
    return _CONTROL.sub(_escape, line)


def plain_lines(text: str) -> str:
    """Like `plain`, but newlines stay line breaks (notifications of several lines)."""
    return "\n".join(plain(part) for part in str(text).split("\n"))


def plain_text(line: str, style: str = "") -> Text:
    """A Rich Text that never interprets markup: `[bold red]x[/]` stays those characters."""
    return Text(plain(line), style=style, no_wrap=True, end="")
