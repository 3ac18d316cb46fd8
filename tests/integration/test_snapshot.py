"""Snapshot files: record -> snapshot conversion, lossless records, GPU downsampling, atomic
writes under kill -9, and corrupt / future-version files refused with one clear line."""

from __future__ import annotations

import gzip
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kit.snapshots import (
    BASE_ARGS,
    BASE_LOG,
    SPEC_LOG,
    T0,
    decode_line,
    fixture_lines,
    reference_session,
    timed,
    write_record,
)

from specmon.cli import main
from specmon.export.snapshot import (
    SCHEMA,
    SnapshotError,
    decode,
    downsample_gpu,
    encode,
    export_session,
    read_snapshot,
    record_from_json,
    record_to_json,
    snapshot_from_record,
    snapshot_from_session,
    write_snapshot,
)
from specmon.parse.gpu_sample import GpuSample
from specmon.parse.sglang import BatchRecord, parse_line


def test_records_round_trip_losslessly_through_json(data_dir):
    lines = fixture_lines(data_dir, SPEC_LOG) + fixture_lines(data_dir, BASE_LOG, 300) + [BASE_ARGS]
    for line in (json.loads(x)["line"] for x in
                 (data_dir / "sglang-logs/real-sample.jsonl").read_text().splitlines()):
        lines.append(line)
    n = 0
    for line in lines:
        rec = parse_line(line)
        if rec is None:
            continue
        back = record_from_json(json.loads(json.dumps(record_to_json(rec))))
        assert back == rec, line
        assert list(back.to_json().items()) == list(rec.to_json().items()), line
        if isinstance(back, BatchRecord):  # a null stays the class's default: no key of its own
            assert None not in vars(back).values(), line
        n += 1
    assert n > 500


def test_record_file_becomes_snapshot_with_every_record_and_exact_times(data_dir, tmp_path):
    base = [BASE_ARGS] + fixture_lines(data_dir, BASE_LOG, 400)
    spec = fixture_lines(data_dir, SPEC_LOG)
    rows = timed({"base": base, "spec": spec})
    rec = write_record(tmp_path / "r.jsonl", rows)
    snap = snapshot_from_record(rec, host="gpu-box", log_lines=50)
    ref = reference_session(rows)
    assert [s.name for s in snap.servers] == ["base", "spec"]
    for s in snap.servers:
        st = ref.servers[s.name]
        assert s.counts == {"lines": st.lines_total, "decode": st.decode_total,
                            "prefill": st.prefill_total}
        decs = s.decode_entries()
        assert [(e.t, e.record) for e in decs] == [(p.received, p.rec) for p in st.decode]
        kept = [e.line for e in s.entries if e.line is not None]
        assert kept == list(st.log)[-50:]  # the last N raw lines, nothing more
    assert snap.server("base").role == "baseline" and snap.server("base").role_source == "log"
    assert snap.server("spec").role == "speculative"
    assert snap.time_range == (rows[0][2], rows[-1][2])
    assert snap.host == "gpu-box"


def test_record_conversion_drops_replayed_duplicates_and_a_torn_last_line(tmp_path):
    rows = [("b", decode_line(80.0 + i), T0 + i) for i in range(6)]
    p = write_record(tmp_path / "r.jsonl", rows)
    text = p.read_text().splitlines()
    # `record --append` re-read its history: the same (server, path, offset, line) twice
    p.write_text("\n".join(text + text[3:] + ['{"server": "b", "line": "Decode ba']))
    snap = snapshot_from_record(p)
    assert len(snap.server("b").decode_entries()) == 6
    assert snap.source["duplicate_lines_dropped"] == 3


