"""SGLang log-line formats, version by version (sglang-observables.md sections 1-4, 9).

Pure string building, no I/O: the simulator writes these lines, and tests check them byte for
byte against the literal sample lines of the research note. The rules are keyed on the released
version numbers that were compared; anything between two releases is not modelled.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

# Every release whose wheel was read for the research note, oldest first.
VERSIONS: tuple[str, ...] = (
    "0.3.0", "0.3.2", "0.3.4", "0.3.6", "0.4.0", "0.4.1", "0.4.1.post7", "0.4.2", "0.4.3",
    "0.4.4", "0.4.5", "0.4.6", "0.4.6.post5", "0.4.7", "0.4.8", "0.4.9", "0.4.9.post6",
    "0.4.10", "0.5.1", "0.5.2", "0.5.3", "0.5.4", "0.5.4.post3", "0.5.5", "0.5.6", "0.5.8",
    "0.5.9", "0.5.10", "0.5.10.post1", "0.5.11", "0.5.12", "0.5.15", "0.5.18", "0.5.20",
    "0.5.23",
)  # fmt: skip
NEWEST = VERSIONS[-1]

VKey = tuple[int, int, int, int]


def vkey(version: str) -> VKey:
    """'0.4.6.post5' -> (0, 4, 6, 5); a plain release has post 0, so 'postN' ranges start at 1."""
    main, _, post = version.partition(".post")
    parts = [int(p) for p in main.split(".")]
    while len(parts) < 3:
        parts.append(0)
    return (parts[0], parts[1], parts[2], int(post) if post else 0)


def ge(version: str, other: str) -> bool:
    """version >= other, where other may be written '0.4.6.post1' for 'any post-release'."""
    return vkey(version) >= vkey(other)


def check_version(version: str) -> str:
    if version not in VERSIONS:
        raise ValueError(
            f"unknown SGLang format version {version!r}; known: {', '.join(VERSIONS)}"
        )
    return version


# ---------------------------------------------------------------------------- prefix / tags


def rank_tag(
    version: str, *, tp_size: int, tp_rank: int = 0, ep_size: int = 1, dp_rank: int | None = None
) -> str:
    """The scheduler's logger prefix, e.g. ' TP0' or ' TP0 EP0' (section 1 table)."""
    tag = ""
    if not ge(version, "0.4.6.post1"):
        # 0.3.0 - 0.4.6: always a TP tag (0.3.0-0.3.2 only TP0 logs, same text).
        if dp_rank is not None:
            tag += f" DP{dp_rank}"
        return tag + f" TP{tp_rank}"
    if dp_rank is not None:
        tag += f" DP{dp_rank}"
    ep_rank = tp_rank // max(1, tp_size // max(1, ep_size))
    if not ge(version, "0.4.10"):
        if tp_size > 1:
            tag += f" TP{tp_rank}"
        return tag
    if not ge(version, "0.5.6"):
        if tp_size > 1:
            tag += f" TP{tp_rank}"
        if ep_size > 1:
            tag += f" EP{ep_rank}"
        return tag
    # 0.5.6 and later print the EP rank with TP (tp=8 -> ' TP0 EP0', per the research table).
    if tp_size > 1:
        tag += f" TP{tp_rank} EP{ep_rank}"
    elif ep_size > 1:
        tag += f" EP{ep_rank}"
    return tag


def proc_title(version: str, *, tp_size: int, tp_rank: int, ep_size: int = 1) -> str | None:
    """Scheduler process title (section 7.2); None before 0.4.1 (no titles then)."""
    if not ge(version, "0.4.1"):
        return None
    if not ge(version, "0.4.4"):
        return "sglang::scheduler"
    tag = rank_tag(version, tp_size=tp_size, tp_rank=tp_rank, ep_size=ep_size)
    return "sglang::scheduler" + tag.replace(" ", "_")


def timestamp(version: str, t: float, *, log_ms: bool = False) -> str:
    """asctime as SGLang's logging config prints it (clock only before 0.3.4)."""
    lt = time.localtime(t)
    if not ge(version, "0.3.4"):
        return time.strftime("%H:%M:%S", lt)
    s = time.strftime("%Y-%m-%d %H:%M:%S", lt)
    if log_ms and ge(version, "0.5.6"):
        s += f".{int((t % 1) * 1000):03d}"
    return s


