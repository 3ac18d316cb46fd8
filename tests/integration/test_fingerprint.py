"""Fingerprints: environ semantics, NCCL_DEBUG lines, the diff, GPU evidence, cause order, probe."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import time

from kit.fingerprint import _fake_dist

from specmon.analysis.conditions import conditions_differ
from specmon.analysis.drift import Alert
from specmon.analysis.fingerprint import (
    EnvSnapshot,
    Fingerprint,
    GpuState,
    causes_for_alert,
    diff,
    env_from_environ,
    fingerprint_from,
    gpu_evidence,
    gpu_states,
    nccl_debug_env,
    worker_nccl_env,
)
from specmon.feeds import probe as fpc
from specmon.parse.gpu_sample import GpuProcess, GpuSample, encode_reasons

TUNED = {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_P2P_LEVEL": "NVL"}


def environ(d: dict[str, str]) -> bytes:
    return b"".join(f"{k}={v}".encode() + b"\0" for k, v in d.items())


def workers(env: dict[str, str] | None, n: int = 8) -> list[EnvSnapshot]:
    out = []
    for i in range(n):
        raw = environ(env) if env is not None else b"\0" * 1923
        out.append(env_from_environ(raw, 100 + i, f"sglang::scheduler_TP{i}"))
    return out


def nccl_lines(env: dict[str, str], ranks: int = 8, version: str | None = "2.28.9") -> list[str]:
    """NCCL_DEBUG=INFO lines in real NCCL's shapes (tests/data/nccl-h200*): version on rank 0,
    each rank's communicator init with its rank count, then the "set by environment" lines."""
    out = [f"h200:200:200 [0] NCCL INFO NCCL version {version}+cuda13.0"] if version else []
    for r in range(ranks):
        out.append(f"h200:{200 + r}:{200 + r} [{r}] NCCL INFO ncclCommInitRankConfig comm 0x3ba2b9{r}0 "
                   f"rank {r} nranks {ranks} cudaDev {r} nvmlDev {r} busId {r}0 commId 0x91ef - Init START")
        out += [f"h200:{200 + r}:{300 + r} [{r}] NCCL INFO {k} set by environment to {v}"
                + ("." if v.isdigit() and k != "NCCL_P2P_LEVEL" else "")  # integer params end with "."
                for k, v in env.items()]
    return out


# --- /proc/PID/environ ----------------------------------------------------------------------

def test_environ_filtered_and_others_hashed():
    snap = env_from_environ(environ({"NCCL_PROTO": "LL", "CUDA_VISIBLE_DEVICES": "0,1", "SGLANG_X": "1",
                                     "TORCH_NCCL_BLOCKING_WAIT": "1", "NVSHMEM_DISABLE": "0",
                                     "HF_TOKEN": "secret", "PATH": "/usr/bin"}), 1, "launcher")
    assert snap.status == "ok"
    assert set(snap.vars) == {"NCCL_PROTO", "CUDA_VISIBLE_DEVICES", "SGLANG_X", "TORCH_NCCL_BLOCKING_WAIT",
                              "NVSHMEM_DISABLE"}
    assert "secret" not in json.dumps(snap.__dict__)
    assert snap.hashed["HF_TOKEN"] == hashlib.sha256(b"secret").hexdigest()[:12]


def test_empty_or_all_nul_environ_is_unreadable_not_missing():
    assert env_from_environ(b"", 1, "w").status == "unreadable"
    assert env_from_environ(b"\0" * 1923, 1, "w").status == "unreadable"
    assert env_from_environ(None, 1, "w", error="Permission denied").status.startswith("error")


def test_real_setproctitle_worker_environ_reads_as_unreadable():
    """What SGLang's retitled workers look like to specmon (measured semantics, 6.2)."""
    code = ("import setproctitle, sys; setproctitle.setproctitle('sglang::scheduler_TP0'); "
            "print('ready', flush=True); sys.stdin.read()")
    env = {**os.environ, "NCCL_PROTO": "LL"}
    env.pop("SPT_NOENV", None)
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         env=env)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == b"ready"
        raw = open(f"/proc/{p.pid}/environ", "rb").read()
        snap = env_from_environ(raw, p.pid, "sglang::scheduler_TP0")
        assert snap.status == "unreadable" and snap.vars == {}
    finally:
        p.stdin.close()  # type: ignore[union-attr]
        p.wait(timeout=30)


