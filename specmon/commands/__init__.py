"""Implementations of headless CLI commands (kept out of cli.py so --help stays fast)."""
