"""Short benchmark runs against one server: built-in httpx client or `sglang.bench_serving`.

The built-in client sends fixed prompts to SGLang's native streaming `/generate` (concurrency 1
by default) and measures what a user sees: end-to-end output tok/s (all generated tokens over
the wall time of the run, prefill and TTFT included), TTFT, and ITL split per token the way
bench_serving's `sglang` backend does (chunk gap / tokens in the chunk, so a speculative server
that emits 3 tokens per step is not shown as 3x slower per token). Accept length comes from
`/server_info` (`internal_states[0].avg_spec_accept_length`, a server-lifetime value) and from
the responses' own `spec_accept_length` where the server reports it. Each response's per-request
speculative counters (three generations of names, only in the finished chunk in 0.5.23) are
kept per request, and their correct-drafts histograms summed: the acceptance profile of exactly
this benchmark. The log's decode-only `gen throughput` is a different number and is kept
separately (`server_gen_throughput`), and only when the benchmark ran long enough that SGLang's
last decode line covers nothing but the benchmark (its window is the `decode_log_interval`
rounds since the previous line, idle time included: a short benchmark after a pause would
otherwise show e.g. 3.1 tok/s beside a measured ~38 tok/s).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import httpx

from specmon.hosts.base import Host
from specmon.hosts.httpget import SCRAPE_DEADLINE_S, FetchError, get_bounded
from specmon.hostside.protocol import SAFE_PATH
from specmon.numfmt import finite
from specmon.parse.bench_output import parse_bench_serving
from specmon.parse.sglang_metrics import MAX_TEXT, MetricsError, SpecMetrics, parse_spec_metrics
from specmon.parse.vllm_metrics import VllmScrape, parse_vllm_metrics, server_window
from specmon.session.benchmarks import line as bench_line
from specmon.textsafe import cut

PROMPTS = (
    "Explain in detail how speculative decoding speeds up large language model inference.",
    "Write a short story about a lighthouse keeper who discovers a message in a bottle.",
    "List the main differences between TCP and UDP, with an example use case for each.",
    "Describe the water cycle to a ten-year-old, step by step.",
    "Summarise the causes and consequences of the French Revolution.",
    "Write a Python function that merges two sorted lists, and explain its complexity.",
    "What should a traveller know before visiting Japan for the first time?",
    "Compare renewable and fossil energy sources in terms of cost, reliability and emissions.",
)


@dataclass
class BenchConfig:
    num_prompts: int = 8
    concurrency: int = 1
    output_len: int = 128
    input_len: int = 256  # bench_serving --random-input-len
    timeout_s: float = 600.0
    use_bench_serving: bool | None = None  # None: use it when the host has sglang


@dataclass
class BenchResult:
    """One benchmark run; None where a number was not measured (shown as N/A)."""

    server: str
    kind: Literal["builtin", "bench_serving"]
    started_at: float
    completed: int
    failed: int
    concurrency: int
    output_len: int
    duration_s: float
    total_output_tokens: int
    output_tok_s: float | None  # end-to-end: all output tokens / wall time of the run
    mean_ttft_ms: float | None
    median_ttft_ms: float | None
    mean_itl_ms: float | None
    median_itl_ms: float | None
    p99_itl_ms: float | None
    accept_length: float | None  # /server_info avg_spec_accept_length (server lifetime)
    request_accept_length: float | None = None  # mean of the responses' spec_accept_length
    server_gen_throughput: float | None = None  # the log's decode-only tok/s (last_gen_throughput)
    errors: list[str] = field(default_factory=list)
    spec_requests: list[dict[str, Any]] = field(default_factory=list)  # normalised, per request
    spec_histogram: list[int] | None = None  # rounds by correct drafts, summed over requests
    notes: list[str] = field(default_factory=list)  # why a number is N/A
    prometheus: dict[str, float] | None = None  # /metrics spec gauges after the run, if exposed
    prometheus_verify_calls: float | None = None  # spec_verify_calls_total during the run
    # vLLM: its /metrics counters diffed around the run (exact over the run, all engines summed;
    # gen_tok_s counts every emitted token between the two scrapes): parse/vllm_metrics.py
    vllm_counters: dict[str, Any] | None = None
    raw: str | None = None  # bench_serving stdout

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        """The one line every front end shows (`session.benchmarks.line`)."""
        return bench_line(self.to_json())

    def failure(self) -> str | None:
        """One line when no request of the run completed (a stopped server: every request a
        ConnectError), else None: how many failed and the first error, on one line and cut
        (the error may hold a server's response text; the caller redacts it)."""
        if self.completed > 0:
            return None
        first = cut(" ".join(self.errors[0].split())) if self.errors else None
        why = f"first error: {first}" if first else f"{self.kind}: no error reported"
        what = (f"all {self.failed} requests failed" if self.failed > 0
                else "no request completed")
        return f"{self.server}: {what} ({why})"


async def server_info(client: httpx.AsyncClient) -> dict[str, Any] | None:
    """`/server_info` (0.5.8+; `/get_server_info` is deprecated in 0.5.2x and only forwards)
    else `/get_server_info` (0.4.0-0.5.x); None when neither answers."""
    for path in SERVER_INFO_PATHS:
        raw = await _bounded(client, path)
        if raw is None:
            continue
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):
            return None
        return data if isinstance(data, dict) else None
    return None


