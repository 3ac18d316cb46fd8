"""A server log as runs, and two runs compared per batch size (headless `specmon compare`).

The log goes through the same `ServerState.apply` the live session uses, so runs, log times
and DP groups are split exactly as in the UI, and the comparison uses the UI's window code
over the whole run.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from specmon.analysis.conditions import conditions_differ, conditions_unknown
from specmon.analysis.fingerprint import Fingerprint, env_snapshots, fingerprint_from, gpu_states
from specmon.analysis.stats import median
from specmon.jsonout import MAX_DEPTH, too_deep
from specmon.numfmt import NA, num, spec_config_text, spread_text
from specmon.parse.gpu_sample import GpuSample
from specmon.parse.sglang import parse_line
from specmon.parse.vllm import BONUS_NOTE, EngineGuard, VllmDecodeRecord, throughput_label
from specmon.redact import redact_text
from specmon.session.speedup import unknown_text
from specmon.session.state import Run, ServerState
from specmon.session.window import MIN_N, Speedup, WindowStats, run_window, speedups_by_rr, stats_for
from specmon.textsafe import cut

WHOLE_RUN = math.inf


def read_runs(lines: Iterable[bytes | str], name: str = "log") -> ServerState:
    """Every line of a log through the session model; its `runs` are the log's runs."""
    state = ServerState(name, hold_vllm=True)
    guard = EngineGuard(name)
    for line_no, raw in enumerate(lines, 1):
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        text = text.rstrip("\r\n")
        rec = parse_line(text)
        guard.check(rec, line_no)
        state.apply(text, rec, 0.0)  # offline: no receive time
    state.flush()  # a vLLM engine line still waiting for its spec line
    return state


# Offline, a log with clock-only stamps (SGLang 0.3.x) has no date: its times are seconds
# since day 0 (`ServerState._offline_clock`), shown as the clock the log printed ("day 2" after
# a midnight), never as an invented 1970 date.
CLOCK_ONLY_SPAN = 366 * 86400.0


