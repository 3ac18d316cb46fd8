"""Does the advisor pick the best speculative settings? Simulated runs whose optimum is known.

Each case draws the simulator's acceptance (per-token probability, per-request Beta spread) and
step costs (draft forward share of the target, verify cost per draft token), runs a baseline and
two speculative servers (steps 2 and 4, chain) through the time-compressed engine, and asks the
advisor. The true tok/s of every candidate comes from the same model with no noise: expected
tokens per round under the acceptance process (Monte Carlo over requests' alphas, fixed seed)
divided by the perf model's cycle time. A case passes when the advisor's pick is truly at least
as good as the best measured setting (the advisor only recommends what its evidence shows to be
no worse), and the true optimum's tok/s lies inside the optimum's own band (the band carries
what was not measured). The regret against the true optimum is printed.

    python bench/advisor_eval.py [--cases 10] [--seconds 300]
"""

from __future__ import annotations

import argparse
import random
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specmon.analysis.advisor import Advice, Segment, advise, measure  # noqa: E402
from specmon.session.advice import segments  # noqa: E402
from specmon.session.runs import read_runs  # noqa: E402
from specmon.sim import formats  # noqa: E402
from specmon.sim.engine import EngineConfig, simulate  # noqa: E402
from specmon.sim.perf import NCCL_TUNING_VARS, PerfModel, SpecConfig, uniform_ranks  # noqa: E402

TUNED = dict.fromkeys(NCCL_TUNING_VARS, "x")
VERSION = "0.5.23"
TP = 8
KV_MEAN = 1536  # bs 1, ~1024-token prompts and outputs: the mean KV size over a request


@dataclass(frozen=True)
class Case:
    seed: int
    accept_prob: float
    draft_weight_frac: float
    verify_token_cost: float
    accept_decay: float = 1.0

    def engine(self, spec: SpecConfig | None, seed: int) -> EngineConfig:
        return EngineConfig(tp_size=TP, spec=spec, load_concurrency=1, seed=seed,
                            draft_weight_frac=self.draft_weight_frac,
                            verify_token_cost=self.verify_token_cost)

    def spec(self, steps: int) -> SpecConfig:
        return SpecConfig(num_steps=steps, eagle_topk=1, num_draft_tokens=steps + 1,
                          accept_prob=self.accept_prob, accept_decay=self.accept_decay)


def cases(n: int, seed: int = 2026) -> list[Case]:
    rng = random.Random(seed)
    return [Case(seed + i, round(rng.uniform(0.6, 0.92), 3), round(rng.uniform(0.04, 0.3), 3),
                 round(rng.uniform(0.01, 0.06), 3)) for i in range(n)]


def sim_log(cfg: EngineConfig, seconds: float, label: str) -> list[Segment]:
    """A simulated server's log (server_args line + decode/prefill lines) through the session
    model; the advisor's segments of its runs."""
    s = cfg.spec
    args = {"model_path": "meta-llama/Llama-3.1-70B-Instruct", "tp_size": cfg.tp_size,
            "speculative_algorithm": s.algorithm if s else None,
            "speculative_num_steps": s.num_steps if s else None,
            "speculative_eagle_topk": s.eagle_topk if s else None,
            "speculative_num_draft_tokens": s.num_draft_tokens if s else None}
    lines = [formats.line(VERSION, 1.78e9, formats.server_args_message(VERSION, args))]
    lines += [sl.text for sl in simulate(cfg, duration_s=seconds, env=TUNED, version=VERSION,
                                         start=1.78e9 + 1)]
    return segments(read_runs(lines, label))


def true_tok_s(case: Case, steps: int, draws: int = 20000) -> float:
    """Expected bs-1 tok/s of chain `steps` under the simulator's own processes, no noise.

    Requests of equal length need length/tau rounds each, so the long-run tokens per round is
    the harmonic mean of the requests' tau, not the mean."""
    rng = random.Random(case.seed * 7919)
    k = 60.0
    a = case.accept_prob
    inv = 0.0
    for _ in range(draws):
        al = min(0.995, max(0.0, rng.betavariate(a * k, (1 - a) * k)))
        tau, surv = 1.0, 1.0
        for j in range(steps):
            surv *= al * case.accept_decay**j
            tau += surv
        inv += 1.0 / tau
    tau = draws / inv
    model = PerfModel(tp_size=TP, draft_weight_frac=case.draft_weight_frac,
                      verify_token_cost=case.verify_token_cost)
    cyc = model.spec_cycle_ms(1, KV_MEAN, uniform_ranks(TP, TUNED), case.spec(steps))
    return 1000.0 * tau / cyc


