"""Deterministic sessions and feeds for UI tests: real SGLang lines, fixed clock."""

from __future__ import annotations

import asyncio
import random

from specmon.parse.sglang import parse_line
from specmon.session.events import LineItem
from specmon.session.state import Session

T0 = 1_700_000_000.0

ARGS_BASE = ("[2026-11-29 10:00:00] server_args=ServerArgs(model_path='meta-llama/Llama-3.1-70B-Instruct', "
             "tp_size=8, port=30000, speculative_algorithm=None)")
ARGS_SPEC = ("[2026-11-29 10:00:00] server_args=ServerArgs(model_path='meta-llama/Llama-3.1-70B-Instruct', "
             "tp_size=8, port=30001, speculative_algorithm='EAGLE3', speculative_num_steps=2, "
             "speculative_eagle_topk=1, speculative_num_draft_tokens=3)")
READY = "[2026-11-29 10:00:05] The server is fired up and ready to roll!"
DECODE = ("[2026-11-29 10:{m:02d}:{s:02d} TP0 EP0] Decode batch, #running-req: 1, #token: {tok}, "
          "token usage: 0.01, {acc}cuda graph: True, gen throughput (token/s): {gt:.2f}, #queue-req: 0")


def decode_line(i: int, gt: float, accept: float | None = None) -> str:
    acc = f"accept len: {accept:.2f}, accept rate: 0.70, " if accept is not None else ""
    return DECODE.format(m=(i // 60) % 60, s=i % 60, tok=1000 + i * 40, acc=acc, gt=gt)


def apply(session: Session, server: str, text: str, t: float) -> None:
    session.server(server).apply(text, parse_line(text), t)


def populated_session(n: int = 30, seed: int = 3) -> Session:
    """Baseline ~88.8 and EAGLE-3 ~94 tok/s at bs 1, n lines each, one per second from T0."""
    rnd = random.Random(seed)
    s = Session(host="test-host")
    s.server("baseline").role = "baseline"
    s.server("speculative").role = "speculative"
    for name, args in (("baseline", ARGS_BASE), ("speculative", ARGS_SPEC)):
        apply(s, name, args, T0)
        apply(s, name, READY, T0)
    for i in range(n):
        t = T0 + 1 + i
        apply(s, "baseline", decode_line(i, rnd.gauss(88.8, 1.2)), t)
        apply(s, "speculative", decode_line(i, rnd.gauss(94.0, 2.0), rnd.gauss(2.4, 0.08)), t)
    return s


class ScriptFeed:
    """Pushes given lines in batches, then idles: a feed with no processes behind it."""

    def __init__(self, batches: list[tuple[str, list[str]]], delay: float = 0.0,
                 clock: float = T0, host: str = "local") -> None:
        self.host = host
        self.batches = batches
        self.delay = delay
        self.clock = clock
        self.done = asyncio.Event()

    async def run(self, sink) -> None:  # noqa: ANN001
        for server, lines in self.batches:
            sink.lines(self.host, server, [LineItem(x, parse_line(x), self.clock) for x in lines])
            if self.delay:
                await asyncio.sleep(self.delay)
        self.done.set()
        await asyncio.Event().wait()
