"""The headline's widgets: the big figure (block digits), the speedup bar, the drift panel.
They render `specmon.ui.headline.HeadlineModel`; they compute no number."""

from __future__ import annotations

from specmon.parse.vllm import throughput_label
from specmon.session.speedup import format_speedup
from specmon.session.window import interval_text
from specmon.ui.headline import HeadlineModel
from specmon.ui.safe import plain
from specmon.ui.widgets.text import Lines, Piece, fit, wrap_words

STATE_STYLE = {"win": "bold $success", "lose": "bold $error", "tie": "bold $warning",
               "na": "bold $text-muted"}
DRIFT_STYLE = {"drift": "bold $error", "improved": "bold $success", "ok": "$success",
               "checking": "$text-muted", "none": "$text-muted"}


# A 3x5 pixel font drawn with half blocks into 3 rows: solid strokes that read as digits at
# 80x24 (Textual's Digits are thin box-drawing lines that do not).
_FONT = {
    "0": ("###", "#.#", "#.#", "#.#", "###"), "1": (".#.", "##.", ".#.", ".#.", "###"),
    "2": ("###", "..#", "###", "#..", "###"), "3": ("###", "..#", "###", "..#", "###"),
    "4": ("#.#", "#.#", "###", "..#", "..#"), "5": ("###", "#..", "###", "..#", "###"),
    "6": ("###", "#..", "###", "#.#", "###"), "7": ("###", "..#", "..#", "..#", "..#"),
    "8": ("###", "#.#", "###", "#.#", "###"), "9": ("###", "#.#", "###", "..#", "###"),
    ".": (".", ".", ".", ".", "#"), "x": ("...", "...", "#.#", ".#.", "#.#"),
    "-": ("...", "...", "###", "...", "..."), "N": ("#..#", "##.#", "#.##", "#..#", "#..#"),
    "/": ("..#", "..#", ".#.", "#..", "#.."), "A": (".#.", "#.#", "###", "#.#", "#.#"),
}


_BLANK = "\u00a0"  # a no-break space: a row's leading blank cells are kept, not stripped


def big_text(text: str) -> list[str]:
    """`text` in the block font: 3 rows (5 pixel rows, two per row), one blank column between
    glyphs; characters without a glyph are left out."""
    glyphs = [_FONT[c] for c in text if c in _FONT]
    rows = []
    for top, bottom in ((0, 1), (2, 3), (4, None)):
        cells = []
        for g in glyphs:
            cells.append("".join(
                {(True, True): "█", (True, False): "▀", (False, True): "▄"}.get(
                    (a == "#", bottom is not None and g[bottom][i] == "#"), _BLANK)
                for i, a in enumerate(g[top])))
        rows.append(_BLANK.join(cells))
    return rows


class BigFigure(Lines):
    """The headline's biggest number (the speedup true right now) in solid block digits,
    coloured by its own 95% interval, with what it is compared against under it."""

    DEFAULT_CLASSES = "big-figure"
    value: str = "N/A"

    def show(self, model: HeadlineModel) -> None:
        big = model.big
        style = STATE_STYLE[big.state]
        rows = big_text(big.text)
        p: list[Piece] = []
        for i, row in enumerate(rows):
            ink = row.lstrip(_BLANK)
            # leading blank cells as their own piece: SVG renderers strip a text run's leading
            # spaces, which would shift the row in a screenshot
            p.append((("\n" if i else "") + _BLANK * (len(row) - len(ink)), ""))
            p.append((ink, style))
        p.append(("\n" + big.short, "$text-muted"))
        self.put(p)
        self.value = big.text  # the figure shown ("1.07x", "N/A"): tests read it
        for st in STATE_STYLE:
            self.set_class(st == big.state, f"-{st}")


