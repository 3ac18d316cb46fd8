"""One server's panel: title, start-up/control state, labelled numbers of its current run, a
fixed-scale trend, its log."""

from __future__ import annotations

import math

from textual.app import ComposeResult
from textual.containers import Vertical

from specmon.numfmt import spec_config_text
from specmon.parse.sglang import BatchRecord
from specmon.parse.vllm import VllmDecodeRecord, throughput_label
from specmon.redact import redact_text
from specmon.session.benchmarks import accept as bench_accept
from specmon.session.state import ServerState
from specmon.session.window import (
    MIN_N,
    WindowStats,
    current_stats,
    recomputed_accept_rate,
    run_stats_text,
    window_points,
)
from specmon.ui.keys import bindings
from specmon.ui.safe import plain
from specmon.ui.widgets.log import LogView
from specmon.ui.widgets.text import NA, Lines, Piece, fit, nice_ceiling, num, safe_id, spark

STATUS_MARK = {
    "ready": ("●", "status-ready"),
    "starting": ("◐", "status-starting"),
    "stopped": ("○", "status-stopped"),
    "crashed": ("✖", "status-crashed"),
    "unknown": ("?", "status-unknown"),
}




class ServerSummary(Lines):
    """The numbers of one server, most important first, each labelled once."""

    def show(self, state: ServerState, now: float, window_s: float) -> None:
        rows = summary_rows(state, now, window_s)
        w = self.avail
        lw = max(len(r[0]) for r in rows)
        vw = max(len(r[1]) for r in rows)
        p: list[Piece] = []
        for i, (label, value, hint, style) in enumerate(rows):
            lead = "\n" if i else ""
            p.append((f"{lead}{label:<{lw}} ", "$text-muted"))
            room = w - lw - vw - 2
            hint = fit(hint, room) if hint and room >= 6 else ""
            # the space goes with the value: a text run's leading space is lost in SVG renderers
            p.append((f"{value:>{vw}}" + (" " if hint else ""), style or "bold"))
            if hint:
                p.append((hint, "$text-muted"))
        self.put(p)


