"""The simulated scheduler: requests, prefill and decode batches, SGLang's stats counters.

It never sleeps and never reads the clock: `step(now)` runs one forward pass starting at `now`
and returns how long it took plus what it produced (tokens, log records). The live server sleeps
that long before publishing the result; `simulate()` just advances a virtual clock, which gives a
time-compressed run of any length with a fixed seed.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from specmon.sim import formats
from specmon.sim.gpu_model import decode_intensity
from specmon.sim.perf import (
    DRAFT_WEIGHT_FRAC,
    VERIFY_TOKEN_COST,
    PerfModel,
    RankSpeed,
    SpecConfig,
    uniform_ranks,
)

IDLE_AFTER_S = 1.0  # a pause longer than this lets the GPUs go idle
TokenSink = Callable[[int, bool], None]  # (new tokens, finished)


@dataclass
class EngineConfig:
    tp_size: int = 1
    decode_log_interval: int = 40
    max_running_requests: int = 512
    max_total_num_tokens: int = 1_200_000
    max_prefill_tokens: int = 16384
    cuda_graph_max_bs: int = 256
    disable_cuda_graph: bool = False
    context_len: int = 131072
    spec: SpecConfig | None = None
    patch_overhead: float = 0.0
    draft_weight_frac: float = DRAFT_WEIGHT_FRAC  # one draft forward vs the target's weights
    verify_token_cost: float = VERIFY_TOKEN_COST  # verify pass: extra cost per draft token
    # --speculative-adaptive (topk 1): candidate step counts; None = fixed steps
    adaptive_steps: tuple[int, ...] | None = None
    load_concurrency: int = 0
    load_input_len: int = 1024
    load_output_len: int = 1024
    load_pause_prob: float = 0.1  # a synthetic client sometimes goes quiet for a few seconds
    noise_sigma: float = 0.016
    noise_phi: float = 0.7
    seed: int | None = None


@dataclass
class Request:
    rid: str
    input_len: int
    max_new_tokens: int
    arrival: float
    synthetic: bool = False
    sink: TokenSink | None = None
    alpha: float = 0.0
    generated: int = 0
    verify_ct: int = 0
    correct_drafts: int = 0
    spec_hist: list[int] = field(default_factory=list)  # rounds by number of correct drafts
    first_token_time: float | None = None
    finish_time: float | None = None

    @property
    def kv_tokens(self) -> int:
        return self.input_len + self.generated


@dataclass
class DecodeRecord:
    t: float
    running_req: int
    num_tokens: int
    token_usage: float
    gen_throughput: float
    queue_req: int
    cuda_graph: bool
    forward_ct: int
    accept_len: float | None = None
    fwd_busy_s: float = 0.0  # decode forward time in this interval (device timer)
    all_busy_s: float = 0.0  # any forward (prefill too)
    interval_s: float = 0.0
    decode_tokens: int = 0  # tokens the interval's decode passes produced (MFU estimate)
    decode_passes: int = 0
    spec: SpecConfig | None = None  # the settings active at this line (adaptive changes them)


@dataclass
class AdaptiveRecord:
    """`Adaptive spec params updated: steps A -> B (ema_accept_len=X)`."""

    t: float
    old_steps: int
    new_steps: int
    ema_accept_len: float


@dataclass
class PrefillRecord:
    t: float
    new_seq: int
    new_token: int
    cached_token: int
    num_tokens: int
    token_usage: float
    running_req: int
    queue_req: int
    pending_token: int
    input_throughput: float
    cache_hit_rate: float
    forward_ct: int


Record = DecodeRecord | PrefillRecord | AdaptiveRecord


class AdaptiveSteps:
    """SGLang's AdaptiveSpeculativeParams (speculative/adaptive_spec_params.py, defaults):
    EMA (alpha 0.2) of the batch's mean correct drafts, 10 warm-up batches, a decision every 5,
    step down when ema <= lower - 0.5 - 0.25, up when ema > current - 0.5."""

    def __init__(self, candidates: tuple[int, ...], initial: int) -> None:
        self.candidates = sorted(set(candidates))
        self.current = initial if initial in self.candidates else self.candidates[
            len(self.candidates) // 2]
        self.ema = float(self.current - 1)
        self.count = 0

    def update(self, correct: list[int]) -> tuple[int, int, float] | None:
        if not correct:
            return None
        self.ema = 0.8 * self.ema + 0.2 * (sum(correct) / len(correct))
        self.count += 1
        if self.count <= 10 or (self.count - 10) % 5:
            return None
        old = self.current
        i = self.candidates.index(old)
        while i > 0 and self.ema <= self.candidates[i - 1] - 0.5 - 0.25:
            i -= 1
        while i < len(self.candidates) - 1 and self.ema > self.candidates[i] - 0.5:
            i += 1
        self.current = self.candidates[i]
        return (old, self.current, self.ema) if self.current != old else None


@dataclass
class StepResult:
    start: float
    duration: float
    kind: str  # "prefill" | "decode"
    records: list[Record] = field(default_factory=list)
    tokens: list[tuple[Request, int, bool]] = field(default_factory=list)

    @property
    def end(self) -> float:
        return self.start + self.duration


class Engine:
    """One server's scheduler state. Not thread-safe: the caller serialises access."""

    def __init__(self, cfg: EngineConfig, ranks: Sequence[RankSpeed] | None = None) -> None:
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.perf = PerfModel(tp_size=cfg.tp_size, patch_overhead=cfg.patch_overhead,
                              draft_weight_frac=cfg.draft_weight_frac,
                              verify_token_cost=cfg.verify_token_cost)
        self.ranks = ranks or uniform_ranks(cfg.tp_size, {})
        self.spec_now = cfg.spec  # the active settings (adaptive steps change them mid-run)
        self.adaptive = (AdaptiveSteps(cfg.adaptive_steps, cfg.spec.num_steps)
                         if cfg.adaptive_steps and cfg.spec is not None else None)
        if self.adaptive is not None and cfg.spec is not None:
            self.spec_now = replace(cfg.spec, num_steps=self.adaptive.current,
                                    num_draft_tokens=self.adaptive.current + 1)
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self._arrivals: list[tuple[float, int, Request]] = []
        self._ids = itertools.count()
        self._noise = 0.0
        # SGLang's counters
        self.forward_ct = 0
        self.forward_ct_decode = 0
        self.num_generated_tokens = 0
        self.last_decode_stats_tic: float | None = None
        self.last_prefill_stats_tic: float | None = None
        self.last_prefill_tokens = 0
        self.spec_accepted = 0
        self.spec_verify = 0
        self.cum_spec_accepted = 0
        self.cum_spec_verify = 0
        self.last_gen_throughput = 0.0
        self._fwd_busy = 0.0
        self._all_busy = 0.0
        self._decode_passes = 0
        self.last_decode_time: float | None = None
        self.last_accept_len: float | None = None
        self.total_cached = 0
        self.total_prefilled = 0
        # lifetime counters for /metrics
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.num_requests_total = 0
        self.spec_verify_calls_total = 0
        # vLLM's spec-decode counters (a draft = one request's verify round of num_steps tokens)
        self.spec_drafts_total = 0
        self.spec_draft_tokens_total = 0
        self.spec_accepted_total = 0
        self.spec_accepted_per_pos: list[int] = [0] * (cfg.spec.num_steps if cfg.spec else 0)
        self.finished: deque[Request] = deque(maxlen=4096)
        self.on_finish: Callable[[Request], None] | None = None
        self._busy_since: float | None = None
        self._idle_since: float | None = None
        self._recent_bs = 0.0

    @property
    def ranks(self) -> list[RankSpeed]:
        return self._ranks

    @ranks.setter
    def ranks(self, value: Sequence[RankSpeed]) -> None:
        # a step's cost is a max (or min) over the ranks, so equal ranks are costed once: the
        # uniform mode's eight alike ranks cost one (the same result, ~4x fewer model calls)
        self._ranks = list(value)
        self._distinct_ranks = list(dict.fromkeys(self._ranks))

    # ------------------------------------------------------------------ requests

    def submit(
        self,
        now: float,
        input_len: int,
        max_new_tokens: int,
        sink: TokenSink | None = None,
        synthetic: bool = False,
    ) -> Request:
        req = Request(
            rid=f"{next(self._ids):032x}",
            input_len=max(1, min(input_len, self.cfg.context_len - 1)),
            max_new_tokens=max(1, max_new_tokens),
            arrival=now,
            synthetic=synthetic,
            sink=sink,
            alpha=self._draw_alpha(),
        )
        self.waiting.append(req)
        self.num_requests_total += 1
        return req

    def _draw_alpha(self) -> float:
        spec = self.cfg.spec
        if spec is None:
            return 0.0
        # prompts differ in how predictable they are: Beta around the configured mean
        k = 60.0
        a = spec.accept_prob
        return min(0.995, max(0.0, self.rng.betavariate(a * k, (1 - a) * k)))

    def start_load(self, now: float) -> None:
        """Arm the built-in workload: `load_concurrency` clients, each one request at a time."""
        for i in range(self.cfg.load_concurrency):
            self._schedule_arrival(now + 0.002 * i)

    def _schedule_arrival(self, t: float) -> None:
        cfg = self.cfg
        il = max(1, int(cfg.load_input_len * self.rng.uniform(0.9, 1.1)))
        ol = max(1, int(cfg.load_output_len * self.rng.uniform(0.9, 1.1)))
        req = Request(rid="", input_len=il, max_new_tokens=ol, arrival=t, synthetic=True)
        heapq.heappush(self._arrivals, (t, next(self._ids), req))

    def next_arrival(self) -> float | None:
        return self._arrivals[0][0] if self._arrivals else None

    def _admit_arrivals(self, now: float) -> None:
        while self._arrivals and self._arrivals[0][0] <= now:
            t, _, proto = heapq.heappop(self._arrivals)
            req = self.submit(t, proto.input_len, proto.max_new_tokens, synthetic=True)
            req.arrival = t

    # ------------------------------------------------------------------ stepping
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def step(self, now: float) -> StepResult | None:
        """Run one forward pass starting at `now`; None when there is nothing to do."""
        self._admit_arrivals(now)
        if self.last_decode_stats_tic is None:  # SGLang starts its tics at scheduler init
            self.last_decode_stats_tic = now
        if self.last_prefill_stats_tic is None:
            self.last_prefill_stats_tic = now
        if self.waiting and len(self.running) < self.cfg.max_running_requests:
            res = self._prefill(now)
        elif self.running:
            res = self._decode(now)
        else:
            if self._idle_since is None:
                self._idle_since = now
            return None
        # short pauses between requests do not count as idle for the GPU model
        if self._busy_since is None or (
            self._idle_since is not None and now - self._idle_since > IDLE_AFTER_S
        ):
            self._busy_since = now
        self._idle_since = None
        return res

    def _kv_in_use(self) -> int:
        return sum(r.kv_tokens for r in self.running)

    def _prefill(self, now: float) -> StepResult:
        cfg = self.cfg
        batch: list[Request] = []
        budget = cfg.max_prefill_tokens
        while self.waiting and len(self.running) + len(batch) < cfg.max_running_requests:
            nxt = self.waiting[0]
            if batch and nxt.input_len > budget:
                break
            batch.append(self.waiting.popleft())
            budget -= nxt.input_len
        new_tokens = sum(r.input_len for r in batch)
        gap = now - self.last_prefill_stats_tic if self.last_prefill_stats_tic else 0.0
        in_tp = self.last_prefill_tokens / gap if gap > 0 else 0.0
        self.last_prefill_stats_tic = now
        self.last_prefill_tokens = new_tokens
        self.total_prefilled += new_tokens
        kv = self._kv_in_use() + new_tokens
        rec = PrefillRecord(
            t=now,
            new_seq=len(batch),
            new_token=new_tokens,
            cached_token=0,
            num_tokens=kv,
            token_usage=kv / cfg.max_total_num_tokens,
            running_req=len(self.running),
            queue_req=len(self.waiting),
            pending_token=sum(r.input_len for r in self.waiting),
            input_throughput=in_tp,
            cache_hit_rate=100.0 * self.total_cached / max(1, self.total_cached + new_tokens),
            forward_ct=self.forward_ct,
        )
        self.forward_ct += 1
        dur = self.perf.prefill_ms(new_tokens, self._distinct_ranks) / 1000.0
        dur *= math.exp(self._noise)
        self._all_busy += dur
        res = StepResult(now, dur, "prefill", records=[rec])
        end = now + dur
        self.prompt_tokens_total += new_tokens
        for r in batch:
            r.generated = 1  # the prefill pass samples the first token
            r.first_token_time = end
            self.num_generated_tokens += 1
            self.generation_tokens_total += 1
            self.running.append(r)
            res.tokens.append((r, 1, False))
        self._finish_done(res, [r for r in batch if r.generated >= r.max_new_tokens], end)
        return res

    def _decode(self, now: float) -> StepResult:
        cfg = self.cfg
        bs = len(self.running)
        kv = self._kv_in_use()
        spec = self.spec_now
        noise = math.exp(self._noise)
        produced: list[tuple[Request, int]] = []
        round_correct: list[int] = []
        if spec is None:
            dur = self.perf.step_ms(bs, kv, self._distinct_ranks) / 1000.0 * noise
            for r in self.running:
                produced.append((r, 1))
        else:
            dur = self.perf.spec_cycle_ms(bs, kv, self._distinct_ranks, spec) / 1000.0 * noise
            for r in self.running:
                k = 0
                while k < spec.max_accept_drafts and self.rng.random() < (
                        r.alpha * spec.accept_decay**k):  # position k+1's conditional rate
                    k += 1
                produced.append((r, k + 1))
                round_correct.append(k)
                self.spec_accepted += k
                self.spec_verify += 1
                r.verify_ct += 1
                r.correct_drafts += k
                if len(r.spec_hist) <= spec.max_accept_drafts:
                    r.spec_hist.extend([0] * (spec.max_accept_drafts + 1 - len(r.spec_hist)))
                r.spec_hist[k] += 1
                self.spec_verify_calls_total += 1
                self.spec_drafts_total += 1
                self.spec_draft_tokens_total += spec.num_steps
                self.spec_accepted_total += k
                for i in range(min(k, len(self.spec_accepted_per_pos))):
                    self.spec_accepted_per_pos[i] += 1
        end = now + dur
        self._fwd_busy += dur
        self._all_busy += dur
        self._decode_passes += 1
        self._recent_bs = bs
        res = StepResult(now, dur, "decode")
        done: list[Request] = []
        for r, n in produced:
            n = min(n, r.max_new_tokens - r.generated)
            r.generated += n
            self.num_generated_tokens += n
            self.generation_tokens_total += n
            res.tokens.append((r, n, False))
            if r.generated >= r.max_new_tokens:
                done.append(r)
        self.forward_ct += 1
        self.forward_ct_decode += 1
        if self.forward_ct_decode % cfg.decode_log_interval == 0:
            res.records.append(self._decode_record(end, bs, kv))
        if self.adaptive is not None and spec is not None:
            change = self.adaptive.update(round_correct)
            if change is not None:
                old, new, ema = change
                self.spec_now = replace(spec, num_steps=new, num_draft_tokens=new + 1)
                res.records.append(AdaptiveRecord(end, old, new, ema))
        self._finish_done(res, done, end)
        return res

    def _decode_record(self, t: float, bs: int, kv: int) -> DecodeRecord:
        cfg = self.cfg
        tic = self.last_decode_stats_tic
        gap = t - tic if tic is not None else 0.0
        gen = self.num_generated_tokens / gap if gap > 0 else 0.0
        tokens = self.num_generated_tokens
        fwd, allb, passes = self._fwd_busy, self._all_busy, self._decode_passes
        self._fwd_busy = self._all_busy = 0.0
        self._decode_passes = 0
        self.last_decode_stats_tic = t
        self.num_generated_tokens = 0
        accept_len = None
        if cfg.spec is not None and self.spec_verify:
            accept_len = (self.spec_accepted + self.spec_verify) / self.spec_verify
            self.cum_spec_accepted += self.spec_accepted
            self.cum_spec_verify += self.spec_verify
            self.spec_accepted = 0
            self.spec_verify = 0
            self.last_accept_len = accept_len
        self.last_gen_throughput = gen
        self.last_decode_time = t
        self.step_noise()
        return DecodeRecord(
            t=t,
            running_req=bs,
            num_tokens=kv,
            token_usage=kv / cfg.max_total_num_tokens,
            gen_throughput=gen,
            queue_req=len(self.waiting),
            cuda_graph=(not cfg.disable_cuda_graph) and bs <= cfg.cuda_graph_max_bs,
            forward_ct=self.forward_ct,
            accept_len=accept_len,
            fwd_busy_s=fwd,
            all_busy_s=allb,
            interval_s=gap,
            decode_tokens=tokens,
            decode_passes=passes,
            spec=self.spec_now,
        )

    def step_noise(self) -> None:
        """The noise process moves once per log interval (lag-1 autocorrelation across lines);
        a server that logs by time (vLLM) calls this once per stats interval."""
        phi = self.cfg.noise_phi
        self._noise = phi * self._noise + math.sqrt(1 - phi * phi) * self.rng.gauss(
            0.0, self.cfg.noise_sigma
        )

    def _finish_done(self, res: StepResult, done: list[Request], end: float) -> None:
        if not done:
            return
        for r in done:
            if r in self.running:
                self.running.remove(r)
            r.finish_time = end
            self.finished.append(r)
            for i, (req, n, _) in enumerate(res.tokens):
                if req is r:
                    res.tokens[i] = (req, n, True)
                    break
            else:
                res.tokens.append((r, 0, True))
            if r.synthetic:
                if self.rng.random() < self.cfg.load_pause_prob:
                    gap = self.rng.uniform(1.5, 6.0)
                else:
                    gap = self.rng.expovariate(1 / 0.004)
                self._schedule_arrival(end + gap)
            if self.on_finish is not None:
                self.on_finish(r)

    # ------------------------------------------------------------------ views
    @property
    def avg_spec_accept_length(self) -> float | None:
        if self.cfg.spec is None or not self.cum_spec_verify:
            return None
        return (self.cum_spec_accepted + self.cum_spec_verify) / self.cum_spec_verify

    def flush_cache(self) -> bool:
        if self.has_work():
            return False
        self.cum_spec_accepted = self.cum_spec_verify = 0
        return True

    def load_state(self, now: float) -> dict[str, Any]:
        """What the GPU model needs: busy or idle since when, and how hard the GPUs work."""
        idle_for = now - self._idle_since if self._idle_since is not None else 0.0
        busy = self._busy_since is not None and (self.has_work() or idle_for <= IDLE_AFTER_S)
        bs = len(self.running) or self._recent_bs
        intensity = decode_intensity(bs) if busy else 0.0
        if self.cfg.spec is not None and busy:
            intensity = min(1.0, intensity * 1.25)
        if busy:
            since = self._busy_since
        else:
            since = (self._idle_since + IDLE_AFTER_S) if self._idle_since is not None else now
        return {
            "busy": busy,
            "since": since,
            "intensity": round(intensity, 4),
            "running_req": len(self.running),
            "queue_req": len(self.waiting),
        }


