"""Drift detection for decode throughput against a recorded baseline (pure, no I/O, no clock).

Design (telemetry-and-drift.md 4.2-4.3, calibrated on shared/fixtures/sglang-longlogs):

* Only like with like: every decode line is put in a *stratum* (#running-req bucket, per-request
  context bucket, spec on/off, cuda graph) and compared only with the same stratum of the
  baseline. Dirty lines are excluded and counted by reason (queue, prefill, batch change,
  warm-up, idle gap, ...).
* Log space, median + MAD, an autocorrelation-corrected standard error, a minimum effect (3 %),
  persistence before raising, hysteresis before clearing, a critical level and a fast path for
  large drops.
* Speculative servers are compared on the *cycle rate* `gen_throughput / accept_len`
  (= #running-req / t_cycle), because raw tok/s follows accept len line by line (robust CV 34-43 %
  at bs 1 in the real logs). Acceptance is watched by a second detector on ln(accept len), so a
  tok/s drop is attributed either to the system (t_cycle up) or to acceptance (t_cycle flat).
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from itertools import islice
from typing import Any

from specmon.analysis.stats import median
from specmon.numfmt import ascii_int
from specmon.parse.sglang import BatchRecord, EventRecord, Record

LN_FLOOR = 1e-9

# Exclusion reasons, in the order they are checked (one reason per line).
EXCLUSION_REASONS = (
    "unusable",  # no gen throughput / #running-req, or a non-positive value
    "other_rank",  # a second rank stream of the same server (DP attention logs)
    "warmup",  # first lines after (re)start
    "queue",  # #queue-req > 0
    "prefill",  # a prefill line since the previous decode line
    "batch_change",  # #running-req differs from the previous decode line
    "idle_gap",  # interval or throughput says the line includes idle time
    "other_batch_size",  # not the #running-req asked for (check --running-req / fixed value)
    "no_baseline_stratum",  # the baseline has no (or too few) samples of this stratum
)


@dataclass(frozen=True)
class DriftParams:
    """Every knob of the detector; defaults calibrated by bench/drift_eval.py."""

    window: int = 20  # live samples per evaluation
    min_live: int = 10  # evaluate once this many clean live samples exist in the stratum
    min_base: int = 30  # baseline samples a stratum needs to be usable
    min_effect: float = 0.03  # practical minimum effect (fraction)
    k_se: float = 3.0  # threshold = max(min effect, k_se * SE)
    persist: int = 3  # consecutive evaluations over threshold to raise
    clear_after: int = 5  # consecutive evaluations under threshold/2 to clear
    critical: float = 0.10  # critical level (fraction)
    fast_frac: float = 0.85  # fast path: fast_n raw samples each <= fast_frac * baseline
    fast_n: int = 5
    sig_floor: float = 0.003  # minimum log-space sigma
    rho_max: float = 0.95
    live_sigma: bool = True  # SE uses max(baseline sigma, live window sigma)
    max_age_s: float = 300.0  # live samples older than this leave the window
    warmup_lines: int = 5  # decode lines dropped after a (re)start
    gap_factor: float = 3.0  # interval > gap_factor * recent median interval -> idle gap
    artefact_frac: float = 0.5  # tok/s < artefact_frac * recent median -> idle gap
    ctx_bucket_log2: int = 2  # context bucket width in log2 units (0: ignore context)
    report_max: int = 400  # live samples kept for the alert's estimate
    accept_window: int = 60  # accept len swings ~30 % line to line: a longer window for it

    @property
    def thr_min(self) -> float:
        return math.log(1.0 / (1.0 - self.min_effect))

    @property
    def crit_min(self) -> float:
        return math.log(1.0 / (1.0 - self.critical))


# --------------------------------------------------------------------------------------------
# Strata and samples
# --------------------------------------------------------------------------------------------


_MAX_CTX = 62  # a context bucket is log2(tokens per request) / width: far below this
_MAX_LOG = 700.0  # a sample's y is a log: exp(y) must not overflow a float


def json_kind(x: Any) -> str:
    """What a decoded JSON value is, for messages ("null", "a string", ...)."""
    if x is None:
        return "null"
    if isinstance(x, bool):
        return "a boolean"
    if isinstance(x, (int, float)):
        return "a number"
    if isinstance(x, str):
        return "a string"
    return "a list" if isinstance(x, list) else "an object" if isinstance(x, dict) else type(x).__name__


def _brief(x: Any, width: int = 40) -> str:
    text = repr(x) if not isinstance(x, (list, dict)) else json_kind(x)
    return text if len(text) <= width else text[:width - 3] + "..."


def _finite(x: Any, where: str) -> float:
    """`x` as a finite float; ValueError naming `where` for anything else (bool, string,
    NaN, Infinity, an int too large for a float)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise ValueError(f"{where}: expected a number, got {json_kind(x)}")
    try:
        f = float(x)
    except OverflowError:
        raise ValueError(f"{where}: number out of range") from None
    if not math.isfinite(f):
        raise ValueError(f"{where}: not a finite number ({f})")
    return f


