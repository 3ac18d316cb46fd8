"""Text from hosts and files is data: control characters made visible, for every way out.

The terminal UI (specmon/ui/safe.py), reports and SVG charts all use `visible`, so an ESC, BEL
or OSC sequence from a log line, a snapshot or a host name is shown as the text `\\x1b`, never
sent to a terminal, a Markdown viewer or an XML parser (C0 controls are not even legal XML).
"""

from __future__ import annotations

import re
from typing import Any, BinaryIO, TextIO

# C0 controls except tab, DEL, C1 controls, the Unicode line/paragraph separators, the bidi
# overrides and marks (they reorder what a terminal shows: ALM U+061C, LRM/RLM U+200E-F), the
# invisible ones (zero-width space/joiners U+200B-D, word joiner and invisible operators
# U+2060-4, BOM U+FEFF: they hide or split a word unseen) and XML-illegal non-characters.
_CONTROL = re.compile(
    r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028\u2029\u202a-\u202e"
    r"\u2060-\u2064\u2066-\u2069\ufeff\ufffe\uffff\ud800-\udfff]"
)


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c <= 0xFF else f"\\u{c:04x}"


def visible(text: str) -> str:
    """`text` with every control character shown as an escape (ESC -> the 4 characters \\x1b)."""
    return _CONTROL.sub(_escape, text)


SHOWN = 160  # characters of one value from a host shown in a line of output


def cut(text: str, limit: int = SHOWN) -> str:
    """`text` cut to `limit` characters, the cut said with "...": a value from a host or file
    (a model path, an argument) may be a megabyte, and one line of output shows it."""
    return text if len(text) <= limit else text[:max(limit - 3, 0)] + "..."


def _json_escape(m: re.Match[str]) -> str:
    c = m.group()
    # tab, LF, CR: JSON whitespace outside strings (indented JSON), escaped by the encoders inside
    return c if c in "\t\n\r" else f"\\u{ord(c):04x}"


def json_safe(text: str) -> str:
    """JSON text with every character `visible` escapes written as a JSON \\u escape: the same
    JSON value (outside strings JSON text is ASCII), but `tail -f` of a recording or `zcat` of
    a snapshot sends no C1 control, DEL or bidi override to a terminal. Other non-ASCII text
    (a prompt in Chinese) stays as it is. (The encoders already escape C0 controls.)"""
    if text.isascii() and "\x7f" not in text:
        return text
    return _CONTROL.sub(_json_escape, text)


def visible_lines(text: str) -> str:
    """Like `visible`, but newlines stay line breaks."""
    return "\n".join(visible(part) for part in str(text).split("\n"))


def is_plain(text: str) -> bool:
    """True when `text` has nothing `visible_lines` would change: printable ASCII, tabs and
    newlines (the fast test for JSON and report lines, which are almost always plain)."""
    return text.isascii() and text.replace("\n", "").replace("\t", "").isprintable()


_PLAIN_BYTES = bytes(range(0x20, 0x7F)) + b"\t\n"


def is_plain_bytes(data: bytes) -> bool:
    """`is_plain` for bytes: nothing is left once every printable ASCII byte, tab and newline
    is deleted (one C pass: 11 ms for 36 MB of JSON rows, where `is_plain` of the text takes
    96 ms)."""
    return not data.translate(None, _PLAIN_BYTES)


class SafeBinary:
    """The binary side of a `SafeStream` (`parse --json` writes its ASCII rows as bytes):
    every write goes through the same check; bytes that are not plain are decoded and made
    visible first."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw

    def write(self, data: bytes) -> int:
        if is_plain_bytes(data):
            self.raw.write(data)
        else:
            self.raw.write(visible_lines(data.decode("utf-8", errors="replace")).encode())
        return len(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


class SafeStream:
    """A text stream whose every write goes through `visible_lines`: what an offline command
    prints (a server_args value, a stored fingerprint, a file name) cannot reach the terminal
    as an escape sequence (OSC 52 clipboard write, CSI 2J, C1, U+202E)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(text if is_plain(text) else visible_lines(text))
        return len(text)

    @property
    def buffer(self) -> SafeBinary:
        return SafeBinary(self.stream.buffer)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)