class SpeedupBar(Lines):
    """Beside the big figure: the speedup it shows with its interval, the statements that make
    the live number suspect (drift, conditions that differ, an ended run), batch size,
    medians with their n, and what they imply. The session computes all of it."""

    def show(self, model: HeadlineModel, rows: int = 4) -> None:
        sp = model.speedup
        w = self.avail
        p: list[Piece] = []
        view = model.view
        if sp is None:
            p.append(("speedup N/A", STATE_STYLE["na"]))
            p.append(("\n" + fit(model.reason or "", w), "$text-muted"))
            self.put(p)
            return
        parts = format_speedup(view).split(" · ") if view is not None else [f"{sp.ratio:.2f}x"]
        big = model.big
        honest = big.short == "vs recorded"
        if honest:
            vr = view.vs_recorded_ci95 if view is not None else None
            ci = f" (95% {vr[0]:.2f}–{vr[1]:.2f})" if vr else ""
            head = f"speedup {big.text} {big.label}{ci}"
        else:
            head = "speedup " + parts[0]  # "speedup 1.50x vs live baseline 62.9 (run 2)"
        p.append((fit(head, w) or head[:w], STATE_STYLE[big.state]))
        verdict = {"win": "speculation wins", "lose": "speculation loses",
                   "tie": "no clear difference (the interval holds 1)",
                   "na": "no verdict (no interval)"}[model.state]
        lines: list[tuple[str, str]] = []
        statements = list(model.statements)
        if honest:
            # the live figure second, with why it is not the speedup
            drift = [x for x in statements if "DRIFT" in x]
            lines.append((" · ".join([f"live {parts[0]}", *drift]), "bold $warning"))
            statements = [x for x in statements if x not in drift and "x vs recorded" not in x]
        else:
            drift = [x for x in statements if "DRIFT" in x or "vs recorded" in x]
            if drift:
                lines.append((" · ".join(drift), "bold $warning"))
            statements = [x for x in statements if x not in drift]
        lines.extend((x, "bold $warning") for x in statements)
        live = "live " if honest else ""
        lines.append((f"{live}95% {interval_text(sp)} · bs {sp.running_req} · {verdict} · "
                      f"spec {sp.spec.median:.1f} / base {sp.base.median:.1f} tok/s", ""))
        lines.append((f"medians, {throughput_label(model.engine)}, last {model.window_s:.0f} s "
                      f"of each run · n spec {sp.spec.n} / base {sp.base.n}", "$text-muted"))
        cyc, be = sp.verify_cycle_ms, sp.break_even_accept_len
        if cyc is not None and be is not None and sp.spec.accept_len is not None:
            lines.append((f"verify cycle {cyc:.1f} ms · break-even accept len {be:.2f} "
                          f"(now {sp.spec.accept_len:.2f})", "$text-muted"))
        else:
            lines.append((f"ms/token {sp.spec_ms_per_token:.1f} spec vs "
                          f"{sp.base_ms_per_token:.1f} base", "$text-muted"))
        for line, style in lines[:max(rows - 1, 0)]:
            p.append(("\n" + fit(line, w), style))
        self.put(p)


class DriftPanel(Lines):
    """Each compared server against its recorded baseline: OK, or DRIFT with its first cause."""

    def show(self, model: HeadlineModel, rows: int = 4, hint_for: str | None = None,
             hint: str = "") -> None:
        """`hint`: said after server `hint_for`'s "no recorded baseline" (how to record one,
        where it goes): the server the key acts on, so "this run" is the one above it."""
        w = self.avail
        p: list[Piece] = []
        left = rows - len(model.drift)  # rows left for causes
        for i, d in enumerate(model.drift):
            name = plain(d.server)
            if i:
                p.append(("\n", ""))
            p.append((name + " ", "bold"))
            text = d.text
            if len(name) + 1 + len(text) > w:
                text = text.replace(" vs recorded ", " vs rec. ")
            if len(name) + 1 + len(text) > w:
                text = text.split(" vs ")[0]  # "DRIFT -29%": the essential
            p.append((fit(text, max(w - len(name) - 1, 4)), DRIFT_STYLE[d.state]))
            if d.state == "none" and hint and d.server == hint_for and left > 0:
                p.append(("\n  " + (fit(hint, w - 2) or hint[:w - 2]), "$accent"))
                left -= 1
                hint = ""
            if d.cause and left > 0:
                lines = wrap_words("cause: " + plain(d.cause), w - 2, left)
                left -= len(lines)
                for line in lines:
                    p.append(("\n  " + line, "$warning"))
        if not p:
            p.append(("drift: no servers yet", "$text-muted"))
        self.put(p)
        self.set_class(any(d.state == "drift" for d in model.drift), "-drift")
