"""Acceptance profile, speculative cost model, candidate settings, "speculation no longer pays".

Pure functions over segments the session layer hands over (specmon.session.advice: the
session's `ServerState.runs`, each split where an `Adaptive spec params updated` line changed
the step count); no run model, no I/O, no clock here. Every number comes from one segment at one
batch size (#running-req). The model is the engineering form of Leviathan et al.:

    tokens per round   tau(s) = 1 + sum_{k=1..s} P(draft position k accepted)
    cycle time         t_cycle(s, d) = a + b*s + c*(d - 1 - s)      (fitted, ms)
    tok/s              running_req * tau / t_cycle;  speedup = tau * t_b / t_cycle

with `t_b` the baseline's ms per token at the same batch size. The advice claims only what was
measured: a setting that was run shows its own number; one the runs identify (fitted cost,
measured acceptance positions) gets a point and a ~95 % band; one they do not identify gets no
point and a band over stated priors (`Priors`: draft cost per step from 0 to what the measured
cycle leaves above one baseline step; conditional acceptance never rising with draft position).
`best` is a setting whose whole band lies at or above the best measured tok/s, else the best
measured setting; none while the baseline's conditions differ from the speculative server's.
Statistical bands: acceptance from the profile's n (rounds, or autocorrelation-corrected
decode lines), cycle time from the spread of the per-line cycle times.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from specmon.analysis.drift import DriftParams, SampleFilter, lag1, neff
from specmon.parse.sglang import BatchRecord
from specmon.parse.vllm import VllmDecodeRecord

MIN_LINES = 3  # decode lines a segment needs at the chosen batch size
STEPS = range(1, 7)
DRAFT_TOKENS = range(2, 9)
Z = 1.96


# --------------------------------------------------------------------------------------------
# Segments (made by the session layer from its runs: specmon.session.advice)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Line:
    """One server-level decode interval of a segment."""

    rec: BatchRecord
    t: float | None = None  # log time (s); None: the SampleFilter reads the record's stamp
    after_prefill: bool = False  # a prefill line came since the previous decode line


@dataclass
class Segment:
    """Decode lines of one server run with constant speculative settings (the session's Run,
    split at adaptive step changes)."""

    run: str  # "spec.log run 2", "spec.log run 2.3" (the third adaptive segment)
    steps: int | None = None
    topk: int | None = None
    draft_tokens: int | None = None
    algorithm: str | None = None
    lines: list[Line] = field(default_factory=list)
    histogram: list[int] | None = None  # rounds by correct drafts (benchmark meta_info)
    started_by: str = "server_args"  # or "adaptive": an `Adaptive spec params updated` line
    start_t: float | None = None  # the log time where it began (chart marker)
    launch: str = ""  # the run this segment belongs to ("spec.log run 2")
    started: str | None = None  # the run's start as text ("2026-10-30 14:02:11")

    def __post_init__(self) -> None:
        if not self.launch:
            self.launch = self.run

    @property
    def records(self) -> list[BatchRecord]:
        return [ln.rec for ln in self.lines]

    @property
    def speculative(self) -> bool:
        return bool(self.algorithm) or any(ln.rec.accept_len is not None for ln in self.lines)

    def named(self) -> str:
        """`spec.log run 3 (started 2026-10-30 14:02:11)`: which run a number came from."""
        return f"{self.launch} (started {self.started})" if self.started else self.launch


# --------------------------------------------------------------------------------------------
# Measurements
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Measured:
    """One segment at one batch size, from its clean decode lines."""

    run: str
    steps: int | None
    topk: int | None
    draft_tokens: int | None
    running_req: int
    accept_len: float | None
    t_cycle_ms: float | None
    tok_s: float
    n: int
    n_eff: float
    se_log_tok_s: float
    se_accept: float | None = None
    se_log_cycle: float | None = None
    histogram: tuple[int, ...] | None = None
    # vLLM: per-position acceptance S(k) = P(>= k drafts accepted) as printed, weighted by
    # drafted tokens over the lines measured, and the drafts (rounds) behind it
    per_position: tuple[float, ...] | None = None
    drafts: float = 0.0
    named: str = ""  # "base.log run 3 (started 2026-10-30 14:02:11)"
    launch: str = ""  # the server run it belongs to ("spec.log run 2")

    @property
    def band(self) -> tuple[float, float]:
        """~95 % interval of the measured tok/s."""
        return (self.tok_s * math.exp(-Z * self.se_log_tok_s),
                self.tok_s * math.exp(Z * self.se_log_tok_s))

    def to_json(self) -> dict[str, Any]:
        return {"run": self.run, "steps": self.steps, "topk": self.topk,
                "draft_tokens": self.draft_tokens, "running_req": self.running_req,
                "accept_len": _round(self.accept_len), "t_cycle_ms": _round(self.t_cycle_ms),
                "tok_s": _round(self.tok_s), "n": self.n}


def _round(v: float | None, nd: int = 4) -> float | None:
    return None if v is None or not math.isfinite(v) else round(v, nd)


def clean_lines(lines: Sequence[Line]) -> list[BatchRecord]:
    """Lines the drift detector would keep: no warm-up, queue, prefill in the interval,
    batch-size change or idle gap (whose gen throughput counts idle time)."""
    f = SampleFilter(DriftParams())
    out = []
    for ln in lines:
        if ln.after_prefill:
            f.prefill()
        if ln.rec.kind == "decode" and f.decode(ln.rec, ln.t) is not None:
            out.append(ln.rec)
    return out


def _se_log(xs: Sequence[float]) -> tuple[float, float]:
    """(SE of the log-mean, n_eff) with lag-1 autocorrelation taken into account."""
    logs = [math.log(x) for x in xs if x > 0]
    n = len(logs)
    if n < 2:
        return float("inf"), float(n)
    m = sum(logs) / n
    sd = math.sqrt(sum((x - m) ** 2 for x in logs) / (n - 1))
    ne = neff(n, max(0.0, min(0.95, lag1(logs))))
    return sd / math.sqrt(ne), ne


def measure(seg: Segment, running_req: int) -> Measured | None:
    """Mean accept len, cycle time and tok/s of a segment's clean lines at one batch size."""
    lines = [r for r in clean_lines(seg.lines) if r.sample_rr == running_req]
    if len(lines) < MIN_LINES:
        return None
    thr = [r.gen_throughput for r in lines if r.gen_throughput]
    se_thr, ne = _se_log(thr)
    tok_s = math.exp(sum(math.log(x) for x in thr) / len(thr))
    acc = [r.accept_len for r in lines if r.accept_len is not None and r.accept_len > 0]
    if len(acc) < len(lines):
        acc_mean = se_acc = cycle = se_cyc = None
    else:
        acc_mean = sum(acc) / len(acc)
        sd = math.sqrt(sum((a - acc_mean) ** 2 for a in acc) / max(1, len(acc) - 1))
        se_acc = sd / math.sqrt(neff(len(acc), max(0.0, min(0.95, lag1(acc)))))
        cycles = [1000.0 * running_req * (r.accept_len or 0) / (r.gen_throughput or 1)
                  for r in lines]
        se_cyc, _ = _se_log(cycles)
        cycle = math.exp(sum(math.log(c) for c in cycles) / len(cycles))
    pp, drafts = _measured_positions(lines)
    return Measured(seg.run, seg.steps, seg.topk, seg.draft_tokens, running_req, acc_mean, cycle,
                    tok_s, len(lines), ne, se_thr, se_acc, se_cyc,
                    tuple(seg.histogram) if seg.histogram else None, pp, drafts, seg.named(),
                    seg.launch)


