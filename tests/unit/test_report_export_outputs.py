"""Where `specmon export` and `specmon report` write, through the real CLI: a symbolic link at
any output (the snapshot, the report, each chart) is refused in one line, exit 2, nothing
written, unless --force, which replaces the link and leaves its target alone (they silently
replaced it); and a snapshot file name holding control characters puts none into the report,
whose chart links are percent-encoded and still find their files (an ESC went in raw)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import unquote

import pytest
from kit.snapshots import BASE_ARGS, SPEC_ARGS, T0, decode_line, write_record

from specmon.cli import main
from specmon.export.snapshot import (
    SymlinkOutputError,
    atomic_write_bytes,
    snapshot_from_record,
    write_snapshot,
)
from specmon.textsafe import visible_lines

pytestmark = pytest.mark.unit

PRECIOUS = "precious\n"


def _record(tmp_path: Path) -> Path:
    rows = [("base", BASE_ARGS, T0), ("spec", SPEC_ARGS, T0 + 0.5)]
    rows += [("base", decode_line(88.0 + i), T0 + 1 + i) for i in range(4)]
    rows += [("spec", decode_line(94.0 + i, accept=2.4), T0 + 1.5 + i) for i in range(4)]
    return write_record(tmp_path / "r.jsonl", sorted(rows, key=lambda r: r[2]))


def _snapshot(tmp_path: Path, name: str = "snap.json") -> Path:
    return write_snapshot(snapshot_from_record(_record(tmp_path), host="gpu-7"), tmp_path / name)


def _planted(path: Path, tmp_path: Path) -> Path:
    """`path` made a symbolic link to a file someone cares about; returns that file."""
    victim = tmp_path / "victim.txt"
    victim.write_text(PRECIOUS)
    path.symlink_to(victim)
    return victim


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def _files(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


# --- symbolic links at an output ----------------------------------------------------------------

def test_export_refuses_a_symlink_out_unless_force(tmp_path, capsys):
    rec = _record(tmp_path)
    out = tmp_path / "o.json"
    victim = _planted(out, tmp_path)
    before = _files(tmp_path)
    assert main(["export", str(rec), "-o", str(out)]) == 2
    line = _one_line(capsys)
    assert line == (f"specmon export: --out {out} is a symbolic link (to {victim}): not writing "
                    "through it; name the file itself, or --force")
    assert out.is_symlink() and victim.read_text() == PRECIOUS
    assert _files(tmp_path) == before  # no temp file either

    assert main(["export", str(rec), "-o", str(out), "--force"]) == 0
    capsys.readouterr()
    assert not out.is_symlink() and out.read_bytes().startswith(b"{")  # the link replaced...
    assert victim.read_text() == PRECIOUS  # ...never written through


@pytest.mark.parametrize("fmt", ["md", "html", "json"])
def test_report_refuses_a_symlink_at_the_default_report_unless_force(tmp_path, capsys, fmt):
    snap = _snapshot(tmp_path)
    out = tmp_path / f"snap.report.{fmt}"
    victim = _planted(out, tmp_path)
    before = _files(tmp_path)
    assert main(["report", str(snap), "--format", fmt]) == 2
    line = _one_line(capsys)
    assert line.startswith(f"specmon report: {out} is a symbolic link (to {victim}): ")
    assert line.endswith("not writing through it; name the file itself, or --force")
    assert _files(tmp_path) == before  # nothing written: not even the md's chart files
    assert out.is_symlink() and victim.read_text() == PRECIOUS

    assert main(["report", str(snap), "--format", fmt, "--force"]) == 0
    capsys.readouterr()
    assert not out.is_symlink() and out.read_text() != PRECIOUS
    assert victim.read_text() == PRECIOUS


def test_report_refuses_a_symlink_out_and_a_symlink_chart(tmp_path, capsys):
    snap = _snapshot(tmp_path)
    out = tmp_path / "o.md"
    chart = tmp_path / "o-throughput.svg"
    victim = _planted(chart, tmp_path)
    before = _files(tmp_path)
    assert main(["report", str(snap), "-o", str(out)]) == 2
    assert _one_line(capsys) == (f"specmon report: chart {chart} is a symbolic link (to "
                                 f"{victim}): not writing through it; name the file itself, "
                                 "or --force")
    assert _files(tmp_path) == before  # neither the report nor any other chart

    assert main(["report", str(snap), "-o", str(out), "--force"]) == 0
    capsys.readouterr()
    assert not chart.is_symlink() and "<svg" in chart.read_text()
    assert victim.read_text() == PRECIOUS and "(o-throughput.svg)" in out.read_text()

    out.unlink()
    out.symlink_to(victim)
    assert main(["report", str(snap), "-o", str(out), "--format", "html"]) == 2
    assert _one_line(capsys).startswith(f"specmon report: --out {out} is a symbolic link")
    assert out.is_symlink() and victim.read_text() == PRECIOUS


@pytest.mark.parametrize("command", ["export", "report"])
def test_force_is_documented_in_help(capsys, command):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--force" in text and "symbolic link" in text


def test_atomic_write_refuses_a_symlink_unless_force(tmp_path):
    """The UI's screenshot and export keys write through `atomic_write_bytes` too."""
    out = tmp_path / "shot.svg"
    victim = _planted(out, tmp_path)
    with pytest.raises(SymlinkOutputError, match="is a symbolic link"):
        atomic_write_bytes(out, b"<svg/>")
    assert out.is_symlink() and victim.read_text() == PRECIOUS
    atomic_write_bytes(out, b"<svg/>", force=True)
    assert not out.is_symlink() and out.read_bytes() == b"<svg/>"
    assert victim.read_text() == PRECIOUS


# --- file names in the report text --------------------------------------------------------------

def test_control_characters_in_the_snapshot_name_stay_out_of_the_report(tmp_path, capsys):
    snap = _snapshot(tmp_path, "snap\x1b[2J (1).json")
    assert main(["report", str(snap)]) == 0
    capsys.readouterr()
    md = (tmp_path / "snap\x1b[2J (1).report.md").read_text()
    assert visible_lines(md) == md  # no control character at all (newlines aside)
    targets = re.findall(r"!\[[^\]]*\]\(([^)]*)\)", md)
    assert targets, md
    for target in targets:
        assert target.startswith("snap%1B%5B2J%20%281%29.report-"), target
        assert (tmp_path / unquote(target)).is_file()  # the link still finds its chart

    assert main(["report", str(snap), "--format", "html"]) == 0
    capsys.readouterr()
    page = (tmp_path / "snap\x1b[2J (1).report.html").read_text()
    assert visible_lines(page) == page and "\x1b" not in page
    assert os.path.exists(tmp_path / "snap\x1b[2J (1).report-throughput.svg")
