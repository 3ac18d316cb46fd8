"""Server control over a real OpenSSH sshd on 127.0.0.1 (tests/sshd.py): the same controller,
with the launch, checks and signals run on the far side of an SSH connection, /health and the
benchmark through an SSH port forward, the env audit through the host agent."""

from __future__ import annotations

import os

from kit import sshd
from kit.control import (
    alive,
    cleanup_pidfiles,
    cmdline,
    group_alive,
    host_profile,
    kill_group,
    sim_profile,
    start_decoy,
)

from specmon.control.benchmark import BenchConfig
from specmon.control.server import GpuBusy, ServerController
from specmon.hosts.ssh import SshHost

sshd_server = sshd.sshd_server


def ssh_host(server, tmp_path) -> SshHost:
    kh = server.write_known_hosts(tmp_path / "known_hosts")
    cfg = server.write_client_config(tmp_path / "ssh_config", kh, alias="gpubox")
    return SshHost("gpubox", ssh_config=cfg, reconnect_base=0.1)


async def test_start_audit_bench_stop_over_ssh(sshd_server, tmp_path):
    hp = host_profile(tmp_path, name="gpubox", target="gpubox")
    prof = sim_profile(tmp_path, "base", [0, 1], env={"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring"})
    host = ssh_host(sshd_server, tmp_path)
    await host.connect()
    decoy = None
    try:
        async with ServerController(host, prof, hp) as c:
            events = []
            res = await c.start(events.append)
            rec = await c.read_record()
            assert "cuda_graphs" in [e.phase for e in events]
            # launched in its own session on the host, not as a child of the SSH session
            assert rec["pid"] == rec["pgid"] == os.getpgid(res.pid) == os.getsid(res.pid)
            assert not any(res.pid == p for p in sshd_server.session_pids())
            assert [w.title for w in res.audit.workers] == ["sglang::scheduler_TP0_EP0",
                                                            "sglang::scheduler_TP1_EP0"]
            for w in res.audit.workers:
                assert w.status == "ok" and w.env["NCCL_ALGO"] == "Ring" and w.missing == []
            # /health and the benchmark go through an SSH port forward, not the server's port
            url = await c.base_url()
            assert not url.endswith(f":{prof.port}")
            st = await c.status()
            assert st.state == "ready" and st.healthy
            b = await c.benchmark(BenchConfig(num_prompts=1, output_len=12))
            assert b.completed == 1 and b.total_output_tokens == 12 and b.output_tok_s > 0

            other = sim_profile(tmp_path, "other", [1, 2])
            async with ServerController(host, other, hp) as o:
                try:
                    await o.start()
                    raise AssertionError("GPU 1 is busy: start must be refused")
                except GpuBusy as exc:
                    assert [(x.gpu, x.server) for x in exc.owners] == [(1, "base")]

            decoy = start_decoy(tmp_path, rec["cmdline"])
            out = await c.stop(grace=10)
            assert out.ok and out.gpus_free is True and group_alive(res.pid) == []
            assert alive(decoy.pid) and cmdline(decoy.pid) == rec["cmdline"]
            assert (await c.status()).state == "stopped"
    finally:
        if decoy is not None:
            kill_group(decoy.pid)
            decoy.wait(10)
        cleanup_pidfiles(tmp_path / "run")
        await host.close()



async def test_vllm_profile_start_busy_gpu_decoy_stop_over_ssh(sshd_server, tmp_path):
    """A vLLM profile (the simulated `vllm serve`) under the same rules over SSH: its own session,
    its VLLM:: workers audited, its GPUs refused to another profile with the owner named, the
    recorded group stopped while a decoy with the same command line survives."""
    from specmon.config import SpeculativeArgs

    hp = host_profile(tmp_path, name="gpubox", target="gpubox")
    prof = sim_profile(tmp_path, "veagle", [2, 3], role="speculative", env={"NCCL_PROTO": "LL"})
    prof.engine = "vllm"
    prof.speculative = SpeculativeArgs("eagle3", "d/eagle3", num_steps=3)
    host = ssh_host(sshd_server, tmp_path)
    await host.connect()
    decoy = None
    try:
        async with ServerController(host, prof, hp) as c:
            res = await c.start()
            rec = await c.read_record()
            assert rec["pid"] == rec["pgid"] == os.getsid(res.pid)
            assert "vllm" in rec["cmdline"] and "--speculative-config" in rec["cmdline"]
            assert [w.title for w in res.audit.workers if "Worker" in w.title] == [
                "VLLM::Worker_TP0", "VLLM::Worker_TP1"]
            assert all(w.env["NCCL_PROTO"] == "LL" for w in res.audit.workers)
            other = sim_profile(tmp_path, "other", [3])
            async with ServerController(host, other, hp) as o:
                try:
                    await o.start()
                    raise AssertionError("GPU 3 is busy: start must be refused")
                except GpuBusy as exc:
                    assert [(x.gpu, x.server) for x in exc.owners] == [(3, "veagle")]
                    assert exc.owners[0].title == "VLLM::Worker_TP1"
            decoy = start_decoy(tmp_path, rec["cmdline"])
            out = await c.stop(grace=10)
            assert out.ok and out.gpus_free is True and group_alive(res.pid) == []
            assert alive(decoy.pid) and cmdline(decoy.pid) == rec["cmdline"]
    finally:
        if decoy is not None:
            kill_group(decoy.pid)
            decoy.wait(10)
        cleanup_pidfiles(tmp_path / "run")
        await host.close()