def _measured_positions(lines: Sequence[BatchRecord]) -> tuple[tuple[float, ...] | None, float]:
    """vLLM's printed per-position acceptance over `lines` (weighted by drafted tokens), and the
    number of drafts behind it; (None, 0) unless every line carries the same k positions."""
    rows: list[tuple[list[float], int]] = []
    for r in lines:
        spec = r.spec if isinstance(r, VllmDecodeRecord) else None
        pp = spec.get("per_position") if spec else None
        dra = spec.get("drafted") if spec else None
        if not (isinstance(pp, list) and pp and all(isinstance(x, float) for x in pp)
                and isinstance(dra, int) and dra > 0):
            return None, 0.0
        rows.append((pp, dra))
    if not rows or len({len(pp) for pp, _ in rows}) != 1:
        return None, 0.0
    k = len(rows[0][0])
    w = sum(d for _, d in rows)
    return (tuple(sum(pp[i] * d for pp, d in rows) / w for i in range(k)), w / k)


def batch_sizes(segs: Sequence[Segment]) -> Counter[int]:
    c: Counter[int] = Counter()
    for s in segs:
        for r in clean_lines(s.lines):
            if r.running_req:
                c[r.running_req] += 1
    return c


# --------------------------------------------------------------------------------------------
# Acceptance profile
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Profile:
    """P(draft position k accepted) for k = 1..len(survival); beyond it, `tail` per position."""

    survival: tuple[float, ...]  # S(k) = P(at least k drafts accepted), k = 1..m
    tail: float  # conditional acceptance assumed for positions > m
    n: float  # rounds (histogram) or effective decode lines (log only)
    se_tail: float
    source: str  # "histogram" | "accept len"

    def tau(self, max_drafts: int, tail: float | None = None) -> float:
        """Expected tokens per round when at most `max_drafts` drafts can be accepted."""
        t = self.tail if tail is None else tail
        total, s = 1.0, 1.0
        for k in range(1, max_drafts + 1):
            s = self.survival[k - 1] if k <= len(self.survival) else s * t
            total += s
        return total

    def per_position(self) -> list[float]:
        """Conditional acceptance of position k given k-1 were accepted."""
        out, prev = [], 1.0
        for s in self.survival:
            out.append(s / prev if prev > 0 else 0.0)
            prev = s
        return out


