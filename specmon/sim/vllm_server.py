"""`specmon sim server --engine vllm`: a process tree, log and HTTP surface like `vllm serve`.

The same simulated scheduler and spawned TP ranks as the SGLang simulator (specmon.sim.server),
dressed as vLLM V1: the API server process (this one) logs `Engine 000: ...` and the
`SpecDecoding metrics: ...` line every stats interval (10 s; $VLLM_LOG_STATS_INTERVAL from 0.10.1)
from counter deltas, as vLLM's LoggingStatLogger and SpecDecodingLogging do; child processes are
titled `VLLM::EngineCore_DP0` / `VLLM::Worker_TP<r>`; `/metrics` has the `vllm:` counters,
`/v1/completions` streams OpenAI chunks. Like vLLM, the port is bound at start but HTTP is
answered only once the engine is up.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import threading
import time
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from queue import Empty, Queue
from typing import Any

from specmon.sim import vllm_formats as vf
from specmon.sim.engine import Request
from specmon.sim.perf import SpecConfig
from specmon.sim.server import SimError, SimHandler, SimServer, token_text
from specmon.sim.worker import detokenizer_main, worker_main

# vLLM methods the sim accepts; each is modelled as a chain of k draft tokens (SpecConfig, topk 1)
METHODS = ("eagle", "eagle3", "ngram", "draft_model", "mtp", "deepseek_mtp", "suffix")


class VllmSimServer(SimServer):
    serve_early = False  # vLLM binds its socket first but serves only when the engine is up

    def __init__(self, opts: argparse.Namespace) -> None:
        opts.decode_log_interval = 1 << 30  # vLLM logs by time, not by step count
        if getattr(opts, "speculative_algorithm", None):
            raise SimError("vLLM takes --speculative-config JSON, not --speculative-algorithm")
        super().__init__(opts)
        self.prefix = os.environ.get("VLLM_LOGGING_PREFIX", "")
        self.no_color = bool(os.environ.get("NO_COLOR"))
        self.proc_prefix = os.environ.get("VLLM_PROCESS_NAME_PREFIX", "VLLM")
        self.interval = self._stats_interval(opts)
        self.core_pid = 0  # the EngineCore process's pid, for its tag
        self.w0_pid = 0
        self.created = time.time()
        # LoggingStatLogger / SpecDecodingLogging state
        self._last_prompt = self._last_gen = 0
        self._last_t = time.monotonic()
        self._last_idle = True  # vLLM starts with last throughputs 0: an idle start is quiet
        self._spec_last: tuple[int, int, int, list[int]] = (0, 0, 0, [0] * self.k)
        self._spec_last_t = time.monotonic()
        self._prefilled = False

    # ------------------------------------------------------------------ config
    @property
    def k(self) -> int:
        return self.spec.num_steps if self.spec is not None else 0

    def _check_version(self, opts: argparse.Namespace) -> str:
        return vf.check_version(opts.format_version or vf.NEWEST)

    def _spec_config(self, opts: argparse.Namespace) -> SpecConfig | None:
        raw = getattr(opts, "speculative_config", None)
        if not raw:
            return None
        try:
            cfg = json.loads(raw)
        except ValueError as exc:
            raise SimError(f"--speculative-config: not JSON ({exc})") from None
        if not isinstance(cfg, dict):
            raise SimError("--speculative-config must be a JSON object")
        method = cfg.get("method")
        k = cfg.get("num_speculative_tokens")
        if not isinstance(method, str) or method not in METHODS:
            raise SimError(f"--speculative-config: method must be one of {', '.join(METHODS)}, "
                           f"got {method!r}")
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= 16:
            raise SimError("--speculative-config: num_speculative_tokens must be an int 1-16")
        if method != "ngram" and not isinstance(cfg.get("model"), str) and method in (
                "eagle", "eagle3", "draft_model"):
            raise SimError(f"--speculative-config: method {method!r} needs a draft \"model\"")
        if not 0.0 <= opts.accept_prob < 1.0:
            raise SimError("--accept-prob must be in [0, 1)")
        self.spec_method = method
        self.spec_draft = cfg.get("model") if isinstance(cfg.get("model"), str) else None
        return SpecConfig(method.upper(), k, 1, k + 1, opts.accept_prob)

    def _stats_interval(self, opts: argparse.Namespace) -> float:
        if getattr(opts, "log_stats_interval", None):
            return max(0.05, float(opts.log_stats_interval))
        if vf.ge(self.version, "0.10.1"):
            try:
                v = float(os.environ.get("VLLM_LOG_STATS_INTERVAL", "10"))
            except ValueError:
                v = 10.0
            return v if v > 0 else 10.0
        return 10.0

    def server_args(self) -> dict[str, Any]:
        """The non-default CLI args, as `non-default args:` prints them."""
        o = self.opts
        args: dict[str, Any] = {"model_tag": o.model_path, "host": o.host, "port": o.port,
                                "model": o.model_path}
        if o.served_model_name:
            args["served_model_name"] = [o.served_model_name]
        if self.tp > 1:
            args["tensor_parallel_size"] = self.tp
        if self.spec is not None:
            args["speculative_config"] = json.loads(o.speculative_config)
        if getattr(o, "disable_log_stats", False):
            args["disable_log_stats"] = True
        return args

    # ------------------------------------------------------------------ logging
    def _vlog(self, who: str, msg: str, filename: str, lineno: int, level: str = "INFO") -> None:
        name, pid = {"api": (vf.api_tag(self.version), os.getpid()),
                     "core": (vf.engine_core_name(self.version), self.core_pid),
                     "w0": (vf.worker_name(self.version, 0, self.tp) if self.tp > 1
                            else vf.engine_core_name(self.version),
                            self.w0_pid if self.tp > 1 else self.core_pid)}[who]
        tag = vf.tag_prefix(self.version, name, pid, no_color=self.no_color)
        self.log.write(vf.line(self.version, time.time(), msg, filename=filename, lineno=lineno,
                               tag=tag, level=level, prefix=self.prefix))

    def _plain(self, who: str, text: str) -> None:
        """A print that bypasses the logger (uvicorn): tagged by the stdout wrapper 0.10-0.30."""
        name = vf.api_tag(self.version) if not vf.ge(self.version, "0.31.0") else None
        self.out.write(vf.tag_prefix(self.version, name, os.getpid(), no_color=self.no_color)
                       + text)

    def main_log(self, msg: str) -> None:
        self._vlog("api", msg, "api_server.py", 1885)

    def access_log(self, client: str, method: str, path: str, status: int, reason: str) -> None:
        if self.info_on:
            self._plain("api", vf.access_message(client, method, path, status, reason))

    def _child_failed_log(self) -> None:
        if self.tp == 1:  # the EngineCore ran the model itself: the API server notices
            self._rank_dead_log(0)
            return
        self._vlog("core", f"Worker proc {vf.worker_name(self.version, 0, self.tp)} died "
                   "unexpectedly, shutting down executor.", "multiproc_executor.py", 149,
                   "ERROR")

    def _rank_dead_log(self, rank: int) -> None:
        self._vlog("api", f"Engine core proc {vf.engine_core_name(self.version) or 'EngineCore_0'}"
                   " died unexpectedly, shutting down client.", "core_client.py", 564, "ERROR")

    def _write_records(self, records: list[Any]) -> None:
        return  # vLLM prints no per-batch lines: the stats thread logs by time

    # ------------------------------------------------------------------ lifecycle
    def _start(self) -> None:
        v = self.version
        self.main_log(vf.version_message(v, self.opts.model_path))
        if vf.ge(v, "0.10.0"):
            self._vlog("api", vf.non_default_args(self.server_args()), "utils.py", 326)
        os.environ.update(vf.env_edits(v, os.environ))
        if not self._start_workers(lambda: self._vlog(
                "core", "Workers did not start in 120 s.", "core.py", 700, "ERROR")):
            return
        self.w0_pid = int(self.rank_info.get(0, {}).get("pid", 0))
        if self.tp == 1:
            self.core_pid = self.w0_pid
        self._register()
        self._startup_lines()
        if self.stop.is_set():
            return
        threading.Thread(target=self._engine_loop, name="scheduler", daemon=True).start()
        threading.Thread(target=self._ticker, name="load", daemon=True).start()
        self.status = "ready"
        self.ready_time = time.time()
        self._serve()
        self._last_t = self._spec_last_t = time.monotonic()
        if not getattr(self.opts, "disable_log_stats", False):
            threading.Thread(target=self._stats_loop, name="stats", daemon=True).start()
        self._register()
        with self.lock:
            self.engine.start_load(time.time())
        self.wake.set()
        if self.opts.crash_after is not None:
            threading.Thread(target=self._crash_timer, name="crash", daemon=True).start()

    def _spawn(self) -> None:
        ctx = mp.get_context("spawn")
        v = self.version
        base = {"engine": "vllm", "version": v, "tp_size": self.tp, "log_file": self.opts.log_file,
                "log_ms": False, "sim_dir": str(self.sim_dir) if self.sim_dir else None,
                "n_gpus": self.opts.n_gpus, "tag": ""}
        core = vf.engine_core_name(v)
        init = ("rank {r} in world size {n} is assigned as DP rank 0, PP rank 0, TP rank {r}, "
                "EP rank {r}") if vf.ge(v, "0.10.0") else (
                "world_size={n} rank={r} local_rank={r} distributed_init_method=env:// "
                "backend=nccl")  # fmt: skip
        if self.tp > 1:  # the EngineCore drives TP workers (MultiprocExecutor)
            parent, child = mp.get_context("spawn").Pipe()
            p = ctx.Process(target=detokenizer_main,
                            args=({"title": vf.proc_title(core or "EngineCore",
                                                          self.proc_prefix)}, child),
                            name=core or "EngineCore", daemon=True)
            p.start()
            child.close()
            self.core_pid = p.pid or 0
            self._config_line()
            self.workers.append(p)
            self.conns[parent] = -1
        for rank in range(self.tp):
            cfg = dict(base)
            # TP 1: the EngineCore runs the model itself (UniProcExecutor)
            name = vf.worker_name(v, rank, self.tp) if self.tp > 1 else (core or "EngineCore")
            cfg["title"] = vf.proc_title(name, self.proc_prefix)
            cfg["tag_name"] = name if (self.tp > 1 or core) else None
            cfg["gpu"] = self.gpus[rank]
            if self.tp == 1:  # UniProcExecutor: the EngineCore's own error
                cfg["crash_head"] = "EngineCore encountered a fatal error."
                cfg["crash_where"] = ("core.py", 710)
            msg = init.format(r=rank, n=self.tp)
            cfg["init_msgs"] = (msg, f"Model loading took {self.weight_gb:.4f} GiB and "
                                f"{max(0.1, self.opts.startup_s * 0.45):.6f} seconds")
            parent, child = ctx.Pipe()
            p = ctx.Process(target=worker_main, args=(cfg, rank, child), name=name, daemon=True)
            p.start()
            if self.tp == 1:
                self.core_pid = p.pid or 0
                self._config_line()
            child.close()
            self.workers.append(p)
            self.conns[parent] = rank

    def _config_line(self) -> None:
        """The EngineCore's first line, written as soon as the core process exists (its pid)."""
        v = self.version
        o = self.opts
        self._vlog("core", vf.config_message(
            v, model=o.model_path, served_model_name=self.model_name,
            method=getattr(self, "spec_method", None), draft=getattr(self, "spec_draft", None),
            k=self.k, tp=self.tp, seed=self.engine_cfg.seed or 0,
            max_model_len=self.engine_cfg.context_len), "core.py", 61 if not vf.ge(v, "0.10.0")
            else 93)  # fmt: skip

    def _startup_lines(self) -> None:
        v = self.version
        o = self.opts
        total = max(0.0, float(o.startup_s))
        if not self._sleep(total * 0.45):
            return
        ctx = self.engine_cfg.context_len
        self._vlog("core", f"GPU KV cache size: {self.max_total_tokens:,} tokens",
                   "kv_cache_utils.py", 868)
        self._vlog("core", f"Maximum concurrency for {ctx:,} tokens per request: "
                   f"{self.max_total_tokens / ctx:.2f}x", "kv_cache_utils.py", 872)
        if not self._sleep(total * 0.4):
            return
        if not o.disable_cuda_graph:
            self._vlog("w0", f"Graph capturing finished in {max(1, round(total * 0.4))} secs, "
                       "took 0.52 GiB", "gpu_model_runner.py", 2348)
        self._vlog("core", "init engine (profile, create kv cache, warmup model) took "
                   f"{total * 0.85:.2f} seconds", "core.py", 218)
        self._sleep(total * 0.1)
        self._vlog("api", f"Starting vLLM API server 0 on http://{o.host}:{o.port}"
                   if vf.ge(v, "0.10.0") else f"Starting vLLM API server on http://{o.host}:"
                   f"{o.port}", "api_server.py", 1880)  # fmt: skip
        self._vlog("api", "Available routes are:", "launcher.py", 29)
        for route, methods in (("/health", "GET"), ("/metrics", "GET"), ("/v1/models", "GET"),
                               ("/version", "GET"), ("/v1/completions", "POST")):
            self._vlog("api", f"Route: {route}, Methods: {methods}", "launcher.py", 37)
        for msg in (f"Started server process [{os.getpid()}]", "Waiting for application startup.",
                    "Application startup complete."):
            self._plain("api", f"INFO:     {msg}")

    def _uvicorn_log(self, text: str) -> None:
        self._plain("api", text)

    # ------------------------------------------------------------------ stats logging
    def _stats_loop(self) -> None:
        while not self.stop.wait(self.interval):
            try:
                self.log_stats()
            except Exception as exc:  # a stats bug must not take the server down
                self._vlog("api", f"stats logging failed: {exc!r}", "loggers.py", 1, "ERROR")

    def log_stats(self) -> None:
        """LoggingStatLogger.log + SpecDecodingLogging.log for engine 0."""
        v = self.version
        now = time.monotonic()
        e = self.engine
        with self.lock:
            prompt, gen = e.prompt_tokens_total, e.generation_tokens_total
            running, waiting = len(e.running), len(e.waiting)
            kv = e._kv_in_use()
            spec_now = (e.spec_drafts_total, e.spec_draft_tokens_total, e.spec_accepted_total,
                        list(e.spec_accepted_per_pos))
            e.step_noise()  # the slow noise moves per stats interval, as per SGLang log line
        dt = now - self._last_t
        p_tps = (prompt - self._last_prompt) / dt if dt > 0 else 0.0
        g_tps = (gen - self._last_gen) / dt if dt > 0 else 0.0
        if prompt > 0:
            self._prefilled = True
        self._last_prompt, self._last_gen, self._last_t = prompt, gen, now
        idle = p_tps == 0 and g_tps == 0
        # 0.8.5+: log_fn = logger.debug when this interval and the last one were both idle
        quiet = vf.ge(v, "0.8.5") and idle and self._last_idle
        self._last_idle = idle
        if self.info_on and not quiet:
            hit = 0.0 if (self._prefilled or not vf.ge(v, "0.31.0")) else None
            self._vlog("api", vf.engine_message(
                v, engine=0, prompt_tps=p_tps, gen_tps=g_tps, running=running, waiting=waiting,
                kv_usage_pct=100.0 * kv / max(1, self.max_total_tokens), prefix_hit_pct=hit),
                "loggers.py", vf.engine_lineno(v))
        if self.spec is None:
            return
        d0, t0, a0, p0 = self._spec_last
        drafts, dtoks, acc = spec_now[0] - d0, spec_now[1] - t0, spec_now[2] - a0
        per_pos = [x - y for x, y in zip(spec_now[3], p0, strict=True)]
        if drafts == 0 and vf.ge(v, "0.9.0"):
            return  # log() returns before its reset: last_log_time is kept (0.10.2+ quirk)
        msg = vf.spec_message(v, num_drafts=drafts, num_draft_tokens=dtoks, num_accepted=acc,
                              accepted_per_pos=per_pos, elapsed_s=now - self._spec_last_t)
        self._spec_last = (spec_now[0], spec_now[1], spec_now[2], spec_now[3])
        self._spec_last_t = now
        if msg is not None and self.info_on and not quiet:
            self._vlog("api", msg, "metrics.py", vf.spec_lineno(v))

    # ------------------------------------------------------------------ HTTP views
    def metrics_text(self) -> str:
        v = self.version
        e = self.engine
        with self.lock:
            counters: dict[str, float] = {"prompt_tokens": e.prompt_tokens_total,
                                          "generation_tokens": e.generation_tokens_total}
            if self.spec is not None:
                if vf.ge(v, "0.8.5"):
                    counters["spec_decode_num_drafts"] = e.spec_drafts_total
                counters["spec_decode_num_draft_tokens"] = e.spec_draft_tokens_total
                counters["spec_decode_num_accepted_tokens"] = e.spec_accepted_total
            kv_name = "kv_cache_usage_perc" if vf.ge(v, "0.9.2") else "gpu_cache_usage_perc"
            gauges = {"num_requests_running": len(e.running),
                      "num_requests_waiting": len(e.waiting),
                      kv_name: e._kv_in_use() / max(1, self.max_total_tokens)}
            per_pos = (list(e.spec_accepted_per_pos)
                       if self.spec is not None and vf.ge(v, "0.8.5") else None)
        return vf.metrics_text(v, model_name=self.model_name, counters=counters, gauges=gauges,
                               per_pos=per_pos, created=self.created)

    def sim_state(self) -> dict[str, Any]:
        out = super().sim_state()
        out["engine"] = "vllm"
        return out

    def submit(self, input_len: int, max_tokens: int) -> tuple[Request, Queue[tuple[int, bool]]]:
        ctx = self.engine_cfg.context_len
        if input_len + max_tokens > ctx:  # vLLM's wording (serving_engine._validate_input)
            raise ValueError(f"This model's maximum context length is {ctx} tokens. However, you "
                             f"requested {input_len + max_tokens} tokens ({input_len} in the "
                             f"messages, {max_tokens} in the completion). Please reduce the "
                             "length of the messages or completion.")
        q: Queue[tuple[int, bool]] = Queue()
        with self.lock:
            req = self.engine.submit(time.time(), input_len, max_tokens,
                                     sink=lambda n, f: q.put((n, f)))
        self.wake.set()
        return req, q

    def make_handler(self) -> type[BaseHTTPRequestHandler]:
        return _make_vllm_handler(self)


