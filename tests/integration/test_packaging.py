"""Packaging promises: headless commands never import Textual; the wheel ships the stylesheet."""

from __future__ import annotations

import re
import subprocess
import sys
import venv
import zipfile

from kit.paths import ROOT


def test_core_and_parse_command_never_import_textual(tmp_path):
    log = tmp_path / "s.log"
    log.write_text("[2026-02-26 19:16:45 TP0] Decode batch, #running-req: 1, #token: 9, "
                   "token usage: 0.04, cuda graph: True, gen throughput (token/s): 88.80, "
                   "#queue-req: 0\n")
    code = (
        "import sys, specmon, specmon.cli, specmon.parse.sglang, specmon.analysis.logsummary\n"
        f"rc = specmon.cli.main(['parse', {str(log)!r}])\n"
        f"rc2 = specmon.cli.main(['parse', '--json', {str(log)!r}])\n"
        "assert rc == 0 and rc2 == 0\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'textual')\n"
        "print('TEXTUAL', bad)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "TEXTUAL []" in res.stdout
    assert "88.80" in res.stdout


def test_wheel_ships_stylesheet_found_from_installed_package(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(dist), str(ROOT)], check=True, timeout=300)
    wheels = list(dist.glob("specmon-*.whl"))
    assert len(wheels) == 1
    names = zipfile.ZipFile(wheels[0]).namelist()
    assert "specmon/styles/specmon.tcss" in names
    shipped = [n for n in names if not n.startswith("specmon-") and not n.startswith("specmon/")]
    assert shipped == [], shipped
    # Nothing test-only ships: no test data, no fake NVML, no test modules.
    test_only = [n for n in names if re.search(r"(^|/)tests?(/|_)|fake_nvml|conftest|\.jsonl$|\.log(\.gz)?$"
                                                r"|__snapshots__", n)]
    assert test_only == [], test_only
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    # install by unpacking with pip from the outer interpreter into the fresh venv's site dir
    site = subprocess.check_output(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
    ).strip()
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", site,
                    str(wheels[0])], check=True, timeout=300)
    res = subprocess.run(
        [str(py), "-c", "from specmon.resources import stylesheet; p = stylesheet(); "
         "print(p); print(p.read_text()[:40])"],
        capture_output=True, text=True, cwd=tmp_path, timeout=60,
    )
    assert res.returncode == 0, res.stderr
    path = res.stdout.splitlines()[0]
    assert path.startswith(site) and path.endswith("specmon/styles/specmon.tcss")
    assert str(ROOT) not in path


def test_nothing_reads_outside_the_repository():
    """A fresh clone has no reference folder beside it: no test, bench or module may point there."""
    pattern = re.compile(r"\.\./shared|parent / \"shared\"|parents\[\d\] / \"shared\""
                         r"|parent\.parent / \"shared")
    hits = []
    for top in ("tests", "specmon", "bench", ".ci"):
        for path in (ROOT / top).rglob("*"):
            if (path.is_file() and path.suffix in (".py", ".sh", ".toml", "")
                    and "__pycache__" not in path.parts):
                text = path.read_text(encoding="utf-8", errors="replace")
                if path.name != "test_packaging.py" and pattern.search(text):
                    hits.append(str(path.relative_to(ROOT)))
    assert hits == []