def test_nccl_debug_lines_per_rank():
    env = nccl_debug_env(nccl_lines({"NCCL_PROTO": "LL"}, ranks=2) + ["unrelated line"]
                         + ["h:9:9 [2] NCCL INFO NCCL version 2.27.3"])
    # rank 2 logged at INFO but set nothing: authoritative "nothing set", not "unknown"
    assert env == {"rank 0": {"NCCL_PROTO": "LL"}, "rank 1": {"NCCL_PROTO": "LL"}, "rank 2": {}}


def test_worker_env_trust_order():
    launcher = env_from_environ(environ({"NCCL_PROTO": "Simple"}), 1, "launcher")
    fp = fingerprint_from(launcher=launcher, workers=workers(None),
                          nccl_conf={"/etc/nccl.conf": {"NCCL_ALGO": "Tree", "NCCL_PROTO": "LL"}})
    env, src = worker_nccl_env(fp)
    assert env == {"all": {"NCCL_PROTO": "Simple", "NCCL_ALGO": "Tree"}}  # real env wins over conf
    assert src == "launcher environ + NCCL config files"
    fp.workers = workers({"NCCL_PROTO": "LL128"}, 2)
    assert worker_nccl_env(fp) == ({"rank 0": {"NCCL_PROTO": "LL128"}, "rank 1": {"NCCL_PROTO": "LL128"}},
                                   "worker environ")
    fp.nccl_debug = nccl_debug_env(nccl_lines({"NCCL_PROTO": "LL", "NCCL_DEBUG_SUBSYS": "INIT,ENV"}, 1))
    assert worker_nccl_env(fp) == ({"rank 0": {"NCCL_PROTO": "LL"}}, "NCCL_DEBUG lines")


# --- diff -> causes ----------------------------------------------------------------------------

def test_lost_nccl_tuning_named_like_the_issue():
    nvls = {"NCCL_NVLS_ENABLE": "0"}  # SGLang sets it: its "0." line shows the ENV subsystem was on
    rec = fingerprint_from(nccl_lines=nccl_lines({"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring"} | nvls))
    live = fingerprint_from(nccl_lines=nccl_lines({"NCCL_CUMEM_ENABLE": "0"} | nvls))
    causes, checked = diff(rec, live)
    assert causes[0] == "TP workers lack NCCL_ALGO=Ring, NCCL_PROTO=LL that the recorded run had"
    assert causes[1] == "TP workers have NCCL_CUMEM_ENABLE=0 that the recorded run did not"
    assert checked == ["TP worker NCCL env (NCCL_DEBUG lines)"]


def test_only_some_ranks_lack_a_variable_and_changed_values():
    rec = fingerprint_from(workers=workers(TUNED, 4))
    live_w = workers(TUNED, 4)
    live_w[2] = env_from_environ(environ({"NCCL_PROTO": "Simple", "NCCL_P2P_LEVEL": "NVL"}), 9,
                                 "sglang::scheduler_TP2")
    causes, _ = diff(rec, fingerprint_from(workers=live_w))
    assert "TP workers 2 lack NCCL_ALGO=Ring that the recorded run had (from worker environ)" in causes
    assert "TP workers 2 use NCCL_PROTO=Simple where the recorded run had LL (from worker environ)" in causes


def test_unreadable_workers_are_not_reported_as_missing_variables():
    launcher = env_from_environ(environ(TUNED), 1, "launcher")
    rec = fingerprint_from(launcher=launcher, workers=workers(TUNED))
    live = fingerprint_from(launcher=launcher, workers=workers(None))
    causes, checked = diff(rec, live)
    assert not any("lack" in c for c in causes)
    # compared through the launcher instead, and said so
    assert any("launcher environ" in c for c in checked)


def test_unreadable_everything_is_said_in_checked():
    rec = fingerprint_from(workers=workers(TUNED))
    live = fingerprint_from(workers=workers(None))
    causes, checked = diff(rec, live)
    assert causes == []
    assert any("unreadable" in c and "SPT_NOENV=1" in c for c in checked)


