"""Remote text is data: make any log line safe to put on the screen."""

from __future__ import annotations

from specmon.textsafe import visible, visible_lines


def plain(line: str) -> str:
    """The line with every control character made visible (an ESC shows as the text \\x1b)."""
    return visible(line)


def plain_lines(text: str) -> str:
    """Like `plain`, but newlines stay line breaks (notifications of several lines)."""
    return visible_lines(text)
