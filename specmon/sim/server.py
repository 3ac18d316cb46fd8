"""`specmon sim server`: a process tree, log and HTTP surface like `python -m sglang.launch_server`.

Main process: HTTP server (stdlib, threads), the scheduler engine (a thread that sleeps for each
simulated forward pass), log writing. Workers: one spawned process per TP rank
(specmon.sim.worker), which report their env-derived communication cost and GPU clock; the
slowest rank sets the step time, as an all-reduce does.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import random
import signal
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from multiprocessing.connection import Connection, wait
from pathlib import Path
from queue import Empty, Queue
from typing import Any

from specmon.sim import formats
from specmon.sim.engine import Engine, EngineConfig, Request, render
from specmon.sim.gpu_model import (
    MEM_TOTAL_MIB,
    default_sim_dir,
    register_server,
    unregister_server,
)
from specmon.sim.perf import RankSpeed, SpecConfig, nccl_comm_ms
from specmon.sim.worker import LogWriter, detokenizer_main, worker_main


class SimError(Exception):
    """Bad options or a start-up failure: one line for the user."""


_WORDS = (
    " the", " model", " draft", " token", " is", " accepted", " and", " verified", " in", " one",
    " pass", ",", " so", " decoding", " runs", " faster", ".", " We", " measure", " throughput",
)  # fmt: skip

TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0,
                100.0, 200.0, 400.0)  # fmt: skip
E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0,
               100.0, 200.0, 400.0, 600.0, 1200.0, 1800.0, 2400.0)  # fmt: skip


def _cuda_graph_bs(max_bs: int) -> list[int]:
    return [b for b in [1, 2, 4, 8, 12, *range(16, 1025, 8)] if b <= max_bs]


def sglang_env_edits(version: str, symm_mem: bool, nvls: bool) -> dict[str, str]:
    """What SGLang's _set_envs_and_config writes into os.environ before spawning (section 7.3)."""
    env = os.environ
    out: dict[str, str] = {}
    if not formats.ge(version, "0.5.1"):
        out["NCCL_CUMEM_ENABLE"] = "0"
        out["NCCL_NVLS_ENABLE"] = str(int(nvls)) if formats.ge(version, "0.4.3") else "0"
        out["TORCH_NCCL_AVOID_RECORD_STREAMS"] = "1"
        out["CUDA_DEVICE_MAX_CONNECTIONS"] = "1" if not formats.ge(version, "0.3.4") else "4"
    elif not formats.ge(version, "0.5.5"):
        out["NCCL_CUMEM_ENABLE"] = str(int(symm_mem))
        if not symm_mem:
            out["NCCL_NVLS_ENABLE"] = str(int(nvls))
        out["CUDA_DEVICE_MAX_CONNECTIONS"] = "4"
        out["TRTLLM_ENABLE_PDL"] = "1"
    else:
        if "NCCL_CUMEM_ENABLE" not in env or symm_mem:
            out["NCCL_CUMEM_ENABLE"] = str(int(symm_mem))
        if "NCCL_NVLS_ENABLE" not in env or nvls or symm_mem:
            out["NCCL_NVLS_ENABLE"] = str(int(nvls or symm_mem))
        out["CUDA_DEVICE_MAX_CONNECTIONS"] = "8"
        out["TRTLLM_ENABLE_PDL"] = "1"
    return out