def test_files_version_args_conf_env_host_gpu_settings():
    rec = fingerprint_from(argv=["python", "-m", "sglang.launch_server", "--tp", "8", "--attention-backend",
                                 "fa3"], version="0.5.9", modified_files=[], modified_method="RECORD",
                           nccl_conf={"/etc/nccl.conf": {"NCCL_PROTO": "LL"}},
                           launcher=env_from_environ(environ({"CUDA_DEVICE_MAX_CONNECTIONS": "1",
                                                              "LD_PRELOAD": "a"}), 1, "launcher"),
                           host={"kernel": "6.8.0", "cpu_governor": "performance"},
                           gpus=[GpuState(0, driver="580.1", persistence=True)])
    live = fingerprint_from(argv=["python", "-m", "sglang.launch_server", "--tp", "8", "--attention-backend",
                                  "triton", "--disable-custom-all-reduce"], version="0.5.10",
                            modified_files=["sglang/srt/layers/communicator.py"], modified_method="RECORD",
                            nccl_conf={"/etc/nccl.conf": None},
                            launcher=env_from_environ(environ({"LD_PRELOAD": "b"}), 2, "launcher"),
                            host={"kernel": "6.8.0", "cpu_governor": "powersave"},
                            gpus=[GpuState(0, driver="580.2", persistence=False)])
    causes, checked = diff(rec, live)
    text = "\n".join(causes)
    assert "launcher env lacks CUDA_DEVICE_MAX_CONNECTIONS=1 that the recorded run had" in causes
    assert "NCCL config /etc/nccl.conf changed since the recording: removed NCCL_PROTO=LL" in causes
    assert "SGLang files modified since the recording: sglang/srt/layers/communicator.py" in causes
    assert "SGLang version 0.5.9 -> 0.5.10" in causes
    assert ("launch args changed: --attention-backend fa3 -> triton; added --disable-custom-all-reduce"
            in causes)
    assert "other launcher env variables differ (values hashed): LD_PRELOAD" in causes
    assert "GPU driver 580.1 -> 580.2" in causes and "persistence mode off on GPU 0 (was on)" in causes
    assert "cpu governor performance -> powersave" in causes
    # most specific first: env before files before args before GPU settings
    assert text.index("launcher env") < text.index("SGLang files") < text.index("launch args") < text.index(
        "GPU driver")
    assert "SGLang files (RECORD)" in checked


def test_files_already_modified_at_recording_are_not_new():
    rec = fingerprint_from(modified_files=["a.py"], modified_method="RECORD")
    live = fingerprint_from(modified_files=["a.py"], modified_method="RECORD")
    assert diff(rec, live)[0] == []


# --- GPU evidence ------------------------------------------------------------------------------

def gpu(i: int, clock: int, reasons: tuple[str, ...] = (), limit: float = 700.0,
        procs: tuple[GpuProcess, ...] | None = None) -> GpuSample:
    return GpuSample(index=i, clock_sm=clock, max_clock_sm=1980, clocks_event_reasons=encode_reasons(reasons),
                     power_limit_w=limit, power_w=650.0, processes=procs, driver_version="580.1")


def test_clocks_below_recording_with_reason_and_power_limit():
    rec = gpu_states([gpu(i, 1980) for i in range(8)] * 3)
    live = [gpu(i, 1500, ("SwPowerCap",), limit=550.0) for i in range(8)]
    causes, checked = gpu_evidence(rec, live)
    assert causes[0] == ("GPU 0-7 SM clock 1500 MHz vs 1980 recorded (-24%): SwPowerCap "
                         "(at the software power limit)")
    assert causes[1] == "GPU 0-7 power limit 550 W vs 700 W recorded"
    assert checked == ["GPU clocks and power limit"]
    idle = [gpu(0, 345, ("GpuIdle",))]
    assert gpu_evidence(rec, idle)[0] == []  # an idle GPU is not "slow"


