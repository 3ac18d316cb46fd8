"""Errors every layer may raise toward the user; no imports, so nothing cycles through here."""

from __future__ import annotations


class CliError(Exception):
    """A user-facing error: printed as one line by the CLI, exit status 2."""
