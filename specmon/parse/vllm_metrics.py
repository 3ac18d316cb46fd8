"""vLLM's Prometheus `/metrics` counters -> exact windowed acceptance and throughput (log-free).

vLLM (0.8.3+/0.8.5+) exports *counters* per engine (`engine` label, 0.11+ also with DP):
`vllm:spec_decode_num_drafts_total`, `..._num_draft_tokens_total`, `..._num_accepted_tokens_total`,
`..._num_accepted_tokens_per_pos_total{position="i"}` and `vllm:generation_tokens_total`. Unlike
SGLang's last-interval gauges, the difference of two scrapes is exact over the window between
them: acceptance rate = d accepted / d draft tokens, accept length (bonus included) =
1 + d accepted / d drafts, per-position acceptance = d accepted at i / d drafts, generation tok/s =
d generation tokens / d t. `d t` is the time between the two scrapes as the caller measured it
(the exposition carries no server timestamp). A counter that went down is a server restart: that
window has no statistic (a window never spans a restart).

Parsed with prometheus_client's own text parser. Pure: text in, numbers out.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from specmon.parse.sglang_metrics import MAX_TEXT, MetricsError

COUNTERS = {
    "vllm:spec_decode_num_drafts_total": "drafts",
    "vllm:spec_decode_num_draft_tokens_total": "draft_tokens",
    "vllm:spec_decode_num_accepted_tokens_total": "accepted_tokens",
    "vllm:generation_tokens_total": "generation_tokens",
    "vllm:prompt_tokens_total": "prompt_tokens",
}
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
GAUGES = {"vllm:num_requests_running": "running", "vllm:num_requests_waiting": "waiting"}
MAX_POSITIONS = 64
MAX_ENGINES = 1024
# a label that is a number: ASCII digits only (str.isdigit and int() take "²", "٣", " 1", "1_0")
# and at most 18 of them (int() refuses past 4300 digits; an index is never that long)
_RE_INDEX = re.compile(r"[0-9]{1,18}")


def _index(label: str) -> int | None:
    """The number an engine or position label is (ASCII digits, at most 18), else None."""
    return int(label) if _RE_INDEX.fullmatch(label) else None


@dataclass
class EngineCounters:
    """One engine's counters in one scrape (None: not exported by this version/config)."""

    engine: str
    model_name: str | None = None
    drafts: float | None = None
    draft_tokens: float | None = None
    accepted_tokens: float | None = None
    generation_tokens: float | None = None
    prompt_tokens: float | None = None
    per_pos: dict[int, float] = field(default_factory=dict)
    running: float | None = None
    waiting: float | None = None


@dataclass
class VllmScrape:
    """One `/metrics` text: counters per engine label (`"0"` when unlabelled)."""

    engines: dict[str, EngineCounters] = field(default_factory=dict)
    unreadable: int = 0  # vllm: samples left out: NaN, infinite or negative

    @property
    def speculative(self) -> bool:
        return any(e.draft_tokens is not None for e in self.engines.values())


def parse_vllm_metrics(text: str) -> VllmScrape:
    """The vLLM counters of one scrape; MetricsError when the text is not exposition format."""
    if len(text) > MAX_TEXT:
        raise MetricsError(f"/metrics text over {MAX_TEXT} bytes")
    out = VllmScrape()
    try:
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                name = s.name
                key = COUNTERS.get(name)
                gauge = GAUGES.get(name)
                if key is None and gauge is None and name != PER_POS:
                    continue
                if not math.isfinite(s.value) or s.value < 0:
                    out.unreadable += 1
                    continue
                eng_id = s.labels.get("engine", "0")
                eng = out.engines.get(eng_id)
                if eng is None:
                    if len(out.engines) >= MAX_ENGINES:
                        continue
                    eng = out.engines[eng_id] = EngineCounters(eng_id, s.labels.get("model_name"))
                v = float(s.value)
                if key is not None:
                    setattr(eng, key, (getattr(eng, key) or 0.0) + v)  # other labels summed
                elif gauge is not None:
                    setattr(eng, gauge, (getattr(eng, gauge) or 0.0) + v)
                else:
                    pos = _index(s.labels.get("position", ""))
                    if pos is not None and pos < MAX_POSITIONS:
                        eng.per_pos[pos] = eng.per_pos.get(pos, 0.0) + v
    except (ValueError, TypeError, IndexError) as exc:
        raise MetricsError(f"not Prometheus text format: {exc}") from None
    return out


