"""vLLM logs built from vLLM's own format strings (`specmon.sim.vllm_formats`, copied verbatim
from the releases): a data-parallel server (one `Engine NNN:` line per engine per interval,
each followed by its spec line) or a one-engine server, of any release's layout."""

from __future__ import annotations

import random
import time

from specmon.sim import vllm_formats as vf

T0 = time.mktime((2026, 11, 20, 10, 0, 0, 0, 0, -1))  # local time: vLLM prints no zone


def vllm_log(version: str = "0.11.0", *, spec: bool = True, engines: int = 1, intervals: int = 30,
             running: int = 8, prefix_hit: float | None = 50.0, interval_s: float = 10.0,
             k: int = 3, seed: int = 3, config: bool = True, prefill_first: bool = False,
             prefix_hits: list[float | None] | None = None,
             idle: tuple[int, float] | None = None) -> list[str]:
    """Lines of one launch: the config line (every DP engine's copy, as <= 0.11 prints it; with
    `data_parallel_size=engines` where the release prints it), then `intervals` stats intervals.
    `prefill_first`: the first interval is a prefill-only one (no drafts: no spec line from
    0.9.0 on). `prefix_hits`: each engine's printed prefix cache hit rate. `idle` (i, s): s
    seconds without a line before interval i (0.8.5+ prints nothing while idle)."""
    rnd = random.Random(seed)
    out: list[str] = []
    method, draft = ("eagle3", "org/Qwen3-8B-eagle3") if spec else (None, None)
    api = vf.tag_prefix(version, vf.api_tag(version), 200, no_color=True)
    if config:
        for e in range(engines):
            msg = vf.config_message(version, model="Qwen/Qwen3-8B",
                                    served_model_name="Qwen/Qwen3-8B", method=method,
                                    draft=draft, k=k, tp=1, seed=0, max_model_len=32768)
            msg = msg.replace("data_parallel_size=1", f"data_parallel_size={engines}")
            tag = vf.tag_prefix(version, vf.engine_core_name(version, e, engines), 201 + e,
                                no_color=True)
            out.append(vf.line(version, T0, msg, filename="core.py", lineno=93, tag=tag))
    t = T0 + 30.0
    for i in range(intervals):
        if idle is not None and i == idle[0]:
            t += idle[1]
        for e in range(engines):
            drafts = rnd.randint(900, 1100) if spec else 0
            if prefill_first and i == 0:
                drafts = 0
            per_pos = [int(round(drafts * p)) for p in (0.80, 0.60, 0.42)[:k]]
            acc = sum(per_pos)
            gen = (acc + drafts) / interval_s if spec else rnd.uniform(195.0, 205.0)
            if prefill_first and i == 0:
                gen = 8.0
            hit = prefix_hits[e] if prefix_hits is not None else prefix_hit
            msg = vf.engine_message(version, engine=e, prompt_tps=0.0, gen_tps=gen,
                                    running=running, waiting=0, kv_usage_pct=20.0,
                                    prefix_hit_pct=hit)
            out.append(vf.line(version, t, msg, filename="loggers.py",
                               lineno=vf.engine_lineno(version), tag=api))
            if spec:
                sm = vf.spec_message(version, num_drafts=drafts, num_draft_tokens=k * drafts,
                                     num_accepted=acc, accepted_per_pos=per_pos,
                                     elapsed_s=interval_s)
                if sm is not None:
                    out.append(vf.line(version, t, sm, filename="metrics.py",
                                       lineno=vf.spec_lineno(version), tag=api))
        t += interval_s
    return out