def _numbers(xs: Any, where: str, positive: bool = False) -> list[float]:
    if not isinstance(xs, list):
        raise ValueError(f"{where}: expected a list of numbers, got {json_kind(xs)}")
    out = [_finite(x, f"{where}[{i}]") for i, x in enumerate(xs)]
    if positive:
        bad = next((i for i, f in enumerate(out) if f <= 0), None)
        if bad is not None:
            raise ValueError(f"{where}[{bad}]: expected a positive number, got {out[bad]}")
    return out


def rr_bucket(rr: int) -> int:
    """#running-req exact up to 8, then the next power of two (9-16 -> 16, 17-32 -> 32)."""
    if rr <= 8:
        return rr
    return 1 << (rr - 1).bit_length()


def rr_bucket_text(b: int) -> str:
    return str(b) if b <= 8 else f"{b // 2 + 1}-{b}"


@dataclass(frozen=True, order=True)
class Stratum:
    rr: int  # bucket (see rr_bucket)
    ctx: int | None  # context bucket: floor(log2(tokens/running_req) / width); None if unknown
    spec: bool
    graph: bool | None

    @property
    def key(self) -> str:
        return f"{self.rr}|{'' if self.ctx is None else self.ctx}|{int(self.spec)}|" + (
            "" if self.graph is None else str(int(self.graph)))

    @classmethod
    def from_key(cls, key: str) -> Stratum:
        """The inverse of `key`; ValueError (saying what) for anything `key` never writes."""
        parts = key.split("|") if isinstance(key, str) else []
        # ASCII digits (numfmt.ascii_int): a stored key is a file's text ('²' made int() raise)
        rr_n = ascii_int(parts[0]) if len(parts) == 4 and len(parts[0]) <= 9 else None
        ctx_n = ascii_int(parts[1]) if len(parts) == 4 and len(parts[1]) <= 2 else None
        if (rr_n is None or not (parts[1] == "" or ctx_n is not None)
                or parts[2] not in ("0", "1") or parts[3] not in ("", "0", "1")):
            raise ValueError(f"not a stratum key ({_brief(key)})")
        _, ctx, spec, graph = parts
        if not (1 <= rr_n and (ctx_n is None or ctx_n <= _MAX_CTX)):
            raise ValueError(f"stratum key out of range ({_brief(key)})")
        return cls(rr_n, ctx_n, spec == "1", None if graph == "" else graph == "1")

    def describe(self, width: int = 2) -> str:
        parts = [f"bs={rr_bucket_text(self.rr)}"]
        if self.ctx is not None and width:
            lo = 1 << (self.ctx * width)
            parts.append(f"ctx~{_human(lo)}-{_human(lo << width)}")
        if self.graph is False:
            parts.append("no cuda graph")
        return ", ".join(parts)


def _human(n: int) -> str:
    return f"{n >> 10}K" if n >= 4096 else str(n)


