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

# What .ci/sdist-check runs again, with the unit tests, against the installed sdist: the tests
# that read what the package ships (the agent sent over real sshd, the stylesheet, the console
# script, the examples). The whole suite already ran on the same source in `make test`; the
# check itself proves the sdist holds every tracked file.
PACKAGED = (
    "tests/integration/test_packaging.py",
    "tests/integration/test_cli_basics.py",
    "tests/integration/test_import_hygiene.py",
    "tests/integration/test_hostside_agent.py",
    "tests/integration/test_one_agent.py",
    "tests/integration/test_gpu_ssh.py",
    "tests/integration/test_fleet_examples.py",
    "tests/integration/test_ssh.py::test_record_end_to_end_over_ssh",
    "tests/ui/test_demo.py::test_demo_in_a_real_terminal",
    "tests/ui/test_ui_snapshots.py::test_snapshot_demo_steady",
)


def pytest_collection_modifyitems(items) -> None:
    """Each test is marked with its kind (the folder it lives in: unit, integration, ui), and
    `packaged` when PACKAGED names it.

    Async tests also collect garbage inside their own event loop before it closes: subprocess
    transports (agents, servers) that a test let go of are then finalised while the loop is alive,
    instead of in some later test, where asyncio's __del__ would hit a closed loop.
    """
    _check_packaged(items)
    for item in items:
        kind = Path(str(item.fspath)).parent.name
        if kind in KINDS:
            item.add_marker(getattr(pytest.mark, kind))
        if item.nodeid.startswith(PACKAGED):
            item.add_marker(pytest.mark.packaged)
        if inspect.iscoroutinefunction(getattr(item, "function", None)):
            item.fixturenames.append("_gc_in_loop")


def _check_packaged(items) -> None:
    """A renamed test would silently drop out of the sdist check: each PACKAGED entry must match."""
    files = {item.nodeid.split("::")[0] for item in items}
    for entry in PACKAGED:
        path = entry.split("::")[0]
        missing = not (ROOT / path).is_file()
        if missing or (path in files and not any(i.nodeid.startswith(entry) for i in items)):
            raise pytest.UsageError(f"tests/conftest.py PACKAGED names {entry}, which no test matches")


@pytest.fixture
async def _gc_in_loop():
    yield
    await asyncio.sleep(0)
    gc.collect()
    await asyncio.sleep(0)
