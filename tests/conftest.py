from __future__ import annotations

import asyncio
import gc
import inspect
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


@pytest.fixture(scope="session")
def shared() -> Path:
    """The reference material beside the checkout (CI lays a copy there too)."""
    assert (SHARED / "README.md").is_file(), f"shared/ reference folder missing at {SHARED}"
    return SHARED


def pytest_collection_modifyitems(items) -> None:
    """Async tests collect garbage inside their own event loop before it closes.

    Subprocess transports (agents, servers) that a test let go of are then finalised while the
    loop is alive, instead of in some later test, where asyncio's __del__ would hit a closed loop.
    """
    for item in items:
        if inspect.iscoroutinefunction(getattr(item, "function", None)):
            item.fixturenames.append("_gc_in_loop")


@pytest.fixture
async def _gc_in_loop():
    yield
    await asyncio.sleep(0)
    gc.collect()
    await asyncio.sleep(0)
