"""SGLang benchmark output -> typed records (`bench_serving` result blocks, `bench_one_batch_server`).

Pure: text in, records out. `bench_serving` prints `"{:<40} {:<10}"` rows between a
`Serving Benchmark Result` banner and a line of `=`; labels changed over versions (a misspelt
`Max reqeuest concurrency:` up to 0.4.5, optional P90/P95 rows), so rows are kept by their label
and the typed accessors look the labels up. `bench_one_batch_server` prints `key: value` lines
per (batch size, input len) case, starting with `batch size:`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

Value = int | float | str

BANNER = "Serving Benchmark Result"
_RE_ROW = re.compile(r"^(?P<label>[^:]+?):\s+(?P<value>\S.*?)\s*$")
_RE_NUM = re.compile(r"[+-]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?\Z")
_RE_FIRST_NUM = re.compile(r"[+-]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?")
_LABEL_ALIASES = {"Max reqeuest concurrency": "Max request concurrency"}


def _value(text: str) -> Value:
    text = text.strip()
    if _RE_NUM.match(text):
        return float(text) if any(c in text for c in ".eE") else int(text)
    return text


def _num(v: Value | None) -> float | None:
    return float(v) if isinstance(v, (int, float)) else None


@dataclass
class BenchServingSummary:
    """One `Serving Benchmark Result` block: every row by label, plus typed accessors."""

    fields: dict[str, Value] = field(default_factory=dict)

    def get(self, label: str) -> float | None:
        return _num(self.fields.get(label))

    @property
    def completed(self) -> int | None:
        v = self.fields.get("Successful requests")
        return int(v) if isinstance(v, (int, float)) else None

    @property
    def duration_s(self) -> float | None:
        return self.get("Benchmark duration (s)")

    @property
    def output_throughput(self) -> float | None:
        return self.get("Output token throughput (tok/s)")

    @property
    def total_output_tokens(self) -> int | None:
        v = self.fields.get("Total generated tokens")
        return int(v) if isinstance(v, (int, float)) else None

    @property
    def concurrency(self) -> float | None:
        return self.get("Max request concurrency")

    @property
    def accept_length(self) -> float | None:
        return self.get("Accept length")

    @property
    def mean_ttft_ms(self) -> float | None:
        return self.get("Mean TTFT (ms)")

    @property
    def median_ttft_ms(self) -> float | None:
        return self.get("Median TTFT (ms)")

    @property
    def mean_itl_ms(self) -> float | None:
        return self.get("Mean ITL (ms)")

    @property
    def median_itl_ms(self) -> float | None:
        return self.get("Median ITL (ms)")

    @property
    def p99_itl_ms(self) -> float | None:
        return self.get("P99 ITL (ms)")


def parse_bench_serving(text: str) -> list[BenchServingSummary]:
    """Every result block in `text` (a whole stdout), in order; [] when there is none."""
    out: list[BenchServingSummary] = []
    cur: BenchServingSummary | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if BANNER in line:
            cur = BenchServingSummary()
            out.append(cur)
            continue
        if cur is None:
            continue
        stripped = line.strip()
        if stripped and set(stripped) == {"="}:
            cur = None  # closing rule
            continue
        if stripped.startswith("-") and stripped.endswith("-"):
            continue  # section header
        m = _RE_ROW.match(line)
        if m:
            label = m.group("label").strip()
            cur.fields[_LABEL_ALIASES.get(label, label)] = _value(m.group("value"))
    return out


@dataclass
class OneBatchCase:
    """One (batch size, input len) case of `bench_one_batch_server`; None where not printed."""

    batch_size: int
    input_len: int | None = None
    output_len: int | None = None
    latency_s: float | None = None
    ttft_s: float | None = None
    input_throughput: float | None = None
    output_throughput: float | None = None
    last_gen_throughput: float | None = None
    accept_length: float | None = None
    extra: dict[str, Value] = field(default_factory=dict)


_ONE_BATCH_KEYS = {
    "input_len": "input_len",
    "output_len": "output_len",
    "latency": "latency_s",
    "ttft": "ttft_s",
    "last_ttft": "ttft_s",
    "input throughput": "input_throughput",
    "output throughput": "output_throughput",
    "last generation throughput": "last_gen_throughput",
    "acc_length": "accept_length",
}


def parse_one_batch_server(text: str) -> list[OneBatchCase]:
    """Cases from `bench_one_batch_server` stdout; -1 (not available) becomes None."""
    out: list[OneBatchCase] = []
    cur: OneBatchCase | None = None
    for raw in text.splitlines():
        key, sep, rest = raw.strip().partition(":")
        if not sep:
            continue
        key = key.strip()
        m = _RE_FIRST_NUM.search(rest)
        if key == "batch size":
            if m is None:
                continue
            cur = OneBatchCase(batch_size=int(float(m.group(0))))
            out.append(cur)
            continue
        if cur is None or m is None:
            continue
        num = float(m.group(0))
        attr = _ONE_BATCH_KEYS.get(key)
        if attr is None:
            cur.extra[key] = _value(rest.strip())
        elif attr in ("input_len", "output_len"):
            setattr(cur, attr, int(num))
        else:
            setattr(cur, attr, None if num < 0 else num)
    return out
