from __future__ import annotations

import asyncio
import gc
import inspect
from pathlib import Path

import pytest

# fixtures several test modules use, from the shared helpers (tests/kit)
from kit.discovery import fakes  # noqa: F401
from kit.sim_server import launch  # noqa: F401
from kit.ssh_faults import second_sshd  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The real data the tests read; it lives in the repository (tests/data/README.md says whence)."""
    return DATA


KINDS = ("unit", "integration", "ui")


def pytest_collection_modifyitems(items) -> None:
    """Each test is marked with its kind (the folder it lives in: unit, integration, ui).

    Async tests also collect garbage inside their own event loop before it closes: subprocess
    transports (agents, servers) that a test let go of are then finalised while the loop is alive,
    instead of in some later test, where asyncio's __del__ would hit a closed loop.
    """
    for item in items:
        kind = Path(str(item.fspath)).parent.name
        if kind in KINDS:
            item.add_marker(getattr(pytest.mark, kind))
        if inspect.iscoroutinefunction(getattr(item, "function", None)):
            item.fixturenames.append("_gc_in_loop")


@pytest.fixture
async def _gc_in_loop():
    yield
    await asyncio.sleep(0)
    gc.collect()
    await asyncio.sleep(0)
