"""Fixtures of the integration tests that several files share."""

from __future__ import annotations

import pytest

from specmon.hosts.local import LocalHost


@pytest.fixture
async def host():
    """A connected LocalHost: the real agent on this machine (the tail tests' host)."""
    h = LocalHost()
    await h.connect()
    yield h
    await h.close()
