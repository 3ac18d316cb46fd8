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
