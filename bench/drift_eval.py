#!/usr/bin/env python3
"""Evaluate the drift detector on simulated series and on the real long logs.

Simulated: log-normal AR(1) decode throughput at 88.8 tok/s (noise sigma, autocorrelation rho),
with outliers (stragglers), idle-gap artefact lines, prefill lines and short batch-size changes,
all fed as parsed records through the same SampleFilter + detector `specmon check` uses.
Prints, per noise setting: false alarms per 1,000 stationary decode lines and the median number
of decode lines to detect -3 %, -5 %, -7.4 % and -29 % steps (detection rate in brackets), for
the specmon detector and the naive rule "alarm when the last sample is >= 5 % below the
baseline median" (on every line, as a naive monitor would see them).

Real logs (tests/data/sglang-longlogs): baseline from the first 40 % of each run, then the
rest replayed as-is (false alarms) and with a -5 % / -10 % step injected half-way.

    python bench/drift_eval.py [--trials 40] [--quick] [--seed 1]
"""

from __future__ import annotations

import argparse
import gzip
import math
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specmon.analysis.drift import (  # noqa: E402
    DriftMonitor,
    DriftParams,
    baseline_from_records,
)
from specmon.parse.sglang import BatchRecord, parse_line  # noqa: E402

BASE = 88.8
STEPS = (0.03, 0.05, 0.074, 0.29)
CHANGE_AT = 40
AFTER = 200


def series(rng: random.Random, n: int, sigma: float, rho: float, step_at: int | None = None,
           step: float = 0.0, dirty: bool = True) -> list[tuple[BatchRecord | None, float]]:
    """Records (decode and prefill) with timestamps in seconds."""
    out: list[tuple[BatchRecord | None, float]] = []
    e = rng.gauss(0, sigma)
    innov = sigma * math.sqrt(1 - rho * rho)
    t = 0.0
    i = 0
    bs_left = 0
    while i < n:
        e = rho * e + rng.gauss(0, innov)
        level = BASE * (1 - step if step_at is not None and i >= step_at else 1.0)
        thr = level * math.exp(e)
        rr = 1
        if dirty:
            u = rng.random()
            if bs_left > 0:
                bs_left -= 1
                rr, thr = 2, thr * 1.8
            elif u < 0.01:
                thr *= rng.uniform(0.6, 0.9)  # straggler / GC pause: stays in the data
            elif u < 0.03:  # idle gap: the line includes idle time
                gap = rng.uniform(2, 30)
                t += gap
                thr *= 1.35 / (1.35 + gap)
            elif u < 0.08:
                out.append((BatchRecord("prefill", running_req=1, queue_req=0), t))
            elif u < 0.09:
                bs_left = 10
        t += 40 * rr / max(thr, 1e-3)
        out.append((BatchRecord("decode", running_req=rr, tokens=1000 + 40 * (i % 50), gen_throughput=thr,
                                queue_req=0, cuda_graph=True), t))
        i += 1
    return out


def run_monitor(base_recs: list, live_recs: list, params: DriftParams) -> list[int]:
    """Decode-line indices (0-based, live part) at which a warning/critical was raised."""
    stats = baseline_from_records(((r, t) for r, t in base_recs), params)
    m = DriftMonitor(stats, params)
    raises: list[int] = []
    prev = None
    k = -1
    for r, t in live_recs:
        if r is not None and r.kind == "decode":
            k += 1
        m.observe(r, t, k)
        lvl = m.alert.level if m.alert is not None and not m.alert.cleared else None
        active = lvl in ("warning", "critical")
        if active and not prev:
            raises.append(k)
        prev = active
    return raises


def run_naive(base_recs: list, live_recs: list, frac: float = 0.05) -> list[int]:
    base = statistics.median(r.gen_throughput for r, _ in base_recs if r is not None and r.kind == "decode")
    raises: list[int] = []
    prev = False
    k = -1
    for r, _ in live_recs:
        if r is None or r.kind != "decode":
            continue
        k += 1
        active = r.gen_throughput <= (1 - frac) * base
        if active and not prev:
            raises.append(k)
        prev = active
    return raises


def evaluate(sigma: float, rho: float, trials: int, params: DriftParams, seed: int,
             n_base: int = 75, n_stat: int = 1000) -> dict:
    rng = random.Random(seed)
    fa = {"specmon": 0, "naive": 0}
    lines = 0
    det: dict[str, dict[float, list[int | None]]] = {"specmon": {}, "naive": {}}
    for _ in range(trials):
        while True:  # a baseline with >= min_base clean lines at bs 1 (else the run is "insufficient")
            base = series(rng, n_base, sigma, rho)
            stats = baseline_from_records(base, params)
            if any(b.n >= params.min_base and b.stratum.rr == 1 for b in stats.strata.values()):
                break
        live = series(rng, n_stat, sigma, rho)
        lines += n_stat
        fa["specmon"] += len(run_monitor(base, live, params))
        fa["naive"] += len(run_naive(base, live))
        for step in STEPS:
            live = series(rng, CHANGE_AT + AFTER, sigma, rho, CHANGE_AT, step)
            for name, fn in (("specmon", lambda b, lv: run_monitor(b, lv, params)), ("naive", run_naive)):
                after = [k - CHANGE_AT for k in fn(base, live) if k >= CHANGE_AT]
                det[name].setdefault(step, []).append(after[0] if after else None)
    out = {"fa_per_1000": {k: 1000.0 * v / lines for k, v in fa.items()}, "detect": {}}
    for name, by_step in det.items():
        out["detect"][name] = {}
        for step, xs in by_step.items():
            hit = [x for x in xs if x is not None]
            out["detect"][name][step] = (statistics.median(hit) if hit else None, len(hit) / len(xs))
    return out


