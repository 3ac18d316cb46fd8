"""Performance model of the simulated server (a TP-8 H200 box serving a ~70B model).

Calibrated on the seed incidents: at batch size 1 a decode step takes ~11.3 ms (88.8 tok/s) when
the workers see NCCL_PROTO, NCCL_ALGO and NCCL_P2P_LEVEL, and ~15.9 ms (62.9 tok/s) without them;
an EAGLE-3 round with 2 steps / topk 1 / 3 draft tokens costs ~25.5 ms and emits ~2.4 tokens
(~94 tok/s). A step is

    t = W*(1-c + c*r) + per_req*bs*r + kv*tokens + comm(env)         (r = fmax / f_sm)

multiplied by (1 + patch overhead) and by slowly varying log-normal noise. Pure functions; the
NCCL part is evaluated inside each worker from its own os.environ.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# NCCL variables whose presence in a worker's environment takes the tuned communication path,
# with their share of the untuned penalty (P2P level matters most on this box).
NCCL_TUNING_VARS: dict[str, float] = {
    "NCCL_P2P_LEVEL": 0.40,
    "NCCL_PROTO": 0.35,
    "NCCL_ALGO": 0.25,
}

WEIGHTS_MS_TP8 = 8.97  # weight streaming + kernels of one bs-1 step, per GPU at TP 8
COMPUTE_FRAC = 0.15  # share of the bs-1 step that scales with the SM clock
PER_REQ_MS_TP8 = 0.055  # extra per running request (compute, clock-bound)
KV_MS_PER_KTOK_TP8 = 0.02  # attention reads per 1000 KV tokens in the batch
COMM_TUNED_MS_TP7 = 2.25  # all-reduces per step with the tuned env, scaled by (tp-1)/7
COMM_PENALTY_MS_TP7 = 4.628  # what losing all three variables adds
PREFILL_MS_PER_TOK_TP8 = 0.028
PREFILL_FIXED_MS = 4.0
VERIFY_TOKEN_COST = 0.04  # verify pass: +4 % per extra draft token over a plain step
VERIFY_FIXED_MS = 0.6
DRAFT_WEIGHT_FRAC = 0.20  # one draft forward, as a share of the target's weight time
DRAFT_COMM_FRAC = 0.75
DRAFT_FIXED_MS = 0.75


def nccl_comm_ms(tp_size: int, env: Mapping[str, str]) -> float:
    """Per-step communication time a rank with environment `env` pays (0 at TP 1)."""
    if tp_size <= 1:
        return 0.0
    scale = (tp_size - 1) / 7.0
    missing = sum(w for var, w in NCCL_TUNING_VARS.items() if not env.get(var))
    return scale * (COMM_TUNED_MS_TP7 + COMM_PENALTY_MS_TP7 * missing)


def nccl_vars(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in sorted(env.items()) if k.startswith("NCCL_")}


@dataclass(frozen=True)
class RankSpeed:
    """What one TP rank reports: its env-derived comm time and its GPU's clock ratio f/fmax."""

    comm_ms: float
    clock_ratio: float = 1.0


@dataclass(frozen=True)
class SpecConfig:
    algorithm: str = "EAGLE3"
    num_steps: int = 2
    eagle_topk: int = 1
    num_draft_tokens: int = 3
    accept_prob: float = 0.785  # per-draft-token acceptance; 2 steps -> accept len ~2.4
    # draft position k (1-based) is accepted, given k-1 were, with accept_prob * decay^(k-1):
    # 1.0 keeps the rate constant; real drafters lose accuracy with depth (< 1)
    accept_decay: float = 1.0

    @property
    def max_accept_drafts(self) -> int:
        return max(0, min(self.num_steps, self.num_draft_tokens - 1))

    def mean_accept_len(self, alpha: float | None = None) -> float:
        a = self.accept_prob if alpha is None else alpha
        total, surv = 1.0, 1.0
        for k in range(self.max_accept_drafts):
            surv *= a * self.accept_decay**k
            total += surv
        return total