def line(version: str, t: float, message: str, tag: str = "", *, log_ms: bool = False) -> str:
    """One full log line without the newline."""
    return f"[{timestamp(version, t, log_ms=log_ms)}{tag}] {message}"


# ---------------------------------------------------------------------------- decode / prefill


def graph_label(version: str, device: str = "cuda") -> str:
    if not ge(version, "0.5.2"):
        return "cuda graph"
    if not ge(version, "0.5.9"):
        return "cuda graph" if device == "cuda" else "cpu graph"
    if device in ("cpu", "npu", "cuda") or (device == "musa" and ge(version, "0.5.11")):
        return f"{device} graph"
    return "cpu graph"


def has_spec_fields(version: str) -> bool:
    return ge(version, "0.4.1.post1")


def accept_rate(version: str, accept_len: float, num_steps: int, num_draft_tokens: int) -> float:
    """The printed 'accept rate' (section 4.1): its denominator changed twice."""
    if not ge(version, "0.5.6"):
        return accept_len / (num_steps + 1)
    if not ge(version, "0.5.11"):
        return accept_len / num_draft_tokens
    return (accept_len - 1) / max(1, num_draft_tokens - 1)


def decode_message(
    version: str,
    *,
    running_req: int,
    num_tokens: int,
    token_usage: float,
    gen_throughput: float,
    queue_req: int,
    accept_len: float | None = None,
    accept_rate: float | None = None,
    cuda_graph: bool = True,
    forward_ct: int = 0,
    device: str = "cuda",
    log_forward_iters: bool = False,
    cap_len: float | None = None,
    block_accept_len: float | None = None,
    uncap: tuple[float, float, float] | None = None,
    fwd_occupancy: float | None = None,
    fwd_idle_occupancy: float | None = None,
    mfu: tuple[float, float, float] | None = None,
) -> str:
    """The message of a 'Decode batch' line, templates D1-D10 (section 2).

    Optional 0.5.1x-0.5.2x parts, each only in the versions that print it: `cap len` and
    `block accept len` (0.5.18+, when > 0) and DSPARK's `est uncap acc len: mid [lo, hi]`;
    the --enable-mfu-metrics suffix (0.5.10+); `fwd occupancy` (0.5.11+) and
    `fwd+idle occupancy` (0.5.23) with the device timer. A NaN occupancy prints `nan%`.
    """
    spec = accept_len is not None and has_spec_fields(version)
    if ge(version, "0.5.4.post1"):
        head = f"Decode batch [{forward_ct}], " if log_forward_iters else "Decode batch, "
    elif ge(version, "0.5.4"):
        head = f"Decode batch [{forward_ct}], "
    else:
        head = "Decode batch. "
    msg = head + f"#running-req: {running_req}, #token: {num_tokens}, "
    msg += f"token usage: {token_usage:.2f}, "
    if spec:
        msg += f"accept len: {accept_len:.2f}, "
        if ge(version, "0.5.4"):
            msg += f"accept rate: {accept_rate if accept_rate is not None else 0.0:.2f}, "
        if ge(version, "0.5.18"):
            if cap_len:
                msg += f"cap len: {cap_len:.2f}, "
            if block_accept_len:
                msg += f"block accept len: {block_accept_len:.2f}, "
            if uncap is not None:
                msg += f"est uncap acc len: {uncap[0]:.2f} [{uncap[1]:.2f}, {uncap[2]:.2f}], "
    if ge(version, "0.4.6.post1"):
        msg += f"{graph_label(version, device)}: {cuda_graph}, "
    msg += f"gen throughput (token/s): {gen_throughput:.2f}, "
    if vkey(version)[:3] == (0, 4, 4):
        msg += "largest-len: 0, "
    msg += f"#queue-req: {queue_req}"
    if _decode_trailing_comma(version):
        msg += ", "
    if mfu is not None and ge(version, "0.5.10"):
        msg += (f", est. decode TFLOPS/s (per GPU): {mfu[0]:.2f}, "
                f"est. read BW (GB/s per GPU): {mfu[1]:.2f}, "
                f"est. write BW (GB/s per GPU): {mfu[2]:.2f}")
    if fwd_occupancy is not None and ge(version, "0.5.11"):
        msg += f", fwd occupancy: {fwd_occupancy:.2f}%"
        if ge(version, "0.5.23") and fwd_idle_occupancy is not None:
            msg += f", fwd+idle occupancy: {fwd_idle_occupancy:.2f}%"
    return msg


