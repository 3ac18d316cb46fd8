"""Drift cost per live record on a speculative server vs the baseline's size.

Prints µs per record at a baseline of n=76 and n=15,611 and their ratio (1.0 = O(1) in the
baseline's size). Run: `python bench/drift_cost.py`.
"""

from __future__ import annotations

import math
import random
import time

from specmon.analysis.drift import DriftMonitor, DriftParams, baseline_from_records
from specmon.parse.sglang import BatchRecord


def recs(n: int, level: float, seed: int) -> list[BatchRecord]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        acc = 2.4 * math.exp(rng.gauss(0, 0.1))
        out.append(BatchRecord("decode", running_req=1, tokens=1200, queue_req=0, cuda_graph=True,
                               accept_len=acc, gen_throughput=level * acc * math.exp(rng.gauss(0, 0.01))))
    return out


def per_record_us(n_base: int, n_live: int = 2000) -> float:
    p = DriftParams()
    base = baseline_from_records([(r, float(i)) for i, r in enumerate(recs(n_base, 37.0, 1))], p)
    m = DriftMonitor(base, p)
    live = recs(n_live, 37.0, 2)
    t0 = time.perf_counter()
    for i, r in enumerate(live):
        m.observe(r, 1e6 + i, i)
    return 1e6 * (time.perf_counter() - t0) / n_live


def main() -> None:
    small, large = per_record_us(76), per_record_us(15_611)
    print(f"per live record: {small:.1f} us at n_base=76, {large:.1f} us at n_base=15,611; "
          f"ratio {large / small:.2f}")


if __name__ == "__main__":
    main()