def run_age_text(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"


def summary_rows(state: ServerState, now: float, window_s: float
                 ) -> list[tuple[str, str, str, str]]:
    """(label, value, how it was measured, value style) rows of a server panel.

    Every value is the current run's (a restart clears the last run's from these rows), and
    an ended run's values say so ("run 2 ended 40 s ago")."""
    run = state.runs[-1] if state.runs else None
    last = run.last if run is not None else None
    bs = last.running_req if last else None
    rows: list[tuple[str, str, str, str]] = []
    w: WindowStats | None = current_stats(state, now, window_s)
    label = f"median {window_s:.0f} s"
    run_txt = plain(run_stats_text(state, w))  # "run 3 since 14:02:11, n 4"
    ended = ""
    if run is not None and run.ended and run.last_received is not None:
        ended = f"run {run.index} ended {run_age_text(max(0.0, now - run.last_received))} ago · "
    if w is not None and w.n >= MIN_N:
        # n and the spread first: a narrow panel cuts the end of the line, never them
        cv = f" · CV {w.shown_cv * 100:.1f}%" if w.shown_cv is not None else ""
        rows.append((label, num(w.median), f"tok/s · bs {w.running_req} · n {w.n} · "
                     f"p10–p90 {w.p10:.1f}–{w.p90:.1f}{cv} · "
                     f"{plain(run_stats_text(state, w, with_n=False))}", "bold"))
    else:
        rows.append((label, NA, f"{run_txt} · too few decode lines" if w is not None else
                     f"{run_txt} · no decode lines in the window", "$text-muted"))
    stale = "stale · " if state.stale else ""
    if last is None:
        idx = run.index if run is not None else 1
        rows.append(("last interval", NA, f"no decode line in run {idx} yet", "$text-muted"))
    else:
        rows.append(("last interval", num(last.gen_throughput),
                     f"tok/s · {ended}{stale}bs {num(bs, '{}')} · queue "
                     f"{num(last.queue_req, '{}')} · {throughput_label(state.engine)}",
                     "$warning" if state.stale or ended else ""))
    if state.is_speculative and state.engine == "vllm":
        rows.extend(_vllm_spec_rows(state, w))
    elif state.is_speculative:
        al = last.accept_len if last else None
        # a median from MIN_N lines, as the tok/s median above (else the last interval's)
        med_al = w.accept_len if w is not None and w.n >= MIN_N else None
        ndt = state.num_draft_tokens
        rate = recomputed_accept_rate(med_al if med_al is not None else al, ndt)
        if al is None and med_al is None:
            rows.append(("accept len", NA, "no decode line in this run yet", "$text-muted"))
        else:
            what = "median" if med_al is not None else "last interval (too few for a median)"
            rows.append(("accept len", num(med_al if med_al is not None else al),
                         f"{what} · rate {num(rate)} (recomputed, {num(ndt, '{}')} draft "
                         f"tokens) · last {num(al)}", ""))
    if last is not None and bs and last.gen_throughput:
        rows.append(("ms/token", f"{1000.0 * bs / last.gen_throughput:.1f}",
                     "per request · last interval", ""))
    else:
        rows.append(("ms/token", NA, "no decode line in this run yet", "$text-muted"))
    rows.append(_kv_row(state))
    rows.append(_graph_row(last))
    return rows


def _vllm_spec_rows(state: ServerState, w: WindowStats | None) -> list[tuple[str, str, str, str]]:
    """vLLM prints its acceptance counts: the rate and per-position rates are measured."""
    last = state.runs[-1].last if state.runs else None  # the current run's
    al = last.accept_len if last else None
    med_al = w.accept_len if w is not None and w.n >= MIN_N else None  # (as the tok/s median)
    if al is None and med_al is None:
        return [("accept len", NA, "no decode line in this run yet", "$text-muted")]
    spec = last.spec if isinstance(last, VllmDecodeRecord) else None
    pp = spec.get("per_position") if spec else None
    pos = " ".join(num(x) for x in pp) if isinstance(pp, list) else NA
    note = " · bonus added (0.8.5)" if last is not None and getattr(last, "accept_len_note", None) \
        and "0.8.5" in str(getattr(last, "accept_len_note", "")) else ""
    what = "median" if med_al is not None else "last interval (too few for a median)"
    rows = [("accept len", num(med_al if med_al is not None else al),
             f"{what} · last {num(al)} · bonus included{note}", "")]
    if isinstance(last, VllmDecodeRecord):
        rows.append(("accepted", num(last.accept_rate),
                     f"of drafted · per position {pos} · "
                     f"{num(last.accepted_tok_s, '{:.1f}')} accepted tok/s (last interval)", ""))
    return rows


def _kv_row(state: ServerState) -> tuple[str, str, str, str]:
    """KV cache use from #token and the pool size: SGLang prints `token usage` with two
    decimals, so a bs-1 server on a 1.2M-token pool always reads 0.00."""
    last = state.runs[-1].last if state.runs else None  # the current run's
    if isinstance(last, VllmDecodeRecord):
        hit_note = f" ({last.prefix_cache_hit_note})" if last.prefix_cache_hit_note else ""
        return ("KV cache", num(last.kv_cache_usage_pct, "{:.1f}%"),
                f"{last.kv_device or 'GPU'} usage · prefix cache hit "
                f"{num(last.prefix_cache_hit_pct, '{:.1f}%')}{hit_note}", "")
    tokens = last.tokens if last else None
    pool = state.args.get("max_total_num_tokens")
    pool = pool if isinstance(pool, int) and not isinstance(pool, bool) and pool > 0 else None
    if tokens is not None and pool:
        return ("KV cache", f"{tokens:,}", f"tokens · {100.0 * tokens / pool:.2f}% of {pool:,}", "")
    usage = last.token_usage if last else None
    return ("KV cache", num(tokens, "{:,}"), f"tokens · usage {num(usage)} · pool size unknown"
            if tokens is not None else "", "")


def _graph_row(last: BatchRecord | None) -> tuple[str, str, str, str]:
    if last is None or last.cuda_graph is None:
        return ("cuda graph", NA, "", "$text-muted")
    if last.cuda_graph:
        kind = f" ({last.graph_kind})" if last.graph_kind and last.graph_kind != "cuda" else ""
        return ("cuda graph", "on", f"replayed{kind}", "")
    return ("cuda graph", "off", "not replayed · bs above cuda-graph-max-bs?", "$warning")


def title_pieces(state: ServerState, width: int) -> list[Piece]:
    """`● name [role] status · tp 8 · EAGLE3 2/1/3`: the name once, the role as a badge."""
    mark, _ = STATUS_MARK.get(state.status, STATUS_MARK["unknown"])
    name = plain(state.name)
    role = state.role
    p: list[Piece] = [(f"{mark} ", "bold"), (name, "bold")]
    if role and role != state.name:
        p.append((" ", ""))
        p.append((f" {role} ", "reverse"))
    p.append((f" {state.status}", ""))
    extras = []
    if state.args.get("tp_size"):
        extras.append(f"tp {state.args['tp_size']}")
    spec_cfg = spec_config_text(state.args, " · ")
    if spec_cfg:
        extras.append(spec_cfg)
    used = sum(len(t) for t, _ in p)
    if extras:
        p.append((fit(" · " + " · ".join(plain(str(e)) for e in extras),
                      max(width - used - (6 if state.stale else 0), 0)), "$text-muted"))
    if state.stale:
        p.append((" STALE", "bold $warning"))
    return p


class ServerPanel(Vertical):
    """One server: title, start-up/control state, labelled numbers, a fixed-scale trend, its log."""

    DEFAULT_CLASSES = "server-panel"
    # its keys (specmon/keymap.py): server control and baseline recording run on the app's
    # server control for this (focused) server; the log keys go to its log view
    BINDINGS = [*bindings("panel", "app"), *bindings("log")]

    def __init__(self, server: str, *, host: str = "", id: str | None = None) -> None:
        super().__init__(id=id)
        self.server = server
        self.host = host  # servers are keyed (host, server)
        self.can_focus = True
        self._status_cls: str | None = None

    def compose(self) -> ComposeResult:
        sid = safe_id(self.server)
        yield Lines("", classes="panel-title", id=f"title-{sid}")
        yield Lines("", classes="startup", id=f"startup-{sid}")
        yield ServerSummary("", classes="summary", id=f"summary-{sid}")
        yield Lines("", classes="spark", id=f"spark-{sid}")
        yield LogView(self.server, id=f"logview-{sid}")

    @property
    def log_view(self) -> LogView:
        return self.query_one(LogView)

    def action_filter(self) -> None:
        self.log_view.action_filter()

    def action_clear_filter(self) -> None:
        self.log_view.action_clear_filter()

    def action_pause(self) -> None:
        self.log_view.action_pause()

    def action_follow(self) -> None:
        self.log_view.action_follow()

    def action_toggle_log_full(self) -> None:
        self.log_view.action_toggle_log_full()

    def refresh_from(self, state: ServerState, now: float, window_s: float,
                     recorded: float | None = None, control: str | None = None) -> None:
        _, cls = STATUS_MARK.get(state.status, STATUS_MARK["unknown"])
        if cls != self._status_cls:
            for c in STATUS_MARK.values():
                self.set_class(c[1] == cls, c[1])
            self._status_cls = cls
        title = self.query_one(".panel-title", Lines)
        title.put(title_pieces(state, title.avail))
        startup = self.query_one(".startup", Lines)
        pieces = startup_pieces(state, startup.avail, control)
        startup.display = bool(pieces)
        startup.put(pieces)
        self.query_one(ServerSummary).show(state, now, window_s)
        spark = self.query_one(".spark", Lines)
        if spark.display:  # (non-finite values are drawn as gaps: _spark skips them)
            spark.put(_throughputspark(state, now, window_s, recorded, spark.avail))


def _throughputspark(state: ServerState, now: float, window_s: float, recorded: float | None,
                      width: int) -> list[Piece]:
    """Decode tok/s at the current bs on a fixed 0..top scale (top: a round number above the
    recorded baseline and the data)."""
    bs = state.runs[-1].bs if state.runs else None
    span = max(window_s, 1.0) * 5
    pts = window_points(state, now, span)
    data = [p.rec.gen_throughput for p in pts
            if p.rec.gen_throughput is not None and p.rec.sample_rr == bs]
    finite = [v for v in data if math.isfinite(v)]
    top = nice_ceiling(max(finite + ([recorded] if recorded else []))) if finite else None
    label = f"tok/s 0–{top:.0f} " if top else "tok/s "
    bars = spark(data, top, max(width - len(label) - 14, 0))
    if not bars:
        return [(label, "$text-muted"), (f"no decode lines at bs {num(bs, '{}')} yet", "$text-muted")]
    return [(label, "$text-muted"), (bars, "$primary"),
            (f" bs {num(bs, '{}')} · {span:.0f} s", "$text-muted")]


def startup_pieces(state: ServerState, width: int = 200, control: str | None = None
                    ) -> list[Piece]:
    """Start-up progress, the last control action's status (`control`), env audit, benchmark
    of this run, a crash's traceback."""
    p: list[Piece] = []

    def line(text: str, style: str = "") -> None:
        text = redact_text(text)  # before it is cut: a cut secret escapes the screenshot's mask
        p.append((("\n" if p else "") + (fit(text, width) or text[:width]), style))

    if control:
        line(plain(control), "italic")
    if state.tail_status:  # why no line arrives: "no such file: ... (waiting)", a silent file
        line(plain(state.tail_status), "bold")
    audit = state.env_audit
    if audit is not None:
        problems = audit.problems()
        if problems:
            line("env audit: " + "; ".join(plain(x) for x in problems), "bold $warning")
        else:
            line(f"env audit: ok ({len(audit.workers)} workers read)", "$text-muted")
    bench = state.last_bench
    if bench is not None and state.runs and state.last_bench_run == state.runs[-1].index:
        acc, source = bench_accept(vars(bench))  # (the rule `server bench` and the report use)
        line(plain(f"bench {num(bench.output_tok_s, '{:.1f}')} tok/s end-to-end, this run "
                   f"(c={bench.concurrency}, out={bench.output_len}, n={bench.completed}) · TTFT "
                   f"{num(bench.mean_ttft_ms, '{:.0f}')} ms · ITL {num(bench.mean_itl_ms, '{:.2f}')}"
                   f" ms · accept len {num(acc)}" + (f" ({source})" if source else "")))
    if state.status == "crashed":
        code = f" (exit {state.exit_code})" if state.exit_code is not None else ""
        line(f"crashed{code}", "bold $error")
        tb = state.traceback
        shown = tb if len(tb) <= 7 else [tb[0], "  …", *tb[-5:]]
        for x in shown:
            line(plain(x))
        return p
    if state.status != "starting":
        return p
    s = state.startup
    steps = [("args", s.server_args), ("KV cache", s.kv_allocated),
             ("CUDA graphs", s.graph_capture == "done"), ("ready", s.ready)]
    text = "loading: " + "  ".join(("✔ " if done else "… ") + label for label, done in steps)
    if s.graph_capture == "capturing" and s.graph_batch_sizes:
        text += f"  capturing bs {s.graph_batch_sizes[0]}–{s.graph_batch_sizes[-1]}"
    line(text, "$warning")
    return p