def geometric_alpha(tau: float, m: int) -> float:
    """alpha with sum_{k=0..m} alpha^k = tau (bisection; tau clamped to [1, m+1])."""
    if m <= 0:
        return 0.0
    tau = min(max(tau, 1.0), m + 1.0 - 1e-9)
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(mid**k for k in range(m + 1)) < tau:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _max_drafts(steps: int | None, draft_tokens: int | None) -> int | None:
    if steps is None:
        return None
    return min(steps, (draft_tokens - 1) if draft_tokens else steps)


def profile_from_histogram(hist: Sequence[int]) -> Profile | None:
    n = sum(hist)
    if n <= 0 or len(hist) < 2:
        return None
    surv = []
    for k in range(1, len(hist)):
        surv.append(sum(hist[k:]) / n)
    prev = surv[-2] if len(surv) > 1 else 1.0
    tail = surv[-1] / prev if prev > 0 else 0.0
    # binomial SE of the last conditional rate, over the rounds that reached that position
    reach = n * prev
    se = math.sqrt(max(tail * (1 - tail), 1e-6) / max(reach, 1.0))
    return Profile(tuple(surv), tail, float(n), se, "histogram")


def profile_from_log(m: Measured) -> Profile | None:
    """Geometric profile from the mean accept len (the log holds no per-position data)."""
    k = _max_drafts(m.steps, m.draft_tokens)
    if m.accept_len is None or not k:
        return None
    a = geometric_alpha(m.accept_len, k)
    se_tau = m.se_accept or 0.0
    lo = geometric_alpha(m.accept_len - se_tau, k)
    hi = geometric_alpha(m.accept_len + se_tau, k)
    return Profile(tuple(a**i for i in range(1, k + 1)), a, m.n_eff, max(hi - lo, 1e-6) / 2,
                   "accept len")


def profile_from_positions(m: Measured) -> Profile | None:
    """The measured profile: vLLM prints P(>= k drafts accepted) for every position k."""
    pp = m.per_position
    if not pp or m.drafts <= 0:
        return None
    surv = tuple(min(1.0, max(0.0, x)) for x in pp)
    prev = surv[-2] if len(surv) > 1 else 1.0
    tail = surv[-1] / prev if prev > 0 else 0.0
    reach = m.drafts * prev
    se = math.sqrt(max(tail * (1 - tail), 1e-6) / max(reach, 1.0))
    return Profile(surv, min(1.0, tail), m.drafts, se, PER_POSITION)


PER_POSITION = "per-position acceptance (vLLM, measured)"


def best_profile(ms: Sequence[Measured]) -> Profile | None:
    """The profile reaching the furthest draft position (measured ones preferred at equal
    reach: histograms, then vLLM's per-position rates, then the accept len)."""
    best: tuple[tuple[int, bool, bool, float], Profile] | None = None
    for m in ms:
        p = profile_from_histogram(m.histogram) if m.histogram else None
        p = p or profile_from_positions(m) or profile_from_log(m)
        if p is None:
            continue
        key = (len(p.survival), p.source == "histogram", p.source != "accept len", p.n)
        if best is None or key > best[0]:
            best = (key, p)
    return best[1] if best else None