async def _bounded(client: httpx.AsyncClient, path: str) -> bytes | None:
    """GET `path`'s body, bounded as every scrape is (`hosts.httpget`: MAX_TEXT bytes, 15 s);
    None when there is none (a status other than 200, a failure, over the bounds)."""
    try:
        _, data = await get_bounded(client, path, deadline_s=SCRAPE_DEADLINE_S, limit=MAX_TEXT)
    except FetchError:
        return None
    return data


SERVER_INFO_PATHS = ("/server_info", "/get_server_info")


async def vllm_scrape(client: httpx.AsyncClient) -> VllmScrape | None:
    """vLLM's `/metrics` counters; None when not a vLLM server (no vllm: series) or bad."""
    raw = await _bounded(client, "/metrics")
    text = raw.decode("utf-8", errors="replace") if raw is not None else ""
    if "vllm:" not in text:
        return None
    try:
        return parse_vllm_metrics(text)
    except MetricsError:
        return None


async def server_metrics(client: httpx.AsyncClient) -> SpecMetrics | None:
    """SGLang's `/metrics` spec gauges; None when not exposed (no --enable-metrics) or bad."""
    raw = await _bounded(client, "/metrics")
    if raw is None:
        return None
    try:
        return parse_spec_metrics(raw.decode("utf-8", errors="replace"))
    except MetricsError:
        return None

# meta_info names of the same per-request counters, newest first (sglang-observables.md 4.3)
_CORRECT_KEYS = ("spec_num_correct_drafts", "spec_accepted_drafts", "spec_accept_token_num")
_PROPOSED_KEYS = ("spec_num_proposed_drafts", "spec_proposed_drafts", "spec_draft_token_num")
_HIST_KEYS = ("spec_correct_drafts_histogram", "spec_accept_histogram")


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def spec_from_meta(meta: dict[str, Any]) -> dict[str, Any] | None:
    """One response's speculative counters under one set of names; None when it has none."""
    if not any(k.startswith("spec_") for k in meta):
        return None

    def first(keys: tuple[str, ...]) -> Any:
        return next((meta[k] for k in keys if k in meta), None)

    hist = first(_HIST_KEYS)
    if not (isinstance(hist, list) and all(_int(x) is not None for x in hist)):
        hist = None
    return {
        "verify_ct": _int(meta.get("spec_verify_ct")),
        "correct_drafts": _int(first(_CORRECT_KEYS)),
        "proposed_drafts": _int(first(_PROPOSED_KEYS)),
        "histogram": hist,
        "accept_length": finite(meta.get("spec_accept_length")),
        "completion_tokens": _int(meta.get("completion_tokens")),
    }


def sum_histograms(hists: list[list[int]]) -> list[int] | None:
    if not hists:
        return None
    out = [0] * max(len(h) for h in hists)
    for h in hists:
        for i, c in enumerate(h):
            out[i] += c
    return out


