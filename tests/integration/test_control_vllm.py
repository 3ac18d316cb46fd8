"""vLLM server profiles: the launch command from the config, and start/stop of the simulated
`vllm serve` on this machine under the same rules (the group we launched, proven; no names)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from kit.control import cleanup_pidfiles, group_alive, host_profile, kill_group, sim_profile

from specmon.config import SpeculativeArgs, parse_config
from specmon.control.benchmark import BenchConfig
from specmon.control.server import NotOurs, ServerController
from specmon.hosts.local import LocalHost

TOML = """
[servers.veagle]
engine = "vllm"
role = "speculative"
model_path = "meta-llama/Llama-3.1-8B-Instruct"
tp = 2
port = 8001
[servers.veagle.speculative]
algorithm = "eagle3"
draft_model_path = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
num_speculative_tokens = 3

[servers.vsim]
launcher = "sim"
engine = "vllm"
role = "baseline"
model_path = "m"
port = 8002
"""


def test_vllm_profile_launch_commands():
    cfg, issues = parse_config(TOML, Path("specmon.toml"))
    assert issues == []
    v = cfg.servers["veagle"]
    assert (v.engine, v.launcher) == ("vllm", "vllm")
    argv = v.launch_argv("/venv/bin/python")
    assert argv[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    i = argv.index("--speculative-config")
    assert json.loads(argv[i + 1]) == {"method": "eagle3", "num_speculative_tokens": 3,
                                       "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    assert argv[argv.index("--port") + 1] == "8001" and "--model" in argv
    s = cfg.servers["vsim"]
    assert s.launch_argv("py")[:6] == ["py", "-m", "specmon", "sim", "server", "--engine"]
    assert s.launch_argv("py")[6] == "vllm"


@pytest.mark.parametrize(("snippet", "key", "words"), [
    ('engine = "vllm"\n[servers.x.speculative]\nalgorithm = "eagle3"\nnum_steps = 2\n'
     'eagle_topk = 4', "servers.x.speculative.eagle_topk", "not a vLLM option"),
    ('engine = "vllm"\n[servers.x.speculative]\nalgorithm = "eagle3"',
     "servers.x.speculative.num_speculative_tokens", "missing for vLLM"),
    ('launcher = "sglang"\nengine = "vllm"', "servers.x.launcher", "cannot start a vLLM"),
    ('engine = "vlm"', "servers.x.engine", "unknown engine"),
    ('[servers.x.speculative]\nalgorithm = "EAGLE3"\nnum_speculative_tokens = 2',
     "servers.x.speculative.num_speculative_tokens", "is a vLLM option"),
])
def test_vllm_profile_mistakes_are_named(snippet, key, words):
    text = f'[servers.x]\nrole = "speculative"\nmodel_path = "m"\n{snippet}\n'
    _, issues = parse_config(text, Path("c.toml"))
    assert any(i.key == key and words in i.message for i in issues), issues


@pytest.fixture
def hp(tmp_path):
    prof = host_profile(tmp_path)
    yield prof
    cleanup_pidfiles(tmp_path / "run")


async def test_start_audit_status_stop_of_a_simulated_vllm_server(hp, tmp_path):
    prof = sim_profile(tmp_path, "vspec", [2, 3], role="speculative",
                       env={"NCCL_PROTO": "LL", "VLLM_LOG_STATS_INTERVAL": "0.5"})
    prof.engine = "vllm"
    prof.speculative = SpeculativeArgs("eagle3", "d/eagle3", num_steps=2)
    events = []
    async with ServerController(LocalHost(), prof, hp) as c:
        res = await c.start(events.append)
        rec = await c.read_record()
        try:
            phases = [e.phase for e in events]
            # progress from vLLM's start-up lines (readiness may come before the last ones)
            for ph in ("launching", "args", "weights_done", "ready"):
                assert ph in phases, phases
            assert [e.fraction for e in events] == sorted(e.fraction for e in events)
            assert rec["pid"] == rec["pgid"] == res.pid
            assert "--engine" in rec["cmdline"] and "--speculative-config" in rec["cmdline"]
            # the env audit reads vLLM's worker processes (SPT_NOENV=1 keeps them readable)
            titles = sorted(p.title for p in res.audit.workers)
            assert titles == ["VLLM::EngineCore", "VLLM::Worker_TP0", "VLLM::Worker_TP1"]  # 0.18+
            for p in res.audit.workers:
                assert p.status == "ok" and p.env["NCCL_PROTO"] == "LL" and not p.missing
                assert p.env["VLLM_LOG_STATS_INTERVAL"] == "0.5"  # VLLM_ audited for vLLM
            assert res.audit.problems() == []
            st = await c.status()
            assert st.state == "ready" and st.healthy and len(st.members) >= 4
            log = Path(res.log).read_text()
            assert "Initializing a V1 LLM engine (v0.33.0)" in log
            # the built-in benchmark speaks vLLM's OpenAI API and diffs its counters
            b = await c.benchmark(BenchConfig(num_prompts=2, output_len=20))
            assert (b.completed, b.failed, b.total_output_tokens) == (2, 0, 40)
            assert b.mean_ttft_ms is not None and b.mean_itl_ms is None  # N/A, said in notes
            assert any("ITL N/A" in n for n in b.notes)
            vc = b.vllm_counters
            assert vc is not None and vc["drafts"] > 0 and vc["draft_tokens"] == 2 * vc["drafts"]
            # the one line the UI and `server bench` show says what the counters measured (it
            # said "accept length N/A; log decode-only N/A tok/s" beside them)
            line = b.describe()
            assert f"accept len {vc['accept_len']:.2f}" in line and "decode-only" not in line
            assert f"gen {vc['gen_tok_s']:.1f} tok/s" in line
            # a second pidfile pointing at our server under another name is not ours to stop
            other = sim_profile(tmp_path, "intruder", [0])
            c2 = ServerController(LocalHost(), other, hp)
            forged = dict(rec, cmdline=["python3", "-m", "x"], chain=["setsid", "env", "python3", "-m", "x"])
            Path(await c2.pidfile()).write_text(json.dumps(forged))
            os.chmod(await c2.pidfile(), 0o600)
            with pytest.raises(NotOurs):
                await c2.stop(grace=5)
            assert group_alive(rec["pgid"])  # nothing was signalled
            await c2.close()
            out = await c.stop(grace=15)
            assert out.ok and out.signals == ["SIGTERM"] and out.gpus_free is True
            assert group_alive(rec["pgid"]) == []
            assert (await c.status()).state == "stopped"
        finally:
            kill_group(rec["pgid"])
