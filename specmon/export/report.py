"""A report of a snapshot that a person pastes into a team thread (Markdown or HTML).

Servers and fingerprints, decode throughput per batch size with spread and n, speedup at the same
batch size with its 95% interval, accept length, GPU clock and power summary, alerts with causes,
and SVG charts of throughput over time drawn with pygal (a pure-Python SVG charting library).
Every number is computed from the snapshot's records; missing data is "N/A".
"""

from __future__ import annotations

import dataclasses
import html
import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from specmon.analysis.fingerprint import Fingerprint
from specmon.analysis.stats import MIN_SPREAD_N, median, quantile_sorted
from specmon.export.snapshot import ServerSnap, Snapshot
from specmon.export.timeline import declare, timeline
from specmon.numfmt import NA, finite, num, spec_config_text
from specmon.parse.gpu_sample import GpuSample
from specmon.parse.vllm import BONUS_NOTE, VllmDecodeRecord, throughput_label
from specmon.redact import redact_obj, redact_text
from specmon.session.benchmarks import accept as bench_accept
from specmon.session.benchmarks import from_json as bench_from_json
from specmon.session.benchmarks import line as bench_line
from specmon.session.drift_watch import session_speedup_view
from specmon.session.fleet import FleetSession
from specmon.session.offline import play
from specmon.session.ownership import owned_gpus
from specmon.session.pays import KIND as PAYS_KIND
from specmon.session.runs import (
    compare,
    run_by_rr,
    run_fingerprint_offline,
    run_row,
    runs_span,
    stamp,
    time_break_texts,
)
from specmon.session.speedup import unknown_text
from specmon.session.state import Run, ServerState
from specmon.session.window import (
    recomputed_accept_rate,
)
from specmon.textsafe import cut, visible

MAX_CHART_POINTS = 600
_num = num  # specmon.numfmt: the one N/A formatter


def _when(t: float | None) -> str:
    """A time as UTC text; N/A when there is none or no clock can show it (1e300 from a file
    raised OverflowError in gmtime)."""
    if t is None:
        return NA
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))
    except (OverflowError, ValueError, OSError):
        return NA


def _dur(s: float) -> str:
    s = max(0.0, s)
    return f"{int(s // 3600)}h {int(s % 3600 // 60):02d}m {int(s % 60):02d}s"


# --- the session model of a snapshot -------------------------------------------------------------


@dataclass
class ReportModel:
    """The snapshot played through the session model (`session.offline.play`): the runs,
    speedup and alerts the screen would show, computed by the same code."""

    fleet: FleetSession
    host: str
    states: dict[str, ServerState]


def report_model(snap: Snapshot) -> ReportModel:
    """Every line (and GPU poll) of the snapshot, in received order, into one FleetSession."""
    host = snap.host
    fleet = FleetSession([host])
    declare(fleet, snap)
    for s in snap.servers:
        s.seed_args(fleet.host(host).session.server(s.name))
    play(fleet, host, ((ev.t, ev.kind, ev.server, ev.payload) for ev in timeline(snap)))
    session = fleet.host(host).session  # (`declare` gave each server the role the snapshot knew)
    return ReportModel(fleet, host, {s.name: session.server(s.name) for s in snap.servers})


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