def test_other_gpu_processes_by_pid_list_and_by_recording():
    rec = gpu_states([gpu(0, 1980, procs=(GpuProcess(100, 70000.0),))])
    live = [gpu(0, 1980, procs=(GpuProcess(100, 70000.0), GpuProcess(4242, 12288.0)))]
    causes, checked = gpu_evidence(rec, live, server_pids=[100])
    assert causes == ["other GPU processes present: pid 4242 on GPU 0, 12.0 GiB"]
    assert "GPU processes" in checked
    assert gpu_evidence(rec, live)[0] == causes  # no pid list: what the recording ran
    assert gpu_evidence(rec, [gpu(0, 1980, procs=(GpuProcess(100, 1.0),))], server_pids=[100])[0] == []


def test_cause_list_order_and_no_cause_text():
    nvls = {"NCCL_NVLS_ENABLE": "0"}  # SGLang sets it before the spawn: every run prints it
    rec = fingerprint_from(nccl_lines=nccl_lines(TUNED | nvls), gpus=gpu_states([gpu(0, 1980)]),
                           modified_files=[], modified_method="RECORD")
    live = fingerprint_from(nccl_lines=nccl_lines(nvls), modified_files=["x.py"], modified_method="RECORD")
    alert = Alert("warning", "t", (), 0.0, False, kind="throughput")
    causes = causes_for_alert(alert, None, rec, live, [gpu(0, 1500, ("SwPowerCap",))])
    assert causes[0].startswith("TP workers lack ")
    assert causes[1].startswith("SGLang files modified")
    assert causes[2].startswith("GPU 0 SM clock 1500 MHz")
    same = causes_for_alert(alert, None, rec, rec, [gpu(0, 1980)])
    assert same == ["no cause found in: TP worker NCCL env (NCCL_DEBUG lines), SGLang files (RECORD), "
                    "GPU driver and persistence mode, GPU clocks and power limit"]
    assert causes_for_alert(alert, None, None, None, ()) == [
        "cause unknown: nothing to compare (no fingerprint or GPU data)"]


def test_fingerprint_json_round_trip():
    fp = fingerprint_from(argv=["python", "-m", "sglang.launch_server", "--tp-size", "8",
                                "--speculative-algorithm", "EAGLE3"],
                          launcher=env_from_environ(environ(TUNED), 1, "launcher"), workers=workers(None, 2),
                          nccl_lines=nccl_lines(TUNED, 2), gpus=gpu_states([gpu(0, 1980)]),
                          host={"hostname": "h"})
    assert fp.tp_size == 8 and fp.spec == {"speculative_algorithm": "EAGLE3"}
    back = Fingerprint.from_json(json.loads(json.dumps(fp.to_json())))
    assert back == fp
    assert any("unreadable" in line for line in fp.summary())


# --- collection: the probe and the agent path ---------------------------------------------------



def test_probe_finds_files_that_differ_from_record(tmp_path):
    from specmon.sources.fp_probe import modified_files

    _fake_dist(tmp_path, b"patched = True\n", b"original = True\n")
    version, method, files = modified_files("sglang", path=[str(tmp_path)])
    assert (version, method, files) == ("0.5.9", "RECORD", ["sglang/mod.py"])
    assert modified_files("no-such-dist-xyz")[1].startswith("unavailable")


def test_probe_runs_as_python_c(tmp_path):
    from specmon.sources.fp_probe import probe_source

    out = subprocess.run([sys.executable, "-c", probe_source(), "no-such-dist-xyz"], capture_output=True,
                         text=True, timeout=60, check=True)
    d = json.loads(out.stdout)
    assert d["method"].startswith("unavailable") and d["host"]["kernel"]


class FakeAgent:
    def __init__(self, environs: dict[int, bytes], files: dict[str, bytes]) -> None:
        self.environs, self.files = environs, files

    async def request(self, op, **args):
        if op == "proc_info":
            raw = self.environs[args["pid"]]
            if not raw.strip(b"\0"):
                return {"environ": None, "environ_status": "empty"}
            env = dict(x.decode().split("=", 1) for x in raw.split(b"\0") if x)
            return {"environ": {k: v for k, v in env.items()
                                if any(k.startswith(p) for p in args["environ_prefixes"])},
                    "environ_status": "ok"}
        if op == "read":
            if args["path"] not in self.files:
                raise OSError("No such file")
            return {"b64": base64.b64encode(self.files[args["path"]]).decode()}
        raise AssertionError(op)