def fmt_det(x: tuple[float | None, float]) -> str:
    med, rate = x
    return "-" if med is None else f"{med:.0f} ({100 * rate:.0f}%)"


def simulated_table(trials: int, params: DriftParams, seed: int, quick: bool) -> None:
    grid = [(0.02, 0.0), (0.02, 0.5)] if quick else [
        (0.01, 0.0), (0.01, 0.3), (0.02, 0.0), (0.02, 0.3), (0.02, 0.6), (0.04, 0.0), (0.04, 0.3),
        (0.04, 0.6)]
    print("Simulated series: baseline 75 lines (>= 30 clean at bs 1), live 1,000 stationary lines x "
          f"{trials} trials;"
          f" steps at line {CHANGE_AT}, {AFTER} lines after; ~1% stragglers, 2% idle-gap lines,"
          " 5% prefills, 1% batch-size excursions\n")
    head = "| noise | AC | detector | false alarms / 1,000 | " + " | ".join(
        f"{-100 * s:.1f}%" if s != 0.074 else "-7.4%" for s in STEPS) + " |"
    print(head)
    print("|" + "---|" * (4 + len(STEPS)))
    for i, (sigma, rho) in enumerate(grid):
        r = evaluate(sigma, rho, trials, params, seed + i)
        for name in ("specmon", "naive"):
            cells = [fmt_det(r["detect"][name][s]) for s in STEPS]
            print(f"| {100 * sigma:.0f}% | {rho:.1f} | {name} | {r['fa_per_1000'][name]:.2f} | "
                  + " | ".join(cells) + " |")
        sys.stdout.flush()
    print("\ncells: median decode lines from the step to the alarm (detection rate within "
          f"{AFTER} lines); naive = last line >= 5% below the baseline median\n")


def real_logs(params: DriftParams) -> None:
    here = ROOT / "tests" / "data" / "sglang-longlogs"
    files = sorted(here.glob("*.log.gz"))
    if not files:
        print(f"(real logs not found at {here})")
        return
    print("Real long logs: baseline = first 40% of the run, live = the rest\n")
    print("| file | baseline strata (n>=30) | clean live | false alarms / 1,000 clean | -5% step: lines to"
          " detect | -10% step | excluded (top) |")
    print("|---|---|---|---|---|---|---|")
    for f in files:
        recs = [(parse_line(line), None) for line in gzip.decompress(f.read_bytes()).splitlines()]
        recs = [(r, t) for r, t in recs if r is not None]
        dec = [i for i, (r, _) in enumerate(recs) if isinstance(r, BatchRecord) and r.kind == "decode"]
        cut = dec[int(0.4 * len(dec))]
        base, live = recs[:cut], recs[cut:]
        stats = baseline_from_records(base, params)
        usable = sum(1 for b in stats.strata.values() if b.n >= params.min_base)
        m = DriftMonitor(stats, params)
        alarms = 0
        prev = False
        for r, t in live:
            m.observe(r, t)
            a = m.alert is not None and not m.alert.cleared and m.alert.level in ("warning", "critical")
            alarms += a and not prev
            prev = a
        clean = m.clean
        cells = []
        for step in (0.05, 0.10):
            half = len(live) // 2
            scaled = []
            for j, (r, t) in enumerate(live):
                if j >= half and isinstance(r, BatchRecord) and r.kind == "decode" and r.gen_throughput:
                    r = BatchRecord(**{**{k: getattr(r, k) for k in r.__slots__},
                                       "gen_throughput": r.gen_throughput * (1 - step)})
                scaled.append((r, t))
            m2 = DriftMonitor(stats, params)
            k = -1
            hit = None
            k_half = None
            for j, (r, t) in enumerate(scaled):
                m2.observe(r, t)
                if isinstance(r, BatchRecord) and r.kind == "decode" and r.rank_key == m2.filter.stream:
                    k += 1  # decode lines of the compared rank stream
                if j == half:
                    k_half = k
                if j >= half and hit is None and m2.alert is not None and not m2.alert.cleared and \
                        m2.alert.level in ("warning", "critical"):
                    hit = k - (k_half or 0)
            cells.append("not detected" if hit is None else str(hit))
        top = ", ".join(f"{k} {v}" for k, v in sorted(m.excluded.items(), key=lambda kv: -kv[1])[:3])
        fa = 1000.0 * alarms / clean if clean else float("nan")
        name = f.name.removesuffix(".log.gz")
        print(f"| {name} | {usable} | {clean} | {fa:.1f} ({alarms}) | {cells[0]} | {cells[1]} | {top} |")
    print("\n(lines to detect: decode lines of the compared rank stream after the step, dirty ones included;"
          " DP-attention logs compare one rank stream)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="two noise settings only")
    ap.add_argument("--no-real", action="store_true")
    ap.add_argument("--min-live", type=int, help="override DriftParams.min_live")
    ap.add_argument("--k-se", type=float, help="override DriftParams.k_se")
    ap.add_argument("--no-live-sigma", action="store_true")
    a = ap.parse_args()
    params = DriftParams()
    if a.min_live is not None:
        params = DriftParams(**{**params.__dict__, "min_live": a.min_live})
    if a.k_se is not None:
        params = DriftParams(**{**params.__dict__, "k_se": a.k_se})
    if a.no_live_sigma:
        params = DriftParams(**{**params.__dict__, "live_sigma": False})
    t0 = time.perf_counter()
    print(f"params: {params}\n")
    simulated_table(a.trials, params, a.seed, a.quick)
    if not a.no_real:
        real_logs(params)
    print(f"\n({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