def decode_rounds_lower_bound(results: list[_One], concurrency: int) -> int:
    """Decode rounds the server ran for these requests, at least: each round serves at most
    `concurrency` of them; a request needs verify_ct rounds (speculative) or tokens-1."""
    total = 0
    for r in results:
        spec = r.spec or {}
        vc = spec.get("verify_ct")
        total += vc if isinstance(vc, int) else max(0, r.tokens - 1)
    return total // max(1, concurrency)


def info_numbers(info: dict[str, Any] | None) -> tuple[float | None, float | None]:
    """(avg_spec_accept_length, last_gen_throughput) from any /get_server_info shape."""
    if not info:
        return None, None
    if isinstance(info.get("decode"), list) and info["decode"]:
        info = info["decode"][0]  # PD router
    states = info.get("internal_states")
    srcs = [s for s in states if isinstance(s, dict)] if isinstance(states, list) else []
    srcs = srcs or [info]

    def num(k: str) -> float | None:
        # DP rank 0 first; under DP a rank that ran no verify round has null ([null, 2.90])
        for src in srcs:
            v = finite(src.get(k))  # (a server's JSON may hold 10**400: no OverflowError)
            if v is not None:
                return v
        return None

    return num("avg_spec_accept_length"), num("last_gen_throughput")


def info_log_interval(info: dict[str, Any] | None) -> int | None:
    """`decode_log_interval` (a server arg, flat in every /server_info shape)."""
    if not info:
        return None
    if isinstance(info.get("decode"), list) and info["decode"]:
        info = info["decode"][0]
    return _int(info.get("decode_log_interval"))


@dataclass
class _One:
    ok: bool
    tokens: int = 0
    ttft: float | None = None
    itls: list[float] = field(default_factory=list)
    accept: float | None = None
    error: str | None = None
    spec: dict[str, Any] | None = None


