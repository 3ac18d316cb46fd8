"""Locate files shipped with specmon (TCSS), in a source checkout and in an installed wheel."""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def styles_dir() -> Path:
    """The folder holding the TCSS files.

    The wheel ships top-level `styles/` as `specmon/styles/`; a source checkout (editable install
    or running from the repo) has it beside the package.
    """
    for candidate in (_PKG / "styles", _PKG.parent / "styles"):
        if (candidate / "specmon.tcss").is_file():
            return candidate
    raise FileNotFoundError(f"specmon stylesheet not found next to {_PKG}")


def stylesheet(name: str = "specmon.tcss") -> Path:
    return styles_dir() / name
