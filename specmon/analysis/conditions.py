"""Do the baseline and the speculative server run under the same conditions?

A speedup only measures speculation when everything else is equal. `conditions_differ` lists
what is not: server arguments other than speculation settings (`analysis.runargs`), the NCCL
environment the workers saw, GPU models, drivers, power limits and max clocks, the engine's
(SGLang's or vLLM's) files modified against the installed wheel, versions (the engine's,
NCCL's), an acceptance that is not the drafts' own (`acceptance_not_measured`: a benchmark
mode that fakes it, a lossy rule), and a batch size at which the speculative server drafts
nothing (`speculation_off`: vLLM's batch-size rules). Only what both sides know is compared; an
unknown is never a difference. But a run whose server arguments are unknown (its log holds no
launch line: cut, rotated, or read from the middle) could differ in anything, model and TP size
included, so `conditions_unknown` says so beside the speedup rather than let it pass as clean.

Used by the live speedup line and headline (session.speedup), `specmon compare` (text and
`--json` "conditions_differ"), the report, and available to the advisor (pure, no I/O).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from specmon.analysis.fingerprint import Fingerprint
from specmon.analysis.runargs import arg_changes, drafts_at
from specmon.redact import MASK, is_secret_name, redact_text
from specmon.textsafe import cut

# Set by SGLang itself when speculative decoding is on (server_args.py): not the user's choice.
SPECULATION_DERIVED = frozenset({"disable_overlap_schedule"})
# Batch-size limits (SGLang lowers its two for speculation when the user leaves them unset;
# vLLM's max_num_seqs): they change decode speed only at a batch size above the smaller value.
BATCH_LIMITS = frozenset({"cuda_graph_max_bs", "max_running_requests", "max_num_seqs"})
MAX_ITEMS = 4  # names listed per difference (the rest counted)


def _val(v: Any, name: str = "") -> str:
    """A value as a difference shows it: a secret masked before it is cut to 40 characters
    (a cut URL would lose the `@` that tells its password)."""
    if name and v not in (None, "") and not isinstance(v, bool | int | float) \
            and is_secret_name(name):
        return MASK
    return cut(redact_text(repr(v) if isinstance(v, str) else str(v)), 40)


def args_differ(base: Mapping[str, Any], spec: Mapping[str, Any],
                running_req: int | None = None) -> list[str]:
    """`disable_custom_all_reduce: False vs True` for every argument the two runs set
    differently (`analysis.runargs`: not speculation settings, not identity arguments, vLLM's
    non-default args key by key); a batch-size limit only when `running_req` is unknown or
    above the smaller limit."""
    out = []
    speculating = bool(spec.get("speculative_algorithm"))
    for k, b, s in arg_changes(base, spec, speculation=False):
        if speculating and k in SPECULATION_DERIVED:
            continue
        if k in BATCH_LIMITS and running_req is not None and isinstance(b, int) \
                and isinstance(s, int) and running_req <= min(b, s):
            continue
        out.append(f"{k}: {_val(b, k)} vs {_val(s, k)}")
    return out


def _nccl_seen(fp: Fingerprint) -> dict[str, str] | None:
    """NCCL_* variables the workers had: their /proc environ when read, else NCCL_DEBUG lines."""
    env: dict[str, str] = {}
    readable = [w for w in fp.workers if w.readable]
    for w in readable:
        env.update({k: v for k, v in w.vars.items() if k.startswith("NCCL_")})
    if readable:
        return env
    if not fp.nccl_debug:  # no NCCL_DEBUG line: unknown (an empty rank entry: none set)
        return None
    for rank_vars in fp.nccl_debug.values():
        env.update(rank_vars)
    return env


def _env_val(env: dict[str, str], name: str) -> str:
    return _val(env[name], name).strip("'") if name in env else "unset"


def _set(xs: set[float] | set[int]) -> str:
    return "/".join(f"{v:.0f}" if isinstance(v, float) and math.isfinite(v) else str(v)
                    for v in sorted(xs))


def conditions_differ(base: Fingerprint, spec: Fingerprint,
                      running_req: int | None = None) -> list[str]:
    """What differs between the baseline's and the speculative server's conditions besides
    speculation, one short statement each (empty list: nothing known differs). `running_req`:
    the batch size the speedup is measured at (batch-size limits above it do not count)."""
    out = args_differ(base.server_args, spec.server_args, running_req)
    if base.tp_size and spec.tp_size and base.tp_size != spec.tp_size \
            and not any(x.startswith("tp_size:") for x in out):
        out.append(f"tp_size: {base.tp_size} vs {spec.tp_size}")
    bn, sn = _nccl_seen(base), _nccl_seen(spec)
    if bn is not None and sn is not None and bn != sn:
        keys = sorted(k for k in set(bn) | set(sn) if bn.get(k) != sn.get(k))
        more = f" (+{len(keys) - MAX_ITEMS} more)" if len(keys) > MAX_ITEMS else ""
        out.append("NCCL env seen by workers: " + ", ".join(
            f"{k} {_env_val(bn, k)} vs {_env_val(sn, k)}" for k in keys[:MAX_ITEMS]) + more)
    for label, attr in (("GPU model", "name"), ("GPU driver", "driver")):
        bv = {cut(str(v), 60) for g in base.gpus if (v := getattr(g, attr))}
        sv = {cut(str(v), 60) for g in spec.gpus if (v := getattr(g, attr))}
        if bv and sv and bv != sv:
            out.append(f"{label} {', '.join(sorted(bv))} vs {', '.join(sorted(sv))}")
    bl = {g.power_limit_w for g in base.gpus if g.power_limit_w is not None}
    sl = {g.power_limit_w for g in spec.gpus if g.power_limit_w is not None}
    if bl and sl and bl != sl:
        out.append(f"GPU power limit {_set(bl)} W vs {_set(sl)} W")
    bc = {g.max_clock_sm for g in base.gpus if g.max_clock_sm is not None}
    sc = {g.max_clock_sm for g in spec.gpus if g.max_clock_sm is not None}
    if bc and sc and bc != sc:
        out.append(f"GPU max SM clock {_set(bc)} vs {_set(sc)} MHz")
    if base.modified_files is not None and spec.modified_files is not None and \
            set(base.modified_files) != set(spec.modified_files):
        only_b = sorted(set(base.modified_files) - set(spec.modified_files))
        only_s = sorted(set(spec.modified_files) - set(base.modified_files))
        what = [f"baseline: {', '.join(only_b[:2])}" if only_b else "",
                f"speculative: {', '.join(only_s[:2])}" if only_s else ""]
        out.append(f"modified {spec.engine_label} files (" + "; ".join(w for w in what if w) + ")")
    for label, b, s in ((f"{spec.engine_label} version", base.version, spec.version),
                        ("NCCL version", base.nccl_version, spec.nccl_version)):
        if b and s and b != s:
            out.append(f"{label} {b} vs {s}")
    return out + acceptance_not_measured(spec) + speculation_off(spec, running_req)


def speculation_off(spec: Fingerprint, running_req: int | None) -> list[str]:
    """At this batch size the speculative server drafts nothing (a vLLM batch-size rule:
    `disable_by_batch_size`, a `num_speculative_tokens_per_batch_size` range at k 0): the
    ratio compares two plain decoders, not speculation."""
    if running_req is None:
        return []
    k, rule = drafts_at(spec.server_args, running_req)
    if k != 0:
        return []
    return [f"the speculative server drafts no tokens at #running-req {running_req} "
            f"({cut(str(rule), 80)}): the ratio is not speculation's"]


def acceptance_not_measured(fp: Fingerprint) -> list[str]:
    """Why a speculative server's acceptance is not its drafts' own, one statement each: a
    benchmark mode that fakes it (vLLM's `rejection_sample_method` 'synthetic'; SGLang's
    SGLANG_SIMULATE_ACC_LEN in its launcher's or a worker's environment, as the live probe
    reads it) or a lossy acceptance rule (SGLang's accept thresholds below 1.0). A speedup
    measured so is not speculation's."""
    out = []
    nd = fp.server_args.get("non_default_args")
    sc = nd.get("speculative_config") if isinstance(nd, Mapping) else None
    if isinstance(sc, Mapping) and (sc.get("rejection_sample_method") == "synthetic" or any(
            sc.get(k) is not None for k in ("synthetic_acceptance_rates",
                                            "synthetic_acceptance_length"))):
        out.append("the speculative server's acceptance is synthetic (vLLM "
                   "rejection_sample_method 'synthetic', a benchmark mode), not its drafts'")
    for env in [e for e in (fp.launcher, *fp.workers) if e is not None and e.readable]:
        v = env.vars.get("SGLANG_SIMULATE_ACC_LEN")
        if v is not None and _positive(v):
            out.append(f"the speculative server's accept length is simulated "
                       f"(SGLANG_SIMULATE_ACC_LEN={cut(v, 40)} in {cut(env.title, 40)}'s "
                       "environment), not its drafts'")
            break
    for k in ("speculative_accept_threshold_single", "speculative_accept_threshold_acc"):
        v = fp.server_args.get(k)
        if isinstance(v, int | float) and not isinstance(v, bool) and v < 1.0:
            out.append(f"the speculative server accepts drafts the target would reject ({k} "
                       f"{v:g} < 1: not lossless)")
    return out


def _positive(text: str) -> bool:
    """SGLANG_SIMULATE_ACC_LEN is on when it reads as a number above 0 (-1, its default, and 0
    are off)."""
    try:
        v = float(text)
    except ValueError:
        return False
    return math.isfinite(v) and v > 0


def conditions_unknown(base: Fingerprint, spec: Fingerprint) -> list[str]:
    """What cannot be compared because a side does not know it (empty: both sides know their
    server arguments). Said beside every speedup, as `conditions_differ` is."""
    return [f"{side}'s server args (no launch line in its run)"
            for side, fp in (("the baseline", base), ("the speculative server", spec))
            if not fp.server_args]
