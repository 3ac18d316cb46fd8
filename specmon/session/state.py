"""Live session state: servers, their bounded time series, GPUs, alerts.

Mutated only on the UI event loop (or a single headless task); widgets read it on a timer. It
never parses: the pipeline hands it records that `specmon.parse` already produced.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from datetime import time as dt_time
from functools import lru_cache
from typing import Any

from specmon.parse.sglang import BatchRecord, EventRecord, Record
from specmon.parse.vllm import (
    SpecJoiner,
    VllmDecodeRecord,
    VllmEventRecord,
    combine_engines,
    engine_of,
    repeats_config,
    sglang_equivalents,
)
from specmon.session.ownership import owned_gpus

MAX_DECODE_POINTS = 20_000  # raw decode lines of all runs, for snapshots (~2.8 h at 2 lines/s)
MAX_LOG_LINES = 5_000
MAX_PROBE_EVENTS = 16  # host probes kept per server for snapshots (one per launch, mostly)
RECENT_POINTS = 4_096  # full-resolution server-level points per run (~34 min at 2 points/s)
TIER_SECONDS = (10.0, 60.0, 600.0)  # downsampled tiers: medians with n, for the whole run
TIER_POINTS = 4_096  # per tier: 10 s -> 11 h, 1 min -> 68 h, 10 min -> 28 days
MAX_RUNS = 32  # runs kept per server (older runs are summarised away)
MAX_GROUPS = 64  # DP groups kept per run (a hostile log cannot grow it forever)
# Log time that goes back more than SEGMENT_BACK_S (a clock stepped back, a DST fall-back) or
# jumps ahead more than SEGMENT_JUMP_S (the default window: an idle gap or a clock step) starts
# a new time segment inside the run; no window spans two segments.
SEGMENT_BACK_S = 1.0
SEGMENT_JUMP_S = 60.0
MAX_SEGMENTS = 64  # segment boundaries kept per run (the count goes on)
SILENT_ROUNDS = 3  # a DP group missing from this many consecutive rounds is shown as silent
RUN_GPU_SAMPLES = 600  # GPU samples kept per run (per GPU: about 10 min at 1 Hz)
MAX_SPEC_CHANGES = 256  # adaptive step changes kept per run (older ones cover no kept point)
HOLD_WAIT_S = 2.0  # vLLM prints an engine's spec line right after its stats line: this is ample


@lru_cache(maxsize=256)
def _stamp_seconds(stamp: str) -> float | None:
    """(Cached: the lines of one second share their stamp, and parsing it costs ~1 us a line.)"""
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except (ValueError, OverflowError, OSError):  # e.g. year 0001 in a garbled line
        return None


def log_time(rec: Record, received: float) -> float | None:
    """Seconds of the timestamp SGLang printed; None when the line carries none.

    Date+time stamps are naive local times (SGLang's `%Y-%m-%d %H:%M:%S`); only differences
    inside one run are used, so the host's time zone does not matter. A clock-only stamp
    (0.3.x) takes its date from the receive time, the nearest day to it.
    """
    if rec.timestamp:
        return _stamp_seconds(rec.timestamp)
    if rec.time_of_day:
        try:
            clock = dt_time.fromisoformat(rec.time_of_day)
            if received == 0.0:  # offline: no day to take; seconds of day 0, its later days
                # counted by the line order (ServerState._offline_clock)
                return (clock.hour * 3600 + clock.minute * 60 + clock.second
                        + clock.microsecond / 1e6)
            day = datetime.fromtimestamp(received).date()
            t = datetime.combine(day, clock).timestamp()
        except (ValueError, OverflowError, OSError):
            return None
        if t - received > 43_200:
            t -= 86_400
        elif received - t > 43_200:
            t += 86_400
        return t
    return None


@dataclass(slots=True)
class DecodePoint:
    """One decode interval: a log line, or the sum of a DP server's groups at one interval."""

    t: float  # record time: SGLang's printed timestamp (seconds); receive time when it has none
    rec: BatchRecord
    received: float | None = None  # when specmon received it (latency and staleness only)
    t_log: bool = True  # False: the line had no timestamp and `t` is the receive time
    groups: int = 1  # DP groups summed into this point
    after_prefill: bool = False  # a prefill line came since the previous decode line
    seg: int = 0  # the run's time segment it belongs to (see Run.segment)
    epoch: int = 0  # bumped only when log time went back: run figures never reach behind it


@dataclass(frozen=True)
class TimeSegment:
    """Where log time broke inside a run: the newest time before, the first time after."""

    index: int  # 1-based; segment 0 is the run's start
    prev_t: float
    start_t: float

    @property
    def step_s(self) -> float:
        return self.start_t - self.prev_t

    def describe(self) -> str:
        """`log time went back 3600 s at 13:02:11` / `... jumped ahead 300 s ...`."""
        step = self.step_s
        what = f"went back {-step:.0f} s" if step < 0 else f"jumped ahead {step:.0f} s"
        at = time.strftime("%H:%M:%S", time.localtime(self.start_t))
        return f"time segment {self.index + 1} from {at}: log time {what}"


@dataclass(slots=True)
class TierPoint:
    """A downsampled stretch of one run at one batch size: the median of its n points."""

    t: float  # start of the bucket (record time)
    span_s: float
    running_req: int
    median: float
    n: int
    accept_len: float | None


class Tier:
    """Medians per fixed bucket of record time, per #running-req; bounded."""

    def __init__(self, span_s: float, maxlen: int = TIER_POINTS) -> None:
        self.span_s = span_s
        self.points: deque[TierPoint] = deque(maxlen=maxlen)
        self._bucket: float | None = None
        self._vals: dict[int, list[float]] = {}
        self._acc: dict[int, list[float]] = {}

    def add(self, t: float, rr: int, thr: float, accept: float | None) -> None:
        b = t - t % self.span_s
        if self._bucket is not None and b != self._bucket:
            if b < self._bucket:  # out-of-order stamp: it belongs to a closed bucket, count it here
                b = self._bucket
            else:
                self._close()
        self._bucket = b
        vals = self._vals.get(rr)  # (not setdefault: that makes a list every call, x3 tiers)
        if vals is None:
            vals = self._vals[rr] = []
        vals.append(thr)
        if accept is not None:
            acc = self._acc.get(rr)
            if acc is None:
                acc = self._acc[rr] = []
            acc.append(accept)

    def _close(self) -> None:
        if self._bucket is None:
            return
        for rr, vals in sorted(self._vals.items()):
            acc = self._acc.get(rr)
            self.points.append(TierPoint(self._bucket, self.span_s, rr, _median(vals), len(vals),
                                         _median(acc) if acc else None))
        self._vals, self._acc = {}, {}

    def all_points(self) -> list[TierPoint]:
        """Closed buckets plus the open one (its median so far)."""
        out = list(self.points)
        if self._bucket is not None:
            for rr, vals in sorted(self._vals.items()):
                acc = self._acc.get(rr)
                out.append(TierPoint(self._bucket, self.span_s, rr, _median(vals), len(vals),
                                     _median(acc) if acc else None))
        return out


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


@dataclass
class GroupSeries:
    """One DP group's decode lines inside a run (the only stream when there is no DP)."""

    dp_rank: int | None
    stream: tuple[int | None, ...]  # the rank tags of the lines kept (other TP ranks ignored)
    points: deque[DecodePoint] = field(default_factory=lambda: deque(maxlen=RECENT_POINTS))
    total: int = 0
    bs: int | None = None  # the batch size of its newest throughput sample (`sample_batch`)
    missed_rounds: int = 0  # consecutive server-level intervals without a line from this group

    @property
    def silent(self) -> bool:
        return self.missed_rounds >= SILENT_ROUNDS

    @property
    def last(self) -> DecodePoint | None:
        return self.points[-1] if self.points else None


def combine(points: list[DecodePoint]) -> DecodePoint:
    """Server-level figure of one interval: throughput, #running-req, tokens summed over the
    DP groups; accept length weighted by each group's verified tokens (its gen throughput)."""
    if len(points) == 1:
        return points[0]
    recs = [p.rec for p in points]
    thr = [r.gen_throughput for r in recs]
    rr = [r.running_req for r in recs]
    acc_pairs = [(r.accept_len, r.gen_throughput) for r in recs
                 if r.accept_len is not None and r.gen_throughput is not None]
    acc: float | None = None
    wsum = sum(w for _, w in acc_pairs)
    if acc_pairs and wsum > 0:
        acc = sum(a * w for a, w in acc_pairs) / wsum
    first = recs[0]
    tokens = [r.tokens for r in recs]
    queue = [r.queue_req for r in recs]
    graphs = [r.cuda_graph for r in recs]
    usage = [r.token_usage for r in recs if r.token_usage is not None]
    rec = BatchRecord(
        kind="decode", timestamp=max((r.timestamp for r in recs if r.timestamp), default=None),
        time_of_day=first.time_of_day, tp_rank=None, dp_rank=None,
        # an engine that drained within the interval (vLLM's `Running: 0` with tokens) leaves
        # the server's batch size over it unknown: no sample (`sample_batch`)
        running_req=sum(x for x in rr if x is not None) if None not in rr and not any(
            r.running_req == 0 and (r.gen_throughput or 0) > 0 for r in recs) else None,
        tokens=sum(x for x in tokens if x is not None) if None not in tokens else None,
        token_usage=max(usage) if usage else None,
        accept_len=acc,
        cuda_graph=None if None in graphs else all(g for g in graphs),
        graph_kind=first.graph_kind,
        gen_throughput=sum(x for x in thr if x is not None) if None not in thr else None,
        queue_req=sum(x for x in queue if x is not None) if None not in queue else None,
    )
    vrecs = [r for r in recs if isinstance(r, VllmDecodeRecord)]
    if len(vrecs) == len(recs):  # vLLM DP engines: keep their own parts too
        rec = combine_engines(vrecs, rec)
    received = [p.received for p in points if p.received is not None]
    return DecodePoint(max(p.t for p in points), rec, max(received) if received else None,
                       all(p.t_log for p in points), len(points),
                       any(p.after_prefill for p in points))


_ENGINE_NAME = {"vllm": "vLLM", "sglang": "SGLang"}


def vllm_spec_args(args: dict[str, Any], non_default: Any) -> None:
    """A vLLM run's args: its `non-default args` and SGLang's names for its k (parse/vllm.py)."""
    if isinstance(non_default, dict):
        args["non_default_args"] = non_default
    for key, v in sglang_equivalents(args).items():
        args.setdefault(key, v)


@dataclass
class StartupProgress:
    """What the start-up lines said so far; shown while a server loads."""

    server_args: bool = False
    kv_allocated: bool = False
    graph_capture: str | None = None  # "capturing" | "done"
    graph_batch_sizes: list[int] = field(default_factory=list)
    ready: bool = False


@dataclass(frozen=True)
class SpecChange:
    """An `Adaptive spec params updated` line: from server-level point `at` on, `steps` apply."""

    at: int  # the run's decode_total when it came: the index of the first point it covers
    t: float | None  # its log time
    steps: int | None


@dataclass
class Run:
    """One launch of a server: from its start-up lines (or the process start specmon saw, or a
    restart marker in an appended log) to its exit or the next run.

    It owns its arguments, fingerprint, records and GPU samples; every statistic is computed
    inside one run, on the times SGLang printed. A DP-attention server has one series per DP
    group, summed per interval into the server-level series `decode`.
    """

    index: int  # 1-based, per server
    start_reason: str  # "server_args" | "process_start" | "restart" | "log" (history began mid-run)
    start_t: float | None = None  # record time of its first line
    start_received: float | None = None
    end_t: float | None = None
    end_reason: str | None = None  # None while running | "exit" | "next_run"
    exit_code: int | None = None
    args: dict[str, Any] = field(default_factory=dict)
    nccl_lines: list[str] = field(default_factory=list)
    probe: dict[str, Any] | None = None  # host probe for this launch (SGLang version, modified files)
    fingerprint: Any = None
    groups: dict[int | None, GroupSeries] = field(default_factory=dict)
    decode: deque[DecodePoint] = field(default_factory=lambda: deque(maxlen=RECENT_POINTS))
    tiers: list[Tier] = field(default_factory=lambda: [Tier(s) for s in TIER_SECONDS])
    decode_total: int = 0  # server-level points
    lines_total: int = 0  # decode lines of every group
    prefill_total: int = 0
    untimed: int = 0  # decode lines without a printed timestamp (timed by receive time)
    other_rank_lines: int = 0  # a second TP rank of the same DP group printing the same stats
    last_t: float | None = None  # record time of the newest line of the run
    last_received: float | None = None
    last_prefill_t: float | None = None
    last: BatchRecord | None = None  # newest server-level decode record
    # the batch size of the newest throughput sample (`sample_batch`): the run's current batch
    # size (vLLM's last interval may have drained to `Running: 0`, which is none)
    bs: int | None = None
    gpu_samples: deque[Any] = field(default_factory=lambda: deque(maxlen=RUN_GPU_SAMPLES))
    has_server_args: bool = False
    # history read after the start-up lines: bytes of the run's log not read, and the log time
    # of the first line read after them (its figures cover the lines read, not the whole run)
    skipped_bytes: int = 0
    read_from_t: float | None = None
    spec_changes: deque[SpecChange] = field(
        default_factory=lambda: deque(maxlen=MAX_SPEC_CHANGES))  # adaptive step changes
    prefill_pending: bool = False  # a prefill line since the last decode line
    segment: int = 0  # the current time segment (0: none broke yet): no window reaches behind it
    # log time went back this many times: the whole run's figures never reach behind the last
    epoch: int = 0
    segments: list[TimeSegment] = field(default_factory=list)  # boundaries, newest last
    _seg_last_t: float | None = None
    _round: dict[int | None, DecodePoint] = field(default_factory=dict)
    # DP groups the run's arguments announce (vLLM data_parallel_size, SGLang dp_size with DP
    # attention) while not all of them have logged: no round closes short of them before one
    # repeats (0: none awaited; `expect_dp_groups`)
    dp_expect: int = 0

    def expect_dp_groups(self, args: dict[str, Any], vllm: bool) -> None:
        """The groups `args` announce (before the run's first decode line): the first interval
        of a DP server waits for every engine's line instead of closing on the first one."""
        self.dp_expect = dp_groups_announced(args, vllm) if not self.groups else 0

    @property
    def ended(self) -> bool:
        return self.end_reason is not None

    def since_text(self) -> str:
        """`run 3 since 14:02:11` (the record time of the run's first line)."""
        if self.start_t is None:
            return f"run {self.index}"
        return f"run {self.index} since {time.strftime('%H:%M:%S', time.localtime(self.start_t))}"

    def touch(self, t: float | None, received: float) -> None:
        if t is not None:
            if self.start_t is None:
                self.start_t = t
            if self.last_t is None or t > self.last_t:
                self.last_t = t
        if self.start_received is None:
            self.start_received = received
        self.last_received = received

    def add_decode(self, pt: DecodePoint) -> list[DecodePoint]:
        """A group's decode line; returns the server-level points it completed (0 to 2)."""
        rec = pt.rec
        key = rec.dp_rank
        g = self.groups.get(key)
        if g is None:
            if len(self.groups) >= MAX_GROUPS:
                self.other_rank_lines += 1
                return []
            g = self.groups[key] = GroupSeries(key, rec.rank_key)
        elif rec.rank_key != g.stream:
            self.other_rank_lines += 1  # every TP rank printing (--enable-metrics-for-all-schedulers)
            return []
        self.lines_total += 1
        if not pt.t_log:
            self.untimed += 1
        closed = self._check_segment(pt)
        g.points.append(pt)
        g.total += 1
        if (bs := rec.sample_rr) is not None:
            g.bs = bs
        # One interval holds one line per group: DP attention runs the groups' forwards in
        # lockstep, so a group's k-th line covers the same forwards as the others' k-th line.
        # A round closes when every group that still logs is in it, or when one repeats.
        out: list[DecodePoint] = [closed] if closed is not None else []
        if key in self._round:
            out.append(self._close_round())
            self.dp_expect = 0  # a group repeated: every group that logs has been seen
        if len(self.groups) == 1 and not self._round and not self.dp_expect:  # (most servers:
            g.missed_rounds = 0  # no DP groups; the round is this line, as `_close_round` makes it)
            out.append(self._add_point(pt))
            return out
        self._round[key] = pt
        if self.dp_expect:  # the run's args announce more groups than have logged yet
            if key is not None and len(self.groups) < self.dp_expect:
                return out
            self.dp_expect = 0
        active = [k for k, gg in self.groups.items() if not gg.silent or k in self._round]
        if all(k in self._round for k in active):
            out.append(self._close_round())
        return out

    def _check_segment(self, pt: DecodePoint) -> DecodePoint | None:
        """A new time segment when log time breaks (see SEGMENT_BACK_S); `pt` is in it.
        Returns the round the break closed, if one was open (a round never spans a break)."""
        prev = self._seg_last_t
        closed = None
        if prev is not None and (pt.t < prev - SEGMENT_BACK_S or pt.t > prev + SEGMENT_JUMP_S):
            if self._round:
                closed = self._close_round()
            self.segment += 1
            self.segments.append(TimeSegment(self.segment, prev, pt.t))
            del self.segments[:-MAX_SEGMENTS]
            if pt.t < prev:
                self.epoch += 1
        self._seg_last_t = pt.t
        pt.seg, pt.epoch = self.segment, self.epoch
        return closed

    def segment_text(self) -> str | None:
        """What the panel and `parse` say when the run's log time broke, else None."""
        if not self.segments:
            return None
        return self.segments[-1].describe() + (
            f" ({self.segment} breaks in this run)" if self.segment > 1 else "")

    def _close_round(self) -> DecodePoint:
        members = ([*self._round.values()] if len(self._round) == 1
                   else [self._round[k] for k in sorted(self._round, key=_rank_order)])
        for k, g in self.groups.items():
            g.missed_rounds = 0 if k in self._round else g.missed_rounds + 1
        self._round = {}
        if len(members) == 1:
            sp = members[0]
        else:
            sp = combine(members)
            sp.seg = max(p.seg for p in members)
            sp.epoch = max(p.epoch for p in members)
        return self._add_point(sp)

    def _add_point(self, sp: DecodePoint) -> DecodePoint:
        """A server-level point: kept, and counted in the history tiers."""
        self.decode.append(sp)
        self.decode_total += 1
        r = self.last = sp.rec
        rr = r.sample_rr
        if rr is not None:
            self.bs = rr
            t, gt, acc = sp.t, r.gen_throughput, r.accept_len
            assert gt is not None  # (a sample has a throughput)
            for tier in self.tiers:
                tier.add(t, rr, gt, acc)
        return sp

    def silent_groups(self) -> list[int | None]:
        return [k for k, g in self.groups.items() if g.silent]

    def points_since(self, t0: float) -> Iterator[DecodePoint]:
        """Server-level points with record time >= t0, oldest first, without copying the run.

        A window never reaches behind a break of log time, back or ahead (a 300 s window
        blended both sides of a 2-minute jump: 74 tok/s where the server ran at 88, then 60).
        The whole run (t0 -inf) counts both sides of a jump ahead, each gen throughput being
        the server's own measure of its interval, and nothing behind a step back."""
        rev: list[DecodePoint] = []
        whole = t0 == -math.inf
        for p in reversed(self.decode):
            if p.t < t0 or (p.epoch != self.epoch if whole else p.seg != self.segment):
                break
            rev.append(p)
        return reversed(rev)

    def history(self, span_s: float) -> list[TierPoint]:
        """The run's whole length at a resolution of `span_s` (10, 60 or 600 s)."""
        for tier in self.tiers:
            if tier.span_s == span_s:
                return tier.all_points()
        raise ValueError(f"no {span_s} s tier (have {TIER_SECONDS})")


def dp_groups_announced(args: dict[str, Any], vllm: bool) -> int:
    """How many DP groups print their own decode lines per interval, as a run's arguments say:
    vLLM's `data_parallel_size` (one `Engine NNN:` line each), SGLang's `dp_size` with
    `enable_dp_attention` (one line per DP group, in lockstep); 0 when none is announced."""
    n = args.get("dp_size")
    if not isinstance(n, int) or isinstance(n, bool) or n <= 1:
        return 0
    if not vllm and args.get("enable_dp_attention") is not True:
        return 0
    return min(n, MAX_GROUPS)


def _rank_order(k: int | None) -> int:
    return -1 if k is None else k


@dataclass
class ServerState:
    name: str
    role: str | None = None  # "baseline" | "speculative"; None until known
    status: str = "unknown"  # starting | ready | stopped | crashed | unknown
    path: str | None = None
    # raw decode lines of all runs, newest last (snapshots); statistics use `runs`
    decode: deque[DecodePoint] = field(default_factory=lambda: deque(maxlen=MAX_DECODE_POINTS))
    runs: deque[Run] = field(default_factory=lambda: deque(maxlen=MAX_RUNS))
    runs_total: int = 0
    last_decode: BatchRecord | None = None
    last_prefill: BatchRecord | None = None
    last_prefill_t: float | None = None
    lines_total: int = 0
    decode_total: int = 0
    prefill_total: int = 0
    # bytes of the log not read before a decode line (history after the head), by the line's
    # index among all decode lines (`decode_total` when it came): a snapshot keeps them
    gap_points: dict[int, int] = field(default_factory=dict)
    _gap_pending: int = 0
    log: deque[str] = field(default_factory=lambda: deque(maxlen=MAX_LOG_LINES))
    # each raw line's receive time (a snapshot keeps it: a probe or exit replays between the
    # lines it came between)
    log_times: deque[float] = field(default_factory=lambda: deque(maxlen=MAX_LOG_LINES))
    # the record each kept line was parsed into (None: not an SGLang line), in step with `log`:
    # the UI shows the records as they were parsed once, never parsing a line again
    log_records: deque[Record | None] = field(default_factory=lambda: deque(maxlen=MAX_LOG_LINES))
    traceback: list[str] = field(default_factory=list)
    in_traceback: bool = False
    startup: StartupProgress = field(default_factory=StartupProgress)
    exit_code: int | None = None
    stale: bool = False
    notices: deque[str] = field(default_factory=lambda: deque(maxlen=50))
    last_line_t: float | None = None  # receive time of the newest line
    pids: set[int] = field(default_factory=set)  # launcher and workers, when the feed knows them
    fingerprint: Any = None  # the fingerprint of the baseline recorded on this server, if any
    env_audit: Any = None  # what the workers' /proc/PID/environ really held after our start
    last_bench: Any = None  # the last benchmark run (end-to-end numbers)
    last_bench_run: int | None = None  # the index of the server's run it measured
    tail_status: str | None = None  # why no line arrives: "no such file: ...", silent file
    probe: dict[str, Any] | None = None  # latest host probe; a run starting takes it as its own
    # every probe as it came ((time, running, probe), the newest MAX_PROBE_EVENTS): a snapshot
    # keeps them, so a report or replay gives each run the host facts the live session gave it
    probe_events: list[tuple[float, bool, dict[str, Any]]] = field(default_factory=list)
    engine: str | None = None  # "vllm" once a vLLM line arrived (None: SGLang or not known yet)
    # vLLM: each `SpecDecoding metrics` line joins its engine's throughput line (parse/vllm.py).
    # hold_vllm None: hold an engine line for its spec line only once the run is known to be
    # speculative (live: a baseline's points are never delayed); True: always (offline reading,
    # which calls `flush()` at the end).
    hold_vllm: bool | None = None
    _joiner: SpecJoiner | None = None
    _held_received: float = 0.0
    _spec_seen_run: int | None = None  # the run in which a vLLM spec line arrived
    # the records the last `apply` made ready, with their receive times: the line's own record,
    # or (vLLM) an engine line joined with its spec line, possibly one line later
    last_released: list[tuple[Record, float]] = field(default_factory=list)
    _engine_seen: str | None = None  # the engine of the first engine-specific record
    mixed_engines: bool = False  # SGLang and vLLM stats lines in one log (said in `notices`)
    _pending_args: dict[str, Any] | None = None  # vLLM non-default args awaiting their config
    # offline clock-only stamps (SGLang 0.3.x `[HH:MM:SS TP0]`): the day of the last one, and
    # its time; the clock going back by over half a day is the next day (midnight passed)
    _clock_day: int = 0
    _clock_prev: float | None = None

    @property
    def run(self) -> Run:
        """The current (newest) run; a server seen mid-run starts with run 1 ("log")."""
        if not self.runs:
            self._new_run("log")
        return self.runs[-1]

    @property
    def args(self) -> dict[str, Any]:
        return self.run.args

    @args.setter
    def args(self, value: dict[str, Any]) -> None:
        self.run.args = value
        self.run.expect_dp_groups(value, self.engine == "vllm" or "engine_version" in value)

    @property
    def nccl_lines(self) -> list[str]:
        return self.run.nccl_lines

    @nccl_lines.setter
    def nccl_lines(self, value: list[str]) -> None:
        self.run.nccl_lines = value

    @property
    def is_speculative(self) -> bool:
        if self.role is not None:
            return self.role == "speculative"
        return self.last_decode is not None and self.last_decode.is_speculative

    @property
    def num_draft_tokens(self) -> int | None:
        v = self.args.get("speculative_num_draft_tokens")
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    def _new_run(self, reason: str, t: float | None = None, received: float | None = None) -> Run:
        if self.runs:
            prev = self.runs[-1]
            if prev.end_reason is None:
                prev.end_reason = "next_run"
                prev.end_t = prev.last_t
        self.runs_total += 1
        # the host facts carry over to the next launch, but not the environment the probe
        # read from this launch's processes: a restart's processes are other ones
        probe = {k: v for k, v in self.probe.items() if k != "env"} if self.probe else self.probe
        run = Run(self.runs_total, reason, start_t=t, start_received=received, probe=probe)
        self.runs.append(run)
        self._gap_pending = 0  # (a gap of a run that printed no decode line after it: its own)
        return run

    def _run_boundary(self, reason: str, t: float | None, received: float,
                      repeat_starts: bool = True) -> Run:
        """A start marker: a fresh run unless the current one has seen nothing yet (for a
        server_args line, nor a server_args line of its own, unless `repeat_starts` is False)."""
        cur = self.runs[-1] if self.runs else None
        if cur is not None and not cur.ended and cur.lines_total == 0 and cur.prefill_total == 0 \
                and not (reason == "server_args" and cur.has_server_args and repeat_starts):
            if t is not None and cur.start_t is None:
                cur.start_t = t
            if reason == "server_args":
                cur.start_reason = "server_args" if cur.start_reason == "log" else cur.start_reason
            return cur
        return self._new_run(reason, t, received)

    def process_started(self, t: float, pid: int | None = None) -> Run:
        """The feed saw (or made) the server's process start: a new run begins."""
        return self._run_boundary("process_start", None, t)

    def apply(self, text: str, rec: Record | None, t: float,
              skipped: int = 0) -> list[DecodePoint]:
        """One received log line (`t`: receive time) and its parsed record (None if unused).
        `skipped`: bytes of the log not read right before it (history after the start-up
        lines): the run it belongs to is then partial, said wherever its figures are.

        Returns the server-level decode points the line completed: what a drift monitor is
        fed (`DriftMonitor.observe(point.rec, point.t)`), together with the prefill and
        event records as they come; a DP group's own decode line is never fed on its own.
        """
        if skipped > 0:  # (rare: the body below stays one call a line)
            return self._apply_after_gap(text, rec, t, skipped)
        self.lines_total += 1
        self.last_line_t = t
        self.log.append(text)
        self.log_times.append(t)
        self.log_records.append(rec)
        if self.in_traceback:
            if text.strip() and not text.startswith((" ", "\t", "Traceback")) and rec is not None:
                self.in_traceback = False
            else:
                self.traceback.append(text)
                if len(self.traceback) > 200:
                    del self.traceback[:-200]
                if (text and not text.startswith((" ", "\t")) and ":" in text
                        and not text.startswith("Traceback")):
                    self.in_traceback = False  # "SomeError: message" ends it
        eng = engine_of(rec)
        if eng is not None and eng != self._engine_seen:
            if self._engine_seen is None:
                self._engine_seen = eng
            elif not self.mixed_engines:
                self.mixed_engines = True
                self.notices.append(f"this log mixes {_ENGINE_NAME[self._engine_seen]} and "
                                    f"{_ENGINE_NAME[eng]} stats lines: they are not one server; "
                                    "tail each server's own log")
        if self._joiner is not None or isinstance(rec, (VllmDecodeRecord, VllmEventRecord)):
            return self._apply_vllm(rec, t)
        self.last_released = [(rec, t)] if rec is not None else []
        return self._apply_record(rec, t)

    def _apply_vllm(self, rec: Record | None, t: float) -> list[DecodePoint]:
        """A vLLM line through the spec joiner: an engine line may wait for its spec line."""
        if self._joiner is None:
            self._joiner = SpecJoiner()
            self.engine = "vllm"
        j = self._joiner
        if isinstance(rec, VllmEventRecord):
            if rec.kind == "spec":
                self._spec_seen_run = self.run.index
            elif rec.kind == "server_args" and self._same_config(rec):
                return []  # the next DP engine's copy of the config line (<= 0.11): same run
        j.hold = self.hold_vllm if self.hold_vllm is not None else bool(
            self.run.args.get("speculative_algorithm") or self._spec_seen_run == self.run.index)
        held_t = self._held_received
        if isinstance(rec, VllmDecodeRecord):
            self._held_received = t
        if rec is None:
            out = j.flush()
            if not out:
                if self.runs:
                    self.runs[-1].last_received = t
                return []
        else:
            out = j.push(rec)
        done: list[DecodePoint] = []
        self.last_released = []
        for r in out:
            rt = held_t if isinstance(r, VllmDecodeRecord) and r is not rec else t
            self.last_released.append((r, rt))
            done.extend(self._apply_record(r, rt))
        return done

    def release_stale(self, now: float, wait_s: float = HOLD_WAIT_S) -> list[DecodePoint]:
        """A vLLM engine line held `wait_s` (receive time) without its spec line (an interval
        without drafts, then silence: an idle server prints nothing) counts now, unjoined;
        `last_released` says which records were released."""
        if self._joiner is None or not self._joiner.holding or now - self._held_received < wait_s:
            self.last_released = []
            return []
        return self.flush()

    def _same_config(self, rec: VllmEventRecord) -> bool:
        cur = self.runs[-1] if self.runs else None
        return (cur is not None and not cur.ended and cur.has_server_args and cur.lines_total == 0
                and repeats_config(cur.args, rec.data))

    def flush(self) -> list[DecodePoint]:
        """The end of the input: a vLLM engine line still waiting for its spec line counts now."""
        if self._joiner is None:
            return []
        done: list[DecodePoint] = []
        self.last_released = []
        for r in self._joiner.flush():
            self.last_released.append((r, self._held_received))
            done.extend(self._apply_record(r, self._held_received))
        return done

    def _apply_after_gap(self, text: str, rec: Record | None, t: float,
                         skipped: int) -> list[DecodePoint]:
        """`apply` of the first line after bytes not read: the run it belongs to is partial."""
        before = self.runs_total
        out = self.apply(text, rec, t)
        if self.runs and self.runs_total == before:  # (a line that starts a run: whole)
            run = self.runs[-1]
            run.skipped_bytes += skipped
            run.read_from_t = (log_time(rec, t) if rec is not None else None) or t
            self._gap_pending += skipped  # kept on the next decode line (snapshots)
        return out

    def _offline_clock(self, secs: float) -> float:
        """An offline clock-only stamp (seconds of its day) as seconds since day 0: a clock
        that goes back by more than half a day passed midnight (23:59:55 then 00:00:05)."""
        if self._clock_prev is not None and secs + self._clock_day * 86400.0 \
                < self._clock_prev - 43_200:
            self._clock_day += 1
        t = secs + self._clock_day * 86400.0
        self._clock_prev = t
        return t

    def _apply_record(self, rec: Record | None, t: float) -> list[DecodePoint]:
        if rec is None:
            if self.runs:
                self.runs[-1].last_received = t
            return []
        lt = log_time(rec, t)
        if lt is not None and t == 0.0 and not rec.timestamp and rec.time_of_day:
            lt = self._offline_clock(lt)
        if isinstance(rec, EventRecord) and rec.kind in ("server_args", "vllm_args"):
            # vLLM's launch prints `non-default args` (API server) before its config line
            # (engine core): the new run starts at the first, so the downtime before it and
            # the launch's own lines never lengthen the run before
            run = self._run_boundary("server_args", lt, t, repeat_starts=rec.kind == "server_args")
        else:
            run = self.run
        run.touch(lt, t)
        if isinstance(rec, BatchRecord):
            if self.status in ("unknown", "starting", "stopped"):
                self.status = "ready"
            if rec.kind == "decode":
                pt = DecodePoint(lt if lt is not None else t, rec, t, lt is not None,
                                 after_prefill=run.prefill_pending)
                run.prefill_pending = False
                self.decode_total += 1
                self.decode.append(pt)
                if self._gap_pending:
                    self.gap_points[self.decode_total - 1] = self._gap_pending
                    self._gap_pending = 0
                    if len(self.gap_points) > MAX_RUNS:  # (one per run read from its history)
                        del self.gap_points[min(self.gap_points)]
                if self.role is None and rec.accept_len is not None:
                    self.role = "speculative"
                done = run.add_decode(pt)
                if done:
                    self.last_decode = done[-1].rec  # server level (a DP server's groups summed)
                return done
            self.prefill_total += 1
            self.last_prefill = rec
            self.last_prefill_t = t
            run.prefill_total += 1
            run.prefill_pending = True
            run.last_prefill_t = lt if lt is not None else t
            return []
        self._apply_event(rec, run)
        return []

    def _apply_event(self, ev: EventRecord, run: Run) -> None:
        if ev.kind == "server_args":
            run.args = dict(ev.data)
            if isinstance(ev, VllmEventRecord):
                vllm_spec_args(run.args, self._pending_args)
                self._pending_args = None
            run.expect_dp_groups(run.args, isinstance(ev, VllmEventRecord))
            run.has_server_args = True
            run.nccl_lines = []
            self.startup = StartupProgress(server_args=True)
            self.status = "starting"
            self.traceback.clear()
            self.exit_code = None
            if self.role is None:
                self.role = "speculative" if ev.data.get("speculative_algorithm") else "baseline"
        elif ev.kind == "vllm_args":  # vLLM's `non-default args: {...}`, printed before the
            nd = ev.data.get("args")  # config line of the launch it belongs to
            if isinstance(nd, dict):
                self._pending_args = nd
                if not run.has_server_args:  # a log that starts here: this run's own
                    run.args["non_default_args"] = nd
        elif ev.kind == "max_total_num_tokens":
            run.args.update(ev.data)
            self.startup.kv_allocated = True
        elif ev.kind == "cuda_graph_begin":
            self.startup.graph_capture = "capturing"
            if ev.data.get("batch_sizes"):
                self.startup.graph_batch_sizes = ev.data["batch_sizes"]
        elif ev.kind == "cuda_graph_end":
            self.startup.graph_capture = "done"
        elif ev.kind == "ready":
            self.startup.ready = True
            self.status = "ready"
            port = ev.data.get("port")
            if isinstance(ev, VllmEventRecord) and isinstance(port, int):
                run.args.setdefault("port", port)  # vLLM says it only here (SGLang: server_args)
        elif ev.kind == "nccl_env":
            if self.log:
                run.nccl_lines.append(self.log[-1])
        elif ev.kind == "spec_params":
            new = ev.data.get("new_steps")
            run.spec_changes.append(SpecChange(  # t: the run's newest log time (this line's)
                run.decode_total, run.last_t,
                new if isinstance(new, int) and not isinstance(new, bool) else None))
        elif ev.kind == "exit":  # uvicorn's last line at a graceful stop: the run ends here
            self.process_exited(None)
        elif ev.kind == "traceback":
            self.in_traceback = True
            self.traceback = [self.log[-1]] if self.log else []

    def set_probe(self, probe: dict[str, Any], running: bool = False,
                  t: float | None = None) -> None:
        """Host facts for the launch about to start (or just started, before its first line);
        `running`: read from the server process running now, so they are its current run's.
        `t`: when it came (kept for snapshots)."""
        self.probe = dict(probe)
        if t is not None:
            self.probe_events.append((t, running, self.probe))
            del self.probe_events[:-MAX_PROBE_EVENTS]
        cur = self.runs[-1] if self.runs else None
        if cur is not None and not cur.ended and (running or cur.lines_total == 0):
            cur.probe = self.probe

    def add_gpu_samples(self, samples: list[Any]) -> None:
        """GPU samples of this server's own GPUs while this run is current
        (specmon.session.ownership; none while its GPUs are unknown)."""
        if not self.runs or self.runs[-1].ended:
            return
        own = set(owned_gpus(samples, self.pids, self.runs[-1].args).indices)
        self.runs[-1].gpu_samples.extend(g for g in samples if getattr(g, "index", None) in own)

    def process_exited(self, code: int | None) -> None:
        """The server process has exited (signal or crash): its run ends. `code` None: seen
        gone, code unknown (a server started by hand); for a run that ended already (its exit
        code known to whoever started it) that says nothing new."""
        if self.runs and self.runs[-1].ended:
            r = self.runs[-1]
            if code is None:
                return
            if r.end_reason == "exit" and r.exit_code is None:  # its log said it stopped first
                r.exit_code = code
        self.exit_code = code
        self.status = "stopped" if code in (0, -15, 143, None) and not self.traceback else "crashed"
        if self.runs and not self.runs[-1].ended:
            r = self.runs[-1]
            r.end_reason, r.end_t, r.exit_code = "exit", r.last_t, code


@dataclass
class HostState:
    """One host's part of the session model: its servers (by local name), GPUs, alerts. The
    whole model, every host, is `specmon.session.fleet.FleetSession`."""

    host: str = "local"
    servers: dict[str, ServerState] = field(default_factory=dict)
    gpus: list[Any] = field(default_factory=list)  # latest GpuSample per GPU
    gpu_history: dict[int, deque[Any]] = field(default_factory=dict)
    gpu_error: str | None = None
    started_at: float = field(default_factory=time.time)
    alerts: list[dict[str, Any]] = field(default_factory=list)  # every alert raised or cleared
    baselines: list[dict[str, Any]] = field(default_factory=list)  # baselines used, summarised
    benchmarks: list[dict[str, Any]] = field(default_factory=list)

    def server(self, name: str) -> ServerState:
        s = self.servers.get(name)
        if s is None:
            s = self.servers[name] = ServerState(name)
        return s

    def by_role(self, role: str) -> ServerState | None:
        for s in self.servers.values():
            if s.role == role:
                return s
        return None

    def set_gpus(self, samples: list[Any], keep: int = 120) -> None:
        self.gpus = list(samples)
        for g in samples:
            idx = getattr(g, "index", None)
            if idx is None:
                continue
            self.gpu_history.setdefault(idx, deque(maxlen=keep)).append(g)
        for s in self.servers.values():
            s.add_gpu_samples(list(samples))