# --------------------------------------------------------------------------------------------
# Cost model
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CostModel:
    """t_cycle = a + b*steps + c*(draft_tokens - 1 - steps), fitted by weighted least squares."""

    coef: tuple[float, float, float]
    cov: tuple[tuple[float, ...], ...]  # covariance of the fitted coefficients (3x3, zeros out)
    fitted: tuple[bool, bool, bool]
    assumptions: tuple[str, ...]

    @staticmethod
    def features(steps: int, draft_tokens: int) -> tuple[float, float, float]:
        return (1.0, float(steps), float(max(0, draft_tokens - 1 - steps)))

    def predict(self, steps: int, draft_tokens: int) -> tuple[float, float]:
        """(t_cycle ms, its standard error)."""
        g = self.features(steps, draft_tokens)
        t = sum(c * x for c, x in zip(self.coef, g, strict=True))
        var = sum(g[i] * self.cov[i][j] * g[j] for i in range(3) for j in range(3))
        return t, math.sqrt(max(var, 0.0))


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[piv][col]) < 1e-12:
            return None
        m[col], m[piv] = m[piv], m[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                for c in range(col, n + 1):
                    m[r][c] -= f * m[col][c]
    return [m[i][n] / m[i][i] for i in range(n)]


def _inverse(a: list[list[float]]) -> list[list[float]] | None:
    n = len(a)
    cols = []
    for i in range(n):
        e = [1.0 if j == i else 0.0 for j in range(n)]
        x = _solve(a, e)
        if x is None:
            return None
        cols.append(x)
    return [[cols[j][i] for j in range(n)] for i in range(n)]


def fit_cost(ms: Sequence[Measured]) -> CostModel | None:
    pts = [m for m in ms if m.t_cycle_ms is not None and m.steps is not None]
    if not pts:
        return None
    ts = [m.t_cycle_ms for m in pts if m.t_cycle_ms is not None]  # pts' cycle times, as floats
    dts = [m.draft_tokens or (m.steps or 0) + 1 for m in pts]
    feats = [CostModel.features(m.steps or 0, d) for m, d in zip(pts, dts, strict=True)]
    use = [True, len({f[1] for f in feats}) >= 2, False]
    assumptions: list[str] = []
    if not use[1]:
        assumptions.append(
            f"one step count measured ({pts[0].steps}): draft cost per step not identified "
            "(the point model takes 0 ms); run a second step count to measure it")
    extra = {f[2] for f in feats}
    if len({(f[1], f[2]) for f in feats}) > 1 + int(use[1]) and len(extra) >= 2:
        use[2] = True
    else:
        assumptions.append("no tree run with extra draft tokens measured: extra verify cost per "
                           "draft token beyond steps + 1 assumed 0 ms")
    idx = [i for i in range(3) if use[i]]
    w = []
    for m, t in zip(pts, ts, strict=True):
        se = (m.se_log_cycle or 0.05) * t
        w.append(1.0 / max(se * se, 1e-6))
    ata = [[sum(w[k] * feats[k][i] * feats[k][j] for k in range(len(pts))) for j in idx]
           for i in idx]
    atb = [sum(w[k] * feats[k][i] * ts[k] for k in range(len(pts))) for i in idx]
    sol = _solve(ata, atb)
    inv = _inverse(ata)
    if sol is None or inv is None:
        return None
    # residual scatter beyond the stated SEs widens the covariance (never narrows it)
    dof = len(pts) - len(idx)
    if dof > 0:
        resid = sum(w[k] * (ts[k] - sum(sol[a] * feats[k][i] for a, i in enumerate(idx))) ** 2
                    for k in range(len(pts)))
        scale = max(1.0, resid / dof)
        inv = [[x * scale for x in row] for row in inv]
    coef = [0.0, 0.0, 0.0]
    cov = [[0.0] * 3 for _ in range(3)]
    for a, i in enumerate(idx):
        coef[i] = sol[a]
        for b_, j in enumerate(idx):
            cov[i][j] = inv[a][b_]
    return CostModel((coef[0], coef[1], coef[2]), tuple(tuple(r) for r in cov),
                     (use[0], use[1], use[2]), tuple(assumptions))


# --------------------------------------------------------------------------------------------
# Candidates and the advice
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """A setting's predicted tok/s. `basis`: "measured" (a run at this setting: its own
    number), "model" (identified by the measurements: fitted cost, measured acceptance
    positions) or "prior" (the measurements do not identify it: `predicted_tok_s` is None and
    the band spans the stated priors)."""

    steps: int
    topk: int
    draft_tokens: int
    predicted_tok_s: float | None
    band: tuple[float, float]
    predicted_speedup: float | None
    tau: float
    t_cycle_ms: float
    basis: str = "model"

    def to_json(self) -> dict[str, Any]:
        return {"steps": self.steps, "topk": self.topk, "draft_tokens": self.draft_tokens,
                "predicted_tok_s": _round(self.predicted_tok_s, 2),
                "band": [_round(self.band[0], 2), _round(self.band[1], 2)],
                "predicted_speedup": _round(self.predicted_speedup), "basis": self.basis}

    def matches(self, steps: int | None, topk: int | None, draft_tokens: int | None) -> bool:
        return (steps, topk or 1, draft_tokens or (steps or 0) + 1) == (
            self.steps, self.topk, self.draft_tokens)


def flags_for(c: Candidate) -> str:
    return (f"--speculative-num-steps {c.steps} --speculative-eagle-topk {c.topk} "
            f"--speculative-num-draft-tokens {c.draft_tokens}")


@dataclass(frozen=True)
class MeasuredSpeedup:
    """The measured speedup as every front end shows it: the session's one speedup rule
    (`session.window.run_speedup`, medians of the current runs at one batch size), handed in by
    the session layer (`session.advice.with_speedup`). The advisor's clean-line means only fit
    its model; shown as "the speedup" they would contradict `compare` and the headline."""

    ratio: float
    ci95: tuple[float, float] | None
    ci_reason: str | None  # why there is no interval
    running_req: int
    n_base: int
    n_spec: int
    break_even_accept_len: float | None  # accept len at which spec would only match base
    basis: str  # what the medians cover: `whole runs (baseline run 1, speculative run 2)`
    conditions_unknown: tuple[str, ...] = ()  # a side without its launch line: said with it

    def to_json(self) -> dict[str, Any]:
        # (3 decimals, as compare's JSON and every front end print them: one number)
        return {"value": _round(self.ratio, 3),
                "ci95": None if self.ci95 is None else [_round(x, 3) for x in self.ci95],
                "ci95_reason": self.ci_reason, "running_req": self.running_req,
                "n_base": self.n_base, "n_spec": self.n_spec, "basis": self.basis,
                "conditions_unknown": list(self.conditions_unknown)}


@dataclass(frozen=True)
class Advice:
    running_req: int
    measured: tuple[Measured, ...]
    baseline: Measured | None
    profile: Profile
    cost: CostModel
    candidates: tuple[Candidate, ...]
    best: Candidate | None  # None: no recommendation (`no_recommendation` says why)
    assumptions: tuple[str, ...]
    reference: Measured  # the best measured setting: what `best` must be shown to match
    conditions_differ: tuple[str, ...] = ()
    engine: str = "sglang"  # "vllm": the flags are vLLM's `--speculative-config`
    method: str | None = None  # the speculative algorithm of the latest run
    # the measured speedup (None: N/A, no baseline run at this batch size), from the session
    speedup: MeasuredSpeedup | None = None

    @property
    def baseline_ms_per_token(self) -> float | None:
        if self.baseline is None:
            return None
        return 1000.0 * self.running_req / self.baseline.tok_s

    @property
    def baseline_run(self) -> str | None:
        """`baseline base.log run 3 (started 2026-10-30 14:02:11)`."""
        return None if self.baseline is None else f"baseline {self.baseline.named}"

    @property
    def current(self) -> Measured:
        return self.measured[-1]

    @property
    def keeps_current(self) -> bool:
        """The best setting is the measured one the server runs now: the advice is to keep it."""
        b = self.best
        return b is not None and b.basis == "measured" and b.matches(
            self.current.steps, self.current.topk, self.current.draft_tokens)

    @property
    def no_recommendation(self) -> str | None:
        if not self.conditions_differ:
            return None
        return ("no setting recommended: the runs it compares differ in more than speculation ("
                + "; ".join(self.conditions_differ) + "), so the speedup "
                "and the predictions mix speculation with those differences; make them match")

    @property
    def break_even_accept_len(self) -> float | None:
        """Of the measured speedup (the accept len at which speculation would only match the
        baseline), so it agrees with the headline's and compare's."""
        return None if self.speedup is None else self.speedup.break_even_accept_len

    @property
    def flags(self) -> str | None:
        if self.best is None:
            return None
        if self.engine == "vllm":  # vLLM drafts chains: k = steps
            cfg = json.dumps({"method": self.method or "eagle3",
                              "num_speculative_tokens": self.best.steps})
            return f"--speculative-config '{cfg}'"
        return flags_for(self.best)

    def cost_text(self) -> str:
        """t_cycle = a + b*steps (+ c*extra tree tokens), SEs where fitted, and t_b."""
        c, cov, fitted = self.cost.coef, self.cost.cov, self.cost.fitted

        def term(i: int, unit: str) -> str:
            se = math.sqrt(max(cov[i][i], 0.0))
            return f"{c[i]:.2f} {unit}" + (f" (+-{se:.2f})" if fitted[i] else " (not measured)")

        tb = self.baseline_ms_per_token
        return (f"t_cycle = {term(0, 'ms')} + steps x {term(1, 'ms/step')} + extra tree tokens "
                f"x {term(2, 'ms/token')}; t_b = {'N/A' if tb is None else f'{tb:.2f}'} "
                "ms/token")

    def to_json(self) -> dict[str, Any]:
        return {
            "running_req": self.running_req,  # the batch size advised (text: "advice at")
            "measured": [m.to_json() for m in self.measured],
            "baseline_run": self.baseline_run,
            "baseline_ms_per_token": _round(self.baseline_ms_per_token),
            "speedup": None if self.speedup is None else self.speedup.to_json(),
            "break_even_accept_len": _round(self.break_even_accept_len),
            "assumptions": list(self.assumptions),
            "candidates": [c.to_json() for c in self.candidates],
            "best": None if self.best is None else self.best.to_json(),
            "flags": self.flags,
            "conditions_differ": list(self.conditions_differ),
            "no_recommendation": self.no_recommendation,
        }


class CannotAdvise(Exception):
    """The logs hold too little to fit the model; the message says what is missing."""


def _candidate_grid(topks: set[int]) -> list[tuple[int, int, int]]:
    out = []
    for k in sorted(topks):
        for s in STEPS:
            if k == 1:
                out.append((s, 1, s + 1))  # SGLang forces draft tokens = steps + 1 for topk 1
                continue
            for d in DRAFT_TOKENS:
                if s + 1 <= d <= 1 + k * s:
                    out.append((s, k, d))
    return out


@dataclass(frozen=True)
class Priors:
    """What the measurements cannot pin down, as ranges (stated in the advice's assumptions).

    Draft cost: with one step count measured, the cost of one more step lies in
    [0, b_max], b_max = (t_cycle - t_b) / steps: a verify pass costs at least one plain decode
    step of the baseline (t_b), so at most the rest of the measured cycle is drafting (without
    a baseline: the whole cycle). An extra tree draft token, never measured, lies in [0, b_max].
    Acceptance decay: the conditional acceptance of draft position k given k-1 accepted does
    not rise with k. From the windowed accept len only, that bounds the positions inside the
    measured chain (the geometric profile is the lower edge, "every draft up to accept len - 1
    accepted" the upper); beyond the measured chain it lies between 0 and the last measured
    position's rate.
    """

    slope: tuple[float, float] | None  # (0, b_max) ms per step; None: fitted
    extra: tuple[float, float] | None  # ms per extra tree token; None: fitted
    s0: int
    t0: float

    def cycle(self, cost: CostModel, steps: int, draft_tokens: int) -> tuple[float, float]:
        """(lowest, highest) cycle time over the priors (the point model inside)."""
        t, _ = cost.predict(steps, draft_tokens)
        lo = hi = t
        if self.slope is not None:
            d = steps - self.s0
            lo, hi = lo + min(0.0, d * self.slope[1]), hi + max(0.0, d * self.slope[1])
        extra = max(0, draft_tokens - 1 - steps)
        if self.extra is not None and extra:
            hi += extra * self.extra[1]
        return max(lo, 1e-3), hi


def _priors(cost: CostModel, measured: Sequence[Measured], tb: float | None) -> Priors:
    pts = [m for m in measured if m.t_cycle_ms is not None and m.steps]
    s0 = pts[-1].steps or 1 if pts else 1
    t0 = cost.coef[0] + cost.coef[1] * s0
    room = t0 - tb if tb is not None and tb < t0 else t0
    b_max = room / max(s0, 1)
    return Priors(None if cost.fitted[1] else (0.0, b_max),
                  None if cost.fitted[2] else (0.0, b_max), s0, t0)


def _tau_range(p: Profile, mx: int) -> tuple[float, float]:
    """Tokens per round at most `mx` accepted drafts, over the acceptance-decay prior."""
    m = len(p.survival)
    tau = p.tau(mx)
    if mx > m:  # beyond the measured chain: from nothing more accepted to the last rate kept
        return p.tau(m), tau
    if p.source == "histogram" or mx == m:
        return tau, tau
    # inside the chain, from the mean only: geometric (least front-loaded) to all-front-loaded
    return tau, 1.0 + min(float(mx), sum(p.survival))


# (run a, run b, #running-req) -> what differs between the two server runs besides speculation,
# by their launch names ("spec.log run 2"): the session's one rule, handed in by the session layer
Conditions = Callable[[str, str, int], Sequence[str]]


def advise(spec: Sequence[Segment], baseline: Sequence[Segment] = (),
           running_req: int | None = None, conditions: Conditions | None = None) -> Advice:
    """The advice for the speculative segments `spec` (oldest first), optionally against a
    baseline server's segments. `conditions`: how two runs differ in anything but speculation;
    it is asked of every run the advice pools (each speculative run measured, against the
    baseline run used, else against the newest speculative run), at the batch size advised,
    and while any differs no setting is recommended. Raises CannotAdvise saying what is
    missing."""
    spec = [s for s in spec if s.speculative]
    if not spec:
        raise CannotAdvise("no speculative decode lines (no 'accept len' field) in the logs")
    sizes = batch_sizes(spec)
    if not sizes:
        raise CannotAdvise("no clean speculative decode lines (all warm-up, queue, prefill or "
                           "idle gaps)")
    bsizes = batch_sizes(baseline) if baseline else Counter()
    if running_req is None:
        common = [b for b in sizes if b in bsizes] if baseline else list(sizes)
        pool = common or list(sizes)
        running_req = max(pool, key=lambda b: (sizes[b] + bsizes.get(b, 0), -b))
    measured = [m for m in (measure(s, running_req) for s in spec) if m is not None]
    if not measured:
        raise CannotAdvise(f"fewer than {MIN_LINES} clean speculative decode lines at "
                           f"#running-req {running_req}")
    missing = [m.run for m in measured if m.steps is None]
    if missing:
        raise CannotAdvise(f"{', '.join(missing)}: no server_args line with "
                           "speculative_num_steps (the log starts after the launch)")
    base: Measured | None = None
    if baseline:
        bms = [m for m in (measure(s, running_req) for s in baseline if not s.speculative)
               if m is not None]
        if not bms:
            raise CannotAdvise(f"baseline log: fewer than {MIN_LINES} clean decode lines at "
                               f"#running-req {running_req}")
        base = bms[-1]  # the baseline's current (last) run
    profile = best_profile(measured)
    cost = fit_cost(measured)
    if profile is None or cost is None:
        raise CannotAdvise("speculative lines without accept len or cycle time")
    tb = 1000.0 * running_req / base.tok_s if base else None
    pri = _priors(cost, measured, tb)
    assumptions = [a for a in cost.assumptions if "tree" not in a or pri.extra is None]
    if base is not None:
        assumptions.append(f"baseline: {base.named}, the baseline log's last run with "
                           f">= {MIN_LINES} clean lines at #running-req {running_req}")
    if pri.slope is not None:
        ref_text = ("one baseline decode step t_b" if tb is not None and tb < pri.t0
                    else "nothing (no baseline)")
        assumptions.append(
            f"draft cost prior: one more step costs 0 to {pri.slope[1]:.2f} ms (the measured "
            f"cycle {pri.t0:.2f} ms above {ref_text}, per step); bands for other step counts "
            "span it and their point prediction is N/A")
    topks = {1} | {m.topk for m in measured if m.topk and m.topk > 1}
    if pri.extra is not None and max(topks) > 1:
        assumptions.append(f"no tree run with extra draft tokens measured: an extra verify "
                           f"token costs 0 to {pri.extra[1]:.2f} ms (prior); such bands span it")
    m_pos = len(profile.survival)
    if profile.source == PER_POSITION:
        assumptions.append(f"acceptance profile measured: vLLM's per-position acceptance for "
                           f"positions 1-{m_pos} (n={profile.n:.0f} drafts); predictions up to "
                           "that k rest on it")
    if profile.source == "accept len":
        assumptions.append(
            "acceptance from the windowed accept len only (no benchmark histograms); decay prior: "
            "the conditional acceptance of draft position k does not rise with k, so chains "
            f"shorter than {m_pos} lie between the geometric profile (rate {profile.tail:.3f}) "
            "and every draft accepted up to the mean")
    assumptions.append(f"decay prior beyond {m_pos} measured draft positions: conditional "
                       f"acceptance between 0 and {profile.tail:.3f} per position (the last "
                       "measured); bands span it and the point prediction is N/A")
    ref = max(measured, key=lambda m: m.tok_s)
    assumptions.append(
        f"best rule: a setting not measured is recommended only when its whole band lies at or "
        f"above the best measured {ref.tok_s:.2f} tok/s ({ref.run}, steps {ref.steps}); "
        "otherwise the best measured setting")
    cands: list[Candidate] = []
    for s, k, d in _candidate_grid(topks):
        mine = [m for m in measured if (m.steps, m.topk or 1,
                                        m.draft_tokens or (m.steps or 0) + 1) == (s, k, d)]
        mx = min(s, d - 1)
        tau = profile.tau(mx)
        cyc, se_cyc = cost.predict(s, d)
        if mine:  # measured here: its own number (the latest run at this setting)
            m = mine[-1]
            cands.append(Candidate(s, k, d, m.tok_s, m.band, m.tok_s / base.tok_s if base
                                   else None, m.accept_len or tau, m.t_cycle_ms or cyc,
                                   "measured"))
            continue
        tau_lo, tau_hi = _tau_range(profile, mx)
        cyc_lo, cyc_hi = pri.cycle(cost, s, d)
        if cyc <= 0 or cyc_hi <= 0:
            continue
        lo_t = profile.tau(mx, max(0.0, profile.tail - profile.se_tail))
        hi_t = profile.tau(mx, min(1.0, profile.tail + profile.se_tail))
        se_tau = max(hi_t - lo_t, 0.0) / 2 + _tau_se_measured(profile, mx)
        se = math.sqrt((se_tau / tau) ** 2 + (se_cyc / cyc) ** 2)
        band = (1000.0 * running_req * tau_lo / cyc_hi * math.exp(-Z * se),
                1000.0 * running_req * tau_hi / cyc_lo * math.exp(Z * se))
        identified = tau_lo == tau_hi and cyc_lo == cyc_hi
        tok = 1000.0 * running_req * tau / cyc if identified else None
        speed = tok * tb / (1000.0 * running_req) if tok is not None and tb else None
        cands.append(Candidate(s, k, d, tok, band, speed, tau, cyc,
                               "model" if identified else "prior"))
    if not cands:
        raise CannotAdvise("the cost model predicts no positive cycle time")
    shown = [c for c in cands if c.basis != "measured" and c.band[0] >= ref.tok_s]
    best: Candidate | None = max(shown, key=lambda c: c.band[0]) if shown else next(
        (c for c in cands if c.matches(ref.steps, ref.topk, ref.draft_tokens)), None)
    if best is None:  # the best measured setting lies outside the grid: itself
        best = Candidate(ref.steps or 0, ref.topk or 1, ref.draft_tokens or (ref.steps or 0) + 1,
                         ref.tok_s, ref.band, ref.tok_s / base.tok_s if base else None,
                         ref.accept_len or 1.0, ref.t_cycle_ms or 0.0, "measured")
    conditions_differ = (_pooled_conditions(conditions, measured, base, running_req)
                         if conditions is not None else [])
    if conditions_differ:
        best = None
    vllm = any(isinstance(ln.rec, VllmDecodeRecord) for s in spec for ln in s.lines)
    return Advice(running_req, tuple(measured), base, profile, cost, tuple(cands), best,
                  tuple(assumptions), ref, tuple(conditions_differ), "vllm" if vllm else "sglang",
                  spec[-1].algorithm)


def _pooled_conditions(conditions: Conditions, measured: Sequence[Measured],
                       base: Measured | None, running_req: int) -> list[str]:
    """What differs besides speculation among the runs the advice pools: each speculative run
    measured against the baseline run its speedups use (without one: against the newest
    speculative run). Named by run when several speculative runs are pooled."""
    launches = list(dict.fromkeys(m.launch for m in measured))
    ref = base.launch if base is not None else launches[-1]
    out: list[str] = []
    for launch in launches:
        if launch == ref:
            continue
        for d in conditions(ref, launch, running_req):
            one = base is not None and len(launches) == 1
            out.append(d if one else f"{ref} vs {launch}: {d}")
    return list(dict.fromkeys(out))


def _tau_se_measured(p: Profile, mx: int) -> float:
    """SE of tau from the measured positions: binomial over the profile's n rounds."""
    var = 0.0
    for k in range(1, min(mx, len(p.survival)) + 1):
        s = p.survival[k - 1]
        var += s * (1 - s) / max(p.n, 1.0)
    return math.sqrt(var)


# --------------------------------------------------------------------------------------------
# After a restart: predicted vs measured
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    """A run measured at settings the advice predicted: the model's error, visible (a band
    over the priors has no point prediction: only whether the run landed inside it)."""

    run: str
    predicted_tok_s: float | None
    band: tuple[float, float]
    measured_tok_s: float
    measured_band: tuple[float, float]

    @property
    def error_pct(self) -> float | None:
        if self.predicted_tok_s is None:
            return None
        return 100.0 * (self.measured_tok_s / self.predicted_tok_s - 1.0)

    @property
    def within(self) -> bool:
        return self.band[0] <= self.measured_tok_s <= self.band[1]


def check_prediction(advice: Advice, m: Measured) -> Check | None:
    """Compare a (later) run `m` with the advice's prediction for its settings."""
    if m.running_req != advice.running_req:
        return None
    for c in advice.candidates:
        if c.matches(m.steps, m.topk, m.draft_tokens):
            return Check(m.run, c.predicted_tok_s, c.band, m.tok_s, m.band)
    return None


def holdout_checks(spec: Sequence[Segment], baseline: Sequence[Segment] = ()) -> list[Check]:
    """For each run after the first two: predicted from the runs before it vs measured."""
    spec = [s for s in spec if s.speculative]
    out: list[Check] = []
    for i in range(2, len(spec)):
        try:
            adv = advise(spec[:i], baseline)
        except CannotAdvise:
            continue
        m = measure(spec[i], adv.running_req)
        if m is not None:
            c = check_prediction(adv, m)
            if c is not None:
                out.append(c)
    return out


# --------------------------------------------------------------------------------------------
# "Speculation no longer pays"
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PaysState:
    """What the rule compares: speedup at one batch size and its three ingredients."""

    speedup: float
    low: float
    high: float
    accept_len: float | None
    base_ms_per_token: float
    t_cycle_ms: float | None


@dataclass(frozen=True)
class NoLongerPays:
    reason: str  # "slower" (interval wholly below 1) | "no acceptance" (accept len ~ 1)
    moved: str | None  # "baseline faster" | "acceptance fell" | "cycle slower" | None
    text: str


ACCEPT_NEAR_ONE = 0.05


def speculation_no_longer_pays(now: PaysState, ref: PaysState | None = None) -> NoLongerPays | None:
    """The alert rule: the speculative server's speedup over the current baseline run at the
    same batch size is below 1.0 with its interval wholly below, or its accept len is within 5 %
    of 1.0 (drafts no longer accepted). `ref` (when speculation last paid) names which side
    moved: the baseline got faster, acceptance fell, or the verify cycle got slower."""
    slower = now.high < 1.0
    no_accept = now.accept_len is not None and now.accept_len <= 1.0 + ACCEPT_NEAR_ONE
    if not (slower or no_accept):
        return None
    moved = None
    if ref is not None:
        changes: list[tuple[float, str]] = []
        if ref.base_ms_per_token > 0 and now.base_ms_per_token > 0:  # ms/token down = faster
            changes.append((math.log(ref.base_ms_per_token / now.base_ms_per_token),
                            "baseline faster"))
        if ref.accept_len and now.accept_len:
            changes.append((math.log(ref.accept_len / now.accept_len), "acceptance fell"))
        if ref.t_cycle_ms and now.t_cycle_ms:
            changes.append((math.log(now.t_cycle_ms / ref.t_cycle_ms), "cycle slower"))
        changes = [c for c in changes if c[0] > 0.01]
        if changes:
            moved = max(changes)[1]
    reason = "no acceptance" if no_accept else "slower"
    if no_accept:
        text = (f"speculation no longer pays: accept len {now.accept_len:.2f} is within 5 % of "
                f"1.0 (drafts are not accepted); speedup {now.speedup:.2f}x")
    else:
        text = (f"speculation no longer pays: speedup {now.speedup:.2f}x "
                f"(95 % {now.low:.2f}-{now.high:.2f}) vs the current baseline")
    if moved:
        text += f"; {moved}"
    return NoLongerPays(reason, moved, text)


# --------------------------------------------------------------------------------------------
# Live sessions
# --------------------------------------------------------------------------------------------


def pays_state(sp: Any) -> PaysState | None:
    """The rule's inputs from an analysis.window.Speedup."""
    if sp is None:
        return None
    return PaysState(sp.ratio, sp.low, sp.high, sp.spec.accept_len, sp.base_ms_per_token,
                     sp.verify_cycle_ms)
