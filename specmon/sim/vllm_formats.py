"""vLLM (V1) log-line formats, version by version (shared/vllm-observables.md section 1).

Pure string building, no I/O: `specmon sim server --engine vllm` writes these lines and tests
check them against vLLM's own `%`-format strings, copied verbatim below. The rules are keyed on
the released versions that were read (0.8.3-0.33.0); builds between two releases are not
modelled. What the note gives as a source fact is marked "src"; the line numbers of lines other
than the spec line, the wording of start-up lines and the 0.10-vs-0.12 ANSI colour split are the
simulator's choice (a parser must never key on them).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

# Every V1 release whose wheel was read for the research note (V0-only 0.7.3 and 0.8.0 are left
# out: their spec line is the V0 one and 0.8.0 has no `Engine NNN:` prefix).
VERSIONS: tuple[str, ...] = (
    "0.8.3", "0.8.4", "0.8.5", "0.9.0", "0.9.2", "0.10.0", "0.10.1.1", "0.10.2", "0.11.0",
    "0.12.0", "0.13.0", "0.18.0", "0.21.0", "0.25.0", "0.29.0", "0.30.0", "0.31.0", "0.33.0",
)  # fmt: skip
NEWEST = VERSIONS[-1]
DEFAULT_PORT = 8000  # vllm serve --port default

# src: vllm/v1/spec_decode/metrics.py, SpecDecodingLogging.log, joined literals (1a table)
SPEC_F1 = ("SpecDecoding metrics: " "Draft acceptance rate: %.1f%%, " "Accepted: %d tokens, "
           "Drafted: %d tokens")  # fmt: skip
SPEC_F2 = ("SpecDecoding metrics: " "Draft acceptance rate: %.1f%%, "
           "Mean acceptance length: %.2f, " "Accepted: %d tokens, " "Drafted: %d tokens, "
           "Per-position acceptance rate: %s")  # fmt: skip
SPEC_F3 = ("SpecDecoding metrics: " "Mean acceptance length: %.2f, "
           "Accepted throughput: %.2f tokens/s, " "Drafted throughput: %.2f tokens/s, "
           "Accepted: %d tokens, " "Drafted: %d tokens, " "Per-position acceptance rate: %s, "
           "Avg Draft acceptance rate: %.1f%%")  # fmt: skip
# src: vllm/v1/metrics/loggers.py (1b table): fixed string 0.8.3-0.11, parts from 0.12
ENGINE_FIXED = ("Avg prompt throughput: %.1f tokens/s, " "Avg generation throughput: %.1f tokens/s, "
                "Running: %d reqs, Waiting: %d reqs, " "GPU KV cache usage: %.1f%%, "
                "Prefix cache hit rate: %.1f%%")  # fmt: skip
# src: the 0.12+ log_parts (1b table), the device label `%s` from 0.30
ENGINE_PARTS = {
    "prompt": "Avg prompt throughput: %.1f tokens/s",
    "gen": "Avg generation throughput: %.1f tokens/s",
    "running": "Running: %d reqs",
    "waiting": "Waiting: %d reqs",
    "preemptions": "Preemptions: %d",
    "kv": "GPU KV cache usage: %.1f%%",
    "kv_030": "%s KV cache usage: %.1f%%",
    "prefix": "Prefix cache hit rate: %.1f%%",
}
DATE_FORMAT = "%m-%d %H:%M:%S"  # src: vllm/logger.py _DATE_FORMAT (no year)
CYAN_010 = "\x1b[1;36m"  # 0.10-0.11 tag colour (the note: always, files included)
CYAN_012 = "\x1b[0;36m"  # 0.12-0.13 (vllm/utils CYAN; skipped with NO_COLOR)
RESET = "\x1b[0;0m"

VKey = tuple[int, int, int, int]


def vkey(version: str) -> VKey:
    parts = [int(p) for p in version.split(".")]
    while len(parts) < 4:
        parts.append(0)
    return (parts[0], parts[1], parts[2], parts[3])


def ge(version: str, other: str) -> bool:
    return vkey(version) >= vkey(other)


def check_version(version: str) -> str:
    if version not in VERSIONS:
        raise ValueError(f"unknown vLLM format version {version!r}; known: {', '.join(VERSIONS)}")
    return version


def spec_layout(version: str) -> str:
    """F1 (0.8.3-0.8.4), F2a (0.8.5), F2b (0.9.0-0.10.1.1), F3 (0.10.2+)."""
    if not ge(version, "0.8.5"):
        return "F1"
    if not ge(version, "0.9.0"):
        return "F2a"
    if not ge(version, "0.10.2"):
        return "F2b"
    return "F3"


def spec_lineno(version: str) -> int:
    """src: the `log_fn(` line of each release (1a table)."""
    layout = spec_layout(version)
    if layout == "F1":
        return 53
    if layout == "F2a":
        return 82
    if layout == "F2b":
        return 86 if vkey(version)[:3] == (0, 9, 0) else 87
    if not ge(version, "0.12.0"):
        return 96
    if not ge(version, "0.21.0"):
        return 100
    if not ge(version, "0.25.0"):
        return 101
    return 120


def engine_lineno(version: str) -> int:
    """Line of the Engine-line log call (127 is real for 0.10/0.11; the others are chosen)."""
    if not ge(version, "0.10.0"):
        return 87
    if not ge(version, "0.12.0"):
        return 127
    return 236


# ---------------------------------------------------------------------------- processes / tags


def api_tag(version: str) -> str | None:
    """The API server's process tag: none before 0.10 (1d table)."""
    return "APIServer" if ge(version, "0.10.0") else None


