"""The simulated host's sglang install is a real one: the RECORD-hash probe reads it unchanged."""

from __future__ import annotations

from specmon.feeds.probe import run_probe
from specmon.hosts.local import LocalHost
from specmon.sim import dist


async def test_record_probe_finds_the_one_patched_file(tmp_path):
    site = dist.install(tmp_path)
    host = LocalHost("t")
    probe = await run_probe(host, pythonpath=str(site))
    assert probe["version"] == dist.VERSION and probe["method"] == "RECORD"
    assert probe["modified_files"] == []
    dist.patch_file(tmp_path)
    assert dist.install(tmp_path) == site  # a second install keeps the edit
    probe = await run_probe(host, pythonpath=str(site))
    assert probe["modified_files"] == [dist.PATCHED]
    (site / "sglang/srt/entrypoints/engine.py").unlink()
    probe = await run_probe(host, pythonpath=str(site))
    assert probe["modified_files"] == ["sglang/srt/entrypoints/engine.py (missing)", dist.PATCHED]


def _row(root, rel: str) -> str:
    import base64
    import hashlib

    data = (root / rel).read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{rel},sha256={digest},{len(data)}"


async def test_probe_of_a_vllm_install_names_its_one_patched_file(tmp_path):
    """A vLLM wheel laid out by hand (RECORD hashes computed here): the probe, asked for the
    server's engine ("vllm"), hashes vLLM's files and names the one edited after install."""
    site = tmp_path / "site"
    files = {"vllm/__init__.py": "__version__ = '0.11.0'\n",
             "vllm/v1/engine/core.py": "class EngineCore:\n    pass\n",
             "vllm/v1/spec_decode/eagle.py": "class EagleProposer:\n    pass\n"}
    for rel, text in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    info = site / "vllm-0.11.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.11.0\n")
    rows = [_row(site, rel) for rel in files] + [_row(site, "vllm-0.11.0.dist-info/METADATA"),
                                                 "vllm-0.11.0.dist-info/RECORD,,"]
    (info / "RECORD").write_text("\n".join(rows) + "\n")
    with open(site / "vllm/v1/spec_decode/eagle.py", "a") as fh:
        fh.write("DEBUG = True\n")
    host = LocalHost("t")
    probe = await run_probe(host, pythonpath=str(site), dist="vllm")
    assert probe["version"] == "0.11.0" and probe["method"] == "RECORD", probe
    assert probe["modified_files"] == ["vllm/v1/spec_decode/eagle.py"]
    assert probe["dist"] == "vllm"
    sg = await run_probe(host, pythonpath=str(site))  # the SGLang default sees no vLLM file
    assert sg["modified_files"] is None and "sglang not installed" in sg["method"], sg


async def test_sim_vllm_install_is_a_real_one(tmp_path):
    site = dist.install(tmp_path, engine="vllm")
    assert (site / f"vllm-{dist.VLLM_VERSION}.dist-info" / "RECORD").is_file()
    host = LocalHost("t")
    probe = await run_probe(host, pythonpath=str(site), dist="vllm")
    assert probe["version"] == dist.VLLM_VERSION and probe["modified_files"] == []
    dist.patch_file(tmp_path, engine="vllm")
    probe = await run_probe(host, pythonpath=str(site), dist="vllm")
    assert probe["modified_files"] == [dist.VLLM_PATCHED]
