"""`specmon export` on damaged record files and snapshot loading on damaged documents, through
the real CLI: CR-only line endings are line breaks, a torn last row is reported in one line
while the good rows are kept, a file with nothing to export is a one-line error (exit 2), a row
nested past the parser's depth is a malformed row at its line, and a snapshot field of the wrong
type or value is refused in one grammatical line naming the field."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from kit.snapshots import BASE_ARGS, T0, decode_line, write_record

from specmon.cli import main
from specmon.export import snapshot as snapmod
from specmon.export.snapshot import read_snapshot
from specmon.parse.gpu_sample import GpuProcess

pytestmark = pytest.mark.unit

THROUGHPUTS = [80.0, 81.0, 82.0, 83.0]


def _rows(tmp_path: Path) -> list[str]:
    """The rows of a good record file (a server_args line, then four decode lines)."""
    rows = [("b", BASE_ARGS, T0)] + [("b", decode_line(gt), T0 + 1 + i)
                                     for i, gt in enumerate(THROUGHPUTS)]
    return write_record(tmp_path / "rows.jsonl", rows).read_text().splitlines()


def _export(tmp_path: Path, capsys, data: bytes, name: str = "r.jsonl"
            ) -> tuple[int, list[str], Path, Path]:
    src = tmp_path / name
    src.write_bytes(data)
    out = tmp_path / (name + ".snap.json")
    rc = main(["export", str(src), "-o", str(out)])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return rc, err.splitlines(), src, out


def _throughputs(path: Path) -> list[float]:
    snap = read_snapshot(path)
    return [e.record.gen_throughput for s in snap.servers for e in s.decode_entries()]


# --- 1. line endings ------------------------------------------------------------------------------

@pytest.mark.parametrize("ends", [["\r"], ["\r\n"], ["\r", "\n", "\r\n"]],
                         ids=["cr-only", "crlf", "mixed"])
def test_cr_only_and_mixed_line_endings_are_line_breaks(tmp_path, capsys, ends):
    rows = _rows(tmp_path)
    text = "".join(row + ends[i % len(ends)] for i, row in enumerate(rows))
    rc, err, _, out = _export(tmp_path, capsys, text.encode())
    assert rc == 0, err
    assert _throughputs(out) == THROUGHPUTS  # every row once, in order
    assert read_snapshot(out).servers[0].counts["lines"] == len(rows)
    assert err == [f"specmon export: 1 server(s), 4 decode records, 0 GPU samples -> {out}"]


@pytest.mark.parametrize("chunk", [1, 2, 7, 64])
def test_a_crlf_split_between_two_reads_is_one_line_end(tmp_path, capsys, monkeypatch, chunk):
    """The reader takes the file in pieces: a CR that ends one piece and the LF that starts the
    next are one line end (no empty line, no row counted twice, line numbers right)."""
    monkeypatch.setattr(snapmod, "_CHUNK", chunk)
    rows = _rows(tmp_path)
    text = "\r\n".join(rows) + "\r\n" + "\r".join(rows[1:]) + "\r" + "not json\r\n"
    rc, err, src, _ = _export(tmp_path, capsys, text.encode())
    # rows 1-5, then rows 2-5 again (same offsets: dropped as duplicates), then the bad row: 10
    assert rc == 2 and err == [f"specmon export: {src}:10: not a JSON record line "
                               "(Expecting value: line 1 column 1 (char 0))"]
    good = ("\r\n".join(rows) + "\r\n" + "\r".join(rows[1:]) + "\r").encode()
    rc, err, _, out = _export(tmp_path, capsys, good, "good.jsonl")
    assert rc == 0, err
    assert _throughputs(out) == THROUGHPUTS
    assert "4 duplicate lines dropped" in err[-1]


# --- 2. a torn last row ---------------------------------------------------------------------------

@pytest.mark.parametrize("end", ["\n", "\r"])
def test_a_torn_last_row_is_reported_in_one_line_and_the_good_rows_are_kept(tmp_path, capsys,
                                                                           end):
    rows = _rows(tmp_path)
    torn = rows[-1][: len(rows[-1]) // 2]  # the recorder was killed mid-row
    rc, err, src, out = _export(tmp_path, capsys, (end.join(rows) + end + torn).encode())
    assert rc == 0, err
    assert err == [
        f"specmon export: {src}: last row (line 6) is torn, ignored; 5 rows read",
        f"specmon export: 1 server(s), 4 decode records, 0 GPU samples -> {out}",
    ]
    assert _throughputs(out) == THROUGHPUTS
    assert read_snapshot(out).source["torn_last_row"] == 6


def test_a_truncated_gzip_record_file_exports_the_rows_before_the_cut(tmp_path, capsys):
    import gzip

    rows = _rows(tmp_path)
    # two members: the first whole (rows 1-3), the second cut inside its header
    data = (gzip.compress(("\n".join(rows[:3]) + "\n").encode())
            + gzip.compress(("\n".join(rows[3:]) + "\n").encode())[:10])
    rc, err, src, out = _export(tmp_path, capsys, data, "r.jsonl.gz")
    assert rc == 0, err
    assert len(err) == 2 and err[0].startswith(f"specmon export: {src}: read error after 3 lines ")
    assert err[0].endswith("; the 3 rows before it are exported"), err
    assert _throughputs(out) == THROUGHPUTS[:2]
    assert read_snapshot(out).source["read_error"].startswith("read error after 3 lines (")
    rc, err, src, _ = _export(tmp_path, capsys, data[-10:], "cut.jsonl.gz")  # nothing before
    assert rc == 2 and len(err) == 1 and "nothing to export before it" in err[0], err


def test_a_whole_file_has_no_torn_row_message(tmp_path, capsys):
    rc, err, _, out = _export(tmp_path, capsys, ("\n".join(_rows(tmp_path)) + "\n").encode())
    assert rc == 0
    assert err == [f"specmon export: 1 server(s), 4 decode records, 0 GPU samples -> {out}"]
    assert "torn_last_row" not in read_snapshot(out).source


# --- 3. nothing to export -------------------------------------------------------------------------

@pytest.mark.parametrize("data, why", [
    (b"", "empty file, no rows"),
    (b"\n  \n\r\n\r", "empty file, no rows"),
    (b'{"server": "b", "line": "[2026-02-26 19:16:45 TP0] Deco', "its only row (line 1) is torn"),
    (b'\n\n{"server": "b", "li', "its only row (line 3) is torn"),
    (b'{"gpus": [], "received_at": 1772000000}\n', "1 row but no log line or GPU sample in them"),
    (b'{"gpus": [], "received_at": 1772000000}\r{"gpus": [{"ind',
     "1 row but no log line or GPU sample in them; the last row (line 2) is torn"),
], ids=["empty", "blank", "only-torn", "blank-then-torn", "no-samples", "no-samples-then-torn"])
def test_a_record_file_with_nothing_to_export_is_a_one_line_error(tmp_path, capsys, data, why):
    rc, err, src, out = _export(tmp_path, capsys, data)
    assert rc == 2
    assert err == [f"specmon export: {src}: nothing to export: {why}"]
    assert not out.exists()


def test_gpu_rows_alone_are_something_to_export(tmp_path, capsys):
    row = {"gpus": [{"index": 0, "ts": T0, "clock_sm": 1980}], "received_at": T0}
    rc, err, _, out = _export(tmp_path, capsys, (json.dumps(row) + "\n").encode())
    assert rc == 0, err
    assert len(read_snapshot(out).gpu_samples) == 1


# --- 4. rows nested past the parser's depth -------------------------------------------------------

@pytest.mark.parametrize("deep, end", [("[" * 100_000, "\n"), ("[" * 100_000, ""),
                                       ('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", "\n")],
                         ids=["array", "array-last-unended", "in-an-object"])
def test_a_deeply_nested_row_is_a_malformed_row_at_its_line(tmp_path, capsys, deep, end):
    rows = _rows(tmp_path)
    rc, err, src, out = _export(tmp_path, capsys, (rows[0] + "\n" + deep + end).encode())
    assert rc == 2
    assert err == [f"specmon export: {src}:2: not a JSON record line (nested too deeply)"]
    assert not out.exists()


# --- 5. snapshot loading: wrong types and values, one line naming the field ----------------------

def _snapshot_doc(tmp_path: Path, capsys) -> dict:
    rc, err, _, out = _export(tmp_path, capsys, ("\n".join(_rows(tmp_path)) + "\n").encode(),
                              "good.jsonl")
    assert rc == 0, err
    return json.loads(out.read_text())


def _server(**kw):
    return lambda d: d["servers"][0].update(kw)


@pytest.mark.parametrize("damage, what", [
    (_server(name=5), ": servers[0]: 'name' should be a string, got an integer (5)"),
    (_server(log_limit=-5), ": servers[0]: 'log_limit' should be a non-negative integer, got -5"),
    (_server(log_limit="5"), ": servers[0]: 'log_limit' should be an integer, got a string ('5')"),
    (_server(log_limit=True), ": servers[0]: 'log_limit' should be an integer, got true"),
    (_server(line_times="s"), ": servers[0]: 'line_times' should be 'exact' (a record file's) or "
                              "'decode lines exact; other lines take the time of the nearest "
                              "earlier decode line' (a live session's), got a string ('s')"),
    (_server(line_times=[1, 2]), ": servers[0]: 'line_times' should be a string, got a list of "
                                 "2 items"),
    (_server(args=[1]), ": servers[0]: 'args' should be an object, got a list of 1 item"),
    (lambda d: d.update(host={"a": 1}), ": 'host' should be a string, got an object"),
    (lambda d: d.update(created_at="now"), ": 'created_at' should be a number, got a string "
                                           "('now')"),
    (lambda d: d["servers"][0]["lines"][1][2].update(gen_throughput="fast"),
     ": servers[0].lines[1]: field 'gen_throughput' should be a number, got a string ('fast')"),
    (lambda d: d["servers"][0]["lines"][0][2].update(timestamp=7),
     ": servers[0].lines[0]: 'timestamp' should be a string, got an integer (7)"),
], ids=["name-int", "log_limit-negative", "log_limit-str", "log_limit-bool", "line_times-word",
        "line_times-list", "args-list", "host-object", "created_at-str", "record-field",
        "event-timestamp"])
def test_a_snapshot_field_of_the_wrong_type_or_value_is_one_clear_line(tmp_path, capsys,
                                                                       damage, what):
    doc = _snapshot_doc(tmp_path, capsys)
    damage(doc)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    out = tmp_path / "r.md"
    assert main(["report", str(bad), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"specmon report: {bad}{what}"], err
    assert not out.exists()
    # replay loads the snapshot before anything else (here --speed 0 would be refused next, so a
    # snapshot that loads gives that message instead, and no UI starts either way)
    assert main(["replay", str(bad), "--speed", "0"]) == 2
    assert capsys.readouterr().err.splitlines() == [f"specmon replay: {bad}{what}"]


@pytest.mark.parametrize("version", ["\u00b2", "\u0661", "9" * 5000, "1 ", "+1", "0x1", ""],
                         ids=["superscript-two", "arabic-indic-one", "5000-digits", "space", "plus",
                              "hex", "empty"])
def test_a_schema_version_that_is_not_plain_digits_is_one_line(tmp_path, capsys, version):
    """The version after "specmon.snapshot/" is ASCII digits, a few of them: '²' passed
    str.isdigit() and int() raised ValueError (a traceback), 5000 nines raised Python's
    int-digits limit, and an Arabic-Indic '١' was read as version 1."""
    doc = _snapshot_doc(tmp_path, capsys)
    doc["schema"] = "specmon.snapshot/" + version
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    out = tmp_path / "r.md"
    assert main(["report", str(bad), "-o", str(out)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"specmon report: {bad}: unreadable schema version 'specmon.snapshot/")
    assert len(line) < len(str(bad)) + 120 and not out.exists()
    doc["schema"] = "specmon.snapshot/0001"  # digits, leading zeros: version 1, read
    bad.write_text(json.dumps(doc))
    assert read_snapshot(bad).servers[0].name == "b"


def _deep(levels: int) -> list:
    return json.loads("[" * levels + "]" * levels)


_DEEP = _deep(600)  # past any recursive walker (redaction, the writers), within json's parser


@pytest.mark.parametrize("damage, what", [
    (lambda d, x: d.update(source={"kind": "record", "x": x}), ": source.x[0][0][0]…"),
    (lambda d, x: d["gpu"].update(downsampling={"rule": x}), ": gpu.downsampling.rule[0][0][0]…"),
    (lambda d, x: d.update(redaction={"enabled": True, "x": x}), ": redaction.x[0][0][0]…"),
    (lambda d, x: d.update(baselines=[{"server": "b", "stats": x}]), ": baselines[0].stats[0][0]…"),
    (lambda d, x: d.update(benchmarks=[{"server": "b", "notes": x}]),
     ": benchmarks[0].notes[0][0]…"),
    (lambda d, x: d.update(alerts=[{"t": T0, "server": "b", "cause": x}]),
     ": alerts[0].cause[0][0][0]…"),
    (lambda d, x: d["servers"][0].update(args={"tp_size": x}), ": servers[0].args.tp_size[0][0][0]…"),
    (lambda d, x: d["servers"][0].update(fingerprint={"x": x}), ": servers[0].fingerprint.x[0][0][0]…"),
    (lambda d, x: d["servers"][0].update(probes=[[T0, True, {"env": {"launcher": x}}]]),
     ": servers[0]: probes[0].env.launcher[0][0]…"),
    (lambda d, x: d["servers"][0]["lines"][0][2]["data"].update(model_path=x),
     ": servers[0].lines[0]: data.model_path[0][0][0]…"),
    (lambda d, x: d["servers"][0]["lines"][1][2].update(extra={"x": x}),
     ": servers[0].lines[1]: extra.x[0][0][0]…"),
], ids=["source", "gpu-downsampling", "redaction", "baselines", "benchmarks", "alerts", "args",
        "fingerprint", "probe", "event-data", "record-extra"])
def test_a_snapshot_value_nested_too_deep_is_one_line_naming_it(tmp_path, capsys, damage, what):
    """Every free-form field of a snapshot (kept as read: source, the downsampling rule, a
    probe's env, a record's extra...) nests at most jsonout.MAX_DEPTH (64) levels, the baseline
    store's bound: 600 levels was a RecursionError traceback in redaction (`report --format
    json`) or the writers, or passed unchecked. Past it: one line naming the field's path."""
    from specmon.jsonout import MAX_DEPTH

    doc = _snapshot_doc(tmp_path, capsys)
    damage(doc, _DEEP)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    why = f"{what}: nested more than {MAX_DEPTH} levels deep (specmon.jsonout.MAX_DEPTH)"
    for fmt in ("json", "md"):
        out = tmp_path / f"r.{fmt}"
        assert main(["report", str(bad), "--format", fmt, "-o", str(out)]) == 2
        assert capsys.readouterr().err.splitlines() == [f"specmon report: {bad}{why}"]
        assert not out.exists()
    assert main(["replay", str(bad), "--speed", "0"]) == 2
    assert capsys.readouterr().err.splitlines() == [f"specmon replay: {bad}{why}"]


def test_a_snapshot_value_at_the_depth_bound_is_read_and_written_again(tmp_path, capsys):
    """64 levels (a field's own object counted) is read, reported and written again; 65 is
    refused, naming where it goes past."""
    doc = _snapshot_doc(tmp_path, capsys)
    path = tmp_path / "s.json"
    doc["source"] = {"kind": "record", "x": {"y": _deep(62)}}  # source 1 + x 1 + 62
    path.write_text(json.dumps(doc))
    snap = read_snapshot(path)
    assert main(["report", str(path), "--format", "json", "-o", str(tmp_path / "r.json")]) == 0
    assert snapmod.decode(snapmod.encode(snap)).source == snap.source
    doc["source"]["x"]["y"] = _deep(63)
    path.write_text(json.dumps(doc))
    with pytest.raises(snapmod.SnapshotError, match=re.escape(": source.x.y[0][0]…: nested more "
                                                              "than 64 levels deep")):
        read_snapshot(path)


def test_a_record_probe_nested_too_deep_is_one_line_at_its_row(tmp_path, capsys):
    """A probe row's env is kept as read (session.runs.clean_probe passes it through): 600
    levels was a RecursionError traceback in `export` (snapshot._jsonable). Past
    jsonout.MAX_DEPTH it is one line naming the row and the field; within it, the probe is
    exported and the report reads what export wrote."""
    rows = _rows(tmp_path)

    def probe(env: object) -> str:
        return json.dumps({"probe": {"env": env}, "running": True, "server": "b",
                           "received_at": T0 + 0.5})

    rc, err, src, out = _export(tmp_path, capsys,
                                ("\n".join([*rows, probe({"a": _DEEP})]) + "\n").encode())
    assert rc == 2 and err == [f"specmon export: {src}:6: probe.env.a[0][0]…: nested more than "
                               "64 levels deep (specmon.jsonout.MAX_DEPTH)"]
    assert not out.exists()
    env = {"a": _deep(62)}
    rc, err, _, out = _export(tmp_path, capsys,
                              ("\n".join([*rows, probe(env)]) + "\n").encode(), "ok.jsonl")
    assert rc == 0, err
    assert read_snapshot(out).servers[0].probes[0][2]["env"] == env  # probe 1 + env 1 + 62
    assert main(["report", str(out), "--format", "json", "-o", str(tmp_path / "r.json")]) == 0
    from specmon.session.runs import clean_probe  # (any other caller: the env is left out)

    assert clean_probe({"version": "0.5.9", "env": {"a": _DEEP}}) == {"version": "0.5.9"}


def test_gpu_values_out_of_range_are_na_and_what_export_writes_report_reads(tmp_path, capsys):
    """GPU samples are read by one converter (GpuSample.from_agent_json): a value out of range
    is None (N/A) there, in a record file as in a snapshot. Export kept a clock of 10**30 and
    a ts of 1e18 that report then refused ('gpu.samples[0]: clock_sm out of range'), and failed
    on a 5000-digit pstate (Python's set_int_max_str_digits advice) and a power of 10**400
    ('int too large to convert to float'), naming no field."""
    rows = _rows(tmp_path)
    wild = {"index": 0, "name": "NVIDIA H200", "clock_sm": 10 ** 30, "max_clock_sm": 1980,
            "power_w": 1e300, "power_limit_w": 10 ** 400, "pstate": "P" + "9" * 5000,
            "clock_mem": "9" * 5000, "temp_gpu": 61, "ts": 1e18,
            "processes": [{"pid": 10 ** 30}, {"pid": 7, "used_mib": 10 ** 400}]}
    gpu_row = json.dumps({"gpus": [wild], "received_at": T0 + 2})
    rc, err, src, out = _export(tmp_path, capsys, ("\n".join([*rows, gpu_row]) + "\n").encode())
    assert rc == 0, err
    [g] = read_snapshot(out).gpu_samples
    assert (g.clock_sm, g.power_w, g.power_limit_w, g.pstate, g.clock_mem) == (None,) * 5
    assert (g.max_clock_sm, g.temp_gpu, g.ts) == (1980, 61.0, T0 + 2)  # ts: the row's time
    assert g.processes == (GpuProcess(7, None),)
    for fmt in ("json", "md"):
        assert main(["report", str(out), "--format", fmt, "-o", str(tmp_path / f"r.{fmt}")]) == 0
    assert "Traceback" not in capsys.readouterr().err
    doc = json.loads(out.read_text())  # a snapshot's samples: the same reader, the same N/A
    doc["gpu"]["samples"][0].update(clock_sm=10 ** 30, power_w=10 ** 80, ts=1e18)
    out.write_text(json.dumps(doc))
    [g] = read_snapshot(out).gpu_samples
    assert (g.clock_sm, g.power_w, g.ts, g.max_clock_sm) == (None, None, None, 1980)
    assert main(["report", str(out), "--format", "json", "-o", str(tmp_path / "r.json")]) == 0
    assert "Traceback" not in capsys.readouterr().err
    rc, err, src, _ = _export(tmp_path, capsys, ("\n".join([*rows, json.dumps(
        {"gpus": [wild, 5], "received_at": T0 + 2})]) + "\n").encode(), "bad.jsonl")
    assert rc == 2 and err == [f"specmon export: {src}:6: gpus[1]: GPU record must be a JSON "
                               "object, got int"]


def test_good_snapshot_fields_still_load(tmp_path, capsys):
    doc = _snapshot_doc(tmp_path, capsys)
    assert doc["servers"][0]["line_times"] == "exact"
    session_rule = "decode lines exact; other lines take the time of the nearest earlier decode line"
    for log_limit, line_times in ((0, "exact"), (5000, session_rule)):
        doc["servers"][0].update(log_limit=log_limit, line_times=line_times)
        p = tmp_path / "ok.json"
        p.write_text(json.dumps(doc))
        s = read_snapshot(p).servers[0]
        assert (s.log_limit, s.line_times) == (log_limit, line_times)


def test_event_rows_count_to_a_record_files_row_limit(tmp_path, monkeypatch):
    """A record file of nothing but event rows (pids, probe, exit) is bounded like one of
    lines: past the row limit, one line naming the file, not memory without end; a bad
    event row is one line naming where."""
    monkeypatch.setattr(snapmod, "MAX_ROWS", 3)
    rec = tmp_path / "events.jsonl"
    rec.write_text("".join(json.dumps({"pids": [100 + i], "server": "s", "received_at": T0 + i})
                           + "\n" for i in range(5)))
    with pytest.raises(snapmod.SnapshotError, match=r"more than 3 record lines") as ei:
        snapmod.snapshot_from_record(rec)
    assert str(rec) in str(ei.value) and "\n" not in str(ei.value)
    monkeypatch.setattr(snapmod, "MAX_ROWS", 2_000_000)
    assert snapmod.snapshot_from_record(rec).servers[0].pids == [104]  # the newest
    for bad, why in (({"exit": "x"}, "'exit' is not an integer or null"),
                     ({"pids": 7}, "'pids' is not a list"),
                     ({"probe": {}, "running": "yes"}, "a probe row needs")):
        rec.write_text(json.dumps({**bad, "server": "s", "received_at": T0}) + "\n")
        with pytest.raises(snapmod.SnapshotError, match=re.escape(why)) as ei:
            snapmod.snapshot_from_record(rec)
        assert f"{rec}:1" in str(ei.value)