def stratum_of(rec: BatchRecord, params: DriftParams) -> Stratum | None:
    rr = rec.running_req
    if rr is None or rr <= 0:
        return None
    ctx: int | None = None
    if params.ctx_bucket_log2 and rec.tokens is not None and rec.tokens > 0:
        per_req = rec.tokens / rr
        ctx = int(math.log2(max(per_req, 1.0)) // params.ctx_bucket_log2)
    return Stratum(rr_bucket(rr), ctx, rec.accept_len is not None, rec.cuda_graph)


@dataclass(frozen=True, slots=True)
class Sample:
    """One clean decode line: what the detector compares."""

    t: float | None  # seconds (receive time live, log time offline)
    thr: float  # gen throughput, tok/s
    rr: int
    accept: float | None
    stratum: Stratum
    line_no: int | None = None

    @property
    def y(self) -> float:
        """The compared metric in log space: ln tok/s, or ln cycle rate for speculative lines."""
        if self.accept is not None and self.accept > 0:
            return math.log(self.thr / self.accept)
        return math.log(self.thr)

    @property
    def t_cycle_ms(self) -> float | None:
        if self.accept is None:
            return None
        return 1000.0 * self.rr * self.accept / self.thr


def parse_ts(text: str | None) -> float | None:
    """Log timestamp -> seconds (naive local time is fine: only differences are used)."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


class SampleFilter:
    """Turns a stream of records into clean samples; counts every exclusion by reason."""

    def __init__(self, params: DriftParams) -> None:
        self.params = params
        self.excluded: Counter[str] = Counter()
        self.stream: tuple[int | None, ...] | None = None
        self.restart()

    def restart(self) -> None:
        """A server (re)start: warm-up again, forget the previous line's context."""
        self.since_start = 0
        self.prev_rr: int | None = None
        self.prev_ts: float | None = None
        self.prefill_pending = False
        self.intervals: deque[float] = deque(maxlen=20)
        self.recent_thr: deque[float] = deque(maxlen=20)

    def prefill(self) -> None:
        self.prefill_pending = True

    def decode(self, rec: BatchRecord, t: float | None, line_no: int | None = None) -> Sample | None:
        if self.stream is None:
            self.stream = rec.rank_key
        elif rec.rank_key != self.stream:
            self.excluded["other_rank"] += 1
            return None
        p = self.params
        thr, rr = rec.gen_throughput, rec.running_req
        prefill, self.prefill_pending = self.prefill_pending, False
        prev_rr, self.prev_rr = self.prev_rr, rr
        ts = parse_ts(rec.timestamp)
        if ts is None:
            ts = t  # no log time: receive time (a backlog read at once just disables the rule)
        interval = ts - self.prev_ts if ts is not None and self.prev_ts is not None else None
        if ts is not None:
            self.prev_ts = ts
        if rec.sample_rr is None or (rec.accept_len is not None and rec.accept_len <= 0):
            self.excluded["unusable"] += 1
            return None
        assert thr is not None and rr is not None  # (a sample has both: `sample_batch`)
        recent_med_int = median(self.intervals) if len(self.intervals) >= 5 else None
        recent_med_thr = median(self.recent_thr) if len(self.recent_thr) >= 5 else None
        if interval is not None and interval >= 0:
            self.intervals.append(interval)
        self.recent_thr.append(thr)
        self.since_start += 1
        reason: str | None = None
        if self.since_start <= p.warmup_lines:
            reason = "warmup"
        elif rec.queue_req:
            reason = "queue"
        elif prefill:
            reason = "prefill"
        elif prev_rr is not None and prev_rr != rr:
            reason = "batch_change"
        elif (interval is not None and recent_med_int and interval > p.gap_factor * recent_med_int) or (
                recent_med_thr is not None and thr < p.artefact_frac * recent_med_thr):
            reason = "idle_gap"
        if reason is not None:
            self.excluded[reason] += 1
            return None
        st = stratum_of(rec, p)
        assert st is not None
        return Sample(t if t is not None else ts, thr, rr, rec.accept_len, st, line_no)


# --------------------------------------------------------------------------------------------
# Baseline statistics
# --------------------------------------------------------------------------------------------


def _mad_sigma(xs: Sequence[float], floor: float) -> float:
    m = median(xs)
    if m is None:
        return floor
    d = median([abs(x - m) for x in xs]) or 0.0
    return max(1.4826 * d, floor)


def lag1(xs: Sequence[float]) -> float:
    """Lag-1 autocorrelation (0 when undefined)."""
    n = len(xs)
    if n < 3:
        return 0.0
    m = sum(xs) / n
    var = sum((x - m) ** 2 for x in xs) / n
    if var <= 0:
        return 0.0
    cov = sum((xs[i] - m) * (xs[i + 1] - m) for i in range(n - 1)) / (n - 1)
    return cov / var


def neff(n: int, rho: float) -> float:
    return max(2.0, n * (1.0 - rho) / (1.0 + rho))


@dataclass
class StratumBaseline:
    """Clean samples of one stratum and their robust summary."""

    stratum: Stratum
    y: list[float]  # compared metric, log space (see Sample.y)
    thr: list[float]
    accept: list[float] | None = None
    rr: list[int] = field(default_factory=list)
    t_first: float | None = None
    t_last: float | None = None
    sig_floor: float = 0.003
    rho_max: float = 0.95
    # derived once in __post_init__: a live record must cost O(1) in the baseline's size
    mu: float = 0.0
    sig: float = 0.0
    rho: float = 0.0
    _median_thr: float | None = field(default=None, repr=False, compare=False)
    _median_accept: float | None = field(default=None, repr=False, compare=False)
    _accept_mu: float = field(default=0.0, repr=False, compare=False)
    _accept_sig: float = field(default=0.0, repr=False, compare=False)
    _median_rr: float | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.mu = median(self.y) or 0.0
        self.sig = _mad_sigma(self.y, self.sig_floor)
        self.rho = min(max(lag1(self.y), 0.0), self.rho_max)
        self._median_thr = median(self.thr)
        self._median_accept = median(self.accept) if self.accept else None
        self._accept_mu = math.log(self._median_accept or 1.0)
        self._accept_sig = _mad_sigma([math.log(a) for a in (self.accept or [1.0]) if a > 0] or [0.0],
                                      self.sig_floor)
        self._median_rr = median(self.rr) if self.rr else None

    @property
    def n(self) -> int:
        return len(self.y)

    @property
    def median_thr(self) -> float | None:
        return self._median_thr

    @property
    def median_accept(self) -> float | None:
        return self._median_accept

    @property
    def accept_mu(self) -> float:
        """ln(median accept len): the acceptance detector's centre (cached)."""
        return self._accept_mu

    @property
    def accept_sig(self) -> float:
        """Robust sigma of ln(accept len) (cached)."""
        return self._accept_sig

    @property
    def t_cycle_ms(self) -> float | None:
        """Median cycle time: 1000 * rr / exp(mu) (speculative strata only)."""
        if not self.stratum.spec or not self.rr:
            return None
        return 1000.0 * (self._median_rr or 1) / math.exp(self.mu)

    def to_json(self) -> dict[str, Any]:
        return {"stratum": self.stratum.key, "y": self.y, "thr": self.thr, "accept": self.accept,
                "rr": self.rr, "t_first": self.t_first, "t_last": self.t_last,
                "summary": {"n": self.n, "median": self.median_thr, "mu": self.mu, "sig": self.sig,
                            "rho": self.rho, "accept_len": self.median_accept,
                            "t_cycle_ms": self.t_cycle_ms}}

    @classmethod
    def from_json(cls, d: Any, params: DriftParams | None = None,
                  where: str = "stratum") -> StratumBaseline:
        """One stratum as `to_json` wrote it; ValueError naming the field (`where`) for anything
        else: a wrong type, a missing list, a non-finite or out-of-range number."""
        p = params or DriftParams()
        if not isinstance(d, dict):
            raise ValueError(f"{where}: expected an object, got {json_kind(d)}")
        key = d.get("stratum")
        if not isinstance(key, str):
            raise ValueError(f"{where}.stratum: expected a stratum key, got {json_kind(key)}")
        try:
            stratum = Stratum.from_key(key)
        except ValueError as exc:
            raise ValueError(f"{where}.stratum: {exc}") from None
        y = _numbers(d.get("y"), f"{where}.y")
        big = next((i for i, v in enumerate(y) if abs(v) > _MAX_LOG), None)
        if big is not None:  # log tok/s: exp() of it must stay a float
            raise ValueError(f"{where}.y[{big}]: out of range ({y[big]})")
        thr = _numbers(d.get("thr"), f"{where}.thr", positive=True)
        if not y or len(thr) != len(y):
            raise ValueError(f"{where}: expected as many throughputs as samples, at least one "
                             f"(y {len(y)}, thr {len(thr)})")
        acc = d.get("accept")
        accept = None if acc is None else _numbers(acc, f"{where}.accept", positive=True)
        rr_f = _numbers(d.get("rr", []), f"{where}.rr", positive=True)
        if any(x != int(x) for x in rr_f):
            raise ValueError(f"{where}.rr: expected whole numbers")
        rr = [int(x) for x in rr_f]
        t_first, t_last = (None if d.get(k) is None else _finite(d.get(k), f"{where}.{k}")
                           for k in ("t_first", "t_last"))
        return cls(stratum, y, thr, accept or None, rr, t_first, t_last, p.sig_floor, p.rho_max)


@dataclass
class BaselineStats:
    """Per-stratum baseline plus what was excluded while recording it."""

    strata: dict[str, StratumBaseline] = field(default_factory=dict)
    excluded: dict[str, int] = field(default_factory=dict)
    fixed: bool = False  # from --baseline-value: a known centre with no samples

    def get(self, st: Stratum, params: DriftParams) -> StratumBaseline | None:
        b = self.strata.get(st.key)
        if b is None or (not self.fixed and b.n < params.min_base):
            return None
        return b

    def best(self) -> StratumBaseline | None:
        """The stratum with most samples (what `baseline show` leads with)."""
        return max(self.strata.values(), key=lambda b: b.n, default=None)

    def to_json(self) -> dict[str, Any]:
        return {"strata": [b.to_json() for b in self.strata.values()], "excluded": self.excluded}

    @classmethod
    def from_json(cls, d: Any, params: DriftParams | None = None,
                  where: str = "stats") -> BaselineStats:
        """What `to_json` wrote; ValueError (one line naming the field, e.g.
        "stats.strata[2].y[5]: not a finite number") for anything else, never another error."""
        if not isinstance(d, dict):
            raise ValueError(f"{where}: expected an object, got {json_kind(d)}")
        raw = d.get("strata", [])
        if not isinstance(raw, list):
            raise ValueError(f"{where}.strata: expected a list, got {json_kind(raw)}")
        strata = [StratumBaseline.from_json(x, params, f"{where}.strata[{i}]")
                  for i, x in enumerate(raw)]
        ex = d.get("excluded", {})
        if ex is None:
            ex = {}
        if not isinstance(ex, dict):
            raise ValueError(f"{where}.excluded: expected an object, got {json_kind(ex)}")
        excluded: dict[str, int] = {}
        for k, v in ex.items():
            n = _finite(v, f"{where}.excluded.{_brief(k)}")
            if n < 0 or n != int(n):
                raise ValueError(f"{where}.excluded.{_brief(k)}: expected a count, got {_brief(v)}")
            excluded[str(k)] = int(n)
        return cls({b.stratum.key: b for b in strata}, excluded)

    @classmethod
    def fixed_value(cls, toks: float, spread_pct: float | None, running_req: int | None,
                    params: DriftParams | None = None) -> BaselineStats:
        """`--baseline-value`: one stratum-free centre; spread is the per-sample robust CV."""
        p = params or DriftParams()
        sig = max(math.log1p(spread_pct / 100.0), p.sig_floor) if spread_pct else 0.0
        b = StratumBaseline(Stratum(rr_bucket(running_req or 1), None, False, None), [math.log(toks)],
                            [toks], None, [running_req or 1], sig_floor=p.sig_floor)
        b.sig = sig  # 0: unknown, the live window's own spread is used
        return cls({"*": b}, {}, fixed=True)


def build_baseline(samples: Iterable[Sample], excluded: dict[str, int] | None = None,
                   params: DriftParams | None = None) -> BaselineStats:
    p = params or DriftParams()
    groups: dict[str, list[Sample]] = {}
    for s in samples:
        groups.setdefault(s.stratum.key, []).append(s)
    strata: dict[str, StratumBaseline] = {}
    for key, ss in groups.items():
        ts = [s.t for s in ss if s.t is not None]
        acc = [s.accept for s in ss if s.accept is not None]
        strata[key] = StratumBaseline(ss[0].stratum, [s.y for s in ss], [s.thr for s in ss],
                                      acc or None, [s.rr for s in ss], min(ts) if ts else None,
                                      max(ts) if ts else None, p.sig_floor, p.rho_max)
    return BaselineStats(strata, dict(excluded or {}))


def baseline_from_records(records: Iterable[tuple[Record | None, float | None]],
                          params: DriftParams | None = None) -> BaselineStats:
    """Record a baseline from parsed records (a log file or a live window)."""
    p = params or DriftParams()
    f = SampleFilter(p)
    samples: list[Sample] = []
    for rec, t in records:
        s = _feed(f, rec, t, None)
        if s is not None:
            samples.append(s)
    return build_baseline(samples, dict(f.excluded), p)


def _feed(f: SampleFilter, rec: Record | None, t: float | None, line_no: int | None) -> Sample | None:
    if isinstance(rec, BatchRecord):
        if rec.kind == "prefill":
            if f.stream is None or rec.rank_key == f.stream:
                f.prefill()
            return None
        return f.decode(rec, t, line_no)
    if isinstance(rec, EventRecord) and rec.kind == "server_args":
        f.restart()
    return None


def _last(d: deque[Sample], k: int) -> list[Sample]:
    """The newest k items of a deque, oldest first, without copying the rest."""
    out = list(islice(reversed(d), max(k, 0)))
    out.reverse()
    return out


def _split(ys: Sequence[float], mu: float) -> int:
    """Change point inside a window: index j minimising L1 cost of (mu before, median after).

    Used only when an alert is raised, so the estimate starts at the change rather than at
    the window's start (which still holds pre-change samples).
    """
    n = len(ys)
    best_j, best_cost = 0, math.inf
    for j in range(0, max(1, n - 3)):
        post = ys[j:]
        m = median(post) or mu
        cost = sum(abs(y - mu) for y in ys[:j]) + sum(abs(y - m) for y in post)
        if cost < best_cost - 1e-12:
            best_j, best_cost = j, cost
    return best_j


# --------------------------------------------------------------------------------------------
# The detector of one stratum
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Estimate:
    """Live vs recorded on the compared metric, as a ratio with a 95 % interval."""

    live: float  # tok/s (or t_cycle ms / accept len for the other metrics)
    base: float
    delta_pct: float  # live vs recorded, in %, for the *performance* direction
    ci_pct: tuple[float, float]
    n_live: int
    n_base: int | None
    running_req: int
    metric: str  # "tok/s" | "t_cycle" | "accept_len"

    def supported(self, min_effect: float) -> bool:
        """The interval excludes zero and the effect reaches the practical minimum."""
        lo, hi = self.ci_pct
        return not (lo <= 0.0 <= hi) and abs(self.delta_pct) >= 100.0 * min_effect


@dataclass
class Evaluation:
    d: float  # ln(base) - ln(live window median): > 0 means slower
    thr: float
    level: str | None  # state after this evaluation


class StratumDetector:
    """Persistence + hysteresis state machine over one stratum's live samples."""

    def __init__(self, base: StratumBaseline, params: DriftParams, metric: str = "y",
                 fixed: bool = False) -> None:
        self.base = base
        self.fixed = fixed  # baseline is a given value: its own uncertainty is not counted
        self.p = params
        self.metric = metric  # "y" (tok/s or cycle rate) | "accept"
        self.live: deque[Sample] = deque(maxlen=params.report_max)
        self.count = 0
        self.down_hits = 0
        self.up_hits = 0
        self.crit_hits = 0
        self.fast_run = 0
        self.calm = 0
        self.level: str | None = None  # None | "info" | "warning" | "critical"
        self.onset_count = 0
        self.onset_t: float | None = None
        self.onset_line: int | None = None
        self.raised_line: int | None = None
        self.raised_t: float | None = None
        self.last: Evaluation | None = None

    def value(self, s: Sample) -> float:
        if self.metric == "accept":
            return math.log(s.accept) if s.accept else 0.0
        return s.y

    def add(self, s: Sample) -> Evaluation | None:
        p, b = self.p, self.base
        self.live.append(s)
        self.count += 1
        mu = b.mu if self.metric == "y" else b.accept_mu
        sig_b = b.sig if self.metric == "y" else b.accept_sig
        v = self.value(s)
        self.fast_run = self.fast_run + 1 if v <= mu + math.log(p.fast_frac) else 0
        newest = s.t
        w = p.accept_window if self.metric == "accept" else p.window
        win = [x for x in _last(self.live, w)
               if newest is None or x.t is None or newest - x.t <= p.max_age_s]
        if len(win) < p.min_live:
            return None
        ys = [self.value(x) for x in win]
        d = mu - (median(ys) or mu)
        sig = sig_b
        if p.live_sigma or sig <= 0:
            sig = max(sig, _mad_sigma(ys, p.sig_floor))
        rho = b.rho if self.metric == "y" else 0.0
        inv_base = 0.0 if self.base_n is None else 1.0 / neff(self.base_n, rho)
        se = 1.2533 * sig * math.sqrt(1.0 / neff(len(ys), rho) + inv_base)
        thr = max(p.thr_min, p.k_se * se)
        crit = max(p.crit_min, p.k_se * se)
        self.down_hits = self.down_hits + 1 if d >= thr else (0 if d < thr / 2 else self.down_hits)
        self.up_hits = self.up_hits + 1 if -d >= thr else (0 if -d < thr / 2 else self.up_hits)
        self.crit_hits = self.crit_hits + 1 if d >= crit else 0
        prev = self.level
        if self.level in ("warning", "critical"):
            self.calm = self.calm + 1 if d < thr / 2 else 0
            if self.calm >= p.clear_after:
                self.level = None
        elif self.level == "info":
            self.calm = self.calm + 1 if -d < thr / 2 else 0
            if self.calm >= p.clear_after:
                self.level = None
        fast = self.fast_run >= p.fast_n and self.metric == "y"
        if (self.crit_hits >= p.persist and self.metric == "y") or fast:
            self.level = "critical"
        elif self.down_hits >= p.persist and self.level != "critical":
            self.level = "warning"
        elif self.up_hits >= p.persist and self.level is None:
            self.level = "info"
        if self.level != prev:
            self.calm = 0
            if self.level is not None and (prev is None or (prev == "info") != (self.level == "info")):
                self.raised_line = s.line_no
                self.raised_t = s.t
                k = len(win) - _split(ys, mu)  # samples since the estimated change point
                if fast:  # the fast path's run is the evidence: start the estimate there
                    k = min(p.fast_n, len(self.live))
                self.onset_count = self.count - k
                first = self.live[-k]
                self.onset_t, self.onset_line = first.t, first.line_no
        self.last = Evaluation(d, thr, self.level)
        return self.last

    @property
    def base_n(self) -> int | None:
        return None if self.fixed else self.base.n

    def estimate(self, since_onset: bool = True) -> Estimate | None:
        """Live vs recorded over the samples since the alert's onset (else the whole live run)."""
        p, b = self.p, self.base
        k = len(self.live)
        if since_onset and self.level is not None:
            k = min(k, self.count - self.onset_count)
        pts = _last(self.live, k) if k else []
        if len(pts) < 2:
            return None
        ys = [self.value(x) for x in pts]
        rr = int(median([x.rr for x in pts]) or 1)
        if self.metric == "accept":
            mu, sig_b = b.accept_mu, b.accept_sig
            rho_b = 0.0
        else:
            mu, sig_b, rho_b = b.mu, b.sig, b.rho
        m = median(ys) or mu
        sig_l = _mad_sigma(ys, p.sig_floor)
        rho_l = min(max(lag1(ys), 0.0), p.rho_max)
        var = (sig_l ** 2) / neff(len(ys), rho_l)
        if self.base_n is not None:
            var += (sig_b ** 2) / neff(self.base_n, rho_b)
        se = 1.2533 * math.sqrt(var)
        r = m - mu  # ln(live/base) on the compared metric
        lo, hi = r - 1.96 * se, r + 1.96 * se
        if self.metric == "accept":
            live, base, unit = math.exp(m), math.exp(mu), "accept_len"
        elif b.stratum.spec:
            live = 1000.0 * rr / math.exp(m)
            base = b.t_cycle_ms or 1000.0 * rr / math.exp(mu)
            unit = "t_cycle"
        else:
            live, base, unit = math.exp(m), math.exp(mu), "tok/s"
        # delta/CI always in the performance direction (negative = worse)
        return Estimate(live, base, 100.0 * (math.exp(r) - 1.0),
                        (100.0 * (math.exp(lo) - 1.0), 100.0 * (math.exp(hi) - 1.0)),
                        len(ys), self.base_n, rr, unit)


# --------------------------------------------------------------------------------------------
# Alerts and the monitor the app calls
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Alert:
    level: str  # "info" (improved) | "warning" | "critical"
    text: str
    causes: tuple[str, ...]
    started_at: float | None
    cleared: bool
    estimate: Estimate | None = None
    kind: str = "throughput"  # "throughput" | "cycle" | "acceptance"
    first_line: int | None = None
    stratum: str | None = None


def format_estimate(e: Estimate, label: str) -> str:
    """"baseline 82.2 tok/s vs recorded 88.8 (-7.4%, 95% CI -8.1..-6.7, n=40 vs 60, bs=1)"."""
    n = f"n={e.n_live} vs {e.n_base}" if e.n_base is not None else f"n={e.n_live}"
    lo, hi = e.ci_pct
    what = ""
    if e.metric == "t_cycle":
        # the delta is the cycle rate's (performance direction: negative = worse), and says so:
        # t_cycle itself moves the other way ("151.0 ms vs 155.1 (+2.7%)" read as a rise)
        head = f"{label} t_cycle {e.live:.1f} ms vs recorded {e.base:.1f}"
        what = "cycle rate "
    elif e.metric == "accept_len":
        head = f"{label} accept len {e.live:.2f} vs recorded {e.base:.2f}"
    else:
        head = f"{label} {e.live:.1f} tok/s vs recorded {e.base:.1f}"
    return (f"{head} ({what}{e.delta_pct:+.1f}%, 95% CI {lo:+.1f}..{hi:+.1f}, {n}, "
            f"bs={e.running_req})")


CauseFn = Any  # Callable[[], list[str]] supplied by the app (fingerprint diff, GPU evidence)


class DriftMonitor:
    """Streams one server's records through the detector; cheap enough to call at 1 Hz.

    Feed records with `observe(rec, t)` (exact: prefill lines are seen in order), or let
    `update(server, gpus, now)` pull new decode points from a `ServerState`. `update` returns
    the current alert (or the just-cleared one, once) and attaches causes from `explain`.
    """

    def __init__(self, baseline: BaselineStats, params: DriftParams | None = None, *,
                 label: str = "baseline", explain: CauseFn | None = None,
                 running_req: int | None = None) -> None:
        self.baseline = baseline
        self.p = params or DriftParams()
        self.label = label
        self.explain = explain  # (alert kind, estimate, gpus) -> list[str]
        self.filter = SampleFilter(self.p)
        # Only this #running-req is compared (None: all; a fixed value locks onto the first seen)
        self.running_req = running_req
        self.detectors: dict[str, StratumDetector] = {}
        self.acceptance: dict[str, StratumDetector] = {}
        self.clean = 0
        self.evaluations = 0
        self.first_alert_line: int | None = None
        self.first_alert: Alert | None = None
        self.raised: set[str] = set()  # levels ever raised
        self.alert: Alert | None = None
        self._active_key: str | None = None
        self._causes: tuple[str, ...] = ()
        self._causes_for: tuple[str, str] | None = None
        self._causes_at: float | None = None
        self.cause_refresh_s = 5.0  # GPU evidence changes: re-explain an active alert this often

    # -- input -----------------------------------------------------------------------------
    @property
    def excluded(self) -> dict[str, int]:
        return dict(self.filter.excluded)

    def restart(self) -> None:
        """Server restarted: new warm-up, empty live windows (a restart is a change point).

        The previous run's alert ends with it: the new run earns its own alert from its own
        samples (every statistic lives inside one run).
        """
        self.filter.restart()
        for d in list(self.detectors.values()) + list(self.acceptance.values()):
            d.live.clear()
            d.down_hits = d.up_hits = d.crit_hits = d.fast_run = 0
            d.level = None
            d.calm = 0
        prev = self.alert
        if prev is not None and not prev.cleared:
            self.alert = replace(prev, cleared=True, text=prev.text + " - run ended (restart)")

    def observe(self, rec: Record | None, t: float | None, line_no: int | None = None) -> None:
        if isinstance(rec, EventRecord) and rec.kind == "server_args":
            self.restart()
            return
        s = _feed(self.filter, rec, t, line_no)
        if s is not None:
            self._add(s)

    def _detector(self, s: Sample) -> tuple[StratumDetector | None, StratumDetector | None]:
        if self.baseline.fixed:
            key = "*"
            b = self.baseline.strata["*"]
        else:
            key = s.stratum.key
            got = self.baseline.get(s.stratum, self.p)
            if got is None:
                return None, None
            b = got
        det = self.detectors.get(key)
        if det is None:
            det = self.detectors[key] = StratumDetector(b, self.p, fixed=self.baseline.fixed)
        acc = None
        if s.stratum.spec and b.accept and not self.baseline.fixed:
            acc = self.acceptance.get(key)
            if acc is None:
                acc = self.acceptance[key] = StratumDetector(b, self.p, metric="accept")
        return det, acc

    def _add(self, s: Sample) -> None:
        if self.baseline.fixed and s.stratum.spec:
            # a given value is a plain server's tok/s; a speculative line's sample is its cycle
            # rate (gen / accept len): no number to hold against it
            self.filter.excluded["speculative_vs_value"] += 1
            return
        if self.running_req is None and self.baseline.fixed:
            self.running_req = s.rr
        if self.running_req is not None and s.rr != self.running_req:
            self.filter.excluded["other_batch_size"] += 1
            return
        det, acc = self._detector(s)
        if det is None:
            self.filter.excluded["no_baseline_stratum"] += 1
            return
        self.clean += 1
        ev = det.add(s)
        if acc is not None:
            acc.add(s)
        if ev is not None:
            self.evaluations += 1
        self._refresh(s.stratum.key if not self.baseline.fixed else "*")

    def _refresh(self, key: str) -> None:
        """Pick the alert to show: the most severe active level, current stratum first."""
        order = {"critical": 3, "warning": 2, "info": 1}
        best: tuple[int, int, str, str] | None = None
        for kind, dets in (("y", self.detectors), ("accept", self.acceptance)):
            for k, d in dets.items():
                if d.level is None:
                    continue
                score = (order[d.level] if kind == "y" else min(order[d.level], 2), int(k == key), k, kind)
                if best is None or score > best:
                    best = score
        prev = self.alert
        if best is None:
            if prev is not None and not prev.cleared:
                self.alert = replace(prev, cleared=True)
            return
        _, _, k, kind = best
        det = (self.detectors if kind == "y" else self.acceptance)[k]
        est = det.estimate()
        if kind == "accept":
            akind = "acceptance"
        elif det.base.stratum.spec:
            akind = "cycle"
        else:
            akind = "throughput"
        level = det.level or "warning"
        if est is not None and not est.supported(self.p.min_effect):
            # the detector's window crossed its threshold, but the interval over the samples
            # since the change holds zero (or the effect is below the minimum): say nothing
            if prev is not None and not prev.cleared:
                self.alert = replace(prev, cleared=True)
            return
        text = format_estimate(est, self.label) if est else f"{self.label}: drift"
        if akind == "cycle" and est is not None:
            text += "; " + self._spec_split(k)
        causes = self._causes if self._causes_for == (k, akind) else ()
        self.alert = Alert(level, text, causes, det.onset_t, False, est, akind, det.raised_line, k)
        self.raised.add(level)
        if level != "info" and self.first_alert is None:
            self.first_alert_line = det.raised_line
            self.first_alert = self.alert

    def _spec_split(self, key: str) -> str:
        det = self.detectors[key]
        acc = self.acceptance.get(key)
        b = det.base
        pts = _last(det.live, max(det.p.window, det.count - det.onset_count))
        thr = median([x.thr for x in pts])
        accept = median([x.accept for x in pts if x.accept is not None])
        parts = []
        if thr is not None and b.median_thr:
            parts.append(f"tok/s {thr:.1f} vs {b.median_thr:.1f}")
        if accept is not None and b.median_accept:
            parts.append(f"accept len {accept:.2f} vs {b.median_accept:.2f}")
        acc_txt = "" if acc is None or acc.level is None else ", acceptance also changed"
        return ", ".join(parts) + acc_txt

    def spec_split(self) -> str | None:
        """Cause text of the cycle-time split for a speculative alert (None otherwise)."""
        a = self.alert
        if a is None or a.cleared or a.estimate is None:
            return None
        if a.kind == "cycle":
            acc = self.acceptance.get(a.stratum or "")
            also = acc is not None and acc.level is not None
            slower = a.estimate.live > a.estimate.base
            return (f"t_cycle {a.estimate.live:.1f} ms vs {a.estimate.base:.1f} recorded "
                    f"({100.0 * (a.estimate.live / a.estimate.base - 1):+.1f}%): the system got "
                    + ("slower" if slower else "faster") + " (clocks, NCCL, kernels)"
                    + (", and acceptance changed too" if also else ", not acceptance"))
        if a.kind == "acceptance":
            return (f"accept len {a.estimate.live:.2f} vs {a.estimate.base:.2f} recorded with t_cycle "
                    "flat: acceptance changed (prompts, draft model, temperature), not the machine")
        return None

    # -- the session's 1 Hz call -------------------------------------------------------------
    def update(self, gpus: Sequence[Any] = (), now: float | None = None) -> Alert | None:
        """Refresh the current alert's causes; the current alert. Records come in one way:
        `observe`, as they enter the session (which restarts the monitor at a run boundary)."""
        a = self.alert
        if a is None:
            return None
        key = (a.stratum or "", a.kind)
        stale = now is None or self._causes_at is None or now - self._causes_at >= self.cause_refresh_s
        if not a.cleared and self.explain is not None and (self._causes_for != key or stale):
            self._causes = tuple(self.explain(a, gpus, self))
            self._causes_for = key
            self._causes_at = now
            self.alert = a = replace(a, causes=self._causes)
        if a.cleared:
            self._causes_for = None
        return a

    def verdict(self) -> str:
        """Only what the interval supports: an estimate whose 95 % interval holds zero, or
        whose effect is below the minimum, is "ok" whatever the detector's state was."""
        if self.evaluations == 0 and not self.raised:
            return "insufficient"
        est = self.summary_estimate()
        if est is not None and not est.supported(self.p.min_effect):
            return "ok"
        if "warning" in self.raised or "critical" in self.raised:
            return "drift"
        if "info" in self.raised:
            return "improved"
        return "ok"

    def summary_estimate(self) -> Estimate | None:
        """For `specmon check`: since the first alert's onset if one fired, else the whole run."""
        if self.first_alert is not None and self.first_alert.estimate is not None:
            k = self.first_alert.stratum
            det = self.detectors.get(k or "") if self.first_alert.kind != "acceptance" else \
                self.acceptance.get(k or "")
            if det is not None and det.level is not None:  # still active: since its onset
                return det.estimate(since_onset=True) or self.first_alert.estimate
            return self.first_alert.estimate  # cleared: the evidence it was raised on
        dets = [d for d in self.detectors.values() if d.live]
        if not dets:
            return None
        det = max(dets, key=lambda d: d.count)
        return det.estimate(since_onset=False)