def engine_core_name(version: str, dp_rank: int = 0, dp_size: int = 1) -> str | None:
    """The EngineCore's tag name: untagged before 0.10 without DP (EngineCore_<n> with DP),
    EngineCore_DP<n> always in 0.10-0.13, EngineCore (EngineCore_DP<n> with DP) from 0.18."""
    if not ge(version, "0.10.0"):
        return f"EngineCore_{dp_rank}" if dp_size > 1 else None
    if not ge(version, "0.18.0") or dp_size > 1:
        return f"EngineCore_DP{dp_rank}"
    return "EngineCore"


def worker_name(version: str, tp_rank: int, tp_size: int) -> str:
    """A worker's tag name: `VllmWorker rank=<r>` before 0.10, then `Worker[_TP<t>]` (a suffix
    only for sizes > 1; DP/PP/EP are not simulated)."""
    if not ge(version, "0.10.0"):
        return f"VllmWorker rank={tp_rank}"
    return f"Worker_TP{tp_rank}" if tp_size > 1 else "Worker"


def proc_title(name: str, prefix: str = "VLLM") -> str:
    """setproctitle as vLLM's set_process_title does: f"{prefix}::{name}"
    (prefix $VLLM_PROCESS_NAME_PREFIX, default VLLM). Before 0.10 the sim titles the workers
    `VLLM::VllmWorker_<r>` (no source read for 0.8/0.9 titles)."""
    return f"{prefix}::{name.replace(' rank=', '_')}"


def tag_prefix(version: str, name: str | None, pid: int, *, no_color: bool = False) -> str:
    """`(NAME pid=N) ` with the colour vLLM writes into files: ESC[1;36m in 0.10-0.11 (always),
    ESC[0;36m in 0.12-0.13 unless NO_COLOR; none from 0.18 (only on a tty) and none untagged."""
    if name is None:
        return ""
    tag = f"({name} pid={pid})"
    if ge(version, "0.10.0") and not ge(version, "0.12.0"):
        return f"{CYAN_010}{tag}{RESET} "
    if ge(version, "0.12.0") and not ge(version, "0.18.0") and not no_color:
        return f"{CYAN_012}{tag}{RESET} "
    return tag + " "


def header(version: str, t: float, filename: str, lineno: int, level: str = "INFO") -> str:
    """src (1b, logger prefix): `%(levelname)s %(asctime)s [%(filename)s:%(lineno)d] ` from 0.8.0
    (the same text with %(fileinfo)s at INFO)."""
    return f"{level} {time.strftime(DATE_FORMAT, time.localtime(t))} [{filename}:{lineno}] "


def line(version: str, t: float, message: str, *, filename: str, lineno: int,
         tag: str = "", level: str = "INFO", prefix: str = "") -> str:
    """One record as vLLM writes it (no final newline): VLLM_LOGGING_PREFIX, the process tag,
    the header, the message; every "\\n" of the message becomes "\\r\\n" + tag + prefix + header
    (NewLineFormatter, and the stdout wrapper tags every new line)."""
    head = prefix + header(version, t, filename, lineno, level)
    return tag + head + message.replace("\n", "\r\n" + tag + head)


# ---------------------------------------------------------------------------- stats lines


