"""Helpers that several test modules share (they began in test_demo.py)."""

from __future__ import annotations

from specmon.control.local import group_members


def fast(servers):
    for s in servers:
        s.args += ["--startup-s", "0.3"]
    return servers


def group_gone(pgid: int) -> bool:
    return not group_members(pgid)

