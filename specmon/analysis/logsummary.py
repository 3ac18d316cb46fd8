"""Offline summary of SGLang logs: decode throughput per #running-req, accept length, time span.

Numbers are SGLang's own `gen throughput (token/s)`: decode-only, one value per log interval
(default 40 decode steps), wall time including idle and prefill between two log lines. They are
grouped by `#running-req` because throughput at different batch sizes must never be mixed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TypeVar

from specmon.analysis.stats import MIN_SPREAD_N, weighted_quantiles
from specmon.numfmt import NA, num
from specmon.parse.fastscan import FastCounts, add_counts
from specmon.parse.sglang import BatchRecord, EventRecord, sample_batch

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
    engine: str | None = None  # "vllm" for a vLLM log (None: SGLang's)
    name: str = "log"
    # vLLM prints its acceptance counts: summed over the joined intervals
    spec_accepted: int = 0
    spec_drafted: int = 0
    spec_pos: list[float] = field(default_factory=list)  # sum of rate x drafted, per position
    spec_pos_drafted: int = 0  # drafted tokens behind spec_pos (lines with the same k)
    dp_groups: bool = False  # lines of DP ranks besides 0 (DP attention): one line per group
    # vLLM: seconds between an engine's consecutive lines -> how many (the measured interval)
    interval_gaps: Counter[float] = field(default_factory=Counter)
    # vLLM: the run's config names a speculative method (None: no config line read)
    speculative: bool | None = None
    # vLLM: accept lengths not as printed -> how many ("bonus": 0.8.5's, 1 added; "f1": from
    # the counts and k), said beside the median as compare and the report say them
    accept_made: Counter[str] = field(default_factory=Counter)
    # vLLM: counted intervals whose spec line drafted nothing (0.8.3-0.8.5 print `Drafted: 0`
    # or nan for a prefill-only interval, 0.9+ no spec line), per #running-req
    no_drafts: Counter[int] = field(default_factory=Counter)

    def add_record(self, rec: BatchRecord | EventRecord | None) -> None:
        if not isinstance(rec, BatchRecord):
            return
        if rec.kind == "decode":
            if rec.invalid:
                self.invalid += sum(1 for f in rec.invalid if f in SUMMARISED)
            self.decode += 1
            # (a vLLM interval with a spec line is speculative without an accept length)
            self.throughput[(rec.is_speculative, rec.running_req, rec.gen_throughput)] += 1
            if rec.accept_len is not None:
                self.accept[rec.accept_len] += 1
                note = getattr(rec, "accept_len_note", None)
                if note:
                    self.accept_made["f1" if note.startswith("F1") else "bonus"] += 1
            sp = getattr(rec, "spec", None)
            if sp is not None and not sp.get("drafted") and (
                    rr := sample_batch(rec.running_req, rec.gen_throughput)) is not None:
                self.no_drafts[rr] += 1
            self._add_counts(sp)
        else:
            self.prefill += 1
        t = rec.timestamp or rec.time_of_day
        if t is not None:
            if self.first_time is None:
                self.first_time = t
            self.last_time = t

    def _add_counts(self, spec: dict[str, object] | None) -> None:
        if not spec:
            return
        acc, dra, pp = spec.get("accepted"), spec.get("drafted"), spec.get("per_position")
        if not isinstance(acc, int) or not isinstance(dra, int) or dra <= 0:
            return
        self.spec_accepted += acc
        self.spec_drafted += dra
        if isinstance(pp, list) and pp and all(isinstance(x, float) for x in pp) and (
                not self.spec_pos or len(pp) == len(self.spec_pos)):
            self.spec_pos = [a + float(x) * dra for a, x in
                             zip(self.spec_pos or [0.0] * len(pp), pp, strict=True)]
            self.spec_pos_drafted += dra

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
        if other.recognised and self.recognised and (other.engine or "sglang") != (
                self.engine or "sglang"):
            from specmon.parse.vllm import MixedEngines

            raise MixedEngines(f"{other.name}: holds both SGLang and vLLM stats lines: a log that "
                               "mixes engines cannot be read as one server; split it")
        if self.engine is None and other.engine is not None:
            self.engine = other.engine
        self.lines += other.lines
        self.spec_accepted += other.spec_accepted
        self.spec_drafted += other.spec_drafted
        if other.spec_pos and (not self.spec_pos or len(other.spec_pos) == len(self.spec_pos)):
            self.spec_pos = [a + b for a, b in zip(self.spec_pos or [0.0] * len(other.spec_pos),
                                                   other.spec_pos, strict=True)]
            self.spec_pos_drafted += other.spec_pos_drafted
        self.decode += other.decode
        self.prefill += other.prefill
        _merge(self.throughput, other.throughput)
        _merge(self.accept, other.accept)
        self.invalid += other.invalid
        self.events += other.events
        self.dp_groups = self.dp_groups or other.dp_groups
        self.interval_gaps.update(other.interval_gaps)
        self.accept_made.update(other.accept_made)
        self.no_drafts.update(other.no_drafts)
        if other.speculative is not None:
            self.speculative = other.speculative
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

    def groups(self, merged: bool = False
               ) -> dict[bool, dict[int | None, dict[str, float | int | None]]]:
        """Per server kind, per #running-req: n, median, p10, p90 of gen throughput. An
        interval at 0 tok/s (vLLM's idle line after a burst) is counted apart, as every other
        front end leaves it out of its medians (`session.window.stats_for`). `merged`: every
        interval under True (a speculative vLLM run: its intervals without drafts too)."""
        buckets: dict[tuple[bool, int | None], Counter[float]] = {}
        unreadable: Counter[tuple[bool, int | None]] = Counter()
        idle: Counter[tuple[bool, int | None]] = Counter()
        drained: Counter[tuple[bool, int | None]] = Counter()
        for (spec, rr, gt), c in self.throughput.items():
            spec = spec or merged
            if gt is None:
                unreadable[(spec, rr)] += c
                continue
            if gt <= 0:
                idle[(spec, rr)] += c
                continue
            if rr is not None and sample_batch(rr, gt) is None:  # no request running at print
                drained[(spec, rr)] += c
                continue
            bucket = buckets.get((spec, rr))
            if bucket is None:  # (setdefault would build a Counter per key: 0.17 s on 1M lines)
                bucket = buckets[(spec, rr)] = Counter()
            bucket[gt] += c
        out: dict[bool, dict[int | None, dict[str, float | int | None]]] = {}
        for key in set(buckets) | set(unreadable) | set(idle) | set(drained):
            spec, rr = key
            vals = buckets.get(key, Counter())
            p10, med, p90 = _quantiles(vals)
            out.setdefault(spec, {})[rr] = {
                "n": sum(vals.values()), "median": med, "p10": p10, "p90": p90,
                "unreadable": unreadable.get(key, 0), "idle": idle.get(key, 0),
                "drained": drained.get(key, 0),
            }
        return out

    def render(self) -> str:
        recognised = self.decode + self.prefill
        lines: list[str] = [
            f"lines read: {self.lines:,}   recognised: {recognised:,} "
            f"(decode {self.decode:,}, prefill {self.prefill:,})",
            f"time span: {_na(self.first_time)} -> {_na(self.last_time)}" + _went_back(
                self.first_time, self.last_time),
            "",
            "decode throughput = SGLang 'gen throughput (token/s)': decode-only, one value per log",
            "interval (default 40 decode steps; idle and prefill time inside an interval lower it).",
            "Not comparable with a benchmark's end-to-end tok/s, which includes prefill.",
        ]
        if self.engine == "vllm":
            from specmon.parse.vllm import measured_interval

            lines[0] = (f"lines read: {self.lines:,}   recognised: {recognised:,} vLLM engine "
                        "intervals ('decode')")
            iv = measured_interval(self.interval_gaps)
            lines[3:] = [
                "throughput = vLLM 'Avg generation throughput': every token an engine emitted in",
                "its stats interval (prefill steps and accepted drafts included) over that",
                "interval; idle servers print nothing. Not a benchmark's end-to-end tok/s.",
                (f"stats interval: ~{iv:.1f} s (measured: the mean gap between an engine's lines, "
                 "idle gaps left out)" if iv is not None else
                 "stats interval: N/A (no engine printed two lines at different times)"),
            ]
        if self.dp_groups:
            lines += [
                "DP attention: the log holds the lines of several DP groups, and each row counts",
                "a group's own line (its #running-req, its gen throughput). `parse --runs`,",
                "`compare` and the live panel sum the groups per interval (the server's total)."
            ] if self.engine != "vllm" else [
                "Data parallel: the log holds the stats lines of several engines (Engine 000, 001,",
                "...), and each row counts one engine's line (its requests, its throughput).",
                "`parse --runs`, `compare` and the live panel sum the engines per interval."]
        if self.invalid:
            lines.insert(2, f"warning: {self.invalid:,} invalid value(s) (non-finite, negative or "
                            "absurd numbers) read as N/A; their lines are kept")
        groups = self.groups()
        # a speculative vLLM run: every engine interval in its table, those without a spec line
        # (no drafts: prefill only) included, as `parse --runs`, `compare` and the panel count
        # the run's intervals; each row says how many of its n had none
        nospec: dict[int | None, dict[str, float | int | None]] = {}
        if self.engine == "vllm" and (True in groups or self.speculative):
            nospec = groups.get(False, {})
            groups = self.groups(merged=True)
        if not groups:
            lines.append("")
            lines.append("no decode lines found")
        for spec in (False, True):
            if spec not in groups:
                continue
            lines.append("")
            label = "speculative (lines carry 'accept len')" if spec else "baseline (no accept len)"
            if self.engine == "vllm":
                label = ("speculative (a run that prints 'SpecDecoding metrics' lines): every "
                         "engine interval" if spec else
                         "baseline (no 'SpecDecoding metrics' line in the run)")
            lines.append(f"{label}")
            lines.append(f"  {'#running-req':>12}  {'n':>8}  {'median':>10}  {'p10':>10}  {'p90':>10}")
            for rr in sorted(groups[spec], key=lambda r: (r is None, r)):
                g = groups[spec][rr]
                rr_text = "unreadable" if rr is None else str(rr)  # (not a number in the line)
                lines.append(
                    f"  {rr_text:>12}  {g['n']:>8,}  {_num(g['median']):>10}  {_num(g['p10']):>10}"
                    f"  {_num(g['p90']):>10}"
                    + (f"  ({g['unreadable']} unreadable)" if g["unreadable"] else "")
                    + (f"  (+{g['idle']:,} at 0 tok/s: no token in the interval, not counted)"
                       if g["idle"] else "")
                    + (f"  (+{g['drained']:,} printed with no request running: their requests "
                       "ended within the interval, no batch size; not counted)"
                       if g["drained"] else "")
                    + (f"  ({k:,} of them without a SpecDecoding line: no drafts)"
                       if spec and (k := (nospec.get(rr) or {}).get("n")) else "")
                    + (f"  ({d:,} of them with a SpecDecoding line that drafted nothing)"
                       if spec and rr is not None and (d := self.no_drafts.get(rr)) else "")
                )
            if spec:
                vals = Counter({k: v for k, v in self.accept.items() if k is not None})
                p10, med, p90 = _quantiles(vals)
                every = " over every #running-req" if len(groups[spec]) > 1 else ""
                lines.append(
                    f"  accept len{every} (tokens per verify round, bonus included): median "
                    f"{_num(med)}, "
                    f"p10 {_num(p10)}, p90 {_num(p90)}, n {sum(vals.values()):,}"
                )
                if self.accept_made["bonus"]:
                    lines.append(f"    ({self.accept_made['bonus']:,} of them as vLLM 0.8.5 printed"
                                 " them, without the bonus token: 1 added)")
                if self.accept_made["f1"]:
                    lines.append(f"    ({self.accept_made['f1']:,} of them derived: vLLM 0.8.3-0.8.4"
                                 " print no length; 1 + Accepted x k / Drafted, k from the config)")
                if self.spec_drafted:
                    pos = " ".join(f"{x / self.spec_pos_drafted:.3f}" for x in self.spec_pos) \
                        if self.spec_pos_drafted else "N/A"
                    lines.append(
                        f"  accept rate (vLLM's counts, accepted / drafted over the log): "
                        f"{self.spec_accepted / self.spec_drafted:.3f} "
                        f"({self.spec_accepted:,} / {self.spec_drafted:,}); per position {pos}")
        return "\n".join(lines)


def _merge(into: Counter[_T], other: Counter[_T]) -> None:
    """into += other at the lower cost: Counter.update loops in Python per key (dict.update in
    C when `into` is empty), add_counts in C per counted item (better when keys are unique)."""
    if not into or other.total() > 2 * len(other):
        into.update(other)
    else:
        add_counts(into, other.items())


def _went_back(first: str | None, last: str | None) -> str:
    """A span that ends before it starts is log time that went back: said, never shown bare."""
    if first is None or last is None or len(first) != len(last) or last >= first:
        return ""  # ("YYYY-MM-DD HH:MM:SS[.fff]" of one shape sort as times do)
    if "-" not in first:  # clock-only stamps (0.3.x): no date, so most likely midnight passed
        return ("  (clock-only stamps, no date: past midnight, or the log's time went back: "
                "`specmon parse --runs` lists any step back)")
    return ("  (the log's time went back: the rows below count the lines on both sides of the "
            "step; `specmon parse --runs` lists where, and its figures are the run's after it)")


def _na(v: object) -> str:
    return NA if v is None else str(v)


_num = num


def _quantiles(vals: Counter[float]) -> tuple[float | None, float | None, float | None]:
    """p10, median, p90 of a counted multiset; no spread (N/A) of fewer than MIN_SPREAD_N."""
    p10, med, p90 = weighted_quantiles(vals.items(), (0.1, 0.5, 0.9))
    if sum(vals.values()) < MIN_SPREAD_N:
        return None, med, None
    return p10, med, p90