def _decode_trailing_comma(version: str) -> bool:
    if ge(version, "0.5.9"):
        return False
    if ge(version, "0.4.9.post1"):
        return True
    if ge(version, "0.4.6"):
        return False
    return ge(version, "0.4.4")


def prefill_message(
    version: str,
    *,
    new_seq: int,
    new_token: int,
    cached_token: int,
    token_usage: float,
    running_req: int,
    queue_req: int,
    num_tokens: int = 0,
    cache_hit_rate: float = 0.0,
    input_throughput: float = 0.0,
    pending_token: int = 0,
    cuda_graph: bool = False,
    forward_ct: int = 0,
    device: str = "cuda",
    log_forward_iters: bool = False,
) -> str:
    """The message of a 'Prefill batch' line, templates P1-P11 (section 3).

    cache_hit_rate is the lifetime radix hit rate in percent (P1/P2 only); forward_ct is the
    scheduler's forward counter (0.5.4 prints forward_ct + 1).
    """
    if ge(version, "0.5.4.post1"):
        head = f"Prefill batch [{forward_ct + 1}], " if log_forward_iters else "Prefill batch, "
    elif ge(version, "0.5.4"):
        head = f"Prefill batch [{forward_ct + 1}], "
    else:
        head = "Prefill batch. "
    msg = head + f"#new-seq: {new_seq}, #new-token: {new_token}, #cached-token: {cached_token}, "
    if not ge(version, "0.4.4"):
        msg += f"cache hit rate: {cache_hit_rate:.2f}%, "
        if ge(version, "0.3.2"):
            msg += f"token usage: {token_usage:.2f}, "
        return msg + f"#running-req: {running_req}, #queue-req: {queue_req}"
    if vkey(version)[:4] == (0, 4, 9, 0):
        msg += f"#token: {num_tokens}, "
    msg += f"token usage: {token_usage:.2f}, #running-req: {running_req}, #queue-req: {queue_req}"
    graph = f"{graph_label(version, device)}: {cuda_graph}"
    if ge(version, "0.5.11"):
        return msg + f", #pending-token: {pending_token}, {graph}, " + (
            f"input throughput (token/s): {input_throughput:.2f}"
        )
    if ge(version, "0.5.10"):
        return msg + f", {graph}, input throughput (token/s): {input_throughput:.2f}"
    if ge(version, "0.5.9"):
        return msg + f", input throughput (token/s): {input_throughput:.2f}, {graph}"
    if ge(version, "0.4.9.post1") or not ge(version, "0.4.6"):
        return msg + ", "  # P3 (0.4.4-0.4.5) and P5-P8 end with ', '
    return msg  # P4


# ---------------------------------------------------------------------------- start-up lines


def server_args_message(version: str, args: Mapping[str, Any]) -> str:
    """`server_args=ServerArgs(...)` (dataclass repr) or, from 0.5.20, a dict repr."""
    if ge(version, "0.5.20"):
        return f"server_args={dict(args)!r}"
    inner = ", ".join(f"{k}={v!r}" for k, v in args.items())
    return f"server_args=ServerArgs({inner})"


def capture_begin_message(version: str, bs: Sequence[int], avail_mem: float) -> list[str]:
    if ge(version, "0.5.20"):
        return [
            "Capture target decode CUDA graph begin. backend=flashinfer, num_tokens_per_req=1, "
            f"bs={list(bs)}, avail mem={avail_mem:.2f} GB"
        ]
    msgs = [
        "Capture cuda graph begin. This can take up to several minutes. "
        f"avail mem={avail_mem:.2f} GB"
    ]
    if ge(version, "0.5.3"):
        msgs.append(f"Capture cuda graph bs {list(bs)}")
    return msgs


def capture_end_message(version: str, elapsed: float, mem_usage: float, avail_mem: float) -> str:
    if ge(version, "0.5.20"):
        return (
            f"Capture target decode CUDA graph end. elapsed={elapsed:.2f} s, "
            f"mem usage={mem_usage:.2f} GB, avail mem={avail_mem:.2f} GB."
        )
    return (
        f"Capture cuda graph end. Time elapsed: {elapsed:.2f} s. mem usage={mem_usage:.2f} GB. "
        f"avail mem={avail_mem:.2f} GB."
    )


