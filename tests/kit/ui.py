"""Deterministic sessions and feeds for UI tests: real SGLang lines, fixed clock."""

from __future__ import annotations

import asyncio
import random
import time

from specmon.hosts.base import ConnectionState
from specmon.parse.sglang import parse_line
from specmon.session.events import LineItem
from specmon.session.fleet import FleetSession
from specmon.session.state import HostState

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


def apply(session: HostState, server: str, text: str, t: float) -> None:
    session.server(server).apply(text, parse_line(text), t)


def populated_session(n: int = 30, seed: int = 3) -> HostState:
    """Baseline ~88.8 and EAGLE-3 ~94 tok/s at bs 1, n lines each, one per second from T0."""
    rnd = random.Random(seed)
    s = HostState(host="test-host")
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


# --- the demo's steady and drift states, deterministic (snapshot and headline tests) -----------

DEMO_NOW = T0 + 400.0
NCCL_TUNING = {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_P2P_LEVEL": "NVL"}
ARGS_DEMO = ("[2026-11-29 10:00:00] server_args=ServerArgs(model_path='meta-llama/Llama-3.1-70B-"
             "Instruct', tp_size=8, port=30000, base_gpu_id={base}, speculative_algorithm={algo}"
             "{spec})")
SPEC_ARGS = ", speculative_num_steps=2, speculative_eagle_topk=1, speculative_num_draft_tokens=3"
KV_LINE = "[2026-11-29 10:00:02 TP0] Memory pool end. max_total_num_tokens=1200000, avail mem=12.3 GB"


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))


def demo_decode(t: float, k: int, gt: float, accept: float | None = None) -> str:
    """A decode line printed at log time `t` (UTC) by a bs-1 request of up to 1,100 tokens."""
    acc = f"accept len: {accept:.2f}, accept rate: 0.70, " if accept is not None else ""
    return (f"[{_stamp(t)} TP0] Decode batch, #running-req: 1, #token: {600 + (k * 40) % 500}, "
            f"token usage: 0.00, {acc}cuda graph: True, gen throughput (token/s): {gt:.2f}, "
            "#queue-req: 0")


def _nccl_lines(pid: int, tuned: bool) -> list[str]:
    """What 8 TP ranks print with NCCL_DEBUG=INFO, as the simulated host prints it (its format
    follows the real NCCL 2.28 capture)."""
    from specmon.sim.server import sglang_env_edits
    from specmon.sim.worker import nccl_debug_lines

    sglang = {k: v for k, v in sglang_env_edits("0.5.23", False, False).items()
              if k.startswith("NCCL_")}  # what SGLang itself sets before it spawns the ranks
    env = {"NCCL_DEBUG": "INFO", **sglang, **(NCCL_TUNING if tuned else {})}
    return [line for r in range(8) for line in nccl_debug_lines(env, r, pid + r, pid + r, 8)]


def _start(feed, name: str, t: float, spec: bool, nccl: bool) -> None:  # noqa: ANN001
    base = 8 if spec else 0
    args = ARGS_DEMO.format(base=base, algo="'EAGLE3'" if spec else "None",
                            spec=SPEC_ARGS if spec else "")
    feed(name, args.replace("[2026-11-29 10:00:00]", f"[{_stamp(t)}]"), t)
    feed(name, KV_LINE.replace("[2026-11-29 10:00:02", f"[{_stamp(t)}"), t)
    for line in _nccl_lines(4000 + base, nccl):
        feed(name, line, t)
    feed(name, READY.replace("[2026-11-29 10:00:05]", f"[{_stamp(t)}]"), t)


def demo_gpus(t: float, capped: bool = False) -> list:
    """16 simulated H200s: baseline on 0-7, speculative on 8-15 (their pids own them)."""
    from specmon.parse.gpu_sample import GpuProcess, GpuSample

    out = []
    for i in range(16):
        spec = i >= 8
        clock = 1455 if (capped and not spec) else 1980
        out.append(GpuSample(
            ts=t, index=i, name="NVIDIA H200", clock_sm=clock, max_clock_sm=1980,
            clocks_event_reasons=0x4 if (capped and not spec) or i in (3, 11) else 0,
            temp_gpu=52.0 + (i % 8), temp_mem=48.0 + (i % 5), power_w=388.0 + (i % 3),
            power_limit_w=330.0 if (capped and not spec) else 700.0, util_gpu=100.0,
            mem_used_mib=127_133.0, mem_total_mib=143_771.0,
            processes=(GpuProcess(pid=5000 + i, used_mib=127_000.0),)))
    return out


