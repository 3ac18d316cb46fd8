"""Helpers that several test modules share (they began in test_fingerprint.py)."""

from __future__ import annotations

import base64
import hashlib


def _fake_dist(tmp_path, content: bytes, recorded: bytes):
    pkg = tmp_path / "sglang"
    pkg.mkdir()
    (pkg / "mod.py").write_bytes(content)
    (pkg / "same.py").write_bytes(b"x = 1\n")
    info = tmp_path / "sglang-0.5.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.9\n")

    def h(b: bytes) -> str:
        return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b"=").decode()

    same = h(b"x = 1\n")
    (info / "RECORD").write_text(f"sglang/mod.py,{h(recorded)},1\nsglang/same.py,{same},1\n"
                                 "sglang-0.5.9.dist-info/RECORD,,\n")