def max_tokens_message(
    version: str,
    *,
    max_total_num_tokens: int,
    chunked_prefill_size: int,
    max_prefill_tokens: int,
    max_running_requests: int,
    context_len: int,
    available_gpu_mem: float,
) -> str:
    msg = (
        f"max_total_num_tokens={max_total_num_tokens}, "
        f"chunked_prefill_size={chunked_prefill_size}, "
        f"max_prefill_tokens={max_prefill_tokens}, max_running_requests={max_running_requests}, "
        f"context_len={context_len}"
    )
    if ge(version, "0.4.7"):
        msg += f", available_gpu_mem={available_gpu_mem:.2f} GB"
    return msg


def access_message(client: str, method: str, path: str, status: int, reason: str) -> str:
    """uvicorn access line body (the '[ts] ' prefix is added like other main-process lines)."""
    return f'INFO:     {client} - "{method} {path} HTTP/1.1" {status} {reason}'


def nccl_env_line(host: str, pid: int, tid: int, dev: int, var: str, value: str) -> str:
    """What NCCL_DEBUG=INFO prints when it reads a variable from the environment."""
    return f"{host}:{pid}:{tid} [{dev}] NCCL INFO {var} set by environment to {value}"


# ---------------------------------------------------------------------------- /generate meta_info


def spec_meta_info(
    version: str,
    *,
    verify_ct: int,
    correct_drafts: int,
    histogram: Sequence[int],
    completion_tokens: int,
    num_steps: int,
    num_draft_tokens: int,
) -> dict[str, Any]:
    """The speculative keys of a finished request's `meta_info` (sglang-observables.md 4.3).

    Three generations of names: 0.5.6-0.5.10 `spec_accept_token_num`/`spec_draft_token_num`;
    0.5.9-0.5.20 `spec_accept_histogram`; 0.5.11-0.5.20 `spec_accepted_drafts`/
    `spec_proposed_drafts`; 0.5.12+ `spec_num_correct_drafts`/`spec_num_proposed_drafts`/
    `spec_correct_drafts_histogram`. SGLang (0.5.23 tokenizer_manager) adds them only to the
    finished chunk of a stream, so the caller does too.
    """
    if not ge(version, "0.4.3"):
        return {}
    out: dict[str, Any] = {"spec_verify_ct": verify_ct}
    proposed = verify_ct * max(1, num_draft_tokens - 1)
    if ge(version, "0.5.4") and verify_ct:
        acc_len = completion_tokens / verify_ct
        out["spec_accept_length"] = acc_len
        if ge(version, "0.5.11"):
            out["spec_accept_rate"] = correct_drafts / proposed if proposed else 0.0
        else:
            out["spec_accept_rate"] = accept_rate(version, acc_len, num_steps, num_draft_tokens)
    if ge(version, "0.5.6") and not ge(version, "0.5.11"):
        out["spec_accept_token_num"] = correct_drafts
        out["spec_draft_token_num"] = proposed
    if ge(version, "0.5.9") and not ge(version, "0.5.23"):
        out["spec_accept_histogram"] = list(histogram)
    if ge(version, "0.5.11") and not ge(version, "0.5.23"):
        out["spec_accepted_drafts"] = correct_drafts
        out["spec_proposed_drafts"] = proposed
    if ge(version, "0.5.12"):
        out["spec_num_correct_drafts"] = correct_drafts
        out["spec_num_proposed_drafts"] = proposed
        out["spec_correct_drafts_histogram"] = list(histogram)
    return out


def adaptive_message(old_steps: int, new_steps: int, ema_accept_len: float) -> str:
    """AdaptiveSpeculativeParams._recompute_params' line (--speculative-adaptive)."""
    return (f"Adaptive spec params updated: steps {old_steps} -> {new_steps} "
            f"(ema_accept_len={ema_accept_len:.2f})")


def adaptive_init_message(steps: int, candidates: Sequence[int]) -> str:
    return (f"AdaptiveSpeculativeParams initialized: steps={steps}, "
            f"candidate_steps={sorted(set(candidates))}")
