"""Text laid out to a widget's width: `fit`, `wrap_words`, number formats, and `Lines`, the
Static that repaints only when its pieces changed (issue 15's cost rules: nothing is measured
twice, nothing wraps). Colours are theme variables (`$warning`, ...), never literal colours.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from textual import events
from textual.content import Content
from textual.widgets import Static

from specmon.numfmt import NA, num  # noqa: F401  (re-exported: the widgets format with it)
from specmon.textsafe import is_plain, visible_lines

Piece = tuple[str, str]  # (text, Textual style: "bold $warning", "" for none)

def safe_id(name: str) -> str:
    """A widget id for a server name (`host/server` has characters ids may not hold)."""
    out = "".join(c if c.isalnum() or c in "-_" else "_" for c in name) or "server"
    return out if not out[0].isdigit() else f"s{out}"


def fit(text: str, width: int) -> str:
    """`text` in `width` columns, never cut mid-word: trailing " · " parts are dropped whole;
    a first part still too long is cut at a word boundary, with an ellipsis."""
    if len(text) <= width:
        return text
    parts = text.split(" · ")
    while len(parts) > 1:
        parts.pop()
        joined = " · ".join(parts)
        if len(joined) <= width:
            return joined
    text = parts[0]
    if width <= 1:
        return "…"[:max(width, 0)]
    cut = text[:width - 1]
    sp = max(cut.rfind(" "), cut.rfind("·"), cut.rfind(","))
    if sp <= 0:
        return ""
    cut = cut[:sp].rstrip(" ·,")
    return cut + "…" if cut else ""


def wrap_words(text: str, width: int, rows: int) -> list[str]:
    """`text` over at most `rows` lines of `width`, broken between words; the last line ends
    with an ellipsis (at a word boundary) when the text does not fit."""
    out: list[str] = []
    words = text.split()
    line = ""
    while words and len(out) < rows:
        word = words[0]
        cand = f"{line} {word}" if line else word
        if len(cand) <= width:
            line = cand
            words.pop(0)
            continue
        if not line:  # a single word wider than the line
            line = word[:width]
            words.pop(0)
        out.append(line)
        line = ""
    if line and len(out) < rows:
        out.append(line)
    if words and out:
        out[-1] = fit(out[-1] + " " + " ".join(words), width) or out[-1]
    return out


class Lines(Static):
    """A Static that repaints only when its content changed and relayouts only when needed."""

    DEFAULT_CSS = """
    Lines { text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def __init__(self, content: str = "", **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._key: tuple[Piece, ...] | None = None
        self._nlines = -1

    @property
    def avail(self) -> int:
        """Columns to lay text out in (before the first layout: a generous guess)."""
        return self.content_size.width or 200

    def put(self, pieces: Iterable[Piece]) -> bool:
        """Show `pieces`; every text goes through the one text-safety function on the way, so
        host text a statement carries (a server arg's value, a cause) is data on screen."""
        key = tuple((t if is_plain(t) else visible_lines(t), style) for t, style in pieces)
        if key == self._key:
            return False
        n = 1 + sum(t.count("\n") for t, _ in key)
        self.update(Content.assemble(*key), layout=n != self._nlines)
        self._key, self._nlines = key, n
        return True

    def on_resize(self, _event: events.Resize) -> None:
        self._key, self._nlines = None, -1  # laid out for another width: redraw, relayout
        request = getattr(self.app, "request_refresh", None)
        if request is not None:
            request()  # now, not at the next tick: text is laid out to the new width


def spark(vals: Sequence[float | None], top: float | None, width: int) -> str:
    """Bars on a fixed 0..top scale (a constant 1980 MHz is full height, not zero)."""
    bars = "▁▂▃▄▅▆▇█"
    vals = list(vals)[-width:] if width > 0 else []
    if not top or top <= 0 or not any(v is not None and math.isfinite(v) for v in vals):
        return ""
    out = []
    for v in vals:
        if v is None or not math.isfinite(v):
            out.append(" ")
        else:
            out.append(bars[max(0, min(7, int(v / top * 8 - 1e-9)))])
    return "".join(out)


def nice_ceiling(x: float) -> float:
    """A round scale top at or above x (100, 120, 150, 200, ...)."""
    if x <= 0 or not math.isfinite(x):
        return 1.0
    e = 10 ** math.floor(math.log10(x))
    for m in (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0):
        if m * e >= x:
            return m * e
    return 10 * e