async def test_collect_through_the_agent():
    agent = FakeAgent({1: environ({**TUNED, "HOME": "/home/u", "NCCL_CONF_FILE": "/opt/n.conf"}),
                       2: b"\0" * 100},
                      {"/opt/n.conf": b"NCCL_BUFFSIZE=8388608\n# c\n", "/home/u/.nccl.conf": b""})
    fp = await fpc.collect(agent, launcher_pid=1, argv=["python3", "-m", "sglang.launch_server"],
                           workers=[(2, "sglang::scheduler_TP0")], server_info={"version": "0.5.9"},
                           gpus=[gpu(0, 1980)])
    assert fp.launcher is not None and fp.launcher.vars["NCCL_PROTO"] == "LL"
    assert "HOME" in fp.launcher.hashed
    assert fp.workers[0].status == "unreadable"
    assert fp.nccl_conf == {"$NCCL_CONF_FILE": {"NCCL_BUFFSIZE": "8388608"}, "~/.nccl.conf": {},
                            "/etc/nccl.conf": None}
    assert fp.version == "0.5.9" and fp.server_pids == [1, 2] and fp.gpus[0].clock_sm == 1980
    assert fp.collected_at is not None and fp.collected_at <= time.time()


LAUNCHER = r"""
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c",
    "import setproctitle, sys; setproctitle.setproctitle('sglang::scheduler_TP0'); "
    "print('ready', flush=True); sys.stdin.read()"], stdout=subprocess.PIPE, stdin=subprocess.PIPE)
child.stdout.readline()
print(child.pid, flush=True)
sys.stdin.read()
"""


async def test_collect_from_real_processes_through_the_local_agent(tmp_path):
    """Launcher env readable, a retitled worker 'unreadable', the probe run in the agent."""
    import signal

    from specmon.hosts.agent_client import AgentClient
    from specmon.hosts.local import LocalHost

    env = {**os.environ, **TUNED, "HOME": str(tmp_path)}
    env.pop("SPT_NOENV", None)
    (tmp_path / ".nccl.conf").write_text("NCCL_BUFFSIZE=4194304\n")
    p = subprocess.Popen([sys.executable, "-c", LAUNCHER, "--tp-size", "1"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, env=env, start_new_session=True)
    host = LocalHost()
    await host.connect()
    agent = AgentClient(host)
    try:
        worker = int(p.stdout.readline())  # type: ignore[union-attr]
        await agent.start()
        fp = await fpc.collect(agent, launcher_pid=p.pid, argv=[sys.executable, "-c", "x", "--tp-size", "1"],
                               workers=[(worker, "sglang::scheduler_TP0")], probe=True)
    finally:
        await agent.close()
        await host.close()
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=30)
    assert fp.launcher is not None and fp.launcher.status == "ok"
    assert {k: fp.launcher.vars[k] for k in TUNED} == TUNED
    assert fp.workers[0].status == "unreadable"
    assert fp.nccl_conf["~/.nccl.conf"] == {"NCCL_BUFFSIZE": "4194304"}
    env_, src = worker_nccl_env(fp)
    assert src == "launcher environ + NCCL config files" and env_["all"]["NCCL_PROTO"] == "LL"
    assert fp.host.get("kernel") and fp.modified_method is not None and fp.tp_size == 1


async def test_collect_probes_the_engine_its_command_line_runs():
    """A `vllm serve` launcher gets vLLM's install probed (not SGLang's); an SGLang one SGLang's."""
    class ProbingAgent(FakeAgent):
        async def request(self, op, **args):
            if op == "probe":
                self.asked.append(args["dist"])
                return {"version": "0.11.0", "method": "RECORD", "dist": args["dist"],
                        "modified_files": ["vllm/v1/spec_decode/eagle.py"], "host": {}}
            return await super().request(op, **args)

    agent = ProbingAgent({1: environ(TUNED)}, {})
    agent.asked = []
    fp = await fpc.collect(agent, launcher_pid=1, argv=["/usr/bin/vllm", "serve", "m"], probe=True)
    assert agent.asked == ["vllm"] and fp.modified_dist == "vllm"
    assert "modified vLLM files (RECORD): vllm/v1/spec_decode/eagle.py" in fp.summary()
    await fpc.collect(agent, launcher_pid=1, argv=["python3", "-m", "sglang.launch_server"], probe=True)
    assert agent.asked == ["vllm", "sglang"]