def demo_fleet(drift: bool, spec_nccl: bool = True) -> FleetSession:
    """The demo after a few minutes, fed through the session model's event methods: baseline
    recorded at ~88.8 tok/s with NCCL tuning, EAGLE-3 at ~94, both watched from the recording
    on; with `drift`, the baseline restarted without the NCCL variables and runs at ~62.9."""
    now = {"t": DEMO_NOW}
    fleet = FleetSession(["demo"], clock=lambda: now["t"])
    fleet.host_state("demo", ConnectionState("connected"))  # the demo's host is this machine

    def feed(name: str, text: str, t: float) -> None:
        fleet.lines("demo", name, [LineItem(text, parse_line(text), t)])

    rnd = random.Random(7)
    s = fleet.host("demo").session
    s.server("baseline").role = "baseline"
    s.server("speculative").role = "speculative"
    t_start = DEMO_NOW - 390
    _start(feed, "baseline", t_start, spec=False, nccl=True)
    _start(feed, "speculative", t_start, spec=True, nccl=spec_nccl)
    s.server("baseline").pids = {4000, *range(5000, 5008)}
    s.server("speculative").pids = {4008, *range(5008, 5016)}
    for k in range(0, 390, 2):
        t = t_start + 1 + k
        fleet.gpus("demo", demo_gpus(t))
        if not (drift and k > 250):
            feed("baseline", demo_decode(t, k, rnd.gauss(88.8, 0.9)), t)
        feed("speculative", demo_decode(t + 0.5, k, rnd.gauss(94.0, 1.8), rnd.gauss(2.4, 0.06)),
             t + 0.5)
        if k == 200:
            now["t"] = t
            for name in ("baseline", "speculative"):
                fleet.record_baseline("demo", name, name=f"demo/{name}/recorded")
    if drift:
        _start(feed, "baseline", t_start + 252, spec=False, nccl=False)
        for k in range(254, 390, 2):
            t = t_start + 1 + k
            feed("baseline", demo_decode(t, k, rnd.gauss(62.9, 0.7)), t)
    now["t"] = DEMO_NOW
    fleet.tick(DEMO_NOW)
    return fleet


def demo_app(drift: bool, spec_nccl: bool = True, restart: bool = False, **kwargs):  # noqa: ANN201
    """A SpecmonApp on `demo_fleet(drift)`, whose drift watches have seen the whole session.

    `spec_nccl=False`: the speculative server runs without the NCCL tuning (the runs' conditions
    differ); `restart`: the baseline has just restarted (start-up lines, no decode line yet)."""
    from specmon.ui.app import SpecmonApp

    fleet = demo_fleet(drift, spec_nccl)
    now = DEMO_NOW
    if restart:
        now = DEMO_NOW + 6

        def feed(name: str, text: str, t: float) -> None:
            fleet.lines("demo", name, [LineItem(text, parse_line(text), t)])

        _start(feed, "baseline", DEMO_NOW + 5, spec=False, nccl=True)
        fleet.tick(now)
    return SpecmonApp(fleet, clock=lambda: now, show_clock=False, **kwargs)


def phantom_baseline_app(tmp_path):  # noqa: ANN001, ANN201 - a SpecmonApp over the demo
    """The live demo's phantom-baseline scenario (real simulated servers, fast start-up, short
    phases) in an app whose baselines go to a store under `tmp_path`."""
    from specmon.feeds.demo import DemoFeed, default_servers
    from specmon.session.baselines import BaselineStore
    from specmon.ui.app import SpecmonApp

    servers = default_servers()
    for s in servers:
        s.args += ["--startup-s", "0.5"]
    # the baseline logs a decode line every 10 steps, not 40: the scenario's phases count its
    # lines (the noise moves once a line), so they take ~20 s, not ~75 s; the speculative
    # server keeps SGLang's default (its lines span 40 cycles, request gaps included)
    servers[0].args += ["--decode-log-interval", "10"]
    # 40 lines between the recording and the first incident: the "OK vs recorded" verdict
    # they make lasted ~0.2 s with 20, which a UI sampled every 0.1 s missed on a busy machine
    feed = DemoFeed(servers, workdir=tmp_path, scenario="phantom-baseline", record_after=40,
                    phase_lines=50, settle_lines=40)
    return SpecmonApp(HostState(host="demo"), feed, show_clock=False,
                      baseline_store=BaselineStore(tmp_path / "b.sqlite3"))