@dataclass(frozen=True)
class Outcome:
    case: Case
    advice: Advice
    true: dict[int, float]

    @property
    def true_best(self) -> int:
        return max(self.true, key=lambda s: self.true[s])

    @property
    def best(self) -> int:
        b = self.advice.best
        assert b is not None
        return b.steps

    @property
    def no_worse(self) -> bool:
        """The pick is truly at least as good as the best measured setting (0.5 % noise)."""
        ref = max(self.true[m.steps] for m in self.advice.measured if m.steps in self.true)
        return self.true[self.best] >= 0.995 * ref

    @property
    def optimum_in_band(self) -> bool:
        """A predicted optimum's band holds its true tok/s (a measured one is its own number)."""
        c = next(c for c in self.advice.candidates if c.steps == self.true_best)
        return c.basis == "measured" or c.band[0] <= self.true[self.true_best] <= c.band[1]

    @property
    def ok(self) -> bool:
        return self.no_worse and self.optimum_in_band

    @property
    def regret_pct(self) -> float:
        return 100.0 * (1 - self.true[self.best] / self.true[self.true_best])


def run_case(case: Case, seconds: float) -> Outcome:
    runs = (sim_log(case.engine(case.spec(2), case.seed * 10 + 1), seconds, "steps2")
            + sim_log(case.engine(case.spec(4), case.seed * 10 + 2), seconds, "steps4"))
    base = sim_log(case.engine(None, case.seed * 10 + 3), seconds, "baseline")
    adv = advise(runs, base)
    return Outcome(case, adv, {s: true_tok_s(case, s) for s in range(1, 7)})


def measured_check(case: Case, advice: Advice, steps: int, seconds: float) -> tuple[float, bool]:
    """Run the candidate `steps` on the simulator: measured tok/s and whether it is in band."""
    seg = sim_log(case.engine(case.spec(steps), case.seed * 10 + 5 + steps), seconds,
                  f"steps{steps}")
    m = measure(seg[0], advice.running_req)
    assert m is not None
    c = next(c for c in advice.candidates if c.steps == steps)
    return m.tok_s, c.band[0] <= m.tok_s <= c.band[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=300.0, help="simulated seconds per run")
    args = ap.parse_args()
    outs = [run_case(c, args.seconds) for c in cases(args.cases)]
    print(f"{'seed':>5} {'alpha':>6} {'draft':>6} {'verify':>6} | {'true best':>9} "
          f"{'true tok/s':>10} | {'pick':>4} {'pred tok/s':>10} {'band':>15} | "
          f"{'regret %':>8} ok")
    for o in outs:
        b = o.advice.best
        assert b is not None
        print(f"{o.case.seed:>5} {o.case.accept_prob:>6.3f} {o.case.draft_weight_frac:>6.3f} "
              f"{o.case.verify_token_cost:>6.3f} | {o.true_best:>9} "
              f"{o.true[o.true_best]:>10.2f} | {b.steps:>4} {_n(b.predicted_tok_s):>10} "
              f"{b.band[0]:>7.2f}-{b.band[1]:<7.2f} | {o.regret_pct:>8.2f} "
              f"{'yes' if o.ok else 'NO'}")
    print()
    print("prediction (fitted on steps 2 and 4) vs measurement (600 simulated s per setting):")
    print(f"{'seed':>5} {'steps':>5} | {'pred tok/s':>10} {'band':>15} | {'measured':>8} "
          f"{'err %':>6} in band")
    inside = total = 0
    for o in outs[:3]:
        for steps in (1, 3, 6):
            tok, ok = measured_check(o.case, o.advice, steps, 600.0)
            c = next(c for c in o.advice.candidates if c.steps == steps)
            inside += ok
            total += 1
            err = "N/A" if c.predicted_tok_s is None else f"{100 * (tok / c.predicted_tok_s - 1):+.1f}"
            print(f"{o.case.seed:>5} {steps:>5} | {_n(c.predicted_tok_s):>10} "
                  f"{c.band[0]:>7.2f}-{c.band[1]:<7.2f} | {tok:>8.2f} "
                  f"{err:>6} {'yes' if ok else 'NO'}")
    print(f"measured inside the predicted band: {inside}/{total}")
    good = sum(o.ok for o in outs)
    exact = sum(o.best == o.true_best for o in outs)
    print(f"pick no worse than the best measured and true optimum inside its band: "
          f"{good}/{len(outs)} (exact optimum {exact}/{len(outs)})")
    return 0 if good >= 0.9 * len(outs) else 1


def _n(v: float | None) -> str:
    return "N/A" if v is None else f"{v:.2f}"


if __name__ == "__main__":
    raise SystemExit(main())