# ---------------------------------------------------------------------- rendering / fast mode


def render(
    record: Record,
    version: str,
    tag: str,
    *,
    spec: SpecConfig | None = None,
    log_ms: bool = False,
    log_forward_iters: bool = False,
    device_timer: bool = False,
    mfu: bool = False,
    tp_size: int = 8,
) -> str:
    """A record as the log line SGLang `version` prints (without newline).

    `device_timer` stands for SGLANG_ENABLE_METRICS_DEVICE_TIMER=1 (`fwd occupancy`), `mfu` for
    --enable-mfu-metrics; a DSPARK spec prints `cap len`/`block accept len` and its estimate.
    The simulator's values: occupancy = decode forward time / interval (fwd+idle: any forward),
    cap len = the static verify window, the uncapped estimate = accept len with a +-5 % bracket,
    MFU from a 70B bf16 model's FLOPs and weight bytes per pass.
    """
    if isinstance(record, AdaptiveRecord):
        return formats.line(version, record.t, formats.adaptive_message(
            record.old_steps, record.new_steps, record.ema_accept_len), tag, log_ms=log_ms)
    if isinstance(record, DecodeRecord):
        spec = record.spec or spec
        tele = _telemetry(record, version, spec, device_timer, mfu, tp_size)
        rate = None
        if record.accept_len is not None and spec is not None:
            rate = formats.accept_rate(
                version, record.accept_len, spec.num_steps, spec.num_draft_tokens
            )
        msg = formats.decode_message(
            version,
            running_req=record.running_req,
            num_tokens=record.num_tokens,
            token_usage=record.token_usage,
            gen_throughput=record.gen_throughput,
            queue_req=record.queue_req,
            accept_len=record.accept_len,
            accept_rate=rate,
            cuda_graph=record.cuda_graph,
            forward_ct=record.forward_ct,
            log_forward_iters=log_forward_iters,
            **tele,
        )
    else:
        msg = formats.prefill_message(
            version,
            new_seq=record.new_seq,
            new_token=record.new_token,
            cached_token=record.cached_token,
            token_usage=record.token_usage,
            running_req=record.running_req,
            queue_req=record.queue_req,
            num_tokens=record.num_tokens,
            cache_hit_rate=record.cache_hit_rate,
            input_throughput=record.input_throughput,
            pending_token=record.pending_token,
            forward_ct=record.forward_ct,
            log_forward_iters=log_forward_iters,
        )
    return formats.line(version, record.t, msg, tag, log_ms=log_ms)