@pytest.mark.parametrize("content, what", [
    ('{"server": "b", "line": "x", "received_at": 1}\nnot json\n{"server": "b", "line": "y", '
     '"received_at": 2}\n', ":2: not a JSON record line"),
    ('{"server": "b", "line": "x"}\n', ":1: 'received_at' missing"),
    ('{"line": "x", "received_at": 1}\n', ":1: 'server' missing"),
    ('[1, 2]\n', ":1: not a JSON object"),
])
def test_bad_record_lines_are_named_by_file_and_line(tmp_path, capsys, content, what):
    p = tmp_path / "bad.jsonl"
    p.write_text(content)
    rc = main(["export", str(p), "-o", str(tmp_path / "s.json")])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and f"{p}{what}" in err
    assert not (tmp_path / "s.json").exists()


def test_gpu_downsampling_keeps_dips_and_records_the_rule():
    samples = [GpuSample(ts=T0 + i, index=g, clock_sm=1455 if i == 777 else 1980, power_w=600.0)
               for i in range(5000) for g in (0, 1)]
    kept, rule = downsample_gpu(samples, 100)
    assert rule["applied"] is True and rule["max_per_gpu"] == 100
    assert rule["input_samples"] == 10_000 and rule["kept_samples"] == len(kept)
    assert "lowest SM clock" in rule["rule"]
    for g in (0, 1):
        mine = [s for s in kept if s.index == g]
        assert 100 <= len(mine) <= 200
        assert any(s.clock_sm == 1455 for s in mine)  # the throttling dip survives
    small, rule2 = downsample_gpu(samples[:50], 100)
    assert small == samples[:50] and rule2["applied"] is False


def test_snapshot_file_round_trip_plain_and_gzip(data_dir, tmp_path):
    rows = timed({"base": fixture_lines(data_dir, BASE_LOG, 200)})
    gpus = [(T0 + i, [{"index": 0, "clock_sm": 1980, "power_w": 120.5, "ts": T0 + i}])
            for i in range(5)]
    snap = snapshot_from_record(write_record(tmp_path / "r.jsonl", rows, gpus))
    for name in ("s.json", "s.json.gz"):
        path = write_snapshot(snap, tmp_path / name)
        raw = path.read_bytes()
        assert raw.startswith(b"\x1f\x8b") == name.endswith(".gz")
        doc = json.loads(gzip.decompress(raw) if name.endswith(".gz") else raw)
        assert doc["schema"] == SCHEMA
        back = read_snapshot(path)
        assert [(e.t, e.line, e.record) for e in back.servers[0].entries] == \
               [(e.t, e.line, e.record) for e in snap.servers[0].entries]
        assert back.gpu_samples == snap.gpu_samples and len(back.gpu_samples) == 5
        assert back.time_range == snap.time_range
    assert not list(tmp_path.glob(".*tmp*"))  # no temp files left behind


def test_session_snapshot_matches_log_lines_to_their_decode_times(data_dir):
    rows = timed({"spec": fixture_lines(data_dir, SPEC_LOG)})
    ref = reference_session(rows, host="h")
    snap = snapshot_from_session(ref)
    s = snap.servers[0]
    want = [(p.received, p.rec) for p in ref.servers["spec"].decode]
    assert [(e.t, e.record) for e in s.decode_entries()] == want
    assert [e.line for e in s.entries] == list(ref.servers["spec"].log)
    # every line its own receive time (a probe or an exit replays between the lines it came
    # between: non-decode lines took the nearest earlier decode time, start-up lines a later one)
    assert [e.t for e in s.entries] == list(ref.servers["spec"].log_times)
    assert s.line_times == "exact"


def test_export_session_names_file_by_host_and_time(tmp_path):
    ref = reference_session([("b", decode_line(88.0), T0)], host="user@gpu box:22")
    when = time.mktime((2026, 3, 4, 5, 6, 7, 0, 0, -1))
    path = export_session(ref, tmp_path / "out", now=when)
    assert path.name == "specmon-user_gpu_box_22-20260304-050607.json.gz"
    assert read_snapshot(path).servers[0].decode_entries()[0].record.gen_throughput == 88.0


