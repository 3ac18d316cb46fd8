"""`record` of servers up for longer than the history it reads: the agent's "head" brings each
run's launch line, so the report compares the two servers' conditions (here a TP size that
differs) instead of saying they are unknown, and nothing is recorded twice."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from kit.ui import ARGS_BASE, ARGS_SPEC, READY, decode_line


def test_record_reads_each_runs_launch_line_before_its_history(tmp_path: Path) -> None:
    logs = {}
    for name, args, acc in (("base", ARGS_BASE, None),
                            ("spec", ARGS_SPEC.replace("tp_size=8", "tp_size=4"), 2.5)):
        lines = [args, READY] + [decode_line(i, 88.0 + (i % 3) * 0.2 if acc is None
                                             else 94.0 + (i % 3) * 0.2, acc) for i in range(3000)]
        logs[name] = tmp_path / f"{name}.log"
        logs[name].write_text("".join(x + "\n" for x in lines))
    out = tmp_path / "r.jsonl"
    r = subprocess.run([sys.executable, "-m", "specmon", "record", "local", "--log",
                        f"base={logs['base']}", "--log", f"spec={logs['spec']}", "--out", str(out),
                        "--duration", "4"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    for name in ("base", "spec"):
        mine = [x for x in rows if x.get("server") == name]
        # the launch and ready lines at offset 0, then the last 2,000 lines (the history)
        assert [x["offset"] for x in mine[:2]] == [0, len(logs[name].read_text().split("\n")[0]) + 1]
        assert "server_args=" in mine[0]["line"] and len(mine) == 2 + 2000
        assert len({x["offset"] for x in mine}) == len(mine)  # none twice
    snap = tmp_path / "s.json"
    assert subprocess.run([sys.executable, "-m", "specmon", "export", str(out), "-o", str(snap)],
                          capture_output=True, timeout=120).returncode == 0
    assert subprocess.run([sys.executable, "-m", "specmon", "report", str(snap), "--format",
                           "json"], capture_output=True, timeout=120).returncode == 0
    sp = json.loads((tmp_path / "s.report.json").read_text())["speedup"]
    assert sp["conditions_unknown"] == [] and sp["conditions_differ"] == ["tp_size: 8 vs 4"]


def test_a_run_read_from_its_history_is_partial_on_every_way_out(tmp_path: Path) -> None:
    """The head brings the launch line, then the tail reads the last 2,000 lines: the 1,000
    lines between are not read. The run was reported as whole ("started by server_args",
    speedup "medians over the whole runs") while a third of it, at another throughput, was
    missing. The record row after the gap, record's stderr, the snapshot, the report's run
    and speedup and the replayed session all say it is partial."""
    from specmon.export.snapshot import read_snapshot

    lines = [ARGS_BASE, READY] + [decode_line(i, 120.0 if i < 1000 else 90.0, None)
                                  for i in range(3000)]
    base = tmp_path / "base.log"
    base.write_text("".join(x + "\n" for x in lines))
    spec = tmp_path / "spec.log"  # short: read whole
    spec.write_text("".join(x + "\n" for x in [ARGS_SPEC, READY] + [
        decode_line(i, 150.0, 2.9) for i in range(300)]))
    out = tmp_path / "r.jsonl"
    r = subprocess.run([sys.executable, "-m", "specmon", "record", "local", "--log",
                        f"base={base}", "--log", f"spec={spec}", "--out", str(out),
                        "--duration", "4"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    text = base.read_text()
    gap = len("".join(x + "\n" for x in lines[2:1002]))  # between the head and the history
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    mine = [x for x in rows if x["server"] == "base"]
    assert [x.get("skipped", 0) for x in mine[:4]] == [0, 0, gap, 0]
    assert mine[2]["offset"] == text.index(lines[1002]) and "skipped" not in str(
        [x for x in rows if x["server"] == "spec"])
    assert f"base: the history starts {gap:,} bytes after the run's start-up lines" in r.stderr
    snap = tmp_path / "s.json"
    assert subprocess.run([sys.executable, "-m", "specmon", "export", str(out), "-o", str(snap)],
                          capture_output=True, timeout=120).returncode == 0
    loaded = read_snapshot(snap)  # the gap survives the snapshot file
    assert [e.skipped for e in loaded.servers[0].entries if e.skipped] == [gap]
    for fmt in ("json", "md"):
        assert subprocess.run([sys.executable, "-m", "specmon", "report", str(snap), "--format",
                               fmt], capture_output=True, timeout=120).returncode == 0
    doc = json.loads((tmp_path / "s.report.json").read_text())
    (run,) = next(s for s in doc["servers"] if s["name"] == "base")["runs"]
    assert run["partial"].startswith(f"partial: {gap:,} bytes of its log after the start-up "
                                     "lines, before ")
    assert doc["speedup"]["span"].startswith("the lines read of each run")
    md = (tmp_path / "s.report.md").read_text()
    assert "medians over the whole runs" not in md and "**partial: " in md


def test_the_report_gives_the_log_time_range_beside_the_receive_times(tmp_path: Path) -> None:
    """A --whole-file record receives hours of log in a second: the report's only time range
    was the receive times ('0h 00m 00s'); it now gives the servers' own log times first."""
    lines = [ARGS_BASE, READY] + [decode_line(i, 88.0, None) for i in range(50)]
    base = tmp_path / "base.log"
    base.write_text("".join(x + "\n" for x in lines))
    out = tmp_path / "r.jsonl"
    r = subprocess.run([sys.executable, "-m", "specmon", "record", "local", "--log",
                        f"base={base}", "--out", str(out), "--whole-file", "--duration", "3"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    snap = tmp_path / "s.json"
    assert subprocess.run([sys.executable, "-m", "specmon", "export", str(out), "-o", str(snap)],
                          capture_output=True, timeout=120).returncode == 0
    for fmt in ("json", "md"):
        assert subprocess.run([sys.executable, "-m", "specmon", "report", str(snap), "--format",
                               fmt], capture_output=True, timeout=120).returncode == 0
    doc = json.loads((tmp_path / "s.report.json").read_text())
    first = next(x for x in lines if "Decode batch" in x)
    (run,) = doc["servers"][0]["runs"]
    assert doc["log_time_range"]["start"] == run["start"] and doc["log_time_range"]["end"] == \
        run["end"] != run["start"]
    assert first[1:20] <= run["end"]
    md = (tmp_path / "s.report.md").read_text()
    assert f"Log time {run['start']} → {run['end']} (" in md