def engine_message(version: str, *, engine: int, prompt_tps: float, gen_tps: float,
                   running: int, waiting: int, kv_usage_pct: float,
                   prefix_hit_pct: float | None, preemptions: int = 0) -> str:
    """`Engine 000: Avg prompt throughput: ...` (1b). From 0.12 built from parts (Preemptions only
    when > 0); from 0.31 the prefix-cache part only when the cache saw queries (None here)."""
    pre = f"Engine {engine:03d}: "
    if not ge(version, "0.12.0"):
        return pre + ENGINE_FIXED % (prompt_tps, gen_tps, running, waiting, kv_usage_pct,
                                     prefix_hit_pct or 0.0)
    fmt = ENGINE_PARTS
    parts = [fmt["prompt"] % prompt_tps, fmt["gen"] % gen_tps, fmt["running"] % running,
             fmt["waiting"] % waiting]
    if preemptions > 0:
        parts.append(fmt["preemptions"] % preemptions)
    if ge(version, "0.30.0"):
        parts.append(fmt["kv_030"] % ("GPU", kv_usage_pct))
    else:
        parts.append(fmt["kv"] % kv_usage_pct)
    if prefix_hit_pct is not None or not ge(version, "0.31.0"):
        parts.append(fmt["prefix"] % (prefix_hit_pct or 0.0))
    return pre + ", ".join(parts)


def spec_message(version: str, *, num_drafts: int, num_draft_tokens: int, num_accepted: int,
                 accepted_per_pos: Sequence[int], elapsed_s: float) -> str | None:
    """The spec line of one interval, computed as vLLM computes it (1a); None where vLLM prints
    nothing (0.9.0+ with no drafts). 0.8.5 leaves the bonus token out of the mean length and
    prints `nan` for an interval without drafts."""
    layout = spec_layout(version)
    if num_drafts == 0 and layout not in ("F1", "F2a"):
        return None
    nan = float("nan")
    rate = num_accepted / num_draft_tokens * 100 if num_draft_tokens > 0 else nan
    if layout == "F1":
        return SPEC_F1 % (rate, num_accepted, num_draft_tokens)
    if num_drafts:
        per_pos = [a / num_drafts for a in accepted_per_pos]
        mean = num_accepted / num_drafts
    else:
        per_pos = [nan] * len(accepted_per_pos)
        mean = nan
    rates = ", ".join(f"{p:.3f}" for p in per_pos)
    if layout == "F2a":
        return SPEC_F2 % (rate, mean, num_accepted, num_draft_tokens, rates)
    mean += 1  # 0.9.0+: "Conventionally, mean acceptance length includes the bonus token"
    if layout == "F2b":
        return SPEC_F2 % (rate, mean, num_accepted, num_draft_tokens, rates)
    acc_tps = num_accepted / elapsed_s if elapsed_s > 0 else 0.0
    draft_tps = num_draft_tokens / elapsed_s if elapsed_s > 0 else 0.0
    return SPEC_F3 % (mean, acc_tps, draft_tps, num_accepted, num_draft_tokens, rates, rate)


# ---------------------------------------------------------------------------- start-up lines


def speculative_repr(method: str | None, draft: str | None, k: int) -> str:
    """`SpeculativeConfig({method=}, {model=}, {num_spec_tokens=})` (src, 1d), or None."""
    if method is None:
        return "None"
    return f"SpeculativeConfig(method={method!r}, model={draft!r}, num_spec_tokens={k})"


def config_message(version: str, *, model: str, served_model_name: str, method: str | None,
                   draft: str | None, k: int, tp: int, seed: int, max_model_len: int) -> str:
    """`Initializing a V1 LLM engine (vX) with config: ...`: VllmConfig.__str__'s leading fields
    and the parallel sizes (data_parallel_size from 0.10.2), a subset of the real list."""
    fields = [
        f"model={model!r}",
        f"speculative_config={speculative_repr(method, draft, k)}",
        f"tokenizer={model!r}", "skip_tokenizer_init=False", "tokenizer_mode=auto",
        "revision=None", "trust_remote_code=False", "dtype=torch.bfloat16",
        f"max_seq_len={max_model_len}", "download_dir=None", "load_format=auto",
        f"tensor_parallel_size={tp}", "pipeline_parallel_size=1",
    ]
    if ge(version, "0.10.2"):
        fields.append("data_parallel_size=1")
    fields += ["disable_custom_all_reduce=False", "quantization=None", "enforce_eager=False",
               "kv_cache_dtype=auto", "device_config=cuda", f"seed={seed}",
               f"served_model_name={served_model_name}", "enable_prefix_caching=True"]
    return (f"Initializing a V1 LLM engine (v{version}) with config: " + ", ".join(fields))


