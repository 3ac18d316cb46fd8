"""Hostile snapshots and record files: one-line errors naming the spot or the limit, bounded
memory for bombs, reports that finish on many GPUs, well-formed SVG, no markup or escapes."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from kit.snapshots import BASE_ARGS, SPEC_ARGS, T0, decode_line, write_record

from specmon.export import snapshot as snapmod
from specmon.export.report import MAX_LEGEND
from specmon.export.snapshot import (
    SnapshotError,
    atomic_write_bytes,
    encode,
    read_snapshot,
    snapshot_from_record,
    write_snapshot,
)

HOSTILE = "\x1b]52;c;SGVsbG8=\x07\x1b]0;pwned\x07\x1b]8;;http://evil\x1b\\link\x1b[5;31mRED<script>alert(1)</script>"


def cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specmon", *args], capture_output=True,
                          timeout=timeout)


def _rows(n: int = 30) -> list[tuple[str, str, float]]:
    rows = [("base", BASE_ARGS, T0), ("spec", SPEC_ARGS, T0 + 0.5)]
    rows += [("base", decode_line(88.0 + i % 3), T0 + 1 + i) for i in range(n)]
    rows += [("spec", decode_line(94.0 + i % 3, accept=2.4), T0 + 1.5 + i) for i in range(n)]
    return sorted(rows, key=lambda r: r[2])


def _gpus(n_gpus: int, n_t: int = 40) -> list[tuple[float, list[dict]]]:
    return [(T0 + 2 * i, [{"index": g, "name": "NVIDIA H200", "ts": T0 + 2 * i,
                           "clock_sm": 1980 - (g % 4) * 10, "max_clock_sm": 1980,
                           "power_w": 380.0 + (g % 8) + (i % 3), "power_limit_w": 700.0,
                           "temp_gpu": 60, "clocks_event_reasons": 0} for g in range(n_gpus)])
            for i in range(n_t)]


def _snapshot(tmp_path: Path, n_gpus: int, *, hostile: bool = False) -> Path:
    snap = snapshot_from_record(write_record(tmp_path / "r.jsonl", _rows(), _gpus(n_gpus)),
                                host=HOSTILE if hostile else "gpu-7")
    half = max(1, n_gpus // 2)
    snap.servers[0].args.update(base_gpu_id=0, tp_size=half)
    snap.servers[1].args.update(base_gpu_id=half, tp_size=half)
    if hostile:
        snap.servers[0].name = "base" + HOSTILE
        snap.servers[0].path = "/var/log/" + HOSTILE
        snap.alerts = [{"t": T0 + 5, "server": snap.servers[0].name, "kind": "drift",
                        "message": "drop " + HOSTILE, "cause": HOSTILE}]
    return write_snapshot(snap, tmp_path / "s.json")


def _y_labels(svg: str) -> list[float]:
    root = ET.fromstring(svg)
    out = []
    for g in root.iter("{http://www.w3.org/2000/svg}g"):
        if "axis" in (g.get("class") or "") and " y " in f" {g.get('class')} ":
            for t in g.iter("{http://www.w3.org/2000/svg}text"):
                try:
                    out.append(float((t.text or "").replace(",", "")))
                except ValueError:
                    pass
    return out


@pytest.mark.parametrize("n_gpus", [16, 64])
def test_report_on_many_gpus_finishes_with_grouped_capped_legend(tmp_path, n_gpus):
    path = _snapshot(tmp_path, n_gpus)
    res = cli("report", str(path))  # used to hang forever in pygal's split_title
    assert res.returncode == 0, res.stderr
    charts = sorted(tmp_path.glob("s.report-*.svg"))
    assert len(charts) == 5  # throughput, then SM clock and power per server (base, spec)
    for svg_path in charts:
        root = ET.fromstring(svg_path.read_text())  # well-formed XML
        legends = [t for t in root.iter("{http://www.w3.org/2000/svg}text")
                   if (t.text or "").endswith((" median", " min", " max"))]
        assert len(legends) <= MAX_LEGEND
    half = n_gpus // 2
    assert f"base ({half} GPUs) median" in (tmp_path / "s.report-gpu-clock-0-base.svg").read_text()
    assert f"spec ({half} GPUs) max" in (tmp_path / "s.report-gpu-clock-1-spec.svg").read_text()
    power = (tmp_path / "s.report-gpu-power-0-base.svg").read_text()
    ys = _y_labels(power)  # the power axis spans the measured ~380-390 W
    assert ys and min(ys) <= 382 and max(ys) >= 388, ys


def test_report_of_a_hostile_snapshot_carries_no_markup_escape_or_secret(tmp_path):
    path = _snapshot(tmp_path, 2, hostile=True)
    for fmt in ("md", "html"):
        res = cli("report", str(path), "--format", fmt)
        assert res.returncode == 0, res.stderr
        text = (tmp_path / f"s.report.{fmt}").read_text()
        assert "\x1b" not in text and "\x07" not in text
        assert "<script>" not in text.split("</style>")[-1] or fmt == "md"
        assert "<script>alert" not in text
        # shown as text, not dropped (Markdown escapes the backslash and bracket it shows)
        assert ("\\x1b]52" if fmt == "html" else "\\\\x1b\\]52") in text
    svg = (tmp_path / "s.report-throughput.svg").read_text()
    ET.fromstring(svg)
    assert "\x1b" not in svg and "<script>alert" not in svg


def _doc(tmp_path: Path) -> dict:
    path = _snapshot(tmp_path, 1)
    return json.loads(path.read_text())


@pytest.mark.parametrize("damage, what", [
    (lambda d: d.update(created_at=10 ** 400), "created_at is out of range"),
    (lambda d: d["servers"][0]["lines"][0].__setitem__(0, 10 ** 300), "lines[0]: time is out"),
    (lambda d: d["servers"][0].update(exit_code=10 ** 100), "exit_code is out of range"),
    (lambda d: d["alerts"].append({"t": 1e308, "server": "base"}), "alerts[0].t is out of range"),
    # (a GPU value out of range is N/A, not an error: test_export_input.py)
    (lambda d: d["gpu"]["samples"].__setitem__(0, 7), "gpu.samples[0]: GPU record must be a "
                                                      "JSON object, got int"),
    # a fingerprint field of another type (report died with AttributeError in .summary())
    (lambda d: d["servers"][0].update(fingerprint={"model": "m", "nccl_conf": {"/etc/n": "x"}}),
     "servers[0].fingerprint.nccl_conf.'/etc/n': expected an object or null, got a string"),
    (lambda d: d["servers"][0].update(fingerprint={"workers": [{"pid": "1"}]}),
     "servers[0].fingerprint: "),
])
def test_hostile_numbers_in_a_snapshot_are_one_line_errors(tmp_path, damage, what):
    doc = _doc(tmp_path)
    damage(doc)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(SnapshotError) as ei:
        read_snapshot(bad)
    assert what in str(ei.value)
    for cmd in (["report", str(bad), "-o", "-"], ["replay", str(bad)]):
        res = cli(*cmd)
        err = res.stderr.decode()
        assert res.returncode == 2 and "Traceback" not in err and err.count("\n") == 1, err
        assert what in err


def test_nan_time_range_and_5000_digit_ints_are_refused(tmp_path):
    doc = json.loads(_snapshot(tmp_path, 1).read_text())
    doc["time_range"]["start"] = float("nan")
    nan = tmp_path / "nan.json"
    nan.write_text(json.dumps(doc))  # Python writes the non-standard NaN
    assert '"start": NaN' in nan.read_text()
    doc["time_range"]["start"] = T0
    digits = tmp_path / "digits.json"
    digits.write_text(json.dumps(doc).replace('"host": "gpu-7"', '"host": "gpu-7", "n": '
                                              + "9" * 5000))
    for p, what in ((nan, "NaN"), (digits, "digits")):
        for cmd in (["report", str(p), "-o", "-"], ["replay", str(p)]):
            res = cli(*cmd)
            err = res.stderr.decode()
            assert res.returncode == 2 and "Traceback" not in err and what in err, err


def test_json_gz_bomb_in_report_stops_at_the_limit(tmp_path):
    bomb = tmp_path / "bomb.json.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as f:
        f.write(b'{"schema": "specmon.snapshot/1", "host": "')
        block = b" " * (1 << 20)
        for _ in range((snapmod.MAX_SNAPSHOT_BYTES >> 20) + 8):
            f.write(block)
        f.write(b'"}')
    assert bomb.stat().st_size < 2 << 20
    # VmHWM is this process image's peak RSS (ru_maxrss would include the forked pytest's)
    code = ("import re, sys; from specmon.cli import main; rc = main(sys.argv[1:]); "
            "hwm = re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1); "
            "print('MAXRSS', hwm, file=sys.stderr); sys.exit(rc)")
    res = subprocess.run([sys.executable, "-c", code, "report", str(bomb), "-o", "-"],
                         capture_output=True, timeout=240)
    err = res.stderr.decode()
    assert res.returncode == 2 and "MAX_SNAPSHOT_BYTES" in err and "Traceback" not in err, err
    rss_kib = int(err.split("MAXRSS")[1].split()[0])
    assert rss_kib < (snapmod.MAX_SNAPSHOT_BYTES >> 10) + 300 * 1024


def test_jsonl_gz_bomb_in_export_stops_at_the_limit(tmp_path):
    bomb = tmp_path / "bomb.jsonl.gz"
    line = b" " * ((1 << 20) - 1) + b"\n"  # blank lines: only the byte limit can stop this
    with gzip.open(bomb, "wb", compresslevel=9) as f:
        for _ in range((snapmod.MAX_RECORD_BYTES >> 20) + 4):
            f.write(line)
    assert bomb.stat().st_size < 2 << 20
    res = cli("export", str(bomb), "-o", str(tmp_path / "out.json"))
    err = res.stderr.decode()
    assert res.returncode == 2 and "MAX_RECORD_BYTES" in err and "Traceback" not in err, err
    one = tmp_path / "oneline.jsonl.gz"
    with gzip.open(one, "wb") as f:
        for _ in range((snapmod.MAX_RECORD_LINE >> 20) + 2):
            f.write(b"x" * (1 << 20))
    res = cli("export", str(one), "-o", str(tmp_path / "out.json"))
    assert res.returncode == 2 and b"MAX_RECORD_LINE" in res.stderr


def test_too_many_servers_is_an_error_naming_the_limit(tmp_path):
    doc = _doc(tmp_path)
    server = doc["servers"][0]
    doc["servers"] = [dict(server, name=f"s{i}", lines=[]) for i in range(snapmod.MAX_SERVERS + 1)]
    many = tmp_path / "many.json"
    many.write_text(json.dumps(doc))
    for cmd in (["report", str(many), "-o", "-"], ["replay", str(many)]):
        res = cli(*cmd)
        assert res.returncode == 2 and b"MAX_SERVERS" in res.stderr, res.stderr


def test_export_of_non_finite_records_is_strict_json(tmp_path):
    rows = _rows(5) + [("base", decode_line(1.0).replace("1.00", "1e400"), T0 + 40)]
    rec = write_record(tmp_path / "r.jsonl", rows)
    res = cli("export", str(rec), "-o", str(tmp_path / "s.json"))
    assert res.returncode == 0, res.stderr
    doc = json.loads((tmp_path / "s.json").read_text(),
                     parse_constant=lambda c: (_ for _ in ()).throw(AssertionError(c)))
    last = doc["servers"][0]["lines"][-1][2]
    assert "gen_throughput" not in last and last["invalid"] == ["gen_throughput"]
    assert read_snapshot(tmp_path / "s.json").servers[0].entries[-1].record.invalid == [
        "gen_throughput"]
    assert encode(read_snapshot(tmp_path / "s.json"))


def test_temp_files_of_a_killed_export_are_cleaned_on_the_next_run(tmp_path):
    # a real writer killed mid-write: its pid is gone, its temp file stays
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             start_new_session=True)
    dead_pid = child.pid
    stale = tmp_path / f".specmon-host-1.json.gz.tmp-{dead_pid}"
    stale.write_bytes(b"half a snapshot")
    child.kill()
    child.wait()
    live = tmp_path / f".other.json.tmp-{os.getpid()}"  # ours (alive): kept
    live.write_bytes(b"x")
    foreign = tmp_path / f".notes.tmp-{dead_pid}"  # not a name we write: kept
    foreign.write_bytes(b"x")
    others = tmp_path / f".theirs.json.tmp-{dead_pid}"  # our name, another user's file: kept
    others.write_bytes(b"x")
    mine = os.geteuid() != 0  # (only root can give a file away; CI runs as root)
    if not mine:
        os.chown(others, 65534, 65534)
    linked = tmp_path / f".link.json.tmp-{dead_pid}"  # our name, a symlink: kept
    linked.symlink_to(others)
    atomic_write_bytes(tmp_path / "specmon-host-2.json", b"{}")
    assert not stale.exists() and live.exists() and foreign.exists()
    assert others.exists() != mine and linked.is_symlink()
    assert (tmp_path / "specmon-host-2.json").read_bytes() == b"{}"


def test_non_finite_cli_numbers_are_usage_errors(tmp_path):
    snap = _snapshot(tmp_path, 1)
    for args in (["replay", str(snap), "--speed", "nan"], ["replay", str(snap), "--speed", "inf"],
                 ["record", "local", "--log", f"a={tmp_path}/a.log", "--out",
                  str(tmp_path / "o.jsonl"), "--duration", "nan"]):
        res = cli(*args)
        assert res.returncode == 2 and b"Traceback" not in res.stderr, (args, res.stderr)
        assert res.stderr.count(b"\n") == 1 and b"must be a positive number" in res.stderr


@pytest.mark.parametrize("gaps, msg", [
    ([[10**6, 5]], "expected [row index, bytes] of a row of its lines"),
    ([[True, 5]], "expected [row index, bytes]"),
    ([[0, -1]], "bytes is not a byte count (-1)"),
    ([[0, 1.5]], "bytes is not a byte count (1.5)"),
    ("x", "'gaps'"),
])
def test_a_damaged_gap_list_is_one_line_naming_it(tmp_path, gaps, msg):
    """`gaps` (bytes of a log not read before a row: history after the start-up lines) is read
    from a file like every other field: bad ones are a one-line error, good ones kept."""
    path = _snapshot(tmp_path, 2)
    doc = json.loads(path.read_text())
    doc["servers"][0]["gaps"] = [[0, 4096]]
    path.write_text(json.dumps(doc))
    assert read_snapshot(path).servers[0].entries[0].skipped == 4096
    doc["servers"][0]["gaps"] = gaps
    path.write_text(json.dumps(doc))
    with pytest.raises(SnapshotError) as exc:
        read_snapshot(path)
    assert msg in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("stats", [{"strata": "x"}, {"strata": [{"y": ["nan"]}]}, {"strata": [1]},
                                   {"strata": []}])
def test_a_damaged_recorded_baseline_is_left_and_the_report_still_made(tmp_path, stats):
    """A snapshot's recorded baseline is watched again as its lines play; damaged stats are file
    input: that baseline is left (no watch), the report is made, no traceback."""
    from specmon.export.report import report_doc, report_model

    path = _snapshot(tmp_path, 2)
    doc = json.loads(path.read_text())
    doc["baselines"] = [{"name": "b1", "server": doc["servers"][0]["name"], "created_at": T0,
                         "stats": stats}]
    path.write_text(json.dumps(doc))
    snap = read_snapshot(path)
    model = report_model(snap)
    assert model.fleet.watches == {}
    assert "vs_recorded" not in report_doc(snap, model)["speedup"]