def _prompt_len(prompt: Any) -> int:
    if isinstance(prompt, str):
        return max(1, int(len(prompt.split()) * 1.3))
    if isinstance(prompt, list) and prompt and all(
            isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return len(prompt)
    raise ValueError("prompt must be a string or a list of token ids (batches are not simulated)")


def _make_vllm_handler(srv: VllmSimServer) -> type[BaseHTTPRequestHandler]:
    class Handler(SimHandler):
        sim = srv

        def _error(self, status: int, message: str) -> None:
            kind = "BadRequestError" if status == 400 else "NotFoundError"
            self._json(status, {"error": {"message": message, "type": kind, "param": None,
                                          "code": status}})

        def _route(self, method: str) -> None:
            path = urllib.parse.urlsplit(self.path).path
            routes: dict[str, Callable[[], None]] = {
                "/health": lambda: self._send(200, b""),
                "/ping": lambda: self._send(200, b""),
                "/version": lambda: self._json(200, {"version": srv.version}),
                "/v1/models": self._models,
                "/metrics": lambda: self._send(200, srv.metrics_text().encode(),
                                               "text/plain; version=0.0.4; charset=utf-8"),
                "/v1/completions": self._completions,
                "/sim/state": lambda: self._json(200, srv.sim_state()),
            }
            fn = routes.get(path)
            if fn is None:
                self._json(404, {"detail": "Not Found"})
                return
            if (path == "/v1/completions") != (method == "POST"):
                self._json(405, {"detail": "Method Not Allowed"})
                return
            try:
                fn()
            except (BrokenPipeError, ConnectionResetError):
                pass

        def _models(self) -> None:
            card = {"id": srv.model_name, "object": "model", "created": int(srv.started),
                    "owned_by": "vllm", "root": srv.opts.model_path, "parent": None,
                    "max_model_len": srv.engine_cfg.context_len}
            self._json(200, {"object": "list", "data": [card]})

        def _completions(self) -> None:
            try:
                n = int(self.headers.get("content-length") or 0)
                if n > 8 << 20:
                    raise ValueError("request body too large")
                body = json.loads(self.rfile.read(n) or b"{}")
                if not isinstance(body, dict):
                    raise ValueError("body must be a JSON object")
                model = body.get("model")
                if model is not None and model != srv.model_name:
                    self._json(404, {"error": {"message": f"The model `{model}` does not exist.",
                                              "type": "NotFoundError", "param": "model",
                                              "code": 404}})
                    return
                input_len = _prompt_len(body.get("prompt"))
                max_tokens = body.get("max_tokens", 16)
                if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or (
                        max_tokens < 1):
                    raise ValueError("max_tokens must be a positive integer")
                req, q = srv.submit(input_len, max_tokens)
            except (ValueError, TypeError) as exc:
                self._error(400, str(exc))
                return
            stream = bool(body.get("stream"))
            opts = body.get("stream_options")
            usage_chunk = isinstance(opts, dict) and bool(opts.get("include_usage"))
            cid = f"cmpl-{req.rid}"
            created = int(time.time())
            model = srv.model_name

            def chunk(text: str, finish: str | None) -> dict[str, Any]:
                return {"id": cid, "object": "text_completion", "created": created,
                        "model": model, "choices": [{"index": 0, "text": text, "logprobs": None,
                                                     "finish_reason": finish,
                                                     "stop_reason": None}]}

            if stream:
                self._start_stream("text/event-stream; charset=utf-8")
            done = 0
            while True:
                try:
                    n_new, fin = q.get(timeout=0.5)
                except Empty:
                    if srv.stop.is_set():
                        break
                    continue
                if stream and n_new:
                    c = chunk(token_text(req.rid, done, n_new), "length" if fin else None)
                    if usage_chunk:
                        c["usage"] = None
                    self._chunk(f"data: {json.dumps(c)}\n\n".encode())
                elif stream and fin:
                    self._chunk(f"data: {json.dumps(chunk('', 'length'))}\n\n".encode())
                done += n_new
                if fin:
                    break
            usage = {"prompt_tokens": req.input_len, "total_tokens": req.input_len + done,
                     "completion_tokens": done, "prompt_tokens_details": None}
            if stream:
                if usage_chunk:
                    u = {"id": cid, "object": "text_completion", "created": created,
                         "model": model, "choices": [], "usage": usage}
                    self._chunk(f"data: {json.dumps(u)}\n\n".encode())
                self._chunk(b"data: [DONE]\n\n")
                self._chunk(b"")
                return
            out = chunk(token_text(req.rid, 0, done), "length")
            out["usage"] = usage
            self._json(200, out)

    return Handler
