"""Offline summary of SGLang logs: decode throughput per #running-req, accept length, time span.

Numbers are SGLang's own `gen throughput (token/s)`: decode-only, one value per log interval
(default 40 decode steps), wall time including idle and prefill between two log lines. They are
grouped by `#running-req` because throughput at different batch sizes must never be mixed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TypeVar

from specmon.analysis.stats import weighted_quantiles
from specmon.parse.fastscan import FastCounts, add_counts
from specmon.parse.sglang import BatchRecord, EventRecord

# The decode fields the summary shows; an invalid value among them is counted as a warning.
_T = TypeVar("_T")
SUMMARISED = frozenset({"running_req", "gen_throughput", "accept_len"})


@dataclass
class LogSummary:
    lines: int = 0
    decode: int = 0
    prefill: int = 0
    # (speculative?, #running-req, gen throughput) -> how many lines
    throughput: Counter[tuple[bool, int | None, float | None]] = field(default_factory=Counter)
    accept: Counter[float | None] = field(default_factory=Counter)
    first_time: str | None = None
    last_time: str | None = None
    events: int = 0  # start-up lines (server_args, ready, ...): an SGLang log without batches yet
    invalid: int = 0  # SUMMARISED values printed but impossible (non-finite, negative, absurd)

    def add_record(self, rec: BatchRecord | EventRecord | None) -> None:
        if not isinstance(rec, BatchRecord):
            return
        if rec.kind == "decode":
            if rec.invalid:
                self.invalid += sum(1 for f in rec.invalid if f in SUMMARISED)
            self.decode += 1
            self.throughput[(rec.accept_len is not None, rec.running_req, rec.gen_throughput)] += 1
            if rec.accept_len is not None:
                self.accept[rec.accept_len] += 1
        else:
            self.prefill += 1
        t = rec.timestamp or rec.time_of_day
        if t is not None:
            if self.first_time is None:
                self.first_time = t
            self.last_time = t

    @property
    def recognised(self) -> int:
        return self.decode + self.prefill

    def add_fast(self, counts: FastCounts, first: str | None, last: str | None) -> None:
        self.decode += counts.decode
        self.prefill += counts.prefill
        _merge(self.throughput, counts.throughput)
        _merge(self.accept, counts.accept)
        self.invalid += counts.invalid
        self._add_times(first, last)

    def merge(self, other: LogSummary) -> None:
        self.lines += other.lines
        self.decode += other.decode
        self.prefill += other.prefill
        _merge(self.throughput, other.throughput)
        _merge(self.accept, other.accept)
        self.invalid += other.invalid
        self.events += other.events
        self._add_times(other.first_time, other.last_time)

    def _add_times(self, first: str | None, last: str | None) -> None:
        if self.first_time is None:
            self.first_time = first
        if last is not None:
            self.last_time = last

    def comparable(self) -> tuple[object, ...]:
        """Everything the report shows, for checking the fast path against the general one."""
        return (self.lines, self.decode, self.prefill, dict(self.throughput), dict(self.accept),
                self.first_time, self.last_time, self.invalid)

    def groups(self) -> dict[bool, dict[int | None, dict[str, float | int | None]]]:
        """Per server kind, per #running-req: n, median, p10, p90 of gen throughput."""
        buckets: dict[tuple[bool, int | None], Counter[float]] = {}
        unreadable: Counter[tuple[bool, int | None]] = Counter()
        for (spec, rr, gt), c in self.throughput.items():
            if gt is None:
                unreadable[(spec, rr)] += c
                continue
            buckets.setdefault((spec, rr), Counter())[gt] += c
        out: dict[bool, dict[int | None, dict[str, float | int | None]]] = {}
        for key in set(buckets) | set(unreadable):
            spec, rr = key
            vals = buckets.get(key, Counter())
            p10, med, p90 = weighted_quantiles(vals.items(), (0.1, 0.5, 0.9))
            out.setdefault(spec, {})[rr] = {
                "n": sum(vals.values()), "median": med, "p10": p10, "p90": p90,
                "unreadable": unreadable.get(key, 0),
            }
        return out

    def render(self) -> str:
        recognised = self.decode + self.prefill
        lines: list[str] = [
            f"lines read: {self.lines:,}   recognised: {recognised:,} "
            f"(decode {self.decode:,}, prefill {self.prefill:,})",
            f"time span: {_na(self.first_time)} -> {_na(self.last_time)}",
            "",
            "decode throughput = SGLang 'gen throughput (token/s)': decode-only, one value per log",
            "interval (default 40 decode steps; idle and prefill time inside an interval lower it).",
            "Not comparable with a benchmark's end-to-end tok/s, which includes prefill.",
        ]
        if self.invalid:
            lines.insert(2, f"warning: {self.invalid:,} invalid value(s) (non-finite, negative or "
                            "absurd numbers) read as N/A; their lines are kept")
        groups = self.groups()
        if not groups:
            lines.append("")
            lines.append("no decode lines found")
        for spec in (False, True):
            if spec not in groups:
                continue
            lines.append("")
            label = "speculative (lines carry 'accept len')" if spec else "baseline (no accept len)"
            lines.append(f"{label}")
            lines.append(f"  {'#running-req':>12}  {'n':>8}  {'median':>10}  {'p10':>10}  {'p90':>10}")
            for rr in sorted(groups[spec], key=lambda r: (r is None, r)):
                g = groups[spec][rr]
                lines.append(
                    f"  {_na(rr):>12}  {g['n']:>8,}  {_num(g['median']):>10}  {_num(g['p10']):>10}"
                    f"  {_num(g['p90']):>10}"
                    + (f"  ({g['unreadable']} unreadable)" if g["unreadable"] else "")
                )
            if spec:
                vals = Counter({k: v for k, v in self.accept.items() if k is not None})
                p10, med, p90 = weighted_quantiles(vals.items(), (0.1, 0.5, 0.9))
                lines.append(
                    f"  accept len (tokens per verify round, bonus included): median {_num(med)}, "
                    f"p10 {_num(p10)}, p90 {_num(p90)}, n {sum(vals.values()):,}"
                )
        return "\n".join(lines)


def _merge(into: Counter[_T], other: Counter[_T]) -> None:
    """into += other at the lower cost: Counter.update loops in Python per key (dict.update in
    C when `into` is empty), add_counts in C per counted item (better when keys are unique)."""
    if not into or other.total() > 2 * len(other):
        into.update(other)
    else:
        add_counts(into, other.items())


def _na(v: object) -> str:
    return "N/A" if v is None else str(v)


def _num(v: float | None) -> str:
    return "N/A" if v is None else f"{v:.2f}"