async def _sse_objects(r: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON objects of a server-sent event stream (`data: {...}` lines) until `[DONE]`;
    other lines and what is not a JSON object are skipped."""
    async for line in r.aiter_lines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        try:
            chunk = json.loads(data)
        except ValueError:
            continue
        if isinstance(chunk, dict):
            yield chunk


async def _one_request(client: httpx.AsyncClient, prompt: str, output_len: int,
                       timeout: float) -> _One:
    body = {"text": prompt, "stream": True,
            "sampling_params": {"max_new_tokens": output_len, "temperature": 0.0,
                                "ignore_eos": True}}
    t0 = time.perf_counter()
    last_t = t0
    done = 0
    res = _One(ok=False)
    try:
        async with client.stream("POST", "/generate", json=body, timeout=timeout) as r:
            if r.status_code != 200:
                await r.aread()
                return _One(ok=False, error=f"HTTP {r.status_code}: {r.text[:200]}")
            async for chunk in _sse_objects(r):
                if "error" in chunk:  # SGLang: HTTP 200, then this chunk, then [DONE]
                    return _One(ok=False, tokens=done, error=_stream_error(chunk["error"]))
                meta = chunk.get("meta_info") or {}
                if not isinstance(meta, dict):
                    continue
                spec = spec_from_meta(meta)
                if spec is not None:
                    res.spec = spec  # 0.5.23 sends these only in the finished chunk
                n = int(meta.get("completion_tokens") or 0)
                now = time.perf_counter()
                new = n - done
                if new <= 0:
                    continue
                if res.ttft is None:
                    res.ttft = now - t0
                else:
                    res.itls.extend([(now - last_t) / new] * new)
                done, last_t = n, now
                acc = meta.get("spec_accept_length")
                if isinstance(acc, (int, float)):
                    res.accept = float(acc)
    except httpx.HTTPError as exc:
        return _One(ok=False, tokens=done, error=f"{type(exc).__name__}: {exc}")
    res.ok, res.tokens = done > 0, done
    if not res.ok:
        res.error = "no tokens received"
    return res


async def served_model(client: httpx.AsyncClient) -> str | None:
    """The first model id of an OpenAI server's `/v1/models` (what a request names)."""
    try:
        r = await client.get("/v1/models", timeout=10)
        data = r.json().get("data") if r.status_code == 200 else None
        first = data[0] if isinstance(data, list) and data else None
        mid = first.get("id") if isinstance(first, dict) else None
        return mid if isinstance(mid, str) else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None


async def _one_completion(client: httpx.AsyncClient, prompt: str, output_len: int,
                          timeout: float, model: str | None = None) -> _One:
    """One streamed OpenAI `/v1/completions` request (vLLM). Its chunks carry text, not token
    counts (a speculative step may send several tokens in one), so the token count comes from
    the final usage chunk and TTFT from the first chunk; per-token ITLs are not measured."""
    body = {"prompt": prompt, "max_tokens": output_len, "temperature": 0.0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}
    if model is not None:
        body["model"] = model
    t0 = time.perf_counter()
    res = _One(ok=False)
    tokens = 0
    try:
        async with client.stream("POST", "/v1/completions", json=body, timeout=timeout) as r:
            if r.status_code != 200:
                await r.aread()
                return _One(ok=False, error=f"HTTP {r.status_code}: {r.text[:200]}")
            async for chunk in _sse_objects(r):
                if "error" in chunk:
                    return _One(ok=False, error=_stream_error(chunk["error"]))
                choices = chunk.get("choices")
                if res.ttft is None and isinstance(choices, list) and any(
                        isinstance(c, dict) and c.get("text") for c in choices):
                    res.ttft = time.perf_counter() - t0
                usage = chunk.get("usage")
                if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
                    tokens = int(usage["completion_tokens"])
    except httpx.HTTPError as exc:
        return _One(ok=False, error=f"{type(exc).__name__}: {exc}")
    res.ok, res.tokens = tokens > 0, tokens
    if not res.ok:
        res.error = "no usage chunk with completion_tokens received"
    return res


def _stream_error(err: Any) -> str:
    """The server's own error text (one line, bounded)."""
    msg = err.get("message") if isinstance(err, dict) else err
    text = " ".join(str(msg).split())[:300] if msg is not None else "(no message)"
    return f"server error in stream: {text}"


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    k = min(len(s) - 1, max(0, round(q * (len(s) - 1))))
    return s[k]


async def run_builtin(base_url: str, server: str, cfg: BenchConfig) -> BenchResult:
    """The built-in client against `base_url` (a forwarded port)."""
    started = time.time()
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(cfg.num_prompts)]
    sem = asyncio.Semaphore(max(1, cfg.concurrency))
    limits = httpx.Limits(max_connections=max(1, cfg.concurrency) + 2)
    async with httpx.AsyncClient(base_url=base_url, limits=limits) as client:
        prom_before = await server_metrics(client)
        vllm_before, t_before = await vllm_scrape(client), time.perf_counter()

        # a vLLM server (its /metrics has vllm: series) speaks the OpenAI API, not /generate
        openai = vllm_before is not None
        model = await served_model(client) if openai else None

        async def go(p: str) -> _One:
            async with sem:
                if openai:
                    return await _one_completion(client, p, cfg.output_len, cfg.timeout_s, model)
                return await _one_request(client, p, cfg.output_len, cfg.timeout_s)

        t0 = time.perf_counter()
        results = await asyncio.gather(*(go(p) for p in prompts))
        duration = time.perf_counter() - t0
        info = await server_info(client)
        accept, gen = info_numbers(info)
        prom_after = await server_metrics(client)
        vllm_after, t_after = await vllm_scrape(client), time.perf_counter()
    vllm_counters: dict[str, Any] | None = None
    if vllm_before is not None and vllm_after is not None:
        w = server_window(vllm_before, vllm_after, t_after - t_before)
        vllm_counters = w.to_json() if w is not None else None
    prom: dict[str, float] | None = None
    verify_calls: float | None = None
    if prom_after is not None:
        prom = {k: v for k in prom_after.values if (v := prom_after.get(k)) is not None}
        a, b = (m.get("verify_calls_total") if m else None for m in (prom_before, prom_after))
        if a is not None and b is not None and b >= a:
            verify_calls = b - a
    ok = [r for r in results if r.ok]
    notes: list[str] = []
    if openai:
        notes.append("ITL N/A: vLLM's OpenAI stream chunks carry text, not token counts "
                     "(tokens from the usage chunk)")
    interval = info_log_interval(info)
    rounds = decode_rounds_lower_bound(ok, cfg.concurrency)
    if gen is not None and (interval is None or rounds < 2 * interval):
        why = ("decode_log_interval unknown" if interval is None else
               f"the benchmark ran >= {rounds} decode rounds, fewer than 2 x "
               f"decode_log_interval ({interval})")
        notes.append(f"log decode-only tok/s N/A: {why}, so SGLang's last decode line may "
                     "cover time before the benchmark")
        gen = None
    specs = [r.spec for r in ok if r.spec is not None]
    hists = [s["histogram"] for s in specs if s.get("histogram")]
    ttfts = [r.ttft * 1000 for r in ok if r.ttft is not None]
    itls = [x * 1000 for r in ok for x in r.itls]
    accs = [r.accept for r in ok if r.accept is not None]
    total = sum(r.tokens for r in ok)
    return BenchResult(
        server=server, kind="builtin", started_at=started, completed=len(ok),
        failed=len(results) - len(ok), concurrency=cfg.concurrency, output_len=cfg.output_len,
        duration_s=duration, total_output_tokens=total,
        output_tok_s=total / duration if ok and duration > 0 else None,
        mean_ttft_ms=statistics.fmean(ttfts) if ttfts else None,
        median_ttft_ms=statistics.median(ttfts) if ttfts else None,
        mean_itl_ms=statistics.fmean(itls) if itls else None,
        median_itl_ms=statistics.median(itls) if itls else None,
        p99_itl_ms=_pct(itls, 0.99),
        accept_length=accept, request_accept_length=statistics.fmean(accs) if accs else None,
        server_gen_throughput=gen,
        errors=[r.error for r in results if r.error][:5],
        spec_requests=specs, spec_histogram=sum_histograms(hists), notes=notes,
        prometheus=prom, prometheus_verify_calls=verify_calls, vllm_counters=vllm_counters,
    )


