"""The core is importable without the TUI: every headless module, imported in a fresh
interpreter, leaves Textual unimported (as harlequin checks its core), and every command module
with a headless handler too. `lint-imports` checks the same statically; this catches what a
static graph cannot (a module importing Textual through a library at import time)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import specmon

TUI = ("specmon.ui", "specmon.commands.connect_cmd", "specmon.commands.demo_cmd",
       "specmon.commands.replay_cmd", "specmon.__main__")


def headless_modules() -> list[str]:
    mods = [m.name for m in pkgutil.walk_packages(specmon.__path__, "specmon.")]
    return sorted(m for m in mods if not m.startswith(TUI))


def test_every_headless_module_imports_without_textual():
    mods = headless_modules()
    # the layers that must be covered are really in the list (a typo above would empty it)
    for pkg in ("parse", "session", "analysis", "sources", "hosts", "feeds", "export", "control",
                "commands"):
        assert any(m.startswith(f"specmon.{pkg}.") for m in mods), pkg
    code = (
        "import importlib, sys\n"
        f"for m in {mods!r}:\n"
        "    importlib.import_module(m)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'textual')\n"
        "print('TEXTUAL', bad)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "TEXTUAL []" in res.stdout, res.stdout


def test_the_check_itself_sees_textual_when_a_tui_module_is_imported():
    code = ("import sys, specmon.ui.app\n"
            "print('TEXTUAL', bool([m for m in sys.modules if m.split('.')[0] == 'textual']))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "TEXTUAL True" in res.stdout, res.stderr


HOST_SIDE = "specmon/hostside"  # the one host agent: a package of stdlib-only modules


def test_host_side_programs_import_nothing_from_specmon():
    """What is streamed to a host's Python must run there alone: no `specmon` import at all."""
    import ast
    from pathlib import Path

    root = Path(specmon.__file__).resolve().parents[1]
    files = sorted((root / HOST_SIDE).rglob("*.py"))
    assert len(files) >= 6  # protocol, tail, procs, control, nvml, main (and the entry points)
    for f in files:
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            assert not any(n == "specmon" or n.startswith("specmon.") for n in names), (f, names)


def test_importing_every_module_prints_no_warning():
    """A library's import-time warning (asyncssh naming DSA types under cryptography 48+: ten
    lines) lands on every command's stderr, where the one-line errors are; -W error turns
    each into a failure, with the default filters otherwise."""
    mods = [m.name for m in pkgutil.walk_packages(specmon.__path__, "specmon.")
            if m.name != "specmon.__main__"]
    assert "specmon.hosts.ssh" in mods
    code = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\n"
    res = subprocess.run([sys.executable, "-W", "error", "-c", code, *mods],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stderr == "", res.stderr[-2000:]
