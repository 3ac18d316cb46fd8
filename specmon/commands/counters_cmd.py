"""`specmon counters URL`: a vLLM server's acceptance and throughput from its /metrics counters.

The log-free path: vLLM's spec-decode and generation counters, scraped every `--interval`
seconds, give exact per-window acceptance rate, accept length (bonus included), per-position
acceptance and generation tok/s (`specmon.parse.vllm_metrics`). The window is timed by this
machine's clock between the two scrapes (the exposition format carries no server time).
A scrape is bounded: 8 MiB of body (inflated; reading stops there) and 15 s from the request to
its last byte.

Exit status: 0 done, 2 usage or the URL gave no vLLM counters.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import re
import sys
import time
from typing import Any

from specmon.commands.options import add_json
from specmon.errors import CliError
from specmon.hosts.httpget import SCRAPE_DEADLINE_S, why
from specmon.jsonout import dumps
from specmon.numfmt import NA, num
from specmon.redact import MASK, redact_text
from specmon.textsafe import cut, visible

MAX_COUNT = 1_000_000
# what a URL's user:password@ is, where the text is no valid URL (`http://u:pa/ss@h`: an
# unescaped / in the password): all up to the last @ before a ?query or #fragment
_RE_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*+://)[^?#]*@")


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


def shown(text: object) -> str:
    """`text` as one line of an error: secrets masked (a URL's user:password@, ?access_token=),
    control characters escaped (a newline too), cut to a line's length."""
    return cut(visible(redact_text(str(text))))


def _why(exc: Exception) -> str:
    return shown(why(exc))


def metrics_url(raw: str) -> Any:
    """The `/metrics` URL (an httpx.URL) of `raw`: http(s)://HOST:PORT, any path, with
    `/metrics` appended to the path (not after a ?query) unless the path ends with it.
    CliError, one line, for text that is no http(s) URL."""
    import httpx

    try:
        url = httpx.URL(raw)
        if url.scheme not in ("http", "https") or not url.host:
            raise CliError(f"{shown(raw)}: not an http:// or https:// URL with a host")
        if not url.path.rstrip("/").endswith("/metrics"):
            url = url.copy_with(path=url.path.rstrip("/") + "/metrics")
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        masked = _RE_USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", raw, count=1)
        # (the parser's words may quote a piece of the password: "Invalid port: 'pa'")
        why = f" ({_why(exc)})" if masked == raw else ""
        raise CliError(f"{shown(masked)}: not a valid URL{why}") from None
    return url


async def _fetch(client: Any, url: Any, deadline_s: float, limit: int) -> str:
    """The body of GET `url` as text (bounded: `specmon.hosts.httpget`); CliError, one line,
    naming the URL, when there is none."""
    from specmon.hosts.httpget import FetchError, get_bounded

    try:
        _, data = await get_bounded(client, url, deadline_s=deadline_s, limit=limit,
                                    what="/metrics body")
    except FetchError as exc:
        raise CliError(f"{shown(url)}: {shown(exc)}") from None
    # (the exposition format is UTF-8; a byte that is not is no digit of a counter either)
    return data.decode("utf-8", errors="replace")


async def _scrape(client: Any, url: Any) -> Any:
    from specmon.parse.sglang_metrics import MAX_TEXT, MetricsError
    from specmon.parse.vllm_metrics import parse_vllm_metrics

    where = shown(url)
    text = await _fetch(client, url, SCRAPE_DEADLINE_S, MAX_TEXT)
    try:
        scrape = parse_vllm_metrics(text)
    except MetricsError as exc:
        raise CliError(f"{where}: {shown(exc)}") from None
    if not scrape.engines and scrape.unreadable:
        raise CliError(f"{where}: no readable vllm: counters ({scrape.unreadable} sample(s) NaN, "
                       "infinite or negative)")
    if not scrape.engines:
        raise CliError(f"{where}: no vllm: counters (not a vLLM server, or stats disabled)")
    return scrape


HUGE = 1e15  # past this a value is shown in e-notation (1.000e+300, not 301 digits)


def _fmt(v: float | None, f: str = "{:.3f}") -> str:
    """`num`'s text (N/A for None, NaN and infinities, as JSON's null), in e-notation past HUGE."""
    if v is not None and math.isfinite(v) and abs(v) >= HUGE:
        return num(v, "{:.3e}")
    return num(v, f)


def run(args: argparse.Namespace) -> int:
    if not (0 < args.interval <= 3600):
        raise CliError(f"--interval must be in (0, 3600] seconds (got {args.interval})")
    if not (1 <= args.count <= MAX_COUNT):
        raise CliError(f"--count must be in 1..{MAX_COUNT} (got {args.count})")
    return asyncio.run(_watch(args, metrics_url(args.url)))


async def _watch(args: argparse.Namespace, url: Any) -> int:
    import httpx

    from specmon.parse.vllm_metrics import windows

    async with httpx.AsyncClient() as client:
        prev, t_prev = await _scrape(client, url), time.monotonic()
        for i in range(args.count):
            await asyncio.sleep(args.interval)
            cur, t_cur = await _scrape(client, url), time.monotonic()
            for w in windows(prev, cur, t_cur - t_prev):
                if args.json:
                    print(dumps({"window": i + 1, **w.to_json()}), flush=True)
                    continue
                # (a label is the server's text: "0\nwindow 9 ..." would print a second line)
                engine = cut(visible(w.engine), 40)
                if w.restart:
                    print(f"window {i + 1} engine {engine}: a counter went down (restart): "
                          f"{NA}", flush=True)
                else:
                    pp = " ".join(_fmt(x, "{:.3f}") for x in w.per_position or []) or NA
                    print(f"window {i + 1} ({_fmt(w.dt_s, '{:.1f}')} s) engine {engine}: accept "
                          f"len {_fmt(w.accept_len, '{:.2f}')} (bonus incl.), accept rate "
                          f"{_fmt(w.accept_rate)}, per position {pp}, drafts "
                          f"{_fmt(w.drafts, '{:.0f}')}, gen {_fmt(w.gen_tok_s, '{:.1f}')} tok/s "
                          "(every emitted token, prefill steps incl.)", flush=True)
            prev, t_prev = cur, t_cur
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(2)
