"""A benchmark's figures as every front end shows them: the UI's notice and panel line,
`specmon server bench`, and the report of a snapshot that kept the session's benchmarks.

They all read a benchmark in its JSON form (`control.benchmark.BenchResult.to_json`, which a
snapshot keeps under "benchmarks"), so one rule says which accept length a benchmark measured
and how its line reads; a snapshot's entries are checked here first (a file is hostile input).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specmon.numfmt import finite, num, unix_time
from specmon.textsafe import cut

MAX_NOTES = 8  # notes kept per benchmark read from a file


def _f(d: Mapping[str, Any] | None, key: str) -> float | None:
    return finite(d.get(key)) if isinstance(d, Mapping) else None


def accept(b: Mapping[str, Any]) -> tuple[float | None, str | None]:
    """(the accept length this benchmark measured, where it comes from), best source first:
    vLLM's counters diffed over exactly the run, the mean of the responses' own
    `spec_accept_length`, then SGLang's /server_info value (the server's whole life, said so)."""
    counters = b.get("vllm_counters")
    for value, source in ((_f(counters, "accept_len"), "vLLM counters over the run"),
                          (_f(b, "request_accept_length"), "the responses' mean"),
                          (_f(b, "accept_length"), "server_info, server lifetime")):
        if value is not None:
            return value, source
    return None, None


def line(b: Mapping[str, Any]) -> str:
    """The one line a benchmark is shown as (the UI's notice, `server bench`)."""
    def f(key: str, fmt: str = ".1f", d: Mapping[str, Any] | None = None) -> str:
        return num(_f(b if d is None else d, key), "{:" + fmt + "}")

    head = (f"{cut(str(b.get('server')), 80)} [{b.get('kind')}, c={b.get('concurrency')}, "
            f"out={b.get('output_len')}, n={b.get('completed')}]: end-to-end output "
            f"{f('output_tok_s')} tok/s, TTFT {f('mean_ttft_ms')} ms, "
            f"ITL {f('mean_itl_ms', '.2f')} ms")
    c = b.get("vllm_counters")
    if isinstance(c, Mapping):  # vLLM: its counters over exactly this run (no decode-only line)
        spec = (f"accept len {f('accept_len', '.2f', c)} (bonus incl.), accept rate "
                f"{f('accept_rate', '.2f', c)}, " if _f(c, "drafts") else "no drafts, ")
        return (f"{head}; vLLM counters over the run: {spec}gen {f('gen_tok_s', '.1f', c)} "
                "tok/s (every emitted token, prefill steps incl.)")
    value, source = accept(b)
    acc = f"{num(value, '{:.2f}')} ({source})" if value is not None else "N/A"
    # the log's number is SGLang's last decode line: one log interval, not the run's median
    gen = _f(b, "server_gen_throughput")
    log = (f"log's last decode line {num(gen, '{:.1f}')} tok/s (decode-only, one interval)"
           if gen is not None else "log decode-only tok/s N/A")
    return f"{head}, accept length {acc}; {log}"


def from_json(d: Any) -> dict[str, Any] | None:
    """A snapshot's benchmark entry with the fields the front ends read, each of its type
    (numbers finite, text cut), or None when the entry is no benchmark object."""
    if not isinstance(d, Mapping) or not isinstance(d.get("server"), str):
        return None
    out: dict[str, Any] = {"server": cut(d["server"], 200),
                           "kind": cut(str(d.get("kind")), 20)}
    out["started_at"] = unix_time(d.get("started_at"))  # (1e300 is no time to print)
    for key in ("duration_s", "output_tok_s", "mean_ttft_ms", "median_ttft_ms",
                "mean_itl_ms", "median_itl_ms", "p99_itl_ms", "accept_length",
                "request_accept_length", "server_gen_throughput"):
        out[key] = _f(d, key)
    for key in ("completed", "failed", "concurrency", "output_len", "total_output_tokens"):
        v = d.get(key)
        out[key] = v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 10**12 \
            else None
    c = d.get("vllm_counters")
    out["vllm_counters"] = ({k: _f(c, k) for k in ("accept_len", "accept_rate", "drafts",
                                                   "gen_tok_s", "dt_s")}
                            if isinstance(c, Mapping) else None)
    notes = d.get("notes")
    out["notes"] = [cut(x) for x in notes[:MAX_NOTES] if isinstance(x, str)] \
        if isinstance(notes, list) else []
    return out
