from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


@pytest.fixture(scope="session")
def shared() -> Path:
    """The reference material beside the checkout (CI lays a copy there too)."""
    assert (SHARED / "README.md").is_file(), f"shared/ reference folder missing at {SHARED}"
    return SHARED
