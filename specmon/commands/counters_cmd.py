"""`specmon counters URL`: a vLLM server's acceptance and throughput from its /metrics counters.

The log-free path: vLLM's spec-decode and generation counters, scraped every `--interval`
seconds, give exact per-window acceptance rate, accept length (bonus included), per-position
acceptance and generation tok/s (`specmon.parse.vllm_metrics`). The window is timed by this
machine's clock between the two scrapes (the exposition format carries no server time).

Exit status: 0 done, 2 usage or the URL gave no vLLM counters.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from specmon.commands.options import add_json
from specmon.errors import CliError
from specmon.jsonout import dumps

MAX_COUNT = 1_000_000


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Scrape a vLLM server's /metrics every INTERVAL seconds and print each "
                     "window's exact acceptance rate, accept length (bonus included), per-position "
                     "acceptance and generation tok/s (every emitted token, prefill steps included), "
                     "per engine and summed. A counter that goes down (a restart) gives no value for "
                     "that window.")
    p.add_argument("url", metavar="URL", help="http://HOST:PORT (or the /metrics URL itself)")
    p.add_argument("--interval", type=float, default=10.0, metavar="S",
                   help="seconds between scrapes (default 10, vLLM's stats interval)")
    p.add_argument("--count", type=int, default=1, metavar="N",
                   help="windows to print (default 1)")
    add_json(p, "one JSON object per window and engine")


def _scrape(client: Any, url: str) -> Any:
    import httpx

    from specmon.parse.sglang_metrics import MetricsError
    from specmon.parse.vllm_metrics import parse_vllm_metrics

    try:
        r = client.get(url, timeout=10)
    except httpx.HTTPError as exc:
        raise CliError(f"{url}: cannot fetch ({type(exc).__name__}: {exc})") from None
    if r.status_code != 200:
        raise CliError(f"{url}: HTTP {r.status_code}")
    try:
        scrape = parse_vllm_metrics(r.text)
    except MetricsError as exc:
        raise CliError(f"{url}: {exc}") from None
    if not scrape.engines and scrape.unreadable:
        raise CliError(f"{url}: no readable vllm: counters ({scrape.unreadable} sample(s) NaN, "
                       "infinite or negative)")
    if not scrape.engines:
        raise CliError(f"{url}: no vllm: counters (not a vLLM server, or stats disabled)")
    return scrape


def _fmt(v: float | None, f: str = "{:.3f}") -> str:
    return "N/A" if v is None else f.format(v)


def run(args: argparse.Namespace) -> int:
    import httpx

    from specmon.parse.vllm_metrics import windows

    if not (0 < args.interval <= 3600):
        raise CliError(f"--interval must be in (0, 3600] seconds (got {args.interval})")
    if not (1 <= args.count <= MAX_COUNT):
        raise CliError(f"--count must be in 1..{MAX_COUNT} (got {args.count})")
    url = args.url if args.url.rstrip("/").endswith("/metrics") else args.url.rstrip("/") + "/metrics"
    with httpx.Client() as client:
        prev, t_prev = _scrape(client, url), time.monotonic()
        for i in range(args.count):
            time.sleep(args.interval)
            cur, t_cur = _scrape(client, url), time.monotonic()
            for w in windows(prev, cur, t_cur - t_prev):
                if args.json:
                    print(dumps({"window": i + 1, **w.to_json()}), flush=True)
                elif w.restart:
                    print(f"window {i + 1} engine {w.engine}: a counter went down (restart): "
                          "N/A", flush=True)
                else:
                    pp = " ".join(_fmt(x, "{:.3f}") for x in w.per_position or []) or "N/A"
                    print(f"window {i + 1} ({w.dt_s:.1f} s) engine {w.engine}: accept len "
                          f"{_fmt(w.accept_len, '{:.2f}')} (bonus incl.), accept rate "
                          f"{_fmt(w.accept_rate)}, per position {pp}, drafts "
                          f"{_fmt(w.drafts, '{:.0f}')}, gen {_fmt(w.gen_tok_s, '{:.1f}')} tok/s "
                          "(every emitted token, prefill steps incl.)", flush=True)
            prev, t_prev = cur, t_cur
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(2)
