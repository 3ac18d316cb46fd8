"""Nothing the agent side runs imports from the folder it was started in (issue 22).

`python -c` puts that folder first on sys.path: root ran `specmon record local` from a shared
folder where another user had put json.py, and the agent's loader (`import sys,types,json`)
ran it as root. A relative PYTHONPATH entry of the user's server resolved against the agent's
folder too, so the probe read a dist-info another user planted there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from specmon.hostside import procs

DECODE = ("[2025-06-01 12:00:00 TP0] Decode batch, #running-req: 1, #token: 100, token usage: "
          "0.01, gen throughput (token/s): 88.80, #queue-req: 0, ")
# every module the agent side imports after start-up, and pynvml, each leaving a mark
PLANTED = ("json", "types", "base64", "zlib", "importlib", "runpy", "pynvml", "subprocess",
           "select", "signal", "socket", "hashlib", "platform", "ctypes")


def plant(folder: Path, marks: Path) -> None:
    for name in PLANTED:
        (folder / f"{name}.py").write_text(
            f"open({str(marks)!r}, 'a').write({name!r} + '\\n')\nraise ImportError('planted')\n")


def test_record_started_in_a_folder_with_planted_modules_imports_none(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    marks = tmp_path / "marks"
    plant(shared, marks)
    log = tmp_path / "s.log"
    log.write_text(DECODE + "\n")
    out = tmp_path / "out.jsonl"
    # specmon itself as its console script starts (`-m` would put the shared folder first
    # in specmon's own process: what is tested is the agent it starts)
    main = "import sys; del sys.path[0]; from specmon.cli import main; sys.exit(main())"
    res = subprocess.run(
        [sys.executable, "-c", main, "record", "local", "--log", f"s={log}", "--out",
         str(out), "--duration", "2"],
        cwd=shared, capture_output=True, text=True, timeout=90,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert res.returncode == 0, res.stderr
    assert not marks.exists(), marks.read_text()  # (read only when a planted module ran)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert any("88.80" in r.get("line", "") for r in rows)


def test_the_configured_interpreters_path_has_no_relative_entry(tmp_path, monkeypatch):
    """`_python_path` asks the configured interpreter for its sys.path (pynvml, the probe):
    run from the shared folder it imported json.py there, and '' came back as a folder."""
    shared = tmp_path / "shared"
    shared.mkdir()
    marks = tmp_path / "marks"
    plant(shared, marks)
    wrapper = tmp_path / "python"  # the configured interpreter (not sys.executable itself)
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.chdir(shared)
    monkeypatch.setenv("PYTHONPATH", "relative/dir")
    path = procs._python_path(str(wrapper))
    assert path and all(os.path.isabs(p) for p in path), path
    assert not marks.exists(), marks.read_text()


def test_a_servers_relative_pythonpath_is_read_from_its_own_folder(tmp_path, monkeypatch):
    server_dir, ours = tmp_path / "grp", tmp_path / "shared"
    for d in (server_dir / "pkg", ours / "pkg"):
        d.mkdir(parents=True)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            cwd=server_dir, env={**os.environ, "PYTHONPATH": ".:pkg"})
    try:  # (Popen returns once the exec happened: its environ is the server's)
        monkeypatch.chdir(ours)
        dirs = procs._site_dirs(proc.pid) or []
        assert str(server_dir / "pkg") in dirs and os.path.join(server_dir, ".") in dirs, dirs
        assert not any(d.startswith(str(ours)) or not os.path.isabs(d) for d in dirs), dirs
    finally:
        proc.kill()
        proc.wait()