@dataclass
class CounterWindow:
    """What two scrapes say about the window between them (one engine, or all summed).

    Every value is exact over the window (counter deltas); None when the window holds no drafts,
    the version does not export the counter, or a counter went down (`restart`)."""

    engine: str  # engine label, or "all"
    dt_s: float
    drafts: float | None = None
    draft_tokens: float | None = None
    accepted_tokens: float | None = None
    generation_tokens: float | None = None
    accept_rate: float | None = None  # accepted / drafted draft tokens
    accept_len: float | None = None  # 1 + accepted / drafts (bonus included, SGLang's accept len)
    mean_draft_len: float | None = None  # drafted tokens per draft (< k: short ngram drafts)
    per_position: list[float] | None = None  # accepted at position i / drafts
    gen_tok_s: float | None = None  # generation tokens / dt: every emitted token, prefill incl.
    restart: bool = False

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _delta(a: float | None, b: float | None) -> tuple[float | None, bool]:
    if a is None or b is None:
        return None, False
    d = b - a
    return (None, True) if d < 0 else (d, False)


def _window(name: str, pairs: list[tuple[EngineCounters, EngineCounters]], dt: float
            ) -> CounterWindow:
    w = CounterWindow(name, dt)
    sums: dict[str, float | None] = {}
    for key in ("drafts", "draft_tokens", "accepted_tokens", "generation_tokens"):
        total: float | None = 0.0
        for a, b in pairs:
            d, went_down = _delta(getattr(a, key), getattr(b, key))
            w.restart = w.restart or went_down
            total = None if d is None or total is None else total + d
        sums[key] = total
    if w.restart:
        return w
    w.drafts, w.draft_tokens = sums["drafts"], sums["draft_tokens"]
    w.accepted_tokens, w.generation_tokens = sums["accepted_tokens"], sums["generation_tokens"]
    if w.draft_tokens and w.accepted_tokens is not None:
        w.accept_rate = w.accepted_tokens / w.draft_tokens
    if w.drafts:
        if w.accepted_tokens is not None:
            w.accept_len = 1.0 + w.accepted_tokens / w.drafts
        if w.draft_tokens is not None:
            w.mean_draft_len = w.draft_tokens / w.drafts
        positions = sorted(set.intersection(*(set(a.per_pos) & set(b.per_pos) for a, b in pairs)))
        if positions and positions == list(range(len(positions))):
            pp = []
            for i in positions:
                d = sum(b.per_pos[i] - a.per_pos[i] for a, b in pairs)
                if d < 0:
                    w.restart = True
                    return CounterWindow(name, dt, restart=True)
                pp.append(d / w.drafts)
            w.per_position = pp
    if w.generation_tokens is not None and dt > 0:
        w.gen_tok_s = w.generation_tokens / dt
    return w


def windows(before: VllmScrape, after: VllmScrape, dt_s: float) -> list[CounterWindow]:
    """Per engine present in both scrapes, then "all" (the engines summed), over `dt_s` seconds."""
    common = [k for k in after.engines if k in before.engines]
    pairs = [(before.engines[k], after.engines[k]) for k in sorted(common, key=_order)]
    out = [_window(k, [p], dt_s) for k, p in zip(sorted(common, key=_order), pairs, strict=True)]
    if len(pairs) > 1:
        out.append(_window("all", pairs, dt_s))
    return out


def server_window(before: VllmScrape, after: VllmScrape, dt_s: float) -> CounterWindow | None:
    """The whole server's window (all engines summed); None when no engine is in both."""
    ws = windows(before, after, dt_s)
    return ws[-1] if ws else None


def _order(k: str) -> tuple[int, int, str]:
    """Engines in number order ("2" before "10"), then any other label in text order."""
    n = _index(k)
    return (0, n, "") if n is not None else (1, 0, k)