class SimServer:
    def __init__(self, opts: argparse.Namespace) -> None:
        try:
            self.version = self._check_version(opts)
        except ValueError as exc:
            raise SimError(str(exc)) from None
        self.opts = opts
        self.tp = max(1, int(opts.tp_size))
        if opts.decode_log_interval < 1:
            raise SimError("--decode-log-interval must be >= 1")
        self.spec = self._spec_config(opts)
        self.model_name = opts.served_model_name or opts.model_path
        self.name = opts.name or f"sim-{opts.port}"
        sim_dir = opts.sim_dir or os.environ.get("SPECMON_SIM_DIR")
        self.sim_dir: Path | None = Path(sim_dir) if sim_dir else default_sim_dir()
        self.gpus = [opts.base_gpu_id + r for r in range(self.tp)]
        if self.gpus[-1] >= opts.n_gpus:
            raise SimError(
                f"--base-gpu-id {opts.base_gpu_id} + --tp-size {self.tp} exceeds the "
                f"{opts.n_gpus} simulated GPUs"
            )
        self.log_ms = os.environ.get("SGLANG_LOG_MS", "") in ("1", "true", "True")
        self.log_iters = os.environ.get("SGLANG_LOG_FORWARD_ITERS", "") in ("1", "true", "True")
        self.device_timer = os.environ.get("SGLANG_ENABLE_METRICS_DEVICE_TIMER", "") in (
            "1", "true", "True")
        self.mfu = bool(getattr(opts, "enable_mfu_metrics", False)) and opts.enable_metrics
        self.info_on = opts.log_level in ("debug", "info")
        self.tag0 = formats.rank_tag(self.version, tp_size=self.tp, tp_rank=0)
        # memory plan (cosmetic but self-consistent): a ~70B bf16 model sharded over tp GPUs
        self.avail0 = 139.12
        self.weight_gb = min(17.6 * 8 / self.tp, 60.0)
        kv_gb = max(4.0, self.avail0 * opts.mem_fraction_static - self.weight_gb - 4.0)
        self.max_total_tokens = int(kv_gb * 1e9 / (327_680 / self.tp))
        max_running = opts.max_running_requests or (48 if self.spec else 2048)
        self.cuda_graph_max_bs = opts.cuda_graph_max_bs or (48 if self.spec else 256)
        seed = opts.seed if opts.seed is not None else random.randrange(1 << 30)
        self.engine_cfg = EngineConfig(
            tp_size=self.tp,
            decode_log_interval=opts.decode_log_interval,
            max_running_requests=max_running,
            max_total_num_tokens=self.max_total_tokens,
            cuda_graph_max_bs=self.cuda_graph_max_bs,
            disable_cuda_graph=opts.disable_cuda_graph,
            spec=self.spec,
            adaptive_steps=self._adaptive(opts),
            patch_overhead=max(0.0, float(opts.patch_overhead)),
            load_concurrency=max(0, opts.load_concurrency),
            load_input_len=max(1, opts.load_input_len),
            load_output_len=max(1, opts.load_output_len),
            seed=seed,
        )
        self.engine = Engine(self.engine_cfg, [RankSpeed(nccl_comm_ms(self.tp, {}))] * self.tp)
        self.lock = threading.RLock()
        self.wake = threading.Event()
        self.stop = threading.Event()
        self.status = "starting"
        self.exit_code = 0
        self.started = time.time()
        self.log = LogWriter(opts.log_file, 2)
        self.out = LogWriter(opts.log_file, 1)  # uvicorn access lines go to stdout in SGLang
        self.workers: list[mp.process.BaseProcess] = []
        self.conns: dict[Connection, int] = {}  # conn -> rank (-1 = detokenizer)
        self.rank_info: dict[int, dict[str, Any]] = {}
        self.ready_ranks: set[int] = set()
        self.worker_failed = threading.Event()
        self.ttft_hist = [0] * (len(TTFT_BUCKETS) + 1)
        self.e2e_hist = [0] * (len(E2E_BUCKETS) + 1)
        self.ttft_sum = self.e2e_sum = 0.0
        self.hist_count = 0
        self.httpd: ThreadingHTTPServer | None = None
        self.engine.on_finish = self._on_finish
        self._last_load: dict[str, Any] | None = None
        self._last_load_write = 0.0
        self._last_busy_intensity = 0.0

    # ------------------------------------------------------------------ config
    def _check_version(self, opts: argparse.Namespace) -> str:
        return formats.check_version(opts.format_version or formats.NEWEST)

    def _spec_config(self, opts: argparse.Namespace) -> SpecConfig | None:
        algo = opts.speculative_algorithm
        if not algo:
            return None
        algo = algo.upper()
        if not formats.has_spec_fields(self.version):
            raise SimError(
                "--speculative-algorithm needs --format-version >= 0.4.1.post7 "
                f"(got {self.version})"
            )
        if algo == "EAGLE3" and not formats.ge(self.version, "0.4.5"):
            raise SimError(f"EAGLE3 needs --format-version >= 0.4.5 (got {self.version})")
        if algo == "DSPARK" and not formats.ge(self.version, "0.5.18"):
            raise SimError(f"DSPARK needs --format-version >= 0.5.18 (got {self.version})")
        steps = opts.speculative_num_steps or 3
        topk = opts.speculative_eagle_topk or 1
        ndt = opts.speculative_num_draft_tokens or (steps + 1)
        if topk == 1:
            ndt = steps + 1  # SGLang adjusts it and says so
        if not 0.0 <= opts.accept_prob < 1.0:
            raise SimError("--accept-prob must be in [0, 1)")
        return SpecConfig(algo, steps, topk, ndt, opts.accept_prob)

    def _adaptive(self, opts: argparse.Namespace) -> tuple[int, ...] | None:
        if not getattr(opts, "speculative_adaptive", False):
            return None
        if self.spec is None or self.spec.algorithm not in ("EAGLE", "EAGLE3") or (
                self.spec.eagle_topk != 1):
            raise SimError("--speculative-adaptive needs EAGLE/EAGLE3 with topk 1")
        if not formats.ge(self.version, "0.5.23"):
            raise SimError(f"--speculative-adaptive is modelled from --format-version 0.5.23 "
                           f"(got {self.version})")
        return (1, 3, 7)

    def server_args(self) -> dict[str, Any]:
        o = self.opts
        s = self.spec
        args: dict[str, Any] = {
            "model_path": o.model_path,
            "tokenizer_path": o.model_path,
            "tokenizer_mode": "auto",
            "skip_tokenizer_init": False,
            "load_format": "auto",
            "trust_remote_code": False,
            "dtype": "auto",
            "kv_cache_dtype": "auto",
            "quantization": None,
            "context_length": None,
            "device": "cuda",
            "served_model_name": self.model_name,
            "chat_template": None,
            "is_embedding": False,
            "revision": None,
            "host": o.host,
            "port": o.port,
            "mem_fraction_static": o.mem_fraction_static,
            "max_running_requests": self.engine_cfg.max_running_requests,
            "max_total_tokens": None,
            "chunked_prefill_size": 8192,
            "max_prefill_tokens": self.engine_cfg.max_prefill_tokens,
            "schedule_policy": "fcfs",
            "schedule_conservativeness": 1.0,
            "page_size": 1,
            "tp_size": self.tp,
            "pp_size": 1,
            "stream_interval": 1,
            "random_seed": self.engine_cfg.seed,
            "log_level": o.log_level,
            "log_level_http": None,
            "log_requests": False,
            "show_time_cost": False,
            "enable_metrics": o.enable_metrics,
            "decode_log_interval": o.decode_log_interval,
            "api_key": None,
            "dp_size": 1,
            "load_balance_method": "round_robin",
            "ep_size": 1,
            "base_gpu_id": o.base_gpu_id,
            "gpu_id_step": 1,
            "speculative_algorithm": s.algorithm if s else None,
            "speculative_draft_model_path": o.speculative_draft_model_path if s else None,
            "speculative_num_steps": s.num_steps if s else None,
            "speculative_eagle_topk": s.eagle_topk if s else None,
            "speculative_num_draft_tokens": s.num_draft_tokens if s else None,
            "attention_backend": "flashinfer",
            "disable_cuda_graph": o.disable_cuda_graph,
            "cuda_graph_max_bs": self.cuda_graph_max_bs,
            "cuda_graph_bs": None,
            "disable_custom_all_reduce": o.disable_custom_all_reduce,
            "enable_nccl_nvls": o.enable_nccl_nvls,
            "disable_overlap_schedule": False,
        }
        if formats.ge(self.version, "0.5.1"):
            args["enable_symm_mem"] = o.enable_symm_mem
        return args

    # ------------------------------------------------------------------ logging
    def main_log(self, msg: str) -> None:
        self.log.write(formats.line(self.version, time.time(), msg, "", log_ms=self.log_ms))

    def sched_log(self, msg: str, t: float | None = None) -> None:
        t = time.time() if t is None else t
        self.log.write(formats.line(self.version, t, msg, self.tag0, log_ms=self.log_ms))

    def access_log(self, client: str, method: str, path: str, status: int, reason: str) -> None:
        if not self.info_on:
            return
        body = formats.access_message(client, method, path, status, reason)
        if formats.ge(self.version, "0.4.1.post1"):
            body = formats.line(self.version, time.time(), body, "", log_ms=self.log_ms)
        self.out.write(body)

    # ------------------------------------------------------------------ lifecycle
    def run(self) -> int:
        self._install_signals()
        try:
            self.httpd = _HttpServer((self.opts.host, self.opts.port), self.make_handler())
        except OSError as exc:
            where = f"{self.opts.host}:{self.opts.port}"
            raise SimError(f"cannot bind {where}: {exc.strerror}") from None
        self.httpd.daemon_threads = True
        if self.serve_early:
            self._serve()
        try:
            self._start()
            if not self.stop.is_set():
                while not self.stop.wait(0.2):
                    pass
        finally:
            self._shutdown()
        return self.exit_code

    serve_early = True  # SGLang answers HTTP (503) while it starts

    def _serve(self) -> None:
        if self.httpd is not None:
            threading.Thread(target=self.httpd.serve_forever, name="http", daemon=True).start()

    def _child_failed_log(self) -> None:
        self.main_log("Received sigquit from a child process. It usually means the child failed.")

    def _rank_dead_log(self, rank: int) -> None:
        self.main_log(f"Rank {rank} scheduler is dead. Please check if there are relevant logs.")

    def _write_records(self, records: list[Any]) -> None:
        if not self.info_on:
            return
        for rec in records:
            self.log.write(
                render(rec, self.version, self.tag0, spec=self.spec, log_ms=self.log_ms,
                       log_forward_iters=self.log_iters, device_timer=self.device_timer,
                       mfu=self.mfu, tp_size=self.tp)  # fmt: skip
            )

    def make_handler(self) -> type[BaseHTTPRequestHandler]:
        return _make_handler(self)

    def _uvicorn_log(self, text: str) -> None:
        self.main_log(text)

    def _install_signals(self) -> None:
        def on_term(signum: int, frame: Any) -> None:
            self.request_stop(0)

        def on_quit(signum: int, frame: Any) -> None:
            self._child_failed_log()
            self.request_stop(1)

        signal.signal(signal.SIGTERM, on_term)
        signal.signal(signal.SIGINT, on_term)
        signal.signal(signal.SIGQUIT, on_quit)

    def request_stop(self, code: int) -> None:
        if not self.stop.is_set():
            self.exit_code = code
            self.status = "stopping"
            self.stop.set()
            self.wake.set()

    def _sleep(self, seconds: float) -> bool:
        """Stop-aware sleep; False when asked to stop."""
        return not self.stop.wait(max(0.0, seconds))

    def _start(self) -> None:
        v = self.version
        o = self.opts
        self.main_log(formats.server_args_message(v, self.server_args()))
        if self.spec is not None:
            if formats.ge(v, "0.5.4") and o.max_running_requests is None:
                self.main_log(
                    "Max running requests is reset to 48 for speculative decoding. You can "
                    "override this by explicitly setting --max-running-requests."
                )
            if self.spec.eagle_topk == 1 and o.speculative_num_draft_tokens not in (
                None,
                self.spec.num_draft_tokens,
            ):
                self.main_log(
                    "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 "
                    "when speculative_eagle_topk == 1"
                )
        os.environ.update(
            sglang_env_edits(v, o.enable_symm_mem, o.enable_nccl_nvls and not o.enable_symm_mem)
        )
        if not self._start_workers(lambda: self.main_log(
                "Scheduler processes did not start in 120 s.")):
            return
        self._register()
        self._startup_lines()
        if self.stop.is_set():
            return
        threading.Thread(target=self._engine_loop, name="scheduler", daemon=True).start()
        threading.Thread(target=self._ticker, name="load", daemon=True).start()
        self._warmup()
        if self.stop.is_set():
            return
        self.status = "ready"
        self.ready_time = time.time()
        self.main_log("The server is fired up and ready to roll!")
        self._register()
        with self.lock:
            self.engine.start_load(time.time())
        self.wake.set()
        if o.crash_after is not None:
            threading.Thread(target=self._crash_timer, name="crash", daemon=True).start()

    def _start_workers(self, say_timeout: Callable[[], None], timeout_s: float = 120.0) -> bool:
        """Spawn the TP workers (the env they inherit is what they keep: variables set after
        the spawn never reach them, as with a real launcher) and wait until every rank is
        ready; False when stopped, a worker failed or they did not start in time (said)."""
        self._register()
        self._spawn()
        for item in self.opts.set_env_after_spawn:
            key, sep, value = item.partition("=")
            if sep and key:
                os.environ[key] = value  # too late: the workers already have their env
        threading.Thread(target=self._pump, name="workers", daemon=True).start()
        deadline = time.time() + timeout_s
        while len(self.ready_ranks) < self.tp:
            if self.stop.is_set() or self.worker_failed.is_set():
                return False
            if time.time() > deadline:
                say_timeout()
                self.request_stop(1)
                return False
            time.sleep(0.02)
        return True

    def _spawn(self) -> None:
        ctx = mp.get_context("spawn")
        base = {
            "version": self.version,
            "tp_size": self.tp,
            "log_file": self.opts.log_file,
            "log_ms": self.log_ms,
            "sim_dir": str(self.sim_dir) if self.sim_dir else None,
            "n_gpus": self.opts.n_gpus,
        }
        if formats.ge(self.version, "0.4.1"):
            parent, child = ctx.Pipe()
            p = ctx.Process(
                target=detokenizer_main,
                args=({"title": "sglang::detokenizer"}, child),
                name="detokenizer",
                daemon=True,
            )
            p.start()
            child.close()
            self.workers.append(p)
            self.conns[parent] = -1
        for rank in range(self.tp):
            cfg = dict(base)
            cfg["title"] = formats.proc_title(self.version, tp_size=self.tp, tp_rank=rank)
            cfg["tag"] = formats.rank_tag(self.version, tp_size=self.tp, tp_rank=rank)
            cfg["gpu"] = self.gpus[rank]
            parent, child = ctx.Pipe()
            p = ctx.Process(
                target=worker_main, args=(cfg, rank, child), name=f"tp{rank}", daemon=True
            )
            p.start()
            child.close()
            self.workers.append(p)
            self.conns[parent] = rank

    def _pump(self) -> None:
        """Messages from the workers; a worker that goes away unasked takes the server down."""
        while self.conns and not self.stop.is_set():
            for conn in wait(list(self.conns), timeout=0.5):
                if not isinstance(conn, Connection):  # wait() hands back what it was given
                    continue
                rank = self.conns.get(conn)
                if rank is None:
                    continue
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    del self.conns[conn]
                    if not self.stop.is_set() and rank >= 0:
                        time.sleep(0.3)  # let a crashing rank's SIGQUIT arrive first
                        if not self.stop.is_set():
                            self._rank_dead_log(rank)
                            self.worker_failed.set()
                            self.request_stop(1)
                    continue
                if rank < 0 or not isinstance(msg, dict):
                    continue
                info = self.rank_info.setdefault(rank, {})
                info.update({k: v for k, v in msg.items() if k != "type"})
                if msg.get("type") == "ready":
                    self.ready_ranks.add(rank)
                self._update_ranks()

    def _update_ranks(self) -> None:
        ranks = []
        for r in range(self.tp):
            info = self.rank_info.get(r, {})
            ranks.append(
                RankSpeed(
                    float(info.get("comm_ms", nccl_comm_ms(self.tp, {}))),
                    float(info.get("clock_ratio", 1.0)),
                )
            )
        with self.lock:
            self.engine.ranks = ranks

    def _startup_lines(self) -> None:
        v = self.version
        if self.engine.adaptive is not None:
            self.sched_log(formats.adaptive_init_message(self.engine.adaptive.current,
                                                         self.engine.adaptive.candidates))
        total = max(0.0, float(self.opts.startup_s))
        self.sched_log(f"Load weight begin. avail mem={self.avail0:.2f} GB")
        if not self._sleep(total * 0.45):
            return
        avail = self.avail0 - self.weight_gb
        arch = "LlamaForCausalLM"
        self.sched_log(
            f"Load weight end. type={arch}, dtype=torch.bfloat16, avail mem={avail:.2f} GB, "
            f"mem usage={self.weight_gb:.2f} GB."
        )
        kv_size = self.max_total_tokens * 327_680 / self.tp / 2 / 1e9
        self.sched_log(
            f"KV Cache is allocated. #tokens: {self.max_total_tokens}, K size: {kv_size:.2f} GB, "
            f"V size: {kv_size:.2f} GB"
        )
        avail -= 2 * kv_size
        self.sched_log(f"Memory pool end. avail mem={avail:.2f} GB")
        if not self._sleep(total * 0.05):
            return
        if not self.opts.disable_cuda_graph:
            bs = _cuda_graph_bs(self.cuda_graph_max_bs)
            for msg in formats.capture_begin_message(v, bs, avail):
                self.sched_log(msg)
            t0 = time.time()
            if not self._sleep(total * 0.4):
                return
            self.sched_log(formats.capture_end_message(v, time.time() - t0, 1.62, avail - 1.62))
            avail -= 1.62
        self.sched_log(
            formats.max_tokens_message(
                v,
                max_total_num_tokens=self.max_total_tokens,
                chunked_prefill_size=8192,
                max_prefill_tokens=self.engine_cfg.max_prefill_tokens,
                max_running_requests=self.engine_cfg.max_running_requests,
                context_len=self.engine_cfg.context_len,
                available_gpu_mem=avail,
            )
        )
        pid = os.getpid()
        for msg in (
            f"Started server process [{pid}]",
            "Waiting for application startup.",
            "Application startup complete.",
            f"Uvicorn running on http://{self.opts.host}:{self.opts.port} (Press CTRL+C to quit)",
        ):
            self.main_log(f"INFO:     {msg}")
        self._sleep(total * 0.1)

    def _warmup(self) -> None:
        """SGLang's own warm-up request: one prefill, a few tokens, an access line."""
        done = threading.Event()

        def sink(_n: int, fin: bool) -> None:
            if fin:
                done.set()

        with self.lock:
            self.engine.submit(time.time(), 6, 8, sink=sink)
        self.wake.set()
        while not done.wait(0.1):
            if self.stop.is_set():
                return
        self.access_log("127.0.0.1:" + str(random.randint(30000, 60000)), "POST", "/generate",
                        200, "OK")  # fmt: skip

    def _crash_timer(self) -> None:
        if not self._sleep(float(self.opts.crash_after or 0)):
            return
        for conn, rank in list(self.conns.items()):
            if rank == 0:
                with contextlib.suppress(OSError):
                    conn.send("crash")

    def _engine_loop(self) -> None:
        t_engine = time.time()
        while not self.stop.is_set():
            with self.lock:
                now = t_engine
                res = self.engine.step(now)
                nxt = self.engine.next_arrival()
            if res is None:
                wait_s = 0.25 if nxt is None else min(0.25, max(0.0, nxt - time.time()))
                self.wake.wait(wait_s)
                self.wake.clear()
                t_engine = time.time()
                continue
            if not self._sleep(res.end - time.time()):
                break
            self._write_records(res.records)
            for req, n, fin in res.tokens:
                if req.sink is not None:
                    req.sink(n, fin)
            t_engine = res.end
            if time.time() - t_engine > 0.25:  # fell far behind (a stalled host): resync
                t_engine = time.time()

    def _on_finish(self, req: Request) -> None:
        if req.first_token_time is None or req.finish_time is None or req.max_new_tokens == 8:
            return
        ttft = req.first_token_time - req.arrival
        e2e = req.finish_time - req.arrival
        self.ttft_sum += ttft
        self.e2e_sum += e2e
        self.hist_count += 1
        for hist, buckets, val in ((self.ttft_hist, TTFT_BUCKETS, ttft),
                                   (self.e2e_hist, E2E_BUCKETS, e2e)):  # fmt: skip
            idx = next((i for i, b in enumerate(buckets) if val <= b), len(buckets))
            hist[idx] += 1

    def _ticker(self) -> None:
        while not self.stop.wait(0.5):
            self._register(periodic=True)

    def _register(self, periodic: bool = False) -> None:
        if self.sim_dir is None:
            return
        now = time.time()
        with self.lock:
            load = self.engine.load_state(now)
        if load["busy"]:
            self._last_busy_intensity = load["intensity"]
        load["last_intensity"] = self._last_busy_intensity
        if periodic and load == self._last_load and now - self._last_load_write < 5.0:
            return
        self._last_load = dict(load)
        self._last_load_write = now
        worker_pids = {
            str(self.gpus[r]): info["pid"] for r, info in self.rank_info.items() if "pid" in info
        }
        data = {
            "name": self.name,
            "pid": os.getpid(),
            "host": self.opts.host,
            "port": self.opts.port,
            "gpus": self.gpus,
            "worker_pids": worker_pids,
            "mem_used_mib": int(MEM_TOTAL_MIB * self.opts.mem_fraction_static),
            "model_path": self.opts.model_path,
            "engine": getattr(self.opts, "engine", None) or "sglang",
            "format_version": self.version,
            "speculative_algorithm": self.spec.algorithm if self.spec else None,
            "status": self.status,
            "started": self.started,
            "log_file": self.opts.log_file,
            "load": load,
        }
        with contextlib.suppress(OSError):
            register_server(self.sim_dir, self.name, data)

    def _shutdown(self) -> None:
        self.status = "stopping"
        self.stop.set()
        self.wake.set()
        if self.httpd is not None:
            with contextlib.suppress(Exception):
                self.httpd.shutdown()
                self.httpd.server_close()
        for conn in list(self.conns):
            with contextlib.suppress(OSError):
                conn.send("stop")
        deadline = time.time() + 3.0
        for p in self.workers:
            p.join(max(0.0, deadline - time.time()))
        for p in self.workers:
            if p.is_alive():
                p.terminate()
                p.join(1.0)
            if p.is_alive():
                p.kill()
                p.join(1.0)
        if self.sim_dir is not None:
            unregister_server(self.sim_dir, self.name)
        if self.exit_code == 0:
            for msg in ("Shutting down", "Waiting for application shutdown.",
                        "Application shutdown complete.",
                        f"Finished server process [{os.getpid()}]"):  # fmt: skip
                self._uvicorn_log(f"INFO:     {msg}")
        self.log.close()
        self.out.close()

    # ------------------------------------------------------------------ HTTP views
    def server_info(self) -> dict[str, Any]:
        v = self.version
        args = self.server_args()
        with self.lock:
            last = self.engine.last_gen_throughput
            avg_acc = self.engine.avg_spec_accept_length
        sched = {
            "status": "ready",
            "max_total_num_tokens": self.max_total_tokens,
            "max_req_input_len": self.engine_cfg.context_len - 1,
        }
        internal: dict[str, Any] = {"last_gen_throughput": last}
        if avg_acc is not None:
            internal["avg_spec_accept_length"] = avg_acc
        if not formats.ge(v, "0.4.6.post1"):
            return {**args, **sched, **internal, "version": v}
        state: dict[str, Any] = dict(args) if formats.ge(v, "0.5.8") else {
            k: args[k] for k in ("model_path", "tp_size", "speculative_algorithm",
                                 "max_running_requests", "cuda_graph_max_bs")
        }  # fmt: skip
        state.update(internal)
        if formats.ge(v, "0.4.9"):
            key = "graph" if formats.ge(v, "0.5.0") else "cuda_graph"
            state["memory_usage"] = {
                "weight": round(self.weight_gb, 2),
                "kvcache": round(self.max_total_tokens * 327_680 / self.tp / 1e9, 2),
                "token_capacity": self.max_total_tokens,
                key: 1.62,
            }
        if formats.ge(v, "0.5.8"):
            state["effective_max_running_requests_per_dp"] = self.engine_cfg.max_running_requests
        out = {**args, **sched, "internal_states": [state], "version": v}
        if formats.ge(v, "0.5.23"):
            out.update(
                {
                    "launch_command": "python -m sglang.launch_server "
                    f"--model-path {self.opts.model_path} --tp-size {self.tp}",
                    "startup_time": round(getattr(self, "ready_time", self.started) - self.started,
                                          3),  # fmt: skip
                    "frontend": "python",
                }
            )
        return out

    def model_info(self) -> dict[str, Any]:
        return {
            "model_path": self.opts.model_path,
            "tokenizer_path": self.opts.model_path,
            "is_generation": True,
        }

    def metrics_text(self) -> str:
        v = self.version
        labels = {"model_name": self.model_name}
        if formats.ge(v, "0.4.4"):
            labels["engine_type"] = "unified"
        if formats.ge(v, "0.4.10"):
            labels.update({"pp_rank": "0", "tp_rank": "0"})
        if formats.ge(v, "0.5.8"):
            labels["moe_ep_rank"] = "0"
        tok_labels = {"model_name": self.model_name}
        if formats.ge(v, "0.5.11"):
            tok_labels["engine_type"] = "unified"
        now = time.time()
        e = self.engine
        with self.lock:
            gen = e.last_gen_throughput
            if e.last_decode_time is None or (now - e.last_decode_time > 30 and not e.running):
                gen = 0.0
            kv = e._kv_in_use()
            gauges = [
                ("num_running_reqs", "The number of running requests.", len(e.running)),
                ("num_used_tokens", "The number of used tokens.", kv),
                ("token_usage", "The token usage.", kv / self.max_total_tokens),
                ("gen_throughput", "The generation throughput (token/s).", gen),
                ("num_queue_reqs", "The number of requests in the waiting queue.", len(e.waiting)),
                ("cache_hit_rate", "The prefix cache hit rate.", 0.0),
                ("spec_accept_length", "The average acceptance length of speculative decoding.",
                 e.last_accept_len or 0.0),  # fmt: skip
            ]
            if formats.ge(v, "0.5.4") and self.spec is not None:
                rate = formats.accept_rate(
                    v, e.last_accept_len or 1.0, self.spec.num_steps, self.spec.num_draft_tokens
                )
                gauges.append(("spec_accept_rate", "The acceptance rate.", rate))
            if formats.ge(v, "0.5.15"):  # the active speculative configuration
                now_spec = e.spec_now
                gauges.append(("spec_num_steps", "Active speculative num steps.",
                               now_spec.num_steps if now_spec else 0))
                gauges.append(("spec_num_draft_tokens", "Active speculative draft tokens.",
                               now_spec.num_draft_tokens if now_spec else 0))
            if formats.ge(v, "0.5.18"):
                dspark = self.spec is not None and self.spec.algorithm == "DSPARK"
                gauges.append(("spec_cap_length", "Mean verify cap length (DSPARK).",
                               float(self.spec.num_draft_tokens) if dspark and self.spec
                               else 0.0))
                gauges.append(("spec_block_accept_length", "Block accept length (DSPARK).",
                               (e.last_accept_len or 0.0) if dspark else 0.0))
            if formats.ge(v, "0.5.4"):
                cg = (not self.opts.disable_cuda_graph) and len(e.running) <= self.cuda_graph_max_bs
                gauges.append(("is_cuda_graph", "Whether the batch used a cuda graph.", float(cg)))
            if formats.ge(v, "0.5.6"):
                gauges.append(("max_total_num_tokens", "Maximum total tokens.",
                               self.max_total_tokens))  # fmt: skip
            counters = [
                ("prompt_tokens", "Number of prefill tokens processed.", e.prompt_tokens_total),
                ("generation_tokens", "Number of generation tokens processed.",
                 e.generation_tokens_total),  # fmt: skip
                ("num_requests", "Number of requests processed.", e.num_requests_total),
            ]
            if formats.ge(v, "0.5.15") and self.spec is not None:
                counters.append(("spec_verify_calls", "Number of verify calls.",
                                 e.spec_verify_calls_total))  # fmt: skip
            hists = [
                ("time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                 TTFT_BUCKETS, list(self.ttft_hist), self.ttft_sum),
                ("e2e_request_latency_seconds", "Histogram of End-to-end request latency in "
                 "seconds", E2E_BUCKETS, list(self.e2e_hist), self.e2e_sum),
            ]  # fmt: skip
            count = self.hist_count
        out: list[str] = []

        def lab(d: dict[str, str], extra: dict[str, str] | None = None) -> str:
            items = {**d, **(extra or {})}
            return "{" + ",".join(f'{k}="{val}"' for k, val in sorted(items.items())) + "}"

        for name, help_, val in gauges:
            out += [f"# HELP sglang:{name} {help_}", f"# TYPE sglang:{name} gauge",
                    f"sglang:{name}{lab(labels)} {float(val)}"]  # fmt: skip
        for name, help_, val in counters:
            out += [f"# HELP sglang:{name}_total {help_}", f"# TYPE sglang:{name}_total counter",
                    f"sglang:{name}_total{lab(tok_labels)} {float(val)}"]  # fmt: skip
        for name, help_, buckets, hist, total in hists:
            out += [f"# HELP sglang:{name} {help_}", f"# TYPE sglang:{name} histogram"]
            cum = 0
            for b, c in zip((*buckets, float("inf")), hist, strict=True):
                cum += c
                le = "+Inf" if b == float("inf") else str(float(b))
                out.append(f"sglang:{name}_bucket{lab(tok_labels, {'le': le})} {float(cum)}")
            out.append(f"sglang:{name}_count{lab(tok_labels)} {float(count)}")
            out.append(f"sglang:{name}_sum{lab(tok_labels)} {float(total)}")
        return "\n".join(out) + "\n"

    def sim_state(self) -> dict[str, Any]:
        """specmon-only debug view: what each rank read from its own environment."""
        with self.lock:
            step_ms = self.engine.perf.step_ms(1, 1000, self.engine.ranks)
        return {
            "name": self.name,
            "pid": os.getpid(),
            "status": self.status,
            "format_version": self.version,
            "ranks": [
                {"rank": r, **self.rank_info.get(r, {})} for r in range(self.tp)
            ],
            "launcher_nccl_env": {k: val for k, val in sorted(os.environ.items())
                                  if k.startswith("NCCL_")},  # fmt: skip
            "bs1_step_ms": step_ms,
            "patch_overhead": self.engine_cfg.patch_overhead,
        }

    def generate(self, body: dict[str, Any]) -> tuple[Request, Queue[tuple[int, bool]]]:
        sp = body.get("sampling_params") or {}
        max_new = int(sp.get("max_new_tokens", 128))
        if body.get("input_ids") is not None:
            ids = body["input_ids"]
            if not isinstance(ids, list) or (ids and not isinstance(ids[0], int)):
                raise ValueError("input_ids must be a list of ints")
            input_len = len(ids)
        else:
            text = body.get("text")
            if not isinstance(text, str):
                raise ValueError("text must be a string (batched requests are not simulated)")
            input_len = max(1, int(len(text.split()) * 1.3))
        ctx = self.engine_cfg.context_len
        if input_len >= ctx:  # TokenizerManager._validate_one_request's wording
            raise ValueError(f"The input ({input_len} tokens) is longer than the model's context "
                             f"length ({ctx} tokens).")
        q: Queue[tuple[int, bool]] = Queue()
        with self.lock:
            req = self.engine.submit(
                time.time(), input_len, max_new, sink=lambda n, f: q.put((n, f))
            )
        self.wake.set()
        return req, q

    def meta_info(self, req: Request, done: bool, completion: int) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "id": req.rid,
            "finish_reason": {"type": "length", "length": req.max_new_tokens} if done else None,
            "prompt_tokens": req.input_len,
            "completion_tokens": completion,
            "cached_tokens": 0,
        }
        if self.spec is not None and done:  # spec_* only in the finished chunk, as 0.5.23
            meta.update(formats.spec_meta_info(
                self.version, verify_ct=req.verify_ct, correct_drafts=req.correct_drafts,
                histogram=req.spec_hist, completion_tokens=completion,
                num_steps=self.spec.num_steps, num_draft_tokens=self.spec.num_draft_tokens))
        if done and req.finish_time is not None:
            meta["e2e_latency"] = req.finish_time - req.arrival
        return meta


