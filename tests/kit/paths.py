"""Where the tests' data lives (all inside the repository)."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
DATA = TESTS / "data"
