"""Deterministic generator of realistic SGLang logs (real line formats, realistic mix).

Used by bench/parse_speed.py and by the test that checks the summary fast path agrees exactly
with the general parser.
"""

from __future__ import annotations

import random
from pathlib import Path

# One template per real format family (sglang-observables.md sections 2, 3, 9).
_DECODE = [
    # D10 0.5.9+, speculative
    "[{ts}{tags}] Decode batch, #running-req: {rr}, #token: {tok}, token usage: {use:.2f}, "
    "accept len: {al:.2f}, accept rate: {ar:.2f}, cuda graph: True, gen throughput (token/s): "
    "{gt:.2f}, #queue-req: {q}",
    # D10 baseline
    "[{ts}{tags}] Decode batch, #running-req: {rr}, #token: {tok}, token usage: {use:.2f}, "
    "cuda graph: {cg}, gen throughput (token/s): {gt:.2f}, #queue-req: {q}",
    # D9 (trailing comma)
    "[{ts}{tags}] Decode batch, #running-req: {rr}, #token: {tok}, token usage: {use:.2f}, "
    "cuda graph: {cg}, gen throughput (token/s): {gt:.2f}, #queue-req: {q}, ",
    # D8 with iteration counter, speculative
    "[{ts}{tags}] Decode batch [{it}], #running-req: {rr}, #token: {tok}, token usage: {use:.2f}, "
    "accept len: {al:.2f}, accept rate: {ar:.2f}, cuda graph: True, gen throughput (token/s): "
    "{gt:.2f}, #queue-req: {q}, ",
    # D6 0.4.6.postN, speculative
    "[{ts}{tags}] Decode batch. #running-req: {rr}, #token: {tok}, token usage: {use:.2f}, "
    "accept len: {al:.2f}, cuda graph: True, gen throughput (token/s): {gt:.2f}, #queue-req: {q}",
    # D1 0.3.x, clock only
    "[{clock} TP0] Decode batch. #running-req: {rr}, #token: {tok}, token usage: {use:.2f}, "
    "gen throughput (token/s): {gt:.2f}, #queue-req: {q}",
    # fork with custom logging prefix
    "{ts} INFO {pid} [ DP{r} TP{r} EP{r} scheduler_metrics_mixin.py:222] Decode batch. "
    "#running-req: {rr}, #token: {tok}, token usage: {use:.2f}, accept len: {al:.2f}, "
    "pre-allocated usage: 0.36, #retracted-req: 0, cuda graph: True, gen throughput (token/s): "
    "{gt:.2f}, #queue-req: {q}, ",
    # hybrid mamba
    "[{ts}{tags}] Decode batch, #running-req: {rr}, #full token: {tok}, full token usage: "
    "{use:.2f}, mamba num: 12, mamba usage: 0.05, npu graph: True, gen throughput (token/s): "
    "{gt:.2f}, #queue-req: {q}",
]
_DECODE_WEIGHTS = [30, 30, 10, 5, 5, 3, 3, 2]
_PREFILL = [
    "[{ts}{tags}] Prefill batch, #new-seq: 1, #new-token: {nt}, #cached-token: {ct}, token usage: "
    "{use:.2f}, #running-req: {rr}, #queue-req: {q}, #pending-token: 0, cuda graph: False, "
    "input throughput (token/s): {it_:.2f}",
    "[{ts}{tags}] Prefill batch. #new-seq: 1, #new-token: {nt}, #cached-token: {ct}, token usage: "
    "{use:.2f}, #running-req: {rr}, #queue-req: {q}, ",
]
_OTHER = [
    '[{ts}] INFO:     127.0.0.1:{port} - "POST /generate HTTP/1.1" 200 OK',
    '[{ts}] INFO:     127.0.0.1:{port} - "GET /metrics HTTP/1.1" 200 OK',
    "[{ts}{tags}] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=61.02 GB",
    "[{ts}{tags}] KV Cache is allocated. #tokens: 1048576, K size: 8.00 GB, V size: 8.00 GB",
    "[{ts}] The server is fired up and ready to roll!",
]


def generate_lines(n_lines: int, seed: int = 7, start: int = 0) -> list[str]:
    rnd = random.Random(seed)
    out: list[str] = []
    it = 0
    for i in range(start, start + n_lines):
        sec = i // 20
        day, hour = 1 + (sec // 86400) % 28, (sec // 3600) % 24
        ts = f"2026-11-{day:02d} {hour:02d}:{(sec // 60) % 60:02d}:{sec % 60:02d}"
        clock = ts[11:]
        r = rnd.choice((0, 1, 2, 3))
        tags = rnd.choice(("", " TP0", " TP0 EP0", f" DP{r} TP{r} EP{r}"))
        u = rnd.random()
        rr = rnd.choice((1, 1, 1, 2, 4, 8, 16, 32))
        if u < 0.62:
            it += 40
            tpl = rnd.choices(_DECODE, _DECODE_WEIGHTS)[0]
            gt = (88.8 if rr == 1 else 60.0 * rr ** 0.8) * rnd.uniform(0.95, 1.05)
            al = rnd.uniform(1.5, 3.5)
            out.append(tpl.format(ts=ts, clock=clock, tags=tags, rr=rr, tok=rnd.randint(0, 90000),
                                  use=rnd.random() * 0.5, al=al, ar=(al - 1) / 2, gt=gt,
                                  q=rnd.choice((0, 0, 0, 1, 3)), cg=rnd.choice(("True", "False")),
                                  it=it, pid=8900 + r, r=r))
        elif u < 0.77:
            tpl = rnd.choice(_PREFILL)
            out.append(tpl.format(ts=ts, tags=tags, nt=rnd.randint(1, 8192),
                                  ct=rnd.randint(0, 4096), use=rnd.random() * 0.5, rr=rr,
                                  q=rnd.randint(0, 3), it_=rnd.uniform(100, 20000)))
        else:
            out.append(rnd.choice(_OTHER).format(ts=ts, tags=tags, port=rnd.randint(30000, 60000)))
    return out


def write_log(path: Path, n_lines: int, seed: int = 7) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        chunk = 100_000
        for start in range(0, n_lines, chunk):
            lines = generate_lines(min(chunk, n_lines - start), seed=seed + start, start=start)
            fh.write("\n".join(lines))
            fh.write("\n")
    return path