def stamp(t: float | None) -> str | None:
    if t is None:
        return None
    if 0 <= t < CLOCK_ONLY_SPAN:
        day = int(t // 86400)
        return time.strftime("%H:%M:%S", time.gmtime(t)) + (f" (day {day + 1})" if day else "")
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def clock(t: float | None) -> str:
    if t is not None and 0 <= t < CLOCK_ONLY_SPAN:
        return time.strftime("%H:%M:%S", time.gmtime(t))
    return "?" if t is None else time.strftime("%H:%M:%S", time.localtime(t))


def args_summary(args: dict[str, Any]) -> str:
    """`model m, tp 8, dp 4, EAGLE3 steps 2 topk 1 draft 3` (what tells runs apart)."""
    parts = []
    if args.get("model_path"):
        parts.append(f"model {args['model_path']}")
    for key, label in (("tp_size", "tp"), ("dp_size", "dp")):
        if args.get(key) not in (None, 1) or key == "tp_size" and key in args:
            parts.append(f"{label} {args[key]}")
    if args.get("engine_version"):  # vLLM's config line
        parts.insert(0, f"vLLM {args['engine_version']}")
    spec = spec_config_text(args)
    if spec:
        parts.append(spec)
    # a way out of the run's args (parse --runs, run headers, the UI): a model path may be a
    # URL with credentials, a draft path an hf_ token; masked before it is cut (a cut URL
    # would lose the `@` that tells its password), cut because a hostile line may hold a
    # megabyte of model path
    return ", ".join(cut(redact_text(p)) for p in parts) if parts else "no server_args line"


def time_segments(run: Run) -> list[dict[str, Any]]:
    """Where the run's log time broke (a clock stepped back, a gap or step ahead)."""
    return [{"segment": sg.index + 1, "from": stamp(sg.start_t), "after": stamp(sg.prev_t),
             "step_s": round(sg.step_s, 3)} for sg in run.segments]


def time_break_text(sg: dict[str, Any]) -> str:
    """What a break of log time does to the figures, in the words every front end uses
    (`parse --runs`, `compare`): the whole-run figures count the points since the last step
    back (`Run.points_since`), both sides of a jump ahead; no window spans either."""
    step = sg["step_s"]
    what = f"went back {-step:.0f} s" if step < 0 else f"jumped ahead {step:.0f} s"
    rule = ("no time window and none of the run's figures above reach behind it" if step < 0
            else "time windows restart there; the run's figures above count both sides (each "
            "is the server's own measure of its interval)")
    return f"time segment {sg['segment']} from {sg['from']}: log time {what} " \
           f"(after {sg['after']}); {rule}"


SHOWN_JUMPS = 3  # jumps ahead listed one by one in a summary (compare, report); then one line


def time_break_texts(segments: list[dict[str, Any]], limit: int | None = SHOWN_JUMPS) -> list[str]:
    """A run's breaks of log time in `time_break_text`'s words. Every step back is listed; of
    the jumps ahead (an idle server logs nothing: a benchmark every 5 min gives one per pause)
    the first `limit`, then one line for the rest, so a day's log is not 30 lines of notes.
    `limit=None`: all (`parse --runs`, the detailed view the summary line points to)."""
    out: list[str] = []
    rest: list[float] = []
    shown = 0  # jumps ahead listed
    for sg in segments:
        ahead = sg["step_s"] >= 0
        if ahead and limit is not None and shown >= limit:
            rest.append(sg["step_s"])
            continue
        out.append(time_break_text(sg))
        shown += ahead
    if rest:
        out.append(f"log time jumped ahead {len(rest)} more time(s), by "
                   f"{min(rest):.0f}-{max(rest):.0f} s, each the start of a time segment where "
                   "time windows restart (`specmon parse --runs FILE` lists them)")
    return out


def partial_text(run: Run) -> str | None:
    """Why a run's figures cover only part of it (history read after its start-up lines), or
    None for a run read whole."""
    if not run.skipped_bytes:
        return None
    return (f"partial: {run.skipped_bytes:,} bytes of its log after the start-up lines, before "
            f"{stamp(run.read_from_t)}, were not read (the history a live tail starts with; "
            "--whole-file reads them): its figures cover the lines read")


def run_row(run: Run) -> dict[str, Any]:
    """One line of `specmon parse --runs`."""
    return {"run": run.index, "start": stamp(run.start_t), "end": stamp(run.last_t),
            "partial": partial_text(run),
            "start_reason": run.start_reason, "end_reason": run.end_reason,
            "args": args_summary(run.args), "decode_lines": run.lines_total,
            "dp_groups": len([k for k in run.groups if k is not None]),
            "untimed_lines": run.untimed, "time_segments": time_segments(run),
            **by_running_req(run)}


def run_by_rr(run: Run) -> list[dict[str, Any]]:
    """A run's decode throughput per #running-req over the whole run (gen throughput medians,
    p10-p90, n, accept length), by the UI's window code: what `parse --runs`, `check`, the report
    and `compare` show for a run."""
    pts = run_window(run, WHOLE_RUN)
    out = []
    for rr in sorted({p.rec.running_req for p in pts if p.rec.running_req is not None}):
        st = stats_for(pts, rr, WHOLE_RUN)
        if st is None:
            continue
        out.append({"running_req": rr, "n": st.n, "median_tok_s": _r(st.median),
                    **_spread(st),
                    "robust_cv": _r(st.shown_cv) if st.shown_cv is not None else None,
                    "accept_len_median": _r(st.accept_len) if st.accept_len is not None
                    else None})
    return out


def by_running_req(run: Run) -> dict[str, Any]:
    """`run_by_rr` with the points it covers: `stats_points` of them from `stats_start` (a run
    keeps its newest RECENT_POINTS)."""
    pts = run_window(run, WHOLE_RUN)
    return {"by_running_req": run_by_rr(run), "stats_points": len(pts),
            "stats_start": stamp(pts[0].t) if pts else None}


def _mode_rr(run: Run) -> int | None:
    c = Counter(p.rec.running_req for p in run.decode if p.rec.running_req is not None)
    return c.most_common(1)[0][0] if c else None


def side(run: Run, runs: int, rr: int | None, spec: bool) -> dict[str, Any]:
    pts = run_window(run, WHOLE_RUN)
    st: WindowStats | None = stats_for(pts, rr, WHOLE_RUN) if rr is not None else None
    out: dict[str, Any] = {
        "run": run.index, "runs": runs, "start": stamp(run.start_t),
        "median_tok_s": _r(st.median) if st else None, "n": st.n if st else 0,
        **_spread(st),
    }
    if spec:
        acc = median([p.rec.accept_len for p in pts
                      if p.rec.accept_len is not None and p.rec.running_req == rr])
        out["accept_len_median"] = _r(acc) if acc is not None else None
        counts = [p.rec.spec for p in pts if p.rec.running_req == rr
                  and isinstance(p.rec, VllmDecodeRecord) and p.rec.spec is not None]
        dra = sum(c.get("drafted") or 0 for c in counts)
        if dra:  # vLLM prints its counts: the rate over the compared intervals, measured
            out["accept_rate_counts"] = _r(sum(c.get("accepted") or 0 for c in counts) / dra)
    return out


def _spread(st: WindowStats | None) -> dict[str, float | None]:
    """p10 and p90, N/A (None) under MIN_SPREAD_N samples (`WindowStats.spread`)."""
    sp = st.spread if st is not None else None
    return {"p10": _r(sp[0]) if sp else None, "p90": _r(sp[1]) if sp else None}


def _r(x: float) -> float:
    return round(x, 4)


def _ratio(x: float) -> float:
    """A speedup or its interval's end as JSON: to the 3 decimals every front end prints (a
    4-decimal value printed to 3 rounds twice: compare said 1.530 where advise said 1.531)."""
    return round(x, 3)


def _ci(sp: Speedup) -> list[float] | None:
    """The interval as JSON: null (with `ci95_reason`) when a side has < 2 samples."""
    return None if sp.ci95 is None else [_ratio(sp.ci95[0]), _ratio(sp.ci95[1])]


@dataclass
class Comparison:
    result: dict[str, Any]
    enough: bool  # a batch size with >= MIN_N samples on both runs
    why: str | None  # what was missing, when not enough


def pick_run(state: ServerState, k: int | None, label: str) -> Run:
    """Run k (1-based), default the last; ValueError naming the log when it has no such run."""
    runs = list(state.runs)
    if not runs:
        raise ValueError(f"{label}: no lines SGLang printed (no run)")
    if k is None:
        return runs[-1]
    for r in runs:
        if r.index == k:
            return r
    raise ValueError(f"{label}: no run {k} (the log holds runs 1..{runs[-1].index})")


MAX_PROBE_FILES = 1000  # modified files kept from a probe read back from a file


def clean_probe(d: Any) -> dict[str, Any] | None:
    """A probe read back from a file (snapshot, record) with only the fields a run's
    fingerprint reads, each of its type (a hostile file's list of objects as modified files
    would break the comparisons); None when it is no object."""
    if not isinstance(d, dict):
        return None
    out: dict[str, Any] = {k: d[k] for k in ("dist", "version", "method")
                           if isinstance(d.get(k), str)}
    files = d.get("modified_files")
    if isinstance(files, list):
        out["modified_files"] = [f for f in files if isinstance(f, str)][:MAX_PROBE_FILES]
    env = d.get("env")
    if isinstance(env, dict) and too_deep(env, MAX_DEPTH - 1) is None:
        # each entry is checked where it is read (env_snapshots); one nested past MAX_DEPTH
        # is none (the record and snapshot readers refuse it first: every writer recurses)
        out["env"] = env
    return out


def run_fingerprint_offline(run: Run, gpus: Sequence[GpuSample] | None = None,
                            server_pids: Sequence[int] = (),
                            collected_at: float | None = None) -> Fingerprint:
    """What a run's own lines (and the probe and GPU samples it carries) say about its
    conditions: server args, NCCL_DEBUG lines, the engine's version and modified files, the
    environment of its processes, GPUs (`gpus`: these instead of the run's own samples)."""
    probe = clean_probe(run.probe) or {}  # each field of its type
    files = probe.get("modified_files")
    if gpus is None:
        gpus = [g for g in run.gpu_samples if isinstance(g, GpuSample)]
    launcher, workers = env_snapshots(probe.get("env"))  # read from this run's processes
    return fingerprint_from(server_args=run.args, nccl_lines=run.nccl_lines,
                            launcher=launcher, workers=workers,
                            version=probe.get("version"), modified_files=files,
                            modified_method=probe.get("method") if files is not None else None,
                            modified_dist=probe.get("dist"), gpus=gpu_states(gpus),
                            server_pids=server_pids, collected_at=collected_at)


def run_conditions(base: Run, spec: Run, running_req: int | None = None) -> list[str]:
    """What differs between two runs besides speculation (analysis.conditions, the one rule),
    at the batch size compared."""
    return conditions_differ(run_fingerprint_offline(base), run_fingerprint_offline(spec),
                             running_req)


def run_unknowns(base: Run, spec: Run) -> list[str]:
    """What the two runs' conditions cannot be compared on (analysis.conditions, the one
    rule): a side without its launch line."""
    return conditions_unknown(run_fingerprint_offline(base), run_fingerprint_offline(spec))


def compare(base: ServerState, spec: ServerState, *, base_run: int | None = None,
            spec_run: int | None = None, running_req: int | None = None,
            labels: tuple[str, str] = ("baseline", "speculative")) -> Comparison:
    b = pick_run(base, base_run, f"{labels[0]} log")
    s = pick_run(spec, spec_run, f"{labels[1]} log")
    bp, sp = run_window(b, WHOLE_RUN), run_window(s, WHOLE_RUN)
    rows: list[Speedup] = speedups_by_rr(bp, sp, WHOLE_RUN)
    if running_req is not None:
        rows = [x for x in rows if x.running_req == running_req]
    usable = [x for x in rows if x.base.n >= MIN_N and x.spec.n >= MIN_N]
    head = max(usable, key=lambda x: (min(x.base.n, x.spec.n), -x.running_req), default=None)
    rr = head.running_req if head else running_req if running_req is not None else _mode_rr(s)
    notes: list[str] = []

    def speculative(run: Run) -> bool:
        return any(p.rec.is_speculative for p in run.decode)
    if speculative(b) and not speculative(s) and s.decode:
        notes.append(f"the {labels[0]} log's run {b.index} has speculative decode lines (accept "
                     f"len) and the {labels[1]} log's run {s.index} none: the two logs look "
                     "swapped (the baseline's log goes first)")
    for st, run, label in ((base, b, labels[0]), (spec, s, labels[1])):
        n_runs = len(st.runs)
        if n_runs > 1 or run.index != 1:
            notes.append(f"{label} log holds {n_runs} run{'s' if n_runs != 1 else ''}; compared run "
                         f"{run.index} (from {clock(run.start_t)})")
        groups = [k for k in run.groups if k is not None]
        if len(groups) > 1 or groups and st.engine != "vllm":  # vLLM names even a lone engine 000
            notes.append(f"{label} run {run.index}: {len(groups)} DP groups, summed per interval")
        silent = [k for k in run.silent_groups() if k is not None]
        if silent and st.engine == "vllm":
            notes.append(f"{label} run {run.index}: engine(s) {', '.join(map(str, silent))} printed "
                         "no line before the end (vLLM prints nothing while an engine is idle)")
        elif silent:
            notes.append(f"{label} run {run.index}: DP group(s) {', '.join(map(str, silent))} stopped "
                         "logging before the end")
        if run.untimed:
            notes.append(f"{label} run {run.index}: {run.untimed} decode lines carry no timestamp")
        part = partial_text(run)
        if part is not None:
            notes.append(f"{label} run {run.index}: {part}")
        notes += [f"{label} run {run.index}: {t}" for t in time_break_texts(time_segments(run))]
        fixed = sum(1 for p in run.decode if BONUS_NOTE in (getattr(p.rec, "accept_len_note", None)
                                                             or ""))
        if fixed:
            notes.append(f"{label} run {run.index}: {fixed} accept lengths as vLLM 0.8.5 printed "
                         "them, without the bonus token: 1 added (bonus included, as elsewhere)")
        made = sum(1 for p in run.decode
                   if (getattr(p.rec, "accept_len_note", None) or "").startswith("F1"))
        if made:
            notes.append(f"{label} run {run.index}: {made} accept lengths derived (vLLM 0.8.3-0.8.4 "
                         "print none): 1 + Accepted x k / Drafted, k from the run's config line")
    why = None
    if head is None:
        def counts(pts: list[Any]) -> str:
            c = Counter(rr for p in pts if (rr := p.rec.sample_rr) is not None)
            if running_req is not None:
                c = Counter({running_req: c.get(running_req, 0)})
            if not c and pts:
                return f"{len(pts)} decode lines, none with a readable batch size and throughput"
            return ", ".join(f"bs {k}: n {v}" for k, v in sorted(c.items())) or "no decode lines"
        why = (f"no batch size has >= {MIN_N} decode samples on both runs "
               f"({labels[0]} run {b.index}: {counts(bp)}; {labels[1]} run {s.index}: {counts(sp)})")
        notes.append(why)
    elif rr is not None:
        span = runs_span(b, s)
        if "vllm" in (base.engine, spec.engine):
            notes.append(f"medians at #running-req {rr}, {span}, of {throughput_label('vllm')} "
                         "(not decode-only)")
        else:
            notes.append(f"medians at #running-req {rr}, {span}, decode-only gen throughput")
    differ = run_conditions(b, s, rr)
    result = {
        "conditions_differ": differ,
        "conditions_unknown": run_unknowns(b, s),
        "baseline": side(b, len(base.runs), rr, False),
        "speculative": side(s, len(spec.runs), rr, True),
        "by_running_req": [{"running_req": x.running_req, "speedup": _ratio(x.ratio),
                            "ci95": _ci(x), "ci95_reason": x.ci_reason, "n_base": x.base.n,
                            "n_spec": x.spec.n} for x in rows],
        "speedup": None if head is None else {"running_req": head.running_req,
                                              "value": _ratio(head.ratio), "ci95": _ci(head),
                                              "ci95_reason": head.ci_reason,
                                              "n_base": head.base.n, "n_spec": head.spec.n},
        "notes": notes,
    }
    return Comparison(result, head is not None, why)


def runs_span(*runs: Run) -> str:
    """What medians "over the runs" cover: the whole runs, or the lines read of a partial one."""
    return ("the lines read of each run (a run read in part: its lines between the start-up "
            "and the history were not read)" if any(r.skipped_bytes for r in runs)
            else "whole runs")


def _ci_text(d: dict[str, Any]) -> str:
    ci = d.get("ci95")
    return NA if ci is None else f"{ci[0]:.3f}-{ci[1]:.3f}"


def render(res: dict[str, Any]) -> str:
    b, s, sp = res["baseline"], res["speculative"], res["speedup"]

    lines = []
    if sp is None:
        lines.append("speedup: N/A")
    else:
        lines.append(f"speedup {sp['value']:.3f}x (95% CI {_ci_text(sp)}) "
                     f"at #running-req {sp['running_req']}")
    if res.get("conditions_differ"):
        lines.append("conditions differ: " + "; ".join(res["conditions_differ"]))
    if res.get("conditions_unknown"):
        lines.append(unknown_text(res["conditions_unknown"]))
    for label, d in (("baseline", b), ("speculative", s)):
        extra = f", accept len {num(d.get('accept_len_median'))}" if "accept_len_median" in d else ""
        if "accept_rate_counts" in d:
            extra += f", accept rate {num(d['accept_rate_counts'], '{:.3f}')} (vLLM's counts)"
        lines.append(f"{label}: run {d['run']} of {d['runs']} (from {d['start'] or '?'}): median "
                     f"{num(d['median_tok_s'])} tok/s, n {d['n']}, p10-p90 "
                     f"{spread_text(d['p10'], d['p90'])}{extra}")
    if res["by_running_req"]:
        lines.append(f"{'#running-req':>12}  {'speedup':>8}  {'95% CI':>15}  {'n base':>7}  {'n spec':>7}")
        for row in res["by_running_req"]:
            lines.append(f"{row['running_req']:>12}  {row['speedup']:>8.3f}  "
                         f"{_ci_text(row):>15}  {row['n_base']:>7}  "
                         f"{row['n_spec']:>7}")
    for n in res["notes"]:
        lines.append(f"note: {n}")
    return "\n".join(lines)
