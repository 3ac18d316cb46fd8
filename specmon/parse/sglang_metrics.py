"""SGLang's Prometheus `/metrics` text (`--enable-metrics`) -> the speculative gauges specmon uses.

Parsed with prometheus_client's own text parser (the exposition format has escapes, labels in
any order, `_total` suffix rules). A cross-check of the log, and the only source of acceptance
when the log is not readable. Pure: text in, numbers out; non-finite samples are dropped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

# metric name -> field (sglang-observables.md section 5)
SPEC_METRICS = {
    "sglang:spec_accept_length": "accept_length",  # last decode-log interval
    "sglang:spec_accept_rate": "accept_rate",  # 0.5.4+, denominator changed by version
    "sglang:spec_num_steps": "num_steps",  # 0.5.15+
    "sglang:spec_num_draft_tokens": "num_draft_tokens",  # 0.5.15+
    "sglang:spec_verify_calls_total": "verify_calls_total",  # 0.5.15+, tokenizer side
    "sglang:spec_cap_length": "cap_length",  # 0.5.18+ DSPARK
    "sglang:spec_block_accept_length": "block_accept_length",
    "sglang:gen_throughput": "gen_throughput",
}
MAX_TEXT = 8 * 1024 * 1024


@dataclass
class SpecMetrics:
    """One scrape. Several label sets (DP ranks, other models) -> one value each, keyed."""

    values: dict[str, dict[tuple[tuple[str, str], ...], float]] = field(default_factory=dict)

    def get(self, name: str) -> float | None:
        """The value for `name` when the scrape has exactly one series of it (else None)."""
        series = self.values.get(name) or {}
        return next(iter(series.values())) if len(series) == 1 else None

    def first_rank(self, name: str) -> float | None:
        """DP rank 0 (or the only series) when several ranks export the gauge."""
        series = self.values.get(name) or {}
        for labels, v in series.items():
            if dict(labels).get("dp_rank") in (None, "0"):
                return v
        return None

    @property
    def speculative(self) -> bool | None:
        steps = self.get("num_steps")
        if steps is not None:
            return steps > 0
        acc = self.get("accept_length")
        return None if acc is None else acc > 0


class MetricsError(ValueError):
    """The text is not Prometheus exposition format."""


def parse_spec_metrics(text: str) -> SpecMetrics:
    if len(text) > MAX_TEXT:
        raise MetricsError(f"/metrics text over {MAX_TEXT} bytes")
    out = SpecMetrics()
    try:
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                key = SPEC_METRICS.get(s.name)
                if key is None or not math.isfinite(s.value):
                    continue
                labels = tuple(sorted((k, v) for k, v in s.labels.items() if k != "pid"))
                out.values.setdefault(key, {})[labels] = float(s.value)
    except (ValueError, TypeError, IndexError) as exc:
        raise MetricsError(f"not Prometheus text format: {exc}") from None
    return out
