"""Which of a run's arguments can change how fast it decodes, and how two runs' differ.

One rule for the speedup's conditions (`analysis.conditions`) and a drift alert's causes
(`analysis.fingerprint.diff`). SGLang prints every argument (`server_args=ServerArgs(...)`).
vLLM prints its config line (read under SGLang's names: model_path, tp_size, speculative_*)
and, before it, `non-default args: {...}`: the CLI arguments the user set, where an argument
left out has its default. That dict (`non_default_args` in a run's args) is compared key by key
under vLLM's own names; compared whole, a port or a speculative_config alone made two runs
"differ".
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

NON_DEFAULT = "non_default_args"  # a vLLM run's `non-default args` dict (session.state)

# Arguments that name the process, where it listens or logs, not how fast it decodes.
IDENTITY_ARGS = frozenset({
    "host", "port", "nccl_port", "base_gpu_id", "dist_init_addr", "node_rank", "random_seed",
    "log_level", "log_level_http", "log_requests", "log_requests_level", "show_time_cost",
    "enable_metrics", "enable_metrics_for_all_schedulers", "decode_log_interval", "api_key",
    "admin_api_key", "served_model_name", "file_storage_path", "crash_dump_folder",
    "bucket_time_to_first_token", "bucket_inter_token_latency", "bucket_e2e_request_latency",
    "collect_tokens_histogram", "kv_events_config", "enable_request_time_stats_logging",
    "prompt_tokens_buckets", "generation_tokens_buckets", "model_path_display",
    # the engine's version: compared as the fingerprint's version ("vLLM version A vs B")
    "version", "engine_version",
    # vLLM's spellings (its stats logging: without it there are no lines to compare at all)
    "model_tag", "disable_log_stats", "aggregate_engine_logging",
})
# vLLM's speculation settings, which are not spelled `speculative_*`.
VLLM_SPECULATION = frozenset({
    "speculative_config", "num_speculative_tokens_per_batch_size", "disable_by_batch_size"})
# vLLM CLI names of what its config line already gives under SGLang's names (compared there).
_SAME_AS = {"model": "model_path", "tensor_parallel_size": "tp_size",
            "pipeline_parallel_size": "pp_size", "data_parallel_size": "dp_size"}


class _Default:
    """A vLLM argument its `non-default args` leaves out: the run used vLLM's default."""

    def __repr__(self) -> str:
        return "default"


DEFAULT: Final = _Default()


def is_speculation(name: str) -> bool:
    """A speculation setting: the one thing a speedup's two servers are meant to differ in."""
    return name.startswith("speculative_") or name in VLLM_SPECULATION


def is_identity_flag(flag: str) -> bool:
    """`--port`, `--log-level`: a command-line flag naming an identity argument."""
    return flag.lstrip("-").replace("-", "_") in IDENTITY_ARGS


def _comparable(args: Mapping[str, Any]) -> tuple[dict[str, Any], set[str], bool]:
    """(the arguments that can change decode speed, those read from vLLM's non-default args,
    whether that dict was read: then a vLLM argument it lacks has its default)."""
    out = {k: v for k, v in args.items() if k != NON_DEFAULT and k not in IDENTITY_ARGS}
    nd = args.get(NON_DEFAULT)
    if not isinstance(nd, Mapping):
        return out, set(), False
    cli = set()
    for k, v in nd.items():
        if k in IDENTITY_ARGS or _SAME_AS.get(k, k) in out:
            continue  # (a config-line value is the one the engine runs with)
        out[k] = v
        cli.add(k)
    return out, cli, True


def arg_changes(old: Mapping[str, Any], new: Mapping[str, Any], *,
                speculation: bool) -> Iterator[tuple[str, Any, Any]]:
    """(name, old value, new value) for each argument the two runs set differently, by name;
    DEFAULT where a vLLM run left it at its default. Not identity arguments; not speculation
    settings unless `speculation`; not an argument only one side prints at all (one engine
    version's extra argument, not a difference)."""
    a, a_cli, a_defaults = _comparable(old)
    b, b_cli, b_defaults = _comparable(new)
    for k in sorted(set(a) | set(b)):
        if not speculation and is_speculation(k):
            continue
        if k in a and k in b:
            if a[k] != b[k]:
                yield k, a[k], b[k]
        elif k in a_cli and b_defaults:
            yield k, a[k], DEFAULT
        elif k in b_cli and a_defaults:
            yield k, DEFAULT, b[k]


MAX_SCHEDULE = 64  # ranges of a per-batch-size k schedule read (a longer one is damage)


def _int_of(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def speculation_limits(args: Mapping[str, Any]) -> tuple[int | None, list[tuple[int, int, int]]]:
    """A vLLM run's batch-size rules for speculation, from its `non-default args` (top level
    or inside speculative_config): (`disable_by_batch_size` N: no drafts for new requests
    while more than N are enqueued, <= 0.10; the `num_speculative_tokens_per_batch_size`
    schedule as sorted inclusive (low, high, k) ranges, 0.25+: {"1-16": 3, "256-4096": 0})."""
    nd = args.get(NON_DEFAULT)
    if not isinstance(nd, Mapping):
        return None, []
    sc = nd.get("speculative_config")
    places = [nd, sc] if isinstance(sc, Mapping) else [nd]
    off = next((n for p in places if (n := _int_of(p.get("disable_by_batch_size"))) is not None),
               None)
    sched = next((s for p in places if isinstance(s := p.get(
        "num_speculative_tokens_per_batch_size"), Mapping)), None)
    ranges: list[tuple[int, int, int]] = []
    for key, k in list((sched or {}).items())[:MAX_SCHEDULE]:
        lo, _, hi = str(key).strip().partition("-")
        try:
            a, b = int(lo), int(hi) if hi else int(lo)
        except ValueError:
            continue
        if _int_of(k) is not None and 0 < a <= b:
            ranges.append((a, b, k))
    return off, sorted(ranges)


def drafts_at(args: Mapping[str, Any], running_req: int) -> tuple[int | None, str | None]:
    """(the k a vLLM speculative run drafts at this batch size, the rule that says so), or
    (None, None) when no batch-size rule applies. A schedule's gap inherits the range below
    it (vLLM's rule); its k is capped by num_speculative_tokens."""
    off, ranges = speculation_limits(args)
    if off is not None and running_req > off:
        return 0, f"disable_by_batch_size {off}"
    below = [r for r in ranges if r[0] <= running_req]
    if not below:
        return None, None
    lo, hi, k = below[-1]
    top = _int_of(args.get("speculative_num_steps"))
    span = f"{lo}-{hi}" if lo != hi else str(lo)
    return (min(k, top) if top is not None else k), \
        f"num_speculative_tokens_per_batch_size {span}: {k}"