MODEL_PARAMS = 70e9  # the simulated ~70B model


def _telemetry(rec: DecodeRecord, version: str, spec: SpecConfig | None, device_timer: bool,
               mfu: bool, tp_size: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if spec is not None and spec.algorithm.upper() == "DSPARK" and rec.accept_len is not None:
        out["cap_len"] = float(spec.num_draft_tokens)
        out["block_accept_len"] = rec.accept_len
        out["uncap"] = (rec.accept_len, rec.accept_len * 0.95, rec.accept_len * 1.05)
    if device_timer:
        gap = rec.interval_s
        out["fwd_occupancy"] = 100.0 * rec.fwd_busy_s / gap if gap > 0 else float("nan")
        out["fwd_idle_occupancy"] = (min(100.0, 100.0 * rec.all_busy_s / gap) if gap > 0
                                     else float("nan"))
    if mfu and rec.interval_s > 0:
        per_gpu = 1.0 / max(1, tp_size)
        flops = 2.0 * MODEL_PARAMS * rec.decode_tokens * per_gpu
        read = 2.0 * MODEL_PARAMS * rec.decode_passes * per_gpu + 327_680 * rec.num_tokens * (
            rec.decode_passes) * per_gpu
        write = 327_680 * rec.decode_tokens * per_gpu
        g = rec.interval_s
        out["mfu"] = (flops / g / 1e12, read / g / 1e9, write / g / 1e9)
    return out


@dataclass
class SimLine:
    t: float
    text: str
    record: Record


def simulate(
    cfg: EngineConfig,
    *,
    duration_s: float,
    start: float = 1_780_000_000.0,
    version: str = formats.NEWEST,
    ranks: Sequence[RankSpeed] | None = None,
    env: dict[str, str] | None = None,
    device_timer: bool = False,
    mfu: bool = False,
) -> Iterator[SimLine]:
    """Time-compressed run: the decode/prefill lines of `duration_s` simulated seconds.

    `env` stands for the workers' environment (NCCL variables) when `ranks` is not given.
    """
    if ranks is None:
        ranks = uniform_ranks(cfg.tp_size, env or {})
    eng = Engine(cfg, ranks)
    tag = formats.rank_tag(version, tp_size=cfg.tp_size)
    now = start
    eng.start_load(now)
    end = start + duration_s
    while now < end:
        res = eng.step(now)
        if res is None:
            nxt = eng.next_arrival()
            if nxt is None:
                break
            now = max(now, nxt)
            continue
        now = res.end
        for rec in res.records:
            yield SimLine(rec.t, render(rec, version, tag, spec=cfg.spec,
                                        device_timer=device_timer, mfu=mfu,
                                        tp_size=cfg.tp_size), rec)