async def has_bench_serving(host: Host, python: str) -> bool:
    res = await host.run([python, "-c", SAFE_PATH + "import importlib.util\nsys.exit(0 if "
                          "importlib.util.find_spec('sglang.bench_serving') else 1)"], timeout=60)
    return res.rc == 0


async def run_bench_serving(host: Host, python: str, server: str, port: int, cfg: BenchConfig,
                            listen_host: str = "127.0.0.1") -> BenchResult:
    """sglang.bench_serving on the host, its result block parsed. Run as `-m` does, but with
    only absolute sys.path entries (`SAFE_PATH`): `-m` puts the folder it starts in first, and
    another user's sglang/ there would run as us."""
    argv = [python, "-c", SAFE_PATH + "import runpy\nrunpy.run_module('sglang.bench_serving', "
            "run_name='__main__', alter_sys=True)",
            "--backend", "sglang", "--host", listen_host,
            "--port", str(port), "--dataset-name", "random", "--num-prompts",
            str(cfg.num_prompts), "--random-input-len", str(cfg.input_len),
            "--random-output-len", str(cfg.output_len), "--random-range-ratio", "1",
            "--max-concurrency", str(cfg.concurrency)]
    started = time.time()
    t0 = time.perf_counter()
    res = await host.run(argv, timeout=cfg.timeout_s)
    duration = time.perf_counter() - t0
    blocks = parse_bench_serving(res.stdout)
    if not blocks:
        tail = (res.stderr.strip().splitlines() or res.stdout.strip().splitlines() or
                [f"exit {res.rc}"])[-1]
        raise RuntimeError(f"sglang.bench_serving printed no result block: {tail}")
    b = blocks[-1]
    completed = b.completed or 0
    return BenchResult(
        server=server, kind="bench_serving", started_at=started, completed=completed,
        failed=max(0, cfg.num_prompts - completed), concurrency=cfg.concurrency,
        output_len=cfg.output_len, duration_s=b.duration_s or duration,
        total_output_tokens=b.total_output_tokens or 0, output_tok_s=b.output_throughput,
        mean_ttft_ms=b.mean_ttft_ms, median_ttft_ms=b.median_ttft_ms, mean_itl_ms=b.mean_itl_ms,
        median_itl_ms=b.median_itl_ms, p99_itl_ms=b.p99_itl_ms, accept_length=b.accept_length,
        raw=res.stdout,
    )