WRITER = r"""
import sys
import specmon.export.snapshot as m

def torn(f, data):
    f.write(data[: len(data) // 2])
    f.flush()
    print("HALF", flush=True)
    sys.stdin.read()  # hold here until killed

m._write_chunks = torn
snap = m.read_snapshot(sys.argv[1])
snap.host = "new-host"
m.write_snapshot(snap, sys.argv[1])
"""


def test_kill_9_mid_write_leaves_the_previous_file_intact(tmp_path):
    rows = [("b", decode_line(80.0 + i % 7), T0 + i) for i in range(3000)]
    snap = snapshot_from_record(write_record(tmp_path / "r.jsonl", rows), host="old-host")
    path = write_snapshot(snap, tmp_path / "s.json")
    before = path.read_bytes()
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        got = b""
        while b"HALF" not in got and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 1.0)
            if ready:
                chunk = os.read(proc.stdout.fileno(), 100)
                if not chunk:
                    break
                got += chunk
        assert b"HALF" in got, proc.stderr.read() if proc.poll() is not None else got
        tmps = list(tmp_path.glob(".s.json.tmp-*"))
        assert len(tmps) == 1 and 0 < tmps[0].stat().st_size < len(before)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    assert path.read_bytes() == before
    assert read_snapshot(path).host == "old-host"
    snap.host = "third"
    write_snapshot(snap, path)  # a later write still works next to the stale temp file
    assert read_snapshot(path).host == "third"