def test_vllm_fingerprint_says_vllm_files_and_version():
    rec = fingerprint_from(version="0.10.2", modified_files=[], modified_method="RECORD",
                           modified_dist="vllm")
    live = fingerprint_from(version="0.11.0", modified_method="RECORD", modified_dist="vllm",
                            modified_files=["vllm/distributed/communication_op.py"])
    causes, checked = diff(rec, live)
    assert "vLLM files modified since the recording: vllm/distributed/communication_op.py" in causes
    assert "vLLM version 0.10.2 -> 0.11.0" in causes
    assert "vLLM files (RECORD)" in checked and not any("SGLang" in c for c in causes + checked)
    differ = conditions_differ(rec, live)
    assert "modified vLLM files (speculative: vllm/distributed/communication_op.py)" in differ
    assert "vLLM version 0.10.2 vs 0.11.0" in differ
    # a fingerprint recorded before the probe said its dist reads as SGLang's (the old default)
    assert Fingerprint.from_json({"modified_method": "RECORD"}).engine_label == "SGLang"


def test_drift_causes_skip_where_a_server_listens_and_read_vllm_args_key_by_key():
    """A restart on another port is no cause (argv or server args alike); vLLM's non-default
    args are compared key by key, an argument left out being at its default."""
    argv = ["python", "-m", "sglang.launch_server", "--tp", "8", "--port"]
    causes, checked = diff(fingerprint_from(argv=[*argv, "30000", "--log-level", "info"]),
                           fingerprint_from(argv=[*argv, "30001", "--log-level", "debug"]))
    assert causes == [] and "launch args" in checked

    def vllm(**nd: object) -> Fingerprint:
        return fingerprint_from(server_args={
            "model_path": "Qwen/Qwen3-8B", "tp_size": 1, "port": nd.get("port"),
            "non_default_args": {"model": "Qwen/Qwen3-8B", "host": "0.0.0.0", **nd}})

    causes, checked = diff(vllm(port=8000, max_num_seqs=64), vllm(port=8001, max_num_seqs=64))
    assert causes == [] and "server args" in checked
    causes, _ = diff(vllm(port=8000, max_num_seqs=64), vllm(port=8001, enforce_eager=True))
    assert causes == ["server args changed: enforce_eager default -> True; "
                      "max_num_seqs 64 -> default"]


def test_a_cause_cuts_a_hostile_value_and_masks_a_secret_in_it():
    """A launch line's 100 kB model path made a 100 kB drift cause (`check` printed it whole);
    each value is cut where a cause shows it, after its secret is masked, and a whole cause
    stays short whatever a host's environment holds."""
    def fp(model: str, sock: str) -> Fingerprint:
        return fingerprint_from(
            server_args={"model_path": model, "tp_size": 8},
            launcher=env_from_environ(environ({"NCCL_SOCKET_IFNAME": sock}), 1, "launcher"))

    url = "https://user:s3cretpass@hub.example/" + "m" * 100_000
    causes, _ = diff(fp("m", "eth0"), fp(url, "eth" + "1" * 100_000))
    assert len(causes) == 2 and all(len(c) < 400 for c in causes), [len(c) for c in causes]
    args = next(c for c in causes if c.startswith("server args changed: model_path m -> "))
    assert "s3cretpass" not in args and args.endswith("...")
    alert = Alert("warning", "t", (), 0.0, False, kind="throughput")
    shown = causes_for_alert(alert, None, fp("m", "eth0"), fp("m", "eth" + "1" * 100_000))
    assert shown and all(len(c) < 1000 for c in shown), [len(c) for c in shown]


