"""The simulator's vLLM lines, every release it imitates, parsed back by specmon.parse.vllm:
what the sim meant (counts, throughput, config) is what the parser reads."""

import time

import pytest

from specmon.parse.vllm import SpecJoiner, VllmDecodeRecord, VllmEventRecord, parse_vllm_line
from specmon.sim import vllm_formats as vf

T = time.mktime((2026, 11, 30, 10, 11, 12, 0, 0, -1))  # a past local time: no year rollover


def lines_for(version: str, *, drafts: int, per_pos: list[int], k: int) -> list[str]:
    api = vf.tag_prefix(version, vf.api_tag(version), 4242)
    core = vf.tag_prefix(version, vf.engine_core_name(version), 4243)
    cfg = vf.config_message(version, model="org/target", served_model_name="target",
                            method="eagle3", draft="org/draft", k=k, tp=4, seed=0,
                            max_model_len=8192)
    eng = vf.engine_message(version, engine=0, prompt_tps=812.4, gen_tps=1445.9, running=24,
                            waiting=2, kv_usage_pct=18.3, prefix_hit_pct=52.7)
    spec = vf.spec_message(version, num_drafts=drafts, num_draft_tokens=drafts * k,
                           num_accepted=sum(per_pos), accepted_per_pos=per_pos, elapsed_s=10.0)
    assert spec is not None
    return [
        vf.line(version, T, cfg, filename="core.py", lineno=93, tag=core),
        vf.line(version, T + 10, eng, filename="loggers.py", lineno=vf.engine_lineno(version),
                tag=api),
        vf.line(version, T + 10, spec, filename="metrics.py", lineno=vf.spec_lineno(version),
                tag=api),
    ]


@pytest.mark.parametrize("version", vf.VERSIONS)
def test_every_version_round_trips_through_the_vllm_parser(version):
    per_pos = [4101, 3082, 2156]
    joiner = SpecJoiner()
    recs = []
    for ln in lines_for(version, drafts=5120, per_pos=per_pos, k=3):
        recs += joiner.push(parse_vllm_line(ln))
    recs += joiner.flush()
    cfg = next(r for r in recs if isinstance(r, VllmEventRecord) and r.kind == "server_args")
    assert cfg.data["engine_version"].lstrip("v") == version
    assert (cfg.data["model_path"], cfg.data["speculative_algorithm"]) == ("org/target", "eagle3")
    assert (cfg.data["speculative_num_tokens"], cfg.data["tp_size"]) == (3, 4)
    assert cfg.data["speculative_draft_model_path"] == "org/draft"
    dec = next(r for r in recs if isinstance(r, VllmDecodeRecord))
    assert (dec.dp_rank, dec.running_req, dec.queue_req) == (0, 24, 2)
    assert (dec.gen_throughput, dec.prompt_throughput) == (1445.9, 812.4)
    assert dec.kv_cache_usage_pct == 18.3 and dec.prefix_cache_hit_pct == 52.7
    spec = next(r for r in recs if isinstance(r, VllmEventRecord) and r.kind == "spec")
    assert (spec.data["accepted"], spec.data["drafted"]) == (9339, 15360)
    assert spec.data["draft_accept_rate_pct"] == 60.8
    layout = vf.spec_layout(version)
    if layout == "F1":  # no mean printed: computed from k, since EAGLE-3 always drafts k tokens
        assert spec.data["per_position"] is None
        assert dec.accept_len == pytest.approx(1 + 9339 / (15360 / 3))
        return
    assert spec.data["per_position"] == [0.801, 0.602, 0.421]
    # normalised "bonus included" whatever the release printed (0.8.5 leaves it out)
    assert dec.accept_len == pytest.approx(1 + 9339 / 5120, abs=0.006)
    if layout == "F3":
        assert spec.data["accepted_throughput"] == 933.9
        assert spec.data["drafted_throughput"] == 1536.0


def test_085_nan_interval_is_read_as_none_with_a_warning():
    msg = vf.spec_message("0.8.5", num_drafts=0, num_draft_tokens=0, num_accepted=0,
                          accepted_per_pos=[0, 0], elapsed_s=10.0)
    rec = parse_vllm_line(vf.line("0.8.5", T, msg or "", filename="metrics.py", lineno=82))
    assert isinstance(rec, VllmEventRecord) and rec.kind == "spec"
    assert rec.data["mean_accept_len"] is None and rec.invalid