def token_text(rid: str, start: int, n: int) -> str:
    seed = int(rid[-6:], 16) if rid else 0
    return "".join(_WORDS[(seed + 7 * i) % len(_WORDS)] for i in range(start, start + n))


class _HttpServer(ThreadingHTTPServer):
    """A client that hangs up (a benchmark closing its keep-alive connections) is not an error
    worth a traceback in the server log; uvicorn says nothing either."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


class SimHandler(BaseHTTPRequestHandler):
    """What both simulated engines' HTTP handlers share: uvicorn's headers, the server's own
    access log line, JSON replies; a subclass sets `sim` and routes."""

    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    sim: Any  # the simulated server whose access log gets each request

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        return

    def _access(self, status: int) -> None:
        import http

        try:
            reason = http.HTTPStatus(status).phrase
        except ValueError:
            reason = ""
        client = f"{self.client_address[0]}:{self.client_address[1]}"
        self.sim.access_log(client, self.command, self.path, status, reason)

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self._access(status)

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj).encode())

    def _start_stream(self, ctype: str = "text/event-stream") -> None:
        """A streamed 200 reply: server-sent events in chunked encoding."""
        self.send_response(200)
        self.send_header("content-type", ctype)
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self._access(200)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def do_GET(self) -> None:  # noqa: N802
        self._route("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._route("POST")

    def _route(self, method: str) -> None:
        raise NotImplementedError


def _make_handler(srv: SimServer) -> type[BaseHTTPRequestHandler]:
    class Handler(SimHandler):
        sim = srv

        def _route(self, method: str) -> None:
            path = urllib.parse.urlsplit(self.path).path
            v = srv.version
            routes: dict[str, Callable[[], None]] = {
                "/health": self._health,
                "/health_generate": self._health,
                "/v1/models": self._models,
                "/get_model_info": lambda: self._json(200, srv.model_info()),
                "/metrics": self._metrics,
                "/flush_cache": self._flush,
                "/generate": self._generate,
                "/sim/state": lambda: self._json(200, srv.sim_state()),
            }
            if formats.ge(v, "0.4.0"):
                routes["/get_server_info"] = self._server_info
            else:
                routes["/get_server_args"] = lambda: self._json(200, srv.server_args())
            if formats.ge(v, "0.5.8"):
                routes["/server_info"] = self._server_info
                routes["/model_info"] = routes["/get_model_info"]
            if formats.ge(v, "0.5.20"):
                routes["/ready"] = self._health
            fn = routes.get(path)
            if fn is None:
                self._json(404, {"detail": "Not Found"})
                return
            if path == "/generate" and method != "POST":
                self._json(405, {"detail": "Method Not Allowed"})
                return
            try:
                fn()
            except (BrokenPipeError, ConnectionResetError):
                pass

        def _health(self) -> None:
            ok = srv.status == "ready"
            self._send(200 if ok else 503, b"")

        def _models(self) -> None:
            name = srv.model_name
            card = {
                "id": name,
                "object": "model",
                "created": int(srv.started),
                "owned_by": "sglang",
                "root": name,
                "parent": None,
                "max_model_len": srv.engine_cfg.context_len,
            }
            self._json(200, {"object": "list", "data": [card]})

        def _server_info(self) -> None:
            if srv.status != "ready":
                self._json(503, {"error": "server is starting"})
                return
            self._json(200, srv.server_info())

        def _metrics(self) -> None:
            if not srv.opts.enable_metrics:
                self._json(404, {"detail": "Not Found"})
                return
            self._send(200, srv.metrics_text().encode(), "text/plain; version=0.0.4; charset=utf-8")

        def _flush(self) -> None:
            with srv.lock:
                ok = srv.engine.flush_cache()
            body = (
                b"Cache flushed.\nPlease check backend logs for more details. (When there are "
                b"running or waiting requests, the operation will not be performed.)\n"
            )
            srv.sched_log(
                "Cache flushed successfully!" if ok else
                f"Cache not flushed because there are pending requests. #queue-req: "
                f"{len(srv.engine.waiting)}, #running-req: {len(srv.engine.running)}"
            )  # fmt: skip
            self._send(200 if ok else 400, body, "text/plain")

        def _generate(self) -> None:
            if srv.status != "ready":
                self._json(503, {"error": {"message": "The server is not ready."}})
                return
            try:
                n = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(n) or b"{}")
                if not isinstance(body, dict):
                    raise ValueError("body must be a JSON object")
            except (ValueError, TypeError) as exc:
                self._json(400, {"error": {"message": str(exc)}})
                return
            stream = bool(body.get("stream"))
            try:
                req, q = srv.generate(body)
            except (ValueError, TypeError) as exc:
                if not stream:  # http_server.generate_request: _create_error_response -> 400
                    self._json(400, {"error": {"message": str(exc)}})
                    return
                # streaming: the response has started (200); the error is a data chunk
                self._start_stream()
                err = {"error": {"message": str(exc)}}
                self._chunk(f"data: {json.dumps(err)}\n\n".encode())
                self._chunk(b"data: [DONE]\n\n")
                self._chunk(b"")
                return
            if stream:
                self._start_stream()
            done_tokens = 0
            while True:
                try:
                    n_new, fin = q.get(timeout=0.5)
                except Empty:
                    if srv.stop.is_set():
                        break
                    continue
                done_tokens += n_new
                if stream and (n_new or fin):
                    chunk = {"text": token_text(req.rid, 0, done_tokens),
                             "meta_info": srv.meta_info(req, fin, done_tokens)}  # fmt: skip
                    self._chunk(f"data: {json.dumps(chunk)}\n\n".encode())
                if fin:
                    break
            if stream:
                self._chunk(b"data: [DONE]\n\n")
                self._chunk(b"")
                return
            self._json(200, {"text": token_text(req.rid, 0, done_tokens),
                             "meta_info": srv.meta_info(req, True, done_tokens)})  # fmt: skip

    return Handler


def run_server(opts: argparse.Namespace) -> int:
    """Blocking entry point used by `specmon sim server`."""
    if opts.port is None:
        opts.port = 30000
    return SimServer(opts).run()
