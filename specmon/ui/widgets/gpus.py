"""GPUs grouped by the server whose processes use them: one summary row per group, `d` expands
every GPU's row."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from specmon.analysis.stats import median
from specmon.parse.gpu_sample import SEVERE_REASONS, GpuSample, is_clock_limited
from specmon.session.ownership import owned_gpus
from specmon.session.state import ServerState
from specmon.ui.safe import plain
from specmon.ui.widgets.text import NA, Lines, Piece, fit, num, spark


def reason_style(name: str) -> str:
    """Severity of a clock-event reason: thermal / HW slowdown, power cap, idle, other."""
    if name in SEVERE_REASONS:
        return "bold $error"
    if name == "SwPowerCap":
        return "bold $warning"
    if name == "GpuIdle":
        return "$text-muted"
    return "bold"


def gpu_groups(gpus: Sequence[Any], servers: Iterable[ServerState]
               ) -> list[tuple[str, list[Any]]]:
    """GPUs grouped by the server that owns them (specmon.session.ownership: its processes,
    else its arguments), in server order; the rest in an "unowned" group."""
    owned: dict[int, str] = {}
    order: list[str] = []
    for s in servers:
        order.append(s.name)
        own = set(owned_gpus(gpus, s.pids, s.args).indices)
        for g in gpus:
            if getattr(g, "index", None) in own:
                owned.setdefault(id(g), s.name)
    groups: dict[str, list[Any]] = {name: [] for name in order}
    rest: list[Any] = []
    for g in gpus:
        name = owned.get(id(g))
        (groups[name] if name is not None else rest).append(g)
    out = [(name, gs) for name, gs in groups.items() if gs]
    if rest:
        out.append(("unowned" if out else "GPUs", rest))
    return out


def _reasons_of(gs: Sequence[Any]) -> dict[str, list[Any]]:
    """reason -> the GPU indices that report it."""
    out: dict[str, list[Any]] = {}
    for g in gs:
        if getattr(g, "clocks_event_reasons", None) is None:
            continue
        for r in g.reasons:
            out.setdefault(r, []).append(g.index)
    return out


def _fmt_int(v: float | None) -> str:
    return num(v, "{:,.0f}")


def _cells(cols: Sequence[tuple[str, str, int]], w: int) -> list[Piece]:
    """Columns (text, style, width) left to right while they fit `w`; a column that does not
    fit is left out whole (the ones after it too), so nothing is cut."""
    p: list[Piece] = []
    used = 0
    for text, style, cw in cols:
        cell = text.ljust(cw) if cw else text
        if used + len(cell.rstrip()) > w:
            break
        p.append((cell, style))
        used += len(cell) + 1
        p.append((" ", ""))
    if p:
        p.pop()
    return p


class GpuPanel(Lines):
    """GPUs grouped by server: one summary row per group, `d` expands every GPU's row.

    A GPU is marked (▶) when its SM clock is under 90% of max while a server decodes: that is
    when a clock limit costs tokens. Reasons are coloured by severity (power cap: warning;
    thermal and HW slowdowns: error); the trends use fixed scales (0..max clock, 0..power limit).
    """

    expanded: bool = False

    def show(self, gpus: list[Any], history: dict[int, Any], error: str | None,
             decoding: bool = False, extra: Sequence[tuple[str, Any, list[Any]]] = (),
             servers: Iterable[ServerState] = ()) -> None:
        """`extra`: (host, sample, its history) of GPUs on other nodes of a multi-node server."""
        w = self.avail
        if error and not gpus:
            self.put([(fit(f"no GPU telemetry: {plain(error)}", w) or "no GPU telemetry",
                       "$warning")])
            return
        if not gpus:
            self.put([("GPUs: N/A (no samples yet)", "$text-muted")])
            return
        hist_of = {id(g): list(history.get(g.index, [])) for g in gpus}
        labels = {id(g): f"GPU {num(g.index, '{}')}" for g in gpus}
        for host, g, hist in extra:
            hist_of[id(g)] = hist
            labels[id(g)] = f"{plain(host)}:{num(g.index, '{}')}"
        allg = list(gpus) + [g for _, g, _ in extra]
        groups = gpu_groups(allg, servers)
        nw = max(12, *(len(plain(n)) + 2 for n, _ in groups))
        p: list[Piece] = _cells([(f"{len(allg)} GPUs", "bold", nw), ("", "", 6),
                                 ("SM min/med/max", "$text-muted", 15),
                                 ("°C", "$text-muted", 4), ("W/limit", "$text-muted", 12),
                                 ("clock-event reasons" + ("" if self.expanded else
                                                           " · d: every GPU"), "$text-muted", 0)],
                                w)
        for name, gs in groups:
            p.append(("\n", ""))
            p.extend(self._group_row(name, gs, decoding, w, nw))
            if self.expanded:
                for g in gs:
                    p.append(("\n", ""))
                    p.extend(self._gpu_row(labels[id(g)], g, hist_of.get(id(g), []), decoding,
                                           w, nw))
        if error:
            p.append(("\n" + (fit(plain(error), w) or "GPU telemetry error"), "$warning"))
        self.put(p)

    def _group_row(self, name: str, gs: Sequence[Any], decoding: bool, w: int, nw: int
                   ) -> list[Piece]:
        clocks = [g.clock_sm for g in gs if g.clock_sm is not None]
        maxc = max((g.max_clock_sm for g in gs if g.max_clock_sm), default=None)
        temps = [g.temp_gpu for g in gs if g.temp_gpu is not None]
        power = [g.power_w for g in gs if g.power_w is not None]
        limit = [g.power_limit_w for g in gs if g.power_limit_w is not None]
        limited = decoding and any(_clock_limited(g) for g in gs)
        mark = "▶" if limited else " "
        clock = (f"{min(clocks)}/{median([float(c) for c in clocks]):.0f}/{num(maxc, '{}')}"
                 if clocks else NA)
        temp = f"{max(temps):.0f}" if temps else NA
        pw = (f"{sum(power):,.0f}/{sum(limit):,.0f}" if power and len(limit) == len(power)
              else (f"{sum(power):,.0f}" if power else NA))
        counts = _reasons_of(gs)
        cols: list[tuple[str, str, int]] = [
            (mark + plain(name), "bold reverse" if limited else "bold", nw),
            (f"{len(gs)} GPU{'s' if len(gs) != 1 else ''}", "", 6),
            (clock, "bold $warning" if limited else "", 15), (temp, "", 4), (pw, "", 12)]
        p = _cells(cols, w)
        used = sum(len(t) for t, _ in p)
        if len(p) < 2 * len(cols) - 1:
            return p
        if not counts:
            note = ("reasons N/A" if all(g.clocks_event_reasons is None for g in gs)
                    else "no clock limit")
            if used + 1 + len(note) <= w:
                p.append((" " + note, "$text-muted"))
            return p
        for i, (r, idx) in enumerate(sorted(counts.items(), key=lambda kv: (-len(kv[1]), kv[0]))):
            which = (f" (all {len(gs)})" if len(idx) == len(gs) and len(gs) > 1 else
                     f" (GPU {','.join(str(x) for x in idx)})" if len(idx) <= 3 else
                     f" ({len(idx)} of {len(gs)})")
            txt = (" " if i == 0 else ", ") + r + which
            if used + len(txt) > w - 2:
                p.append((" …", "$text-muted"))
                break
            p.append((txt, reason_style(r)))
            used += len(txt)
        return p

    def _gpu_row(self, label: str, g: Any, hist: list[Any], decoding: bool, w: int, nw: int
                 ) -> list[Piece]:
        limited = decoding and _clock_limited(g)
        reasons = g.reasons if g.clocks_event_reasons is not None else None
        rtxt = ("N/A" if reasons is None else (",".join(reasons) if reasons else "none"))
        cols: list[tuple[str, str, int]] = [
            (("▶ " if limited else "  ") + label, "bold reverse" if limited else "", nw),
            ("", "", 6),
            (f"{num(g.clock_sm, '{}')}/{num(g.max_clock_sm, '{}')}",
             "bold $warning" if limited else "", 15),
            (num(g.temp_gpu, "{:.0f}"), "", 4),
            (f"{num(g.power_w, '{:.0f}')}/{num(g.power_limit_w, '{:.0f}')}", "", 12),
        ]
        p = _cells(cols, w)
        if len(p) < 2 * len(cols) - 1:
            return p
        used = sum(len(t) for t, _ in p)
        rw = max(12, len(rtxt) + 1)
        if used + rw > w:
            return p
        if reasons:
            for i, r in enumerate(reasons):
                p.append(((" " if i == 0 else ",") + r, reason_style(r)))
        else:
            p.append((" " + rtxt, "$text-muted"))
        p.append((" " * (rw - len(rtxt) - 1), ""))
        used += rw
        hist = hist[-16:]
        extras: list[Piece] = []
        mem = (f"mem {_fmt_int(g.mem_used_mib)}/{_fmt_int(g.mem_total_mib)} MiB"
               if getattr(g, "mem_total_mib", None) else f"mem {_fmt_int(g.mem_used_mib)} MiB")
        extras.append((mem, ""))
        extras.append((f"HBM {num(g.temp_mem, '{:.0f}')} °C · util {num(g.util_gpu, '{:.0f}')}%",
                       "$text-muted"))
        clk = spark([h.clock_sm for h in hist], g.max_clock_sm, 16)
        pwr = spark([h.power_w for h in hist], g.power_limit_w, 16)
        if clk:
            extras.append((f"clock 0–{num(g.max_clock_sm, '{}')} {clk}", "$primary"))
        if pwr:
            extras.append((f"power 0–{num(g.power_limit_w, '{:.0f}')} {pwr}", "$primary"))
        for text, style in extras:
            if used + 2 + len(text) > w:
                break
            p.append(("  " + text, style))
            used += 2 + len(text)
        return p


def _clock_limited(g: Any) -> bool:
    return isinstance(g, GpuSample) and is_clock_limited(g)