def non_default_args(args: Mapping[str, Any]) -> str:
    """`non-default args: {...}`: the CLI dict repr (literal_eval-able)."""
    return f"non-default args: {dict(args)!r}"


def version_message(version: str, model: str) -> str:
    """Before 0.18 `vLLM API server version X`; from 0.18 the sim prints the plain form
    `vLLM server version X, serving model M` (as with VLLM_DISABLE_LOG_LOGO=1: no ASCII logo)."""
    if ge(version, "0.18.0"):
        return f"vLLM server version {version}, serving model {model}"
    return f"vLLM API server version {version}"


def access_message(client: str, method: str, path: str, status: int, reason: str) -> str:
    return f'INFO:     {client} - "{method} {path} HTTP/1.1" {status} {reason}'


# ---------------------------------------------------------------------------- environment


def env_edits(version: str, environ: Mapping[str, str]) -> dict[str, str]:
    """What `import vllm` (env_override) and set_multiprocessing_worker_envs write into
    os.environ before the workers start: NCCL_CUMEM_ENABLE=0 (unconditional in older releases;
    modelled as "only when unset or 0" from 0.10, where the code warns and keeps a user's value),
    TORCHINDUCTOR_COMPILE_THREADS=1, and OMP_NUM_THREADS=1 when unset."""
    out = {"TORCHINDUCTOR_COMPILE_THREADS": "1"}
    if not ge(version, "0.10.0") or environ.get("NCCL_CUMEM_ENABLE", "0") == "0":
        out["NCCL_CUMEM_ENABLE"] = "0"
    if "OMP_NUM_THREADS" not in environ:
        out["OMP_NUM_THREADS"] = "1"
    return out


# ---------------------------------------------------------------------------- /metrics


def metrics_text(version: str, *, model_name: str, engine: int = 0,
                 counters: Mapping[str, float], gauges: Mapping[str, float],
                 per_pos: Sequence[int] | None, created: float) -> str:
    """Prometheus text as prometheus_client's generate_latest writes vLLM's collectors: a
    counter family is `<name>_total` (HELP/TYPE counter), its `_created` samples follow as a
    gauge family of their own; labels in vLLM's order (model_name, engine[, position]).
    `counters` keys are exposed names without `vllm:` and `_total`."""
    lab = f'model_name="{model_name}",engine="{engine}"'
    out: list[str] = []

    def counter(name: str, rows: list[tuple[str, float]]) -> None:
        help_ = _HELP.get(name, name)
        out.extend([f"# HELP vllm:{name}_total {help_}", f"# TYPE vllm:{name}_total counter"])
        out.extend(f"vllm:{name}_total{{{labels}}} {float(val)!r}" for labels, val in rows)
        out.extend([f"# HELP vllm:{name}_created {help_}", f"# TYPE vllm:{name}_created gauge"])
        out.extend(f"vllm:{name}_created{{{labels}}} {float(created)!r}" for labels, _ in rows)

    for name, val in gauges.items():
        out += [f"# HELP vllm:{name} {_HELP.get(name, name)}", f"# TYPE vllm:{name} gauge",
                f"vllm:{name}{{{lab}}} {float(val)!r}"]
    for name, val in counters.items():
        counter(name, [(lab, val)])
    if per_pos is not None:
        counter("spec_decode_num_accepted_tokens_per_pos",
                [(f'{lab},position="{i}"', val) for i, val in enumerate(per_pos)])
    return "\n".join(out) + "\n"


_HELP = {
    "num_requests_running": "Number of requests in model execution batches.",
    "num_requests_waiting": "Number of requests waiting to be processed.",
    "kv_cache_usage_perc": "KV-cache usage. 1 means 100 percent usage.",
    "gpu_cache_usage_perc": "GPU KV-cache usage. 1 means 100 percent usage.",
    "prompt_tokens": "Number of prefill tokens processed.",
    "generation_tokens": "Number of generation tokens processed.",
    "spec_decode_num_drafts": "Number of spec decoding drafts.",
    "spec_decode_num_draft_tokens": "Number of draft tokens.",
    "spec_decode_num_accepted_tokens": "Number of accepted tokens.",
    "spec_decode_num_accepted_tokens_per_pos": "Accepted tokens per draft position.",
}
