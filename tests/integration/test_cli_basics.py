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


def test_an_argument_error_echoes_no_escape_sequence(tmp_path):
    """argparse repeats the bad argument; a file name from `specmon parse logs/*` that starts
    with `-` is text someone else chose: it is shown as text, before any command runs."""
    log = tmp_path / "a.log"
    log.write_text("x\n")
    res = subprocess.run([sys.executable, "-m", "specmon", "parse", str(log),
                          "--zz\x1b]0;pwned\x07\x1b[2J\u202e"], capture_output=True, timeout=60)
    assert res.returncode == 2
    assert b"\x1b" not in res.stderr and b"\x07" not in res.stderr
    assert b"\xe2\x80\xae" not in res.stderr  # U+202E
    assert b"unrecognized arguments: --zz\\x1b]0;pwned\\x07\\x1b[2J\\u202e" in res.stderr


def test_a_full_screen_commands_error_before_its_app_echoes_no_escape_sequence(tmp_path):
    """replay, connect and demo get the raw streams (their app owns the terminal), but their
    one-line errors before it starts go through the same text safety: a snapshot's file name
    is text someone else chose, as `report` already shows it."""
    name = str(tmp_path / "x\x1b]0;pwned\x07\u202ey.json")
    for cmd in ("replay", "report"):
        res = subprocess.run([sys.executable, "-m", "specmon", cmd, name],
                             capture_output=True, timeout=60)
        assert res.returncode == 2, res.stderr
        assert b"\x1b" not in res.stderr and b"\x07" not in res.stderr, res.stderr
        assert b"\xe2\x80\xae" not in res.stderr  # U+202E
        assert b"x\\x1b]0;pwned\\x07\\u202ey.json" in res.stderr, res.stderr
        assert res.stderr.count(b"\n") == 1 and b"Traceback" not in res.stderr
