"""The simulated host's engine install: a real `sglang-<version>.dist-info` (or, for a vLLM
server, `vllm-<version>.dist-info`) with a RECORD.

The files are small stand-ins for the engine's modules, but the install is a real one: a
`site-packages`-style directory that `importlib.metadata` reads, whose RECORD lists every file
with its sha256 exactly as pip writes it. So the fingerprint's RECORD-hash probe (the one that
on a real host lists `sglang/srt/entrypoints/engine.py` after a local edit) runs unchanged
against it, and `patch_file` is a local edit it can find.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

from specmon.sim import vllm_formats as vf

VERSION = "0.5.9"
FILES = {
    "sglang/__init__.py": "__version__ = \"0.5.9\"\n",
    "sglang/launch_server.py": "from sglang.srt.entrypoints.http_server import launch_server\n",
    "sglang/srt/__init__.py": "",
    "sglang/srt/entrypoints/__init__.py": "",
    "sglang/srt/entrypoints/engine.py": "class Engine:\n    \"\"\"Simulated engine.\"\"\"\n",
    "sglang/srt/entrypoints/http_server.py": "def launch_server(server_args):\n    pass\n",
    "sglang/srt/layers/__init__.py": "",
    "sglang/srt/layers/communicator.py": "def all_reduce(x):\n    return x\n",
    "sglang/srt/managers/__init__.py": "",
    "sglang/srt/managers/scheduler.py": "class Scheduler:\n    pass\n",
}
PATCHED = "sglang/srt/layers/communicator.py"  # what the phantom-baseline scenario edits
VLLM_VERSION = vf.NEWEST
VLLM_FILES = {
    "vllm/__init__.py": f"__version__ = \"{VLLM_VERSION}\"\n",
    "vllm/entrypoints/__init__.py": "",
    "vllm/entrypoints/openai/__init__.py": "",
    "vllm/entrypoints/openai/api_server.py": "def run_server(args):\n    pass\n",
    "vllm/distributed/__init__.py": "",
    "vllm/distributed/communication_op.py":
        "def tensor_model_parallel_all_reduce(x):\n    return x\n",
    "vllm/v1/__init__.py": "",
    "vllm/v1/engine/__init__.py": "",
    "vllm/v1/engine/core.py": "class EngineCore:\n    pass\n",
    "vllm/v1/spec_decode/__init__.py": "",
    "vllm/v1/spec_decode/eagle.py": "class EagleProposer:\n    pass\n",
}
VLLM_PATCHED = "vllm/distributed/communication_op.py"  # what the vLLM scenario edits
ENGINES = {"sglang": (VERSION, FILES, PATCHED), "vllm": (VLLM_VERSION, VLLM_FILES, VLLM_PATCHED)}


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def site_dir(sim_dir: Path) -> Path:
    return sim_dir / "site-packages"


def install(sim_dir: Path, version: str | None = None, engine: str = "sglang") -> Path:
    """Write `engine`'s install (idempotent: an existing one, edits included, is kept); its
    site dir."""
    default_version, files, _ = ENGINES[engine]
    version = version or default_version
    site = site_dir(sim_dir)
    info = site / f"{engine}-{version}.dist-info"
    if (info / "RECORD").is_file():
        return site
    rows = []
    for rel, text in files.items():
        p = site / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        data = text.encode()
        p.write_bytes(data)
        rows.append(f"{rel},{_record_hash(data)},{len(data)}")
    info.mkdir(parents=True, exist_ok=True)
    meta = f"Metadata-Version: 2.1\nName: {engine}\nVersion: {version}\n"
    (info / "METADATA").write_text(meta)
    (info / "INSTALLER").write_text("pip\n")
    for name in ("METADATA", "INSTALLER"):
        data = (info / name).read_bytes()
        rows.append(f"{info.name}/{name},{_record_hash(data)},{len(data)}")
    rows.append(f"{info.name}/RECORD,,")
    (info / "RECORD").write_text("\n".join(rows) + "\n")
    return site


def patch_file(sim_dir: Path, rel: str | None = None, engine: str = "sglang") -> Path:
    """A local edit of one installed file (what someone debugging a server does); by default
    the engine's PATCHED file."""
    p = site_dir(sim_dir) / (rel or ENGINES[engine][2])
    with open(p, "a", encoding="utf-8") as fh:
        fh.write("import time\n_PATCH_DELAY_S = 0.0005  # local debugging patch\n")
    return p
