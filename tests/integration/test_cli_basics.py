import subprocess
import sys

import specmon


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specmon", *args], capture_output=True, text=True, timeout=60
    )


def test_version_prints_package_version():
    res = run_cli("--version")
    assert res.returncode == 0
    assert res.stdout.strip() == f"specmon {specmon.__version__}"


def test_help_lists_parse_command():
    res = run_cli("--help")
    assert res.returncode == 0
    assert "parse" in res.stdout