def _corrupt_files(tmp_path: Path, good: bytes) -> dict[str, tuple[bytes, str]]:
    doc = json.loads(good)
    future = dict(doc, schema="specmon.snapshot/2")
    other = dict(doc, schema="someone.else/1")
    bad_row = json.loads(good)
    bad_row["servers"][0]["lines"][3][0] = "yesterday"
    bad_rec = json.loads(good)
    bad_rec["servers"][0]["lines"][2][2]["gen_throughput"] = "fast"
    gz = gzip.compress(good)
    return {
        "truncated.json": (good[: len(good) // 2], "JSON error at line 1"),
        "truncated.json.gz": (gz[: len(gz) // 2], "corrupt gzip data"),
        "empty.json": (b"", "empty file"),
        "binary.json": (bytes(range(256)) * 4, "not a specmon snapshot (not UTF-8"),
        "list.json": (b"[1, 2, 3]", "top level is not a JSON object"),
        "future.json": (json.dumps(future).encode(), "schema specmon.snapshot/2 is newer"),
        "other.json": (json.dumps(other).encode(), "not a specmon snapshot (schema is"),
        "badrow.json": (json.dumps(bad_row).encode(), "servers[0].lines[3]: time is not a number"),
        "badrec.json": (json.dumps(bad_rec).encode(),
                        "servers[0].lines[2]: field 'gen_throughput' should be a number, "
                        "got a string ('fast')"),
    }


def test_corrupt_and_future_files_are_refused_with_one_clear_line(tmp_path, capsys):
    rows = [("b", decode_line(80.0 + i), T0 + i) for i in range(5)]
    good = encode(snapshot_from_record(write_record(tmp_path / "r.jsonl", rows)))
    assert decode(good).servers[0].name == "b"
    for name, (data, what) in _corrupt_files(tmp_path, good).items():
        p = tmp_path / name
        p.write_bytes(data)
        with pytest.raises(SnapshotError) as ei:
            read_snapshot(p)
        assert what in str(ei.value) and str(p) in str(ei.value), name
        rc = main(["report", str(p), "-o", str(tmp_path / "r.md")])
        err = capsys.readouterr().err
        assert rc == 2, name
        assert err.startswith(f"specmon report: {p}") and err.count("\n") == 1, err
        assert "Traceback" not in err
    assert not (tmp_path / "r.md").exists()


def test_replay_refuses_a_future_version_without_starting_the_ui(tmp_path):
    p = tmp_path / "f.json"
    p.write_text(json.dumps({"schema": "specmon.snapshot/7", "servers": []}))
    res = subprocess.run([sys.executable, "-m", "specmon", "replay", str(p)], capture_output=True,
                         text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        f"specmon replay: {p}: schema specmon.snapshot/7 is newer than this specmon (0.1.0) "
        f"reads ({SCHEMA}); upgrade specmon to open it"]


def test_export_command_writes_snapshot_and_headless_commands_never_import_textual(tmp_path):
    rows = [("b", decode_line(80.0 + i), T0 + i) for i in range(5)]
    rec = write_record(tmp_path / "r.jsonl", rows)
    out = tmp_path / "s.json.gz"
    code = (
        "import sys, specmon.cli\n"
        f"assert specmon.cli.main(['export', {str(rec)!r}, '-o', {str(out)!r}]) == 0\n"
        f"assert specmon.cli.main(['report', {str(out)!r}]) == 0\n"
        "print('TEXTUAL', sorted(m for m in sys.modules if m.split('.')[0] == 'textual'))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "TEXTUAL []" in res.stdout
    snap = read_snapshot(out)
    assert [e.record.gen_throughput for e in snap.servers[0].decode_entries()] == \
           [80.0, 81.0, 82.0, 83.0, 84.0]
    assert isinstance(snap.servers[0].entries[0].record, BatchRecord)
    assert (tmp_path / "s.report.md").is_file() and (tmp_path / "s.report-throughput.svg").is_file()


def test_a_vllm_speculative_session_snapshot_keeps_one_run(data_dir, tmp_path):
    """A joined vLLM record (spec line, accepted tok/s) is matched back to its engine line:
    the snapshot held every decode line twice (as a bare record and as text), and its report
    showed a second, phantom run with the same 40 lines. Read back from its file, the run
    still has its non-default args (its config line is a vLLM record again)."""
    from specmon.export.report import report_model

    nd = ("(APIServer pid=100) INFO 11-20 09:59:58 [utils.py:326] non-default args: "
          "{'model': 'Qwen/Qwen3-8B', 'port': 8001, 'max_num_seqs': 64}")
    lines = [nd, *(data_dir / "vllm-logs" / "gen-eagle3-0.11.log").read_text().splitlines()]
    ref = reference_session(timed({"spec": lines}), host="h")
    snap = read_snapshot(write_snapshot(snapshot_from_session(ref), tmp_path / "s.json"))
    s = snap.servers[0]
    assert [e.line for e in s.entries] == list(ref.servers["spec"].log)  # no bare record
    assert [(e.t, e.record) for e in s.decode_entries()] == [
        (p.received, p.rec) for p in ref.servers["spec"].decode]
    runs = report_model(snap).states["spec"].runs
    assert [(r.index, r.decode_total) for r in runs] == [(1, 40)]
    assert runs[0].last is not None and runs[0].last.accept_len is not None
    assert runs[0].args["non_default_args"] == {"model": "Qwen/Qwen3-8B", "port": 8001,
                                                "max_num_seqs": 64}
    assert runs[0].args["speculative_num_steps"] == 3  # vLLM's k in SGLang's names


def test_vllm_records_round_trip_losslessly_through_json(data_dir):
    """A replay plays the stored records: a vLLM config line read back as a plain SGLang event
    lost the run's non-default args and k in SGLang's names, its process and pid."""
    from specmon.parse.vllm import join_records

    vl = data_dir / "vllm-logs"
    lines = (vl / "gen-eagle3-0.11.log").read_text().splitlines() + [
        json.loads(x)["line"] for x in (vl / "real-lines.jsonl").read_text().splitlines()]
    recs = [parse_line(ln) for ln in lines]
    join_records(recs)
    kinds = set()
    for rec, line in zip(recs, lines, strict=True):
        if rec is None:
            continue
        back = record_from_json(json.loads(json.dumps(record_to_json(rec))))
        assert type(back) is type(rec) and back == rec, line
        kinds.add((type(rec).__name__, rec.kind))
    assert {("VllmEventRecord", k) for k in ("server_args", "spec", "vllm_args")} <= kinds