def throughput_series(model: ReportModel, max_series_per_server: int = 3
                      ) -> list[tuple[str, list[tuple[float, float]]]]:
    """(label, [(minutes since the first decode line, tok/s)]) per server run and batch size
    (the most common sizes of the newest runs first), on log time: the timestamps SGLang
    printed, so history read at connect spreads over the time it covers."""
    runs = [(name, st.role, r) for name, st in model.states.items() for r in st.runs if r.decode]
    if not runs:
        return []
    t0 = min(r.decode[0].t for _, _, r in runs)
    per_server = max(1, min(max_series_per_server, MAX_LEGEND // max(1, len(model.states))))
    out: list[tuple[str, list[tuple[float, float]]]] = []
    for name, role, run in sorted(runs, key=lambda x: -x[2].decode[-1].t):  # newest first
        pts = list(run.decode)
        counts = Counter(rr for p in pts if (rr := p.rec.sample_rr) is not None)
        for rr, _ in counts.most_common(per_server):  # (samples only, as every median)
            if len(out) >= MAX_LEGEND:
                return out
            out.append((f"{name} ({role or 'role?'}) run {run.index} bs {rr}",
                        [((p.t - t0) / 60.0, p.rec.gen_throughput) for p in pts
                         if p.rec.sample_rr == rr and p.rec.gen_throughput is not None]))
    return out


def throughput_chart(snap: Snapshot, model: ReportModel | None = None) -> str | None:
    """SVG: decode tok/s over log time, one series per server run and batch size."""
    try:
        import pygal
    except ImportError:
        return None
    model = model or report_model(snap)
    series_all = throughput_series(model)
    if not series_all:
        return None
    engines = {st.engine or "sglang" for st in model.states.values()
               if any(r.decode for r in st.runs)}
    y_title, title = "decode tok/s (SGLang gen throughput)", "Decode throughput"
    if engines == {"vllm"}:  # (vLLM's counts every token of its interval: not decode-only)
        y_title, title = "tok/s (vLLM Avg generation throughput)", "Generation throughput"
    elif "vllm" in engines:
        y_title, title = "tok/s (SGLang gen / vLLM Avg generation throughput)", "Throughput"
    chart = pygal.XY(width=960, height=420, js=[], show_dots=False, stroke_style={"width": 1.5},
                     x_title="minutes since the first decode line (log time)",
                     y_title=y_title,
                     title=f"{title} over log time, per run", legend_at_bottom=True,
                     truncate_legend=-1, dynamic_print_values=False)
    notes = []
    for label, series in series_all:
        pts, width = _bucketed(series, MAX_CHART_POINTS)
        if width is not None:
            notes.append(f"median per {width * 60:.1f} s")
        chart.add(_chart_text(label), pts)
    if notes:
        chart.title = ("Decode throughput over log time, per run ("
                       + ", ".join(sorted(set(notes))[:2]) + ")")
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


def _gpu_group_chart(snap: Snapshot, label: str, members: set[int | None], title: str,
                     y_title: str, value: Any) -> str | None:
    import pygal

    t0 = snap.time_range[0] if snap.time_range else 0.0
    samples = [g for g in snap.gpu_samples if g.index in members]
    med, low, high = _band(samples, value, t0, MAX_CHART_POINTS)
    if not med:
        return None
    chart = pygal.XY(width=960, height=360, js=[], show_dots=False, stroke_style={"width": 1.5},
                     x_title="minutes since the snapshot's start (sample time)", y_title=y_title,
                     title=_chart_text(title), legend_at_bottom=True, legend_at_bottom_columns=3,
                     truncate_legend=40, dynamic_print_values=False)
    name = _chart_text(f"{label} ({len(members)} GPU{'s' if len(members) != 1 else ''})")
    chart.add(f"{name} median", med, stroke_style={"width": 2.5})
    if len(members) > 1:
        chart.add(f"{name} min", low, stroke_style={"width": 0.8, "dasharray": "3, 3"})
        chart.add(f"{name} max", high, stroke_style={"width": 0.8, "dasharray": "3, 3"})
    return chart.render(disable_xml_declaration=True)


def _file_id(text: str) -> str:
    out = "".join(c if c.isalnum() or c in "-_" else "_" for c in text)[:40]
    return out or "gpus"


def gpu_charts(snap: Snapshot) -> list[tuple[str, str, str]]:
    """(name, caption, SVG) per server's GPUs (specmon.session.ownership), SM clock then power
    (each on its own axis), median line with min and max dashed over the server's GPUs."""
    try:
        import pygal  # noqa: F401
    except ImportError:
        return []
    if not snap.gpu_samples:
        return []
    out = []
    for i, (label, members) in enumerate(gpu_groups(snap)):
        fid = f"{i}-{_file_id(label)}"
        for kind, title, y, val in (
                ("gpu-clock", "SM clock", "SM clock MHz", lambda g: g.clock_sm),
                ("gpu-power", "power", "power W", lambda g: g.power_w)):
            svg = _gpu_group_chart(snap, label, members, f"{label}: GPU {title} (median, min "
                                   "and max over its GPUs)", y, val)
            if svg is not None:
                out.append((f"{kind}-{fid}", f"GPU {title} of {label} over time", svg))
    return out


def _chart_text(text: str) -> str:
    """A label from the snapshot as chart text: redacted, controls visible (legal XML)."""
    return visible(redact_text(str(text)))[:120]


# --- document model -----------------------------------------------------------------------------

# ("h", level, text) | ("p", text) | ("table", headers, rows) | ("svg", name, svg, alt)
Block = tuple[Any, ...]


def report_json(snap: Snapshot) -> dict[str, Any]:
    """`report --format json`: the report document, secrets masked again (a --no-redact
    snapshot too)."""
    doc: dict[str, Any] = redact_obj(report_doc(snap))
    return doc


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
    if blk[0] == "svg":  # the caption names a server: host text
        return ("svg", blk[1], blk[2], _clean(blk[3]))
    return blk


SCHEMA = "specmon.report/1"
THROUGHPUT_NOTE = ("Throughput is SGLang's own `gen throughput (token/s)`: decode-only, one value "
                   "per log interval, idle and prefill time inside the interval included; not a "
                   "benchmark's end-to-end tok/s. Numbers are never mixed across batch sizes "
                   "(#running-req) nor across server runs; medians with p10–p90 and n over each "
                   "whole run, timed by the timestamps the server printed.")


VLLM_THROUGHPUT_NOTE = (f"vLLM servers: throughput is {throughput_label('vllm')} (vLLM's `Avg "
                        "generation throughput`, one value per engine stats interval; accepted "
                        "drafts and bonus tokens count), not decode-only and not a benchmark's "
                        "end-to-end tok/s; idle vLLM servers print no line. Numbers are never "
                        "mixed across batch sizes (`Running`) nor across server runs; medians "
                        "with p10–p90 and n.")


def _spec_text(args: dict[str, Any]) -> str | None:
    """The speculative settings; a vLLM server's with its release (`vLLM 0.11.0: eagle3 k 3`)."""
    spec = spec_config_text(args)
    if spec and args.get("engine_version"):
        return f"vLLM {args['engine_version']}: {spec}"
    return spec


def _throughput_what(engines: set[str]) -> str:
    """What the throughput figures are, in a heading: SGLang's decode-only gen throughput,
    vLLM's generation throughput (every token of its interval), or both."""
    if engines == {"vllm"}:
        return "generation throughput (vLLM)"
    return "throughput" if "vllm" in engines else "decode throughput"


def _throughput_notes(engines: set[str]) -> list[str]:
    """What the throughput numbers are, for each engine in the report."""
    return ([THROUGHPUT_NOTE] if "sglang" in engines or not engines else []) + (
        [VLLM_THROUGHPUT_NOTE] if "vllm" in engines else [])


def _fingerprint_lines(s: ServerSnap) -> list[str]:
    """Readable lines of the fingerprint the snapshot keeps for a server: the one of the
    baseline recorded on it (what its drift watch compares against), not its current run's."""
    known = set(Fingerprint.__dataclass_fields__)
    d = s.fingerprint or {}
    fp = Fingerprint.from_json({k: v for k, v in d.items() if k in known}) if d else None
    out = fp.summary() if fp is not None else []
    # keys a fingerprint of another shape carries (a probe's env, versions): one line each
    out += [f"{k}: {v}" for k, v in _flatten({k: v for k, v in d.items() if k not in known})]
    return out


def _run_fingerprint_lines(st: ServerState) -> list[str]:
    """What the current run's own lines say (args, NCCL_DEBUG, probe, GPUs)."""
    return run_fingerprint_offline(st.runs[-1]).summary() if st.runs else []


def _flatten(d: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(d, dict):
        out: list[tuple[str, Any]] = []
        for k, v in d.items():
            out += _flatten(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    return [(prefix, d)]


def _accept(run: Run, ndt: int | None) -> dict[str, Any] | None:
    acc = sorted(p.rec.accept_len for p in run.decode if p.rec.accept_len is not None)
    measured = [p.rec for p in run.decode if isinstance(p.rec, VllmDecodeRecord) and p.rec.spec]
    acc_n = sum(r.spec.get("accepted") or 0 for r in measured if r.spec)
    dra_n = sum(r.spec.get("drafted") or 0 for r in measured if r.spec)
    if not acc and not dra_n:  # (vLLM's counts without a length: 0.8.3/0.8.4 and no k known)
        return None
    med = quantile_sorted(acc, 0.5)
    rate = recomputed_accept_rate(med, ndt)
    spread = len(acc) >= MIN_SPREAD_N  # (no spread of one or two values)
    return {"median": _r(med), "p10": _r(quantile_sorted(acc, 0.1)) if spread else None,
            "p90": _r(quantile_sorted(acc, 0.9)) if spread else None, "n": len(acc),
            "draft_tokens": ndt,
            "accept_rate_recomputed": None if measured else _r(rate),
            # vLLM prints accepted and drafted counts: the rate is measured, not recomputed
            "accept_rate_measured": _r(acc_n / dra_n) if dra_n else None,
            "bonus_added": sum(1 for r in measured if r.accept_len_note == BONUS_NOTE)}


def _r(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else round(v, 4)


def _run_doc(run: Run) -> dict[str, Any]:
    ndt = run.args.get("speculative_num_draft_tokens")
    ndt = ndt if isinstance(ndt, int) and not isinstance(ndt, bool) else None
    row = run_row(run)
    return {"run": run.index, "start": row["start"], "end": row["end"],
            "partial": row["partial"],
            "start_reason": run.start_reason, "end_reason": run.end_reason,
            "exit_code": run.exit_code, "args": row["args"], "decode_lines": run.lines_total,
            "by_running_req": run_by_rr(run), "accept_len": _accept(run, ndt),
            "time_segments": row["time_segments"], "dp_groups": row["dp_groups"]}


def _speedup_doc(model: ReportModel) -> dict[str, Any]:
    """The speedup between the current (last) runs, by `session.runs.compare` (the same
    function as `specmon compare`), with the conditions that differ."""
    states = list(model.states.values())
    base = next((st for st in states if st.role == "baseline"), None)
    spec = next((st for st in states if st.role == "speculative"), None)
    out: dict[str, Any] = {"value": None, "ci95": None, "ci95_reason": None, "running_req": None,
                           "base_run": None, "spec_run": None, "n_base": 0, "n_spec": 0,
                           "baseline": base.name if base else None,
                           "speculative": spec.name if spec else None,
                           "base_median": None, "spec_median": None, "conditions_differ": [],
                           "conditions_unknown": [], "by_running_req": [], "reason": None,
                           "span": "whole runs"}
    if base is None or spec is None:
        out["reason"] = "needs one baseline and one speculative server"
        return out
    try:
        cmp = compare(base, spec)
    except ValueError as exc:
        out["reason"] = str(exc)
        return out
    res = cmp.result
    out.update(base_run=res["baseline"]["run"], spec_run=res["speculative"]["run"],
               conditions_differ=res["conditions_differ"],
               conditions_unknown=res["conditions_unknown"], by_running_req=res["by_running_req"])
    sp = res["speedup"]
    if sp is None:
        out["reason"] = cmp.why
        return out
    b_run = next((r for r in base.runs if r.index == out["base_run"]), None)
    s_run = next((r for r in spec.runs if r.index == out["spec_run"]), None)
    out["span"] = runs_span(*(r for r in (b_run, s_run) if r is not None))
    out.update(value=sp["value"], ci95=sp["ci95"], ci95_reason=sp["ci95_reason"],
               running_req=sp["running_req"], n_base=sp["n_base"], n_spec=sp["n_spec"],
               base_median=res["baseline"]["median_tok_s"],
               spec_median=res["speculative"]["median_tok_s"])
    # the headline's first figure while the baseline drifts: speculative / the recorded
    # baseline (a snapshot's recorded baseline is watched again as the lines play)
    watch = model.fleet.watches.get((model.host, base.name))
    if watch is not None and base.runs and spec.runs:
        view = session_speedup_view(model.fleet.host(model.host).session, base, spec, watch,
                                    math.inf, model.fleet.clock())
        if view.drift_active and view.vs_recorded is not None and view.recorded_base is not None:
            ci = view.vs_recorded_ci95
            out["vs_recorded"] = {
                "value": round(view.vs_recorded, 3), "recorded_tok_s": round(view.recorded_base, 2),
                "baseline": watch.baseline.name, "running_req": view.running_req,
                "ci95": [round(ci[0], 3), round(ci[1], 3)] if ci is not None else None}
    return out


def _merge_updates(alerts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per alert: the session logs an alert again when its estimate or causes move
    (a drift alert's numbers refresh while it lasts); the row keeps when it was raised, its
    latest text and cause, and how many updates followed ("the same warning 5 times")."""
    out: list[dict[str, Any]] = []
    open_: dict[tuple[Any, ...], dict[str, Any]] = {}
    for a in alerts:
        key = (a["server"], a["kind"], a["level"])
        cur = open_.get(key)
        if cur is not None and not a["cleared"]:
            cur.update(text=a["text"], cause=a["cause"], updates=cur["updates"] + 1)
            continue
        row = {**a, "updates": 0}
        out.append(row)
        if a["cleared"]:
            open_.pop(key, None)
        else:
            open_[key] = row
    return out


def _alert_doc(a: dict[str, Any]) -> dict[str, Any]:
    """An alert as the report shows it; a snapshot's are file input: its name-like fields are
    text or null (a list there made the table's grouping fail on an unhashable key)."""
    t = a.get("t")

    def text(k: str) -> str | None:
        v = a.get(k)
        return v if isinstance(v, str) else None
    return {"t": t if isinstance(t, int | float) else None, "server": text("server"),
            "level": text("level"), "kind": text("kind"),
            "text": str(a.get("message") or a.get("text") or a.get("kind") or NA),
            "cause": text("cause"), "cleared": bool(a.get("cleared", False))}


def report_doc(snap: Snapshot, model: ReportModel | None = None) -> dict[str, Any]:
    """The report as one JSON-able document: `report --format json` prints it, Markdown and
    HTML render it (the same numbers in every format)."""
    model = model or report_model(snap)
    tr = snap.time_range
    servers = []
    for s in snap.servers:
        st = model.states[s.name]
        own = owned_gpus(snap.gpu_samples, s.pids, st.args if st.runs else s.args)
        servers.append({
            "name": s.name, "role": s.role or st.role, "role_source": s.role_source,
            "status": s.status, "log": s.path,
            "model": st.args.get("model_path") or st.args.get("served_model_name")
            if st.runs else s.args.get("model_path"),
            "tp": (st.args if st.runs else s.args).get("tp_size"),
            "speculative": _spec_text(st.args if st.runs else s.args),
            "engine": st.engine or "sglang", "throughput": throughput_label(st.engine),
            "gpus": own.text(), "gpu_indices": list(own.indices),
            "decode_lines": s.counts.get("decode"), "lines": s.counts.get("lines"),
            "exit_code": s.exit_code, "fingerprint": _run_fingerprint_lines(st),
            "recorded_fingerprint": _fingerprint_lines(s),
            "runs": [_run_doc(r) for r in st.runs],
        })
    # alerts: the ones recorded live that the replay cannot raise again (drift against a stored
    # baseline), then every alert the session model raised while playing the snapshot
    replayed = model.fleet.host(model.host).session.alerts
    kinds = {a.get("kind") for a in replayed}
    alerts = [d for d in map(_alert_doc, snap.alerts) if d["kind"] not in kinds | {PAYS_KIND}]
    alerts += [_alert_doc(a) for a in replayed]
    alerts.sort(key=lambda a: a["t"] if a["t"] is not None else -math.inf)
    # the servers' own clock (what every run's figures are timed by), beside the receive times
    # of `time_range`: a --whole-file record receives hours of log within seconds
    starts = [r.start_t for st in model.states.values() for r in st.runs if r.start_t is not None]
    ends = [r.last_t for st in model.states.values() for r in st.runs if r.last_t is not None]
    return {
        "schema": SCHEMA, "host": snap.host,
        "time_range": {"start": tr[0], "end": tr[1]} if tr else None,
        "log_time_range": {"start": stamp(min(starts)), "end": stamp(max(ends)),
                           "seconds": max(ends) - min(starts)} if starts and ends else None,
        "source": snap.source, "snapshot_written": snap.created_at,
        "specmon_version": snap.specmon_version,
        "secrets_redacted": bool(snap.redaction.get("enabled")),
        "throughput": " ".join(_throughput_notes({str(x["engine"]) for x in servers})),
        "throughput_notes": _throughput_notes({str(x["engine"]) for x in servers}),
        "servers": servers,
        "speedup": _speedup_doc(model),
        "gpus": [dataclasses.asdict(g) for g in gpu_summaries(snap.gpu_samples)],
        "gpu_downsampling": snap.gpu_downsampling.get("rule"),
        "alerts": alerts,
        "benchmarks": _bench_docs(snap, {s.name: s.role or model.states[s.name].role
                                         for s in snap.servers}),
    }


def _bench_docs(snap: Snapshot, roles: dict[str, str | None]) -> list[dict[str, Any]]:
    """The session's benchmarks (each checked: a snapshot is a file), with the accept length
    and line every front end shows, and the end-to-end ratio to the newest baseline benchmark
    of the same shape (kind, concurrency, output length, requests): one run each, no interval."""
    out: list[dict[str, Any]] = []
    for entry in snap.benchmarks:
        b = bench_from_json(entry)
        if b is None:
            continue
        acc, source = bench_accept(b)
        b.update(role=roles.get(b["server"]), accept=acc, accept_source=source,
                 line=bench_line(b), vs_baseline=None)
        shape = (b["kind"], b["concurrency"], b["output_len"], b["completed"])
        base = next((x for x in reversed(out) if x["role"] == "baseline"
                     and (x["kind"], x["concurrency"], x["output_len"], x["completed"]) == shape
                     and x["output_tok_s"]), None)
        if b["role"] == "speculative" and base is not None and b["output_tok_s"] is not None:
            # (1e300 over 1e-300 tok/s is inf: no ratio, null in JSON and N/A in the tables)
            b["vs_baseline"] = {"baseline": base["server"], "started_at": base["started_at"],
                                "ratio": finite(b["output_tok_s"] / base["output_tok_s"])}
        out.append(b)
    return out


def _build_blocks(snap: Snapshot) -> list[Block]:
    model = report_model(snap)
    doc = report_doc(snap, model)
    b: list[Block] = []
    tr = snap.time_range
    span = (tr[1] - tr[0]) if tr else 0.0
    b.append(("h", 1, f"specmon report: {snap.host}"))
    lt = doc["log_time_range"]
    log_span = (f"Log time {lt['start']} → {lt['end']} ({_dur(lt['seconds'])}, as the servers "
                "printed it); " if lt else "Log time N/A; ")
    b.append(("p", f"{log_span}received {_when(tr[0] if tr else None)} → "
                   f"{_when(tr[1] if tr else None)} "
                   f"({_dur(span)}). Snapshot {snap.source.get('kind', 'unknown')} source, "
                   f"written {_when(snap.created_at)} by specmon {snap.specmon_version}; "
                   f"secrets {'redacted' if doc['secrets_redacted'] else 'NOT redacted'}."))
    for note in doc["throughput_notes"]:
        b.append(("p", note))

    # servers
    b.append(("h", 2, "Servers"))
    b.append(("table", ["server", "role", "status", "log", "model", "tp", "speculative", "runs",
                        "decode lines", "lines"],
              [[s["name"], s["role"] or NA, s["status"], s["log"] or NA, cut(str(s["model"] or NA)),
                num(s["tp"], "{}"), s["speculative"] or NA, str(len(s["runs"])),
                num(s["decode_lines"], "{:,}"), num(s["lines"], "{:,}")]
               for s in doc["servers"]]))
    for s, snap_s in zip(doc["servers"], snap.servers, strict=True):
        b.append(("p", f"**{s['name']}**: role source: {s['role_source'] or NA}; {s['gpus']}"
                       + (f"; exit code {s['exit_code']}" if s["exit_code"] is not None else "")))
        if s["fingerprint"]:
            run = s["runs"][-1]["run"] if s["runs"] else "?"
            b.append(("table", [f"{s['name']} run {run} fingerprint (its own lines)"],
                      [[x] for x in s["fingerprint"]]))
        if s["recorded_fingerprint"]:  # (not the current run's: drift compares against it)
            b.append(("table", [f"{s['name']} recorded baseline's fingerprint"],
                      [[x] for x in s["recorded_fingerprint"]]))
        if not s["fingerprint"] and not s["recorded_fingerprint"]:
            b.append(("p", "fingerprint (env, versions): N/A (not in this snapshot)"))
        del snap_s

    # runs: one section per server run
    what = _throughput_what({str(s["engine"]) for s in doc["servers"]})
    b.append(("h", 2, f"{what[0].upper()}{what[1:]} per run and batch size"))
    for s in doc["servers"]:
        for r in s["runs"]:
            b.append(("h", 3, f"{s['name']} ({s['role'] or 'role unknown'}) run {r['run']}"))
            b.append(("p", f"run {r['run']}: {r['start'] or NA} → {r['end'] or NA} "
                           f"(started by {r['start_reason']}, "
                           f"{'ended: ' + r['end_reason'] if r['end_reason'] else 'current'}"
                           + (f", exit code {r['exit_code']}" if r["exit_code"] is not None
                              else "") + f"); {r['args']}; {r['decode_lines']:,} decode lines"
                           + (f"; **{r['partial']}**" if r.get("partial") else "")))
            if not r["by_running_req"]:
                b.append(("p", "no decode lines with a throughput"))
            else:
                b.append(("table", ["#running-req", "n", "median tok/s", "p10", "p90",
                                    "robust CV", "accept len (median)"],
                          [[str(w["running_req"]), f"{w['n']:,}", num(w["median_tok_s"]),
                            num(w["p10"]), num(w["p90"]),
                            num(w["robust_cv"] * 100 if w["robust_cv"] is not None else None,
                                "{:.1f}%"), num(w["accept_len_median"])]
                           for w in r["by_running_req"]]))
            if r.get("dp_groups", 0) > 1:  # (compare's note: a row is the server's total)
                b.append(("p", f"{r['dp_groups']} DP groups, summed per interval: each value "
                               "is the server's total"))
            # log time broke: in parse --runs' and compare's words
            b.extend(("p", t) for t in time_break_texts(r["time_segments"]))
        if not s["runs"]:
            b.append(("h", 3, f"{s['name']} ({s['role'] or 'role unknown'})"))
            b.append(("p", "no decode lines with a throughput"))

    # speedup
    sp = doc["speedup"]
    b.append(("h", 2, "Speedup (speculative ÷ baseline, current runs, same #running-req)"))
    if sp["value"] is None and not sp["by_running_req"]:
        b.append(("p", f"Speedup: N/A ({sp['reason']})."))
    else:
        if sp["value"] is None:
            b.append(("p", f"Speedup: N/A ({sp['reason']})."))
        else:
            ci = sp["ci95"]
            ci_text = (f"95% {ci[0]:.3f}–{ci[1]:.3f}" if ci is not None
                       else f"{sp['ci95_reason']}")
            b.append(("p", f"**Speedup {sp['value']:.3f}×** ({ci_text}) at bs "
                           f"{sp['running_req']}: {sp['speculative']} run {sp['spec_run']} "
                           f"{sp['spec_median']:.2f} / {sp['baseline']} run {sp['base_run']} "
                           f"{sp['base_median']:.2f} tok/s (medians over {sp['span']}, n "
                           f"{sp['n_spec']}/{sp['n_base']}). The interval assumes independent "
                           "samples; consecutive log intervals are correlated, so read it as a "
                           "lower bound on the uncertainty."))
        vr = sp.get("vs_recorded")
        if vr is not None:
            ci = vr["ci95"]
            b.append(("p", f"**The baseline drifts** (its alert is active at the end): against "
                           f"the recorded baseline {vr['baseline']} ({vr['recorded_tok_s']:.2f} "
                           f"tok/s at bs {vr['running_req']}) the speculative server's speedup is "
                           f"**{vr['value']:.3f}×**"
                           + (f" (95% {ci[0]:.3f}–{ci[1]:.3f})" if ci else "")
                           + ", the figure the live headline put first; the speedup above is "
                           "against the drifted live baseline."))
        if sp["conditions_differ"]:
            b.append(("p", "**conditions differ**: " + "; ".join(sp["conditions_differ"])
                           + " (the speedup measures these as well as speculation)."))
        if sp.get("conditions_unknown"):
            b.append(("p", "**" + unknown_text(sp["conditions_unknown"]).replace(
                ": ", "**: ", 1) + "."))
        b.append(("table", ["#running-req", f"{sp['baseline']} run {sp['base_run']} n",
                            f"{sp['speculative']} run {sp['spec_run']} n", "speedup",
                            "95% interval"],
                  [[str(r["running_req"]), str(r["n_base"]), str(r["n_spec"]),
                    f"{r['speedup']:.3f}×",
                    f"{r['ci95'][0]:.3f}–{r['ci95'][1]:.3f}" if r["ci95"] is not None
                    else f"N/A ({r['ci95_reason']})"] for r in sp["by_running_req"]]))

    # accept length (per run)
    b.append(("h", 2, "Accept length"))
    any_spec = False
    for s in doc["servers"]:
        for r in s["runs"]:
            acc = r["accept_len"]
            if acc is None:
                continue
            any_spec = True
            every = (" over every batch size (each has its own in the table above)"
                     if len(r["by_running_req"]) > 1 else "")
            head = (f"{s['name']} run {r['run']}: accept length{every} (tokens per verify round, "
                    f"bonus included) median {num(acc['median'])}, p10 {num(acc['p10'])}, "
                    f"p90 {num(acc['p90'])}, n {acc['n']:,}; ") if acc["n"] else (
                f"{s['name']} run {r['run']}: accept length N/A (vLLM 0.8.3/0.8.4 print none, and "
                "without the run's k from its config line none follows from the counts); ")
            if acc.get("accept_rate_measured") is not None:  # vLLM prints its counts
                b.append(("p", head + "accept rate (vLLM's counts, accepted ÷ drafted over the run) "
                               f"{num(acc['accept_rate_measured'])}."
                               + (f" {acc['bonus_added']:,} lengths were printed by vLLM 0.8.5 "
                                  "without the bonus token; 1 was added." if acc["bonus_added"]
                                  else "")))
                continue
            b.append(("p", head + "accept rate (recomputed as (len−1)/(draft tokens−1), draft "
                           f"tokens {num(acc['draft_tokens'], '{}')}) "
                           f"{num(acc['accept_rate_recomputed'])}."))
    if not any_spec:
        b.append(("p", "N/A: no decode line carries an accept length or acceptance counts."))

    # GPUs
    b.append(("h", 2, "GPUs"))
    gs = gpu_summaries(snap.gpu_samples)
    if not gs:
        b.append(("p", "N/A: no GPU samples in this snapshot."))
    else:
        b.append(("table", ["GPU", "name", "samples", "SM MHz median", "SM MHz min–max", "max SM MHz",
                            "power W median", "power W max", "limit W", "temp °C max",
                            "clock-event reasons (share of samples)"],
                  [[num(g.index, "{}"), g.name or NA, f"{g.n:,}", num(g.clock_med, "{:.0f}"),
                    f"{num(g.clock_min, '{:.0f}')}–{num(g.clock_max, '{:.0f}')}",
                    num(g.max_clock, "{:.0f}"), num(g.power_med, "{:.0f}"),
                    num(g.power_max, "{:.0f}"), num(g.power_limit, "{:.0f}"),
                    num(g.temp_max, "{:.0f}"),
                    ", ".join(f"{r} {share:.0%}" for r, share in g.reasons) or
                    ("none" if g.reasons == [] and g.n else NA)] for g in gs]))
        rule = doc["gpu_downsampling"]
        if rule:
            b.append(("p", f"GPU samples: {rule}."))

    # alerts
    b.append(("h", 2, "Alerts"))
    if not doc["alerts"]:
        b.append(("p", "None recorded in this snapshot, and none raised when its lines were "
                       "played through the session model."))
    else:
        b.append(("table", ["time", "server", "level", "alert", "likely cause"],
                  [[_when(a["t"]), str(a["server"] or NA), str(a["level"] or NA),
                    ("cleared: " if a["cleared"] else "") + a["text"]
                    + (f" (updated {a['updates']} times while it lasted; the latest figures)"
                       if a.get("updates") else ""), str(a["cause"] or NA)]
                   for a in _merge_updates(doc["alerts"])]))  # (JSON: every event, as heard)

    # benchmarks the session ran (the UI's benchmark key)
    b.append(("h", 2, "Benchmarks (end-to-end)"))
    if not doc["benchmarks"]:
        b.append(("p", "None run in this session."))
    else:
        b.append(("p", "End-to-end output tok/s: every generated token over the wall time of "
                       "the run, prefill and time to first token included (not the logs' "
                       "throughput). A ratio is one run each (no interval), and only between "
                       "runs of the same kind, concurrency, output length and request count."))
        b.append(("table", ["time", "server", "kind", "c", "out", "n (failed)", "tok/s",
                            "TTFT ms", "ITL ms", "accept len", "vs baseline"],
                  [[_when(x["started_at"]), f"{x['server']} ({x['role'] or 'role unknown'})",
                    x["kind"], num(x["concurrency"], "{}"), num(x["output_len"], "{}"),
                    f"{num(x['completed'], '{}')} ({num(x['failed'], '{}')})",
                    num(x["output_tok_s"]), num(x["mean_ttft_ms"], "{:.0f}"),
                    num(x["mean_itl_ms"], "{:.2f}"),
                    f"{num(x['accept'])} ({x['accept_source']})" if x["accept"] is not None
                    else NA,
                    f"{num(x['vs_baseline']['ratio'], '{:.3f}×')} ({x['vs_baseline']['baseline']})"
                    if x["vs_baseline"] else NA] for x in doc["benchmarks"]]))
        for x in doc["benchmarks"]:
            for note in x["notes"]:
                b.append(("p", f"{x['server']}, {_when(x['started_at'])}: {note}"))

    # charts
    b.append(("h", 2, "Charts"))
    tp = throughput_chart(snap, model)
    if tp is None:
        b.append(("p", "Throughput chart: N/A (no decode throughput, or pygal not installed)."))
    else:
        b.append(("svg", "throughput", tp, f"{what} over log time, per run"))
    for name, label, svg in gpu_charts(snap):
        b.append(("svg", name, svg, label))
    return b


# --- renderers ----------------------------------------------------------------------------------


def _md_text(text: str) -> str:
    """Markdown passes raw HTML through: `<script>` from a snapshot must arrive as text; and no
    link or image can form from a snapshot's text (`![x](https://...)` in a server name would
    load a remote image): brackets are escaped (a backslash first, so `\\[` stays text). A
    `>` alone opens no tag: it stays, so ">= 3 samples" reads as written in the file too."""
    return (str(text).replace("\\", "\\\\").replace("&", "&amp;").replace("<", "&lt;")
            .replace("[", "\\[").replace("]", "\\]"))


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
            name, alt = blk[1], _md_text(blk[3]).replace("[", "(").replace("]", ")")
            if chart_files and name in chart_files:
                # a file name is the user's text: percent-encoded, so no control character,
                # space or parenthesis reaches the report and the link still finds the file
                out.append(f"![{alt}]({quote(chart_files[name])})")
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