@dataclass(frozen=True)
class PerfModel:
    """Step costs; the speculative ones are parameters so tests can place the true optimum."""

    tp_size: int = 8
    patch_overhead: float = 0.0
    draft_weight_frac: float = DRAFT_WEIGHT_FRAC
    verify_token_cost: float = VERIFY_TOKEN_COST

    @property
    def _shard(self) -> float:
        return 8.0 / max(1, self.tp_size)

    def _gpu_ms(self, bs: int, kv_tokens: int, rank: RankSpeed, tokens_per_req: int = 1) -> float:
        r = 1.0 / max(0.05, rank.clock_ratio)
        w = WEIGHTS_MS_TP8 * self._shard
        return (
            w * (1.0 - COMPUTE_FRAC + COMPUTE_FRAC * r)
            + PER_REQ_MS_TP8 * self._shard * max(0, bs * tokens_per_req - 1) * r
            + KV_MS_PER_KTOK_TP8 * self._shard * kv_tokens / 1000.0
        )

    def step_ms(self, bs: int, kv_tokens: int, ranks: Iterable[RankSpeed]) -> float:
        """One plain decode step: the slowest rank sets the pace (all-reduce synchronises)."""
        t = max(self._gpu_ms(bs, kv_tokens, r) + r.comm_ms for r in ranks)
        return t * (1.0 + self.patch_overhead)

    def spec_cycle_ms(
        self, bs: int, kv_tokens: int, ranks: Iterable[RankSpeed], spec: SpecConfig
    ) -> float:
        """One draft+verify round: a verify pass over the draft tokens plus the draft forwards."""
        ranks = list(ranks)
        ndt = spec.num_draft_tokens
        worst = 0.0
        for r in ranks:
            verify = (self._gpu_ms(bs, kv_tokens, r) + r.comm_ms) * (
                1.0 + self.verify_token_cost * (ndt - 1)
            ) + PER_REQ_MS_TP8 * self._shard * bs * (ndt - 1) / max(0.05, r.clock_ratio)
            draft = (
                self.draft_weight_frac * WEIGHTS_MS_TP8 * self._shard
                + DRAFT_COMM_FRAC * r.comm_ms
                + DRAFT_FIXED_MS
            )
            worst = max(worst, verify + VERIFY_FIXED_MS + (spec.num_steps + 1) * draft)
        return worst * (1.0 + self.patch_overhead)

    def prefill_ms(self, new_tokens: int, ranks: Iterable[RankSpeed]) -> float:
        ranks = list(ranks)
        slow = min(r.clock_ratio for r in ranks)
        comm = max(r.comm_ms for r in ranks)
        t = PREFILL_FIXED_MS + PREFILL_MS_PER_TOK_TP8 * self._shard * new_tokens / max(0.05, slow)
        return (t + 2.0 * comm) * (1.0 + self.patch_overhead)


def uniform_ranks(
    tp_size: int, env: Mapping[str, str], clock_ratio: float = 1.0
) -> list[RankSpeed]:
    """All ranks with the same environment and clock (the fast, time-compressed mode)."""
    comm = nccl_comm_ms(tp_size, env)
    return [RankSpeed(comm, clock_ratio) for _ in range(max(1, tp_size))]


def expected_bs1_tok_s(
    tp_size: int, env: Mapping[str, str], spec: SpecConfig | None = None, **kw: float
) -> float:
    """Noise-free bs-1 throughput (for documentation and sanity checks)."""
    model = PerfModel(tp_size=tp_size, patch_overhead=kw.get("patch_overhead", 0.0))
    ranks = uniform_ranks(tp_size, env, kw.get("clock_ratio", 1.0))
    kv = int(kw.get("kv_tokens", 1150))
    if spec is None:
        return 1000.0 / model.step_ms(1, kv, ranks)
    return 1000.0 * spec.mean_accept_len() / model.spec_cycle_ms(1, kv, ranks, spec)


def _check() -> None:  # pragma: no cover - calibration aid: python -m specmon.sim.perf
    tuned = dict.fromkeys(NCCL_TUNING_VARS, "x")
    print("tuned", expected_bs1_tok_s(8, tuned))
    print("untuned", expected_bs1_tok_s(8, {}))
    print("eagle3", expected_bs1_tok_s(8, tuned, SpecConfig()), SpecConfig().mean_accept_len())
    print("patched", expected_bs1_tok_s(8, tuned, patch_overhead=0.07))


if __name__ == "__main__":  # pragma: no cover
    _check()
