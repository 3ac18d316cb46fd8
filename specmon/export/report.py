"""A report of a snapshot that a person pastes into a team thread (Markdown or HTML).

Servers and fingerprints, decode throughput per batch size with spread and n, speedup at the same
batch size with its 95% interval, accept length, GPU clock and power summary, alerts with causes,
and SVG charts of throughput over time drawn with pygal (a pure-Python SVG charting library).
Every number is computed from the snapshot's records; missing data is "N/A".
"""

from __future__ import annotations

import html
import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from specmon.analysis.stats import median, quantile_sorted
from specmon.export.redact import redact_text
from specmon.export.snapshot import ServerSnap, Snapshot
from specmon.numfmt import NA, num, spec_config_text
from specmon.parse.gpu import GpuSample
from specmon.parse.sglang import BatchRecord
from specmon.session.ownership import owned_gpus
from specmon.session.state import DecodePoint
from specmon.session.window import (
    MIN_N,
    Speedup,
    WindowStats,
    interval_text,
    recomputed_accept_rate,
    speedup_of,
    stats_for,
)
from specmon.textsafe import visible

MAX_CHART_POINTS = 600
_num = num  # specmon.numfmt: the one N/A formatter


def _when(t: float | None) -> str:
    if t is None:
        return NA
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def _dur(s: float) -> str:
    s = max(0.0, s)
    return f"{int(s // 3600)}h {int(s % 3600 // 60):02d}m {int(s % 60):02d}s"


# --- numbers ------------------------------------------------------------------------------------


def decode_points(server: ServerSnap) -> list[DecodePoint]:
    return [DecodePoint(e.t, e.record) for e in server.entries
            if isinstance(e.record, BatchRecord) and e.record.kind == "decode"]


def per_batch_size(points: list[DecodePoint], span_s: float) -> list[WindowStats]:
    sizes = sorted({p.rec.running_req for p in points if p.rec.running_req is not None})
    out = []
    for rr in sizes:
        st = stats_for(points, rr, span_s)
        if st is not None:
            out.append(st)
    return out


def speedup_rows(base: list[WindowStats], spec: list[WindowStats]) -> list[Speedup]:
    """spec ÷ baseline at every common batch size with ≥ MIN_N samples on both sides, by the
    session's one speedup function (`session.window.speedup_of`)."""
    b_by = {w.running_req: w for w in base}
    return [speedup_of(b, s) for s in spec
            if (b := b_by.get(s.running_req)) is not None and b.n >= MIN_N and s.n >= MIN_N]


@dataclass
class GpuSummary:
    index: int | None
    name: str | None
    n: int
    clock_med: float | None
    clock_min: float | None
    clock_max: float | None
    max_clock: float | None
    power_med: float | None
    power_max: float | None
    power_limit: float | None
    temp_max: float | None
    reasons: list[tuple[str, float]] = field(default_factory=list)  # (reason, share of samples)


def gpu_summaries(samples: Sequence[GpuSample]) -> list[GpuSummary]:
    by: dict[int | None, list[GpuSample]] = {}
    for g in samples:
        by.setdefault(g.index, []).append(g)
    out = []
    for idx in sorted(by, key=lambda i: (i is None, i)):
        gs = by[idx]
        clocks = sorted(float(g.clock_sm) for g in gs if g.clock_sm is not None)
        power = sorted(g.power_w for g in gs if g.power_w is not None)
        temps = [g.temp_gpu for g in gs if g.temp_gpu is not None]
        reason_n: Counter[str] = Counter()
        known = 0
        for g in gs:
            if g.clocks_event_reasons is not None:
                known += 1
                reason_n.update(g.reasons)
        out.append(GpuSummary(
            index=idx, name=next((g.name for g in gs if g.name), None), n=len(gs),
            clock_med=quantile_sorted(clocks, 0.5), clock_min=clocks[0] if clocks else None,
            clock_max=clocks[-1] if clocks else None,
            max_clock=max((g.max_clock_sm for g in gs if g.max_clock_sm is not None), default=None),
            power_med=quantile_sorted(power, 0.5), power_max=power[-1] if power else None,
            power_limit=max((g.power_limit_w for g in gs if g.power_limit_w is not None),
                            default=None),
            temp_max=max(temps) if temps else None,
            reasons=[(r, c / known) for r, c in reason_n.most_common()] if known else [],
        ))
    return out