def test_a_speedup_from_faked_or_lossy_acceptance_is_said_to_be_so():
    """Benchmark modes that fake acceptance (vLLM's synthetic rejection sampling, SGLang's
    SGLANG_SIMULATE_ACC_LEN, which public benchmark recipes set) or accept what the target
    would reject (SGLang's thresholds below 1) make a speedup that is not speculation's: said
    beside it, as a condition; the values that mean "off" say nothing."""
    base = fingerprint_from(server_args={"model_path": "m", "tp_size": 8})

    def spec(**args: object) -> Fingerprint:
        return fingerprint_from(
            server_args={"model_path": "m", "tp_size": 8, "speculative_algorithm": "EAGLE3",
                         **args})

    assert conditions_differ(base, spec(speculative_accept_threshold_single=1.0,
                                        speculative_accept_threshold_acc=1.0)) == []
    simulated = spec()
    simulated.launcher = env_from_environ(environ({"SGLANG_SIMULATE_ACC_LEN": "-1"}), 1,
                                          "launcher")
    assert conditions_differ(base, simulated) == []  # -1: SGLang's default, off
    simulated.workers = [env_from_environ(environ({"SGLANG_SIMULATE_ACC_LEN": "2.49"}), 2,
                                          "sglang::scheduler_TP0")]
    assert conditions_differ(base, simulated) == [
        "the speculative server's accept length is simulated (SGLANG_SIMULATE_ACC_LEN=2.49 in "
        "sglang::scheduler_TP0's environment), not its drafts'"]
    assert conditions_differ(base, spec(speculative_accept_threshold_single=0.5)) == [
        "the speculative server accepts drafts the target would reject "
        "(speculative_accept_threshold_single 0.5 < 1: not lossless)"]
    vllm = spec(non_default_args={"speculative_config": {
        "method": "eagle3", "num_speculative_tokens": 3, "rejection_sample_method": "synthetic",
        "synthetic_acceptance_rates": [0.8, 0.6, 0.4]}})
    assert conditions_differ(base, vllm) == [
        "the speculative server's acceptance is synthetic (vLLM rejection_sample_method "
        "'synthetic', a benchmark mode), not its drafts'"]
    real = spec(non_default_args={"speculative_config": {"method": "eagle3",
                                                         "rejection_sample_method": "block"}})
    assert conditions_differ(base, real) == []


def test_a_speedup_across_gpu_models_or_drivers_says_so():
    """Two servers on different GPU models (a mixed box, or runs from two hosts) or drivers:
    the speedup measures the hardware too; the same model and driver say nothing."""
    def fp(name: str, driver: str) -> Fingerprint:
        return fingerprint_from(server_args={"model_path": "m", "tp_size": 1},
                                gpus=[GpuState(0, name=name, driver=driver, power_limit_w=700.0)])

    assert conditions_differ(fp("NVIDIA H200", "580.1"), fp("NVIDIA H200", "580.1")) == []
    assert conditions_differ(fp("NVIDIA H100 80GB HBM3", "580.1"), fp("NVIDIA H200", "580.2")) == [
        "GPU model NVIDIA H100 80GB HBM3 vs NVIDIA H200", "GPU driver 580.1 vs 580.2"]


def test_a_hashed_variable_that_differs_comes_after_what_the_gpus_show():
    """With the live probe reading the launcher's environment, a terminal's per-login
    variables differ between any recording and now: they are ignored, and another hashed
    variable that differs is listed after a power cap the GPUs show, not before it (the panel
    shows the first cause)."""
    def fp(env: dict[str, str]) -> Fingerprint:
        return fingerprint_from(launcher=env_from_environ(environ(env), 1, "launcher"),
                                gpus=gpu_states([gpu(0, 1980)]))

    rec = fp({"VSCODE_IPC_HOOK_CLI": "/run/a.sock", "DBUS_SESSION_BUS_ADDRESS": "a",
              "LD_LIBRARY_PATH": "/opt/a"})
    live = fp({"VSCODE_IPC_HOOK_CLI": "/run/b.sock", "DBUS_SESSION_BUS_ADDRESS": "b",
               "LD_LIBRARY_PATH": "/opt/b"})
    alert = Alert("warning", "t", (), 0.0, False, kind="throughput")
    causes = causes_for_alert(alert, None, rec, live, [gpu(0, 1500, ("SwPowerCap",))])
    assert causes[0].startswith("GPU 0 SM clock 1500 MHz"), causes
    assert causes[-1] == "other launcher env variables differ (values hashed): LD_LIBRARY_PATH"