# --- charts (pygal) -----------------------------------------------------------------------------


def _bucketed(points: list[tuple[float, float]], max_points: int) -> tuple[list[tuple[float, float]],
                                                                             float | None]:
    """At most max_points (x, median y) pairs: medians over equal x buckets when there are more."""
    if len(points) <= max_points:
        return points, None
    lo, hi = points[0][0], points[-1][0]
    width = (hi - lo) / max_points or 1.0
    buckets: dict[int, list[tuple[float, float]]] = {}
    for x, y in points:
        buckets.setdefault(min(int((x - lo) / width), max_points - 1), []).append((x, y))
    out = []
    for b in sorted(buckets):
        xs = buckets[b]
        out.append((xs[len(xs) // 2][0], median(y for _, y in xs) or 0.0))
    return out, width


def throughput_chart(snap: Snapshot, *, max_series_per_server: int = 3) -> str | None:
    """SVG: decode tok/s over time, one series per server and batch size (the most common ones)."""
    try:
        import pygal
    except ImportError:
        return None
    t0 = snap.time_range[0] if snap.time_range else 0.0
    chart = pygal.XY(width=960, height=420, js=[], show_dots=False, stroke_style={"width": 1.5},
                     x_title="minutes since start", y_title="decode tok/s (SGLang gen throughput)",
                     title="Decode throughput over time", legend_at_bottom=True,
                     truncate_legend=-1, dynamic_print_values=False)
    any_series = False
    notes = []
    per_server = max(1, min(max_series_per_server, MAX_LEGEND // max(1, len(snap.servers))))
    for s in snap.servers[:MAX_LEGEND]:
        pts = decode_points(s)
        counts = Counter(p.rec.running_req for p in pts if p.rec.gen_throughput is not None)
        for rr, _ in counts.most_common(per_server):
            series = [((p.t - t0) / 60.0, p.rec.gen_throughput) for p in pts
                      if p.rec.running_req == rr and p.rec.gen_throughput is not None]
            series, width = _bucketed(series, MAX_CHART_POINTS)
            if width is not None:
                notes.append(f"median per {width * 60:.1f} s")
            chart.add(_chart_text(f"{s.name} ({s.role or 'role?'}) bs {rr}"), series)
            any_series = True
    if not any_series:
        return None
    if notes:
        chart.title = "Decode throughput over time (" + ", ".join(sorted(set(notes))[:2]) + ")"
    return chart.render(disable_xml_declaration=True)


MAX_GPU_GROUPS = 4  # GPU groups drawn (each a median line and a min/max band: 3 entries)
MAX_LEGEND = 12  # legend entries of any chart; more squeeze the plot away (pygal then hangs)


def gpu_groups(snap: Snapshot) -> list[tuple[str, set[int | None]]]:
    """GPUs grouped by the server that owns them (specmon.session.ownership: its pids, else its
    arguments), the rest as one group; at most MAX_GPU_GROUPS (the last merged into "other
    GPUs")."""
    present = {g.index for g in snap.gpu_samples}
    groups: list[tuple[str, set[int | None]]] = []
    taken: set[int | None] = set()
    for s in snap.servers:
        idx = owned_gpus(snap.gpu_samples, s.pids, s.args).indices
        mine = (set(idx) & present) - taken
        if mine:
            groups.append((s.name, set(mine)))
            taken |= mine
    rest = present - taken
    if rest:
        groups.append(("GPUs" if not groups else "other GPUs", rest))
    if len(groups) > MAX_GPU_GROUPS:
        keep = groups[:MAX_GPU_GROUPS - 1]
        merged: set[int | None] = set().union(*(g for _, g in groups[MAX_GPU_GROUPS - 1:]))
        groups = keep + [("other GPUs", merged)]
    return groups


def _band(samples: list[GpuSample], value: Any, t0: float, max_points: int
          ) -> tuple[list[tuple[float, float]], list[tuple[float, float]], list[tuple[float, float]]]:
    """Median, min and max of `value(sample)` over all GPUs of a group, per time bucket."""
    pts = sorted(((g.ts - t0) / 60.0, float(v)) for g in samples
                 if g.ts is not None and (v := value(g)) is not None and math.isfinite(float(v)))
    if not pts:
        return [], [], []
    lo, hi = pts[0][0], pts[-1][0]
    width = (hi - lo) / max_points or 1.0
    buckets: dict[int, list[tuple[float, float]]] = {}
    for x, y in pts:
        buckets.setdefault(min(int((x - lo) / width), max_points - 1), []).append((x, y))
    med, low, high = [], [], []
    for b in sorted(buckets):
        xs = buckets[b]
        x = xs[len(xs) // 2][0]
        ys = sorted(y for _, y in xs)
        med.append((x, quantile_sorted(ys, 0.5) or 0.0))
        low.append((x, ys[0]))
        high.append((x, ys[-1]))
    return med, low, high


def _gpu_metric_chart(snap: Snapshot, title: str, y_title: str, value: Any) -> str | None:
    import pygal

    t0 = snap.time_range[0] if snap.time_range else 0.0
    by = {g.index: g for g in snap.gpu_samples}
    groups = gpu_groups(snap)
    chart = pygal.XY(width=960, height=380 + 22 * len(groups), js=[], show_dots=False,
                     stroke_style={"width": 1.5}, x_title="minutes since start", y_title=y_title,
                     title=title, legend_at_bottom=True, legend_at_bottom_columns=3,
                     truncate_legend=40, dynamic_print_values=False)
    drawn = 0
    for label, members in groups:
        samples = [g for g in snap.gpu_samples if g.index in members]
        med, low, high = _band(samples, value, t0, MAX_CHART_POINTS)
        if not med:
            continue
        name = _chart_text(f"{label} ({len(members)} GPU{'s' if len(members) != 1 else ''})")
        chart.add(f"{name} median", med, stroke_style={"width": 2.5})
        if len(members) > 1:
            chart.add(f"{name} min", low, stroke_style={"width": 0.8, "dasharray": "3, 3"})
            chart.add(f"{name} max", high, stroke_style={"width": 0.8, "dasharray": "3, 3"})
        drawn += 1
    del by
    if not drawn:
        return None
    return chart.render(disable_xml_declaration=True)


def gpu_chart(snap: Snapshot) -> str | None:
    """SVG: SM clock over time, GPUs grouped by server (median line, min and max as dashes)."""
    try:
        import pygal  # noqa: F401
    except ImportError:
        return None
    if not snap.gpu_samples:
        return None
    return _gpu_metric_chart(snap, "GPU SM clock (median, min and max over each group's GPUs)",
                             "SM clock MHz", lambda g: g.clock_sm)


def gpu_power_chart(snap: Snapshot) -> str | None:
    """SVG: board power over time on its own axis (a secondary axis misread it before)."""
    try:
        import pygal  # noqa: F401
    except ImportError:
        return None
    if not snap.gpu_samples:
        return None
    return _gpu_metric_chart(snap, "GPU power (median, min and max over each group's GPUs)",
                             "power W", lambda g: g.power_w)


def _chart_text(text: str) -> str:
    """A label from the snapshot as chart text: redacted, controls visible (legal XML)."""
    return visible(redact_text(str(text)))[:120]


# --- document model -----------------------------------------------------------------------------

# ("h", level, text) | ("p", text) | ("table", headers, rows) | ("svg", name, svg, alt)
Block = tuple[Any, ...]


def build_blocks(snap: Snapshot) -> list[Block]:
    """The report's content; every text passes redaction again (a --no-redact snapshot too)."""
    return [_redact_block(blk) for blk in _build_blocks(snap)]


def _clean(text: str) -> str:
    """Snapshot text for a report: secrets masked, control characters (ESC...) made visible."""
    return visible(redact_text(str(text)))


def _redact_block(blk: Block) -> Block:
    if blk[0] == "h":
        return ("h", blk[1], _clean(blk[2]))
    if blk[0] == "p":
        return ("p", _clean(blk[1]))
    if blk[0] == "table":
        return ("table", [_clean(h) for h in blk[1]], [[_clean(c) for c in row] for row in blk[2]])
    return blk


def _build_blocks(snap: Snapshot) -> list[Block]:
    b: list[Block] = []
    tr = snap.time_range
    span = (tr[1] - tr[0]) if tr else 0.0
    b.append(("h", 1, f"specmon report: {snap.host}"))
    b.append(("p", f"Time range {_when(tr[0] if tr else None)} → {_when(tr[1] if tr else None)} "
                   f"({_dur(span)}). Snapshot {snap.source.get('kind', 'unknown')} source, "
                   f"written {_when(snap.created_at)} by specmon {snap.specmon_version}; "
                   f"secrets {'redacted' if snap.redaction.get('enabled') else 'NOT redacted'}."))
    b.append(("p", "Throughput is SGLang's own `gen throughput (token/s)`: decode-only, one value "
                   "per log interval, idle and prefill time inside the interval included; not a "
                   "benchmark's end-to-end tok/s. Numbers are never mixed across batch sizes "
                   "(#running-req); medians with p10–p90 and n, over the whole snapshot."))

    # servers
    b.append(("h", 2, "Servers"))
    rows = []
    for s in snap.servers:
        a = s.args
        spec_cfg = spec_config_text(a) or NA
        rows.append([s.name, s.role or NA, s.status, s.path or NA,
                     str(a.get("model_path") or a.get("served_model_name") or NA),
                     _num(a.get("tp_size"), "{}"), spec_cfg,
                     _num(s.counts.get("decode"), "{:,}"), _num(s.counts.get("lines"), "{:,}")])
    b.append(("table", ["server", "role", "status", "log", "model", "tp", "speculative",
                        "decode lines", "lines"], rows))
    for s in snap.servers:
        items = [f"role source: {s.role_source or NA}"]
        items += [f"{k}={v}" for k, v in sorted(s.args.items())]
        if s.fingerprint:
            items += [f"{k}: {v}" for k, v in _flatten(s.fingerprint)]
        else:
            items.append("fingerprint (env, versions): N/A (not in this snapshot)")
        if s.exit_code is not None:
            items.append(f"exit code {s.exit_code}")
        b.append(("p", f"**{s.name}** fingerprint: " + "; ".join(items)))

    # throughput per batch size
    b.append(("h", 2, "Decode throughput per batch size"))
    stats: dict[str, list[WindowStats]] = {}
    for s in snap.servers:
        st = per_batch_size(decode_points(s), span)
        stats[s.name] = st
        b.append(("h", 3, f"{s.name} ({s.role or 'role unknown'})"))
        if not st:
            b.append(("p", "no decode lines with a throughput"))
            continue
        b.append(("table", ["#running-req", "n", "median tok/s", "p10", "p90", "robust CV",
                            "accept len (median)"],
                  [[str(w.running_req), f"{w.n:,}", _num(w.median), _num(w.p10), _num(w.p90),
                    _num(w.robust_cv * 100 if w.robust_cv is not None else None, "{:.1f}%"),
                    _num(w.accept_len)] for w in st]))

    # speedup
    b.append(("h", 2, "Speedup (speculative ÷ baseline, same #running-req)"))
    base, spec = snap.by_role("baseline"), snap.by_role("speculative")
    if base is None or spec is None:
        b.append(("p", "Speedup: N/A (needs one baseline and one speculative server)."))
    else:
        sp_rows = speedup_rows(stats.get(base.name, []), stats.get(spec.name, []))
        if not sp_rows:
            b.append(("p", f"Speedup: N/A (no batch size with ≥{MIN_N} decode samples on both "
                           f"{base.name} and {spec.name})."))
        else:
            head = max(sp_rows, key=lambda r: min(r.base.n, r.spec.n))
            ci = f" (95% {interval_text(head)})"
            b.append(("p", f"**Speedup {head.ratio:.3f}×**{ci} at bs {head.running_req}: "
                           f"{spec.name} {head.spec.median:.2f} / {base.name} "
                           f"{head.base.median:.2f} tok/s (medians, n {head.spec.n}/"
                           f"{head.base.n}). The interval assumes independent samples; "
                           "consecutive log intervals are correlated, so read it as a lower "
                           "bound on the uncertainty."))
            b.append(("table", ["#running-req", f"{base.name} median (n)",
                                f"{spec.name} median (n)", "speedup", "95% interval"],
                      [[str(r.running_req), f"{r.base.median:.2f} ({r.base.n})",
                        f"{r.spec.median:.2f} ({r.spec.n})", f"{r.ratio:.3f}×",
                        interval_text(r)] for r in sp_rows]))

    # accept length
    b.append(("h", 2, "Accept length"))
    any_spec = False
    for s in snap.servers:
        acc = sorted(p.rec.accept_len for p in decode_points(s) if p.rec.accept_len is not None)
        if not acc:
            continue
        any_spec = True
        med = quantile_sorted(acc, 0.5)
        ndt = s.args.get("speculative_num_draft_tokens")
        ndt = ndt if isinstance(ndt, int) and not isinstance(ndt, bool) else None
        rate = recomputed_accept_rate(med, ndt)
        b.append(("p", f"{s.name}: accept length (tokens per verify round, bonus included) median "
                       f"{_num(med)}, p10 {_num(quantile_sorted(acc, 0.1))}, p90 "
                       f"{_num(quantile_sorted(acc, 0.9))}, n {len(acc):,}; accept rate "
                       f"(recomputed as (len−1)/(draft tokens−1), draft tokens {_num(ndt, '{}')})"
                       f" {_num(rate)}."))
    if not any_spec:
        b.append(("p", "N/A: no decode line carries an accept length."))

    # GPUs
    b.append(("h", 2, "GPUs"))
    gs = gpu_summaries(snap.gpu_samples)
    if not gs:
        b.append(("p", "N/A: no GPU samples in this snapshot."))
    else:
        b.append(("table", ["GPU", "name", "samples", "SM MHz median", "SM MHz min–max", "max SM MHz",
                            "power W median", "power W max", "limit W", "temp °C max",
                            "clock-event reasons (share of samples)"],
                  [[_num(g.index, "{}"), g.name or NA, f"{g.n:,}", _num(g.clock_med, "{:.0f}"),
                    f"{_num(g.clock_min, '{:.0f}')}–{_num(g.clock_max, '{:.0f}')}",
                    _num(g.max_clock, "{:.0f}"), _num(g.power_med, "{:.0f}"),
                    _num(g.power_max, "{:.0f}"), _num(g.power_limit, "{:.0f}"),
                    _num(g.temp_max, "{:.0f}"),
                    ", ".join(f"{r} {share:.0%}" for r, share in g.reasons) or
                    ("none" if g.reasons == [] and g.n else NA)] for g in gs]))
        rule = snap.gpu_downsampling.get("rule")
        if rule:
            b.append(("p", f"GPU samples: {rule}."))

    # alerts
    b.append(("h", 2, "Alerts"))
    if not snap.alerts:
        b.append(("p", "None recorded in this snapshot."))
    else:
        b.append(("table", ["time", "server", "alert", "likely cause"],
                  [[_when(a.get("t") if isinstance(a.get("t"), int | float) else None),
                    str(a.get("server") or NA),
                    str(a.get("message") or a.get("text") or a.get("kind") or NA),
                    str(a.get("cause") or NA)] for a in snap.alerts]))

    # charts
    b.append(("h", 2, "Charts"))
    tp = throughput_chart(snap)
    if tp is None:
        b.append(("p", "Throughput chart: N/A (no decode throughput, or pygal not installed)."))
    else:
        b.append(("svg", "throughput", tp, "decode throughput over time"))
    gc = gpu_chart(snap)
    if gc is not None:
        b.append(("svg", "gpu", gc, "GPU SM clock over time, grouped by server"))
    gp = gpu_power_chart(snap)
    if gp is not None:
        b.append(("svg", "gpu-power", gp, "GPU power over time, grouped by server"))
    return b


def _flatten(d: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(d, dict):
        out: list[tuple[str, Any]] = []
        for k, v in d.items():
            out += _flatten(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    return [(prefix, d)]


# --- renderers ----------------------------------------------------------------------------------


def _md_text(text: str) -> str:
    """Markdown passes raw HTML through: `<script>` from a snapshot must arrive as text."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _md_cell(text: str) -> str:
    return _md_text(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(blocks: list[Block], chart_files: dict[str, str] | None = None) -> str:
    """Markdown; charts are linked to `chart_files[name]` (written by the caller) or noted."""
    out: list[str] = []
    for blk in blocks:
        if blk[0] == "h":
            out.append("#" * blk[1] + " " + _md_text(blk[2]))
        elif blk[0] == "p":
            out.append(_md_text(blk[1]))
        elif blk[0] == "table":
            headers, rows = blk[1], blk[2]
            out.append("| " + " | ".join(_md_cell(h) for h in headers) + " |")
            out.append("|" + "|".join("---" for _ in headers) + "|")
            for r in rows:
                out.append("| " + " | ".join(_md_cell(c) for c in r) + " |")
        elif blk[0] == "svg":
            name, alt = blk[1], blk[3]
            if chart_files and name in chart_files:
                out.append(f"![{alt}]({chart_files[name]})")
            else:
                out.append(f"({alt}: chart not written when printing to stdout)")
        out.append("")
    return "\n".join(out)


_CSS = ("body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #bbb;padding:2px 8px;"
        "text-align:right}th{background:#eee}td:first-child,th:first-child{text-align:left}"
        "figure{margin:1em 0}")


def _inline_md(text: str) -> str:
    """The only Markdown the blocks use: **bold** and `code`."""
    parts = html.escape(text).split("**")
    s = "".join(f"<b>{p}</b>" if i % 2 else p for i, p in enumerate(parts))
    parts = s.split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def render_html(blocks: list[Block]) -> str:
    title = next((b[2] for b in blocks if b[0] == "h"), "specmon report")
    out = ["<!DOCTYPE html>", "<html><head><meta charset=\"utf-8\">",
           f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>"]
    for blk in blocks:
        if blk[0] == "h":
            out.append(f"<h{blk[1]}>{html.escape(blk[2])}</h{blk[1]}>")
        elif blk[0] == "p":
            out.append(f"<p>{_inline_md(blk[1])}</p>")
        elif blk[0] == "table":
            out.append("<table><tr>" + "".join(f"<th>{html.escape(str(h))}</th>" for h in blk[1])
                       + "</tr>")
            for r in blk[2]:
                out.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r)
                           + "</tr>")
            out.append("</table>")
        elif blk[0] == "svg":
            out.append(f"<figure>{blk[2]}<figcaption>{html.escape(blk[3])}</figcaption></figure>")
    out.append("</body></html>")
    return "\n".join(out)
