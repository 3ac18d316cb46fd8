"""Issue 22, no wedge and no data loss: long lines, signals, symlinks, torn rows, disk full.

Real subprocesses of `specmon record local` on real files (the local host runs the same agent
and session model as SSH); the SSH line-rate test is in test_record_rate.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kit.wait import wait_until

from specmon.export.snapshot import atomic_write_bytes

DECODE = ("[2025-06-01 12:00:{s:02d} TP0] Decode batch, #running-req: 1, #token: 100, token "
          "usage: 0.01, accept len: 2.50, gen throughput (token/s): 88.80, #queue-req: 0, ")


def _env(tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, SPECMON_DATA_DIR=str(tmp_path / "data"))


def _record(tmp_path: Path, log: Path, out: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "specmon", "record", "local", "--log", f"srv={log}",
            "--out", str(out), *args]


def _rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def _decode_log(path: Path, n: int) -> Path:
    path.write_text("".join(DECODE.format(s=i % 60) + "\n" for i in range(n)))
    return path


# --- symlinks: temp files and --out ------------------------------------------------------

def test_temp_file_never_follows_a_planted_symlink(tmp_path):
    """Another user plants `.NAME.tmp-<our pid>` -> a file of ours: the write must not go
    through it (it did: the name for our own pid was kept and opened with O_TRUNC)."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    target = tmp_path / "out.json"
    planted = tmp_path / f".out.json.tmp-{os.getpid()}"
    planted.symlink_to(victim)
    atomic_write_bytes(target, b'{"ok": true}\n')
    assert victim.read_text() == "precious\n"
    assert target.read_bytes() == b'{"ok": true}\n' and not target.is_symlink()
    assert planted.is_symlink()  # not ours: left alone
    assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name] == [planted.name]


def test_record_out_refuses_a_symlink_unless_force(tmp_path):
    log = _decode_log(tmp_path / "s.log", 3)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "rec.jsonl"
    out.symlink_to(victim)
    res = subprocess.run(_record(tmp_path, log, out, "--duration", "1"), capture_output=True,
                         text=True, timeout=120, env=_env(tmp_path))
    assert res.returncode == 2, res.stderr
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and "symbolic link" in err[0] and "--force" in err[0], res.stderr
    assert victim.read_text() == "precious\n"
    res = subprocess.run(_record(tmp_path, log, out, "--duration", "1", "--force"),
                         capture_output=True, text=True, timeout=120, env=_env(tmp_path))
    assert res.returncode == 0, res.stderr
    assert len(_rows(victim)) == 3  # written where the user said, knowingly


# --- --append onto a torn row, disk full ---------------------------------------------------

def test_append_cuts_a_torn_last_row_first_and_says_so(tmp_path):
    log = _decode_log(tmp_path / "s.log", 4)
    out = tmp_path / "rec.jsonl"
    whole = json.dumps({"server": "srv", "path": str(log), "offset": 0, "line": "x",
                        "received_at": 1.0, "record": None})
    torn = whole[:37]
    out.write_text(whole + "\n" + torn)
    res = subprocess.run(_record(tmp_path, log, out, "--append", "--duration", "1"),
                         capture_output=True, text=True, timeout=120, env=_env(tmp_path))
    assert res.returncode == 0, res.stderr
    assert f"torn row ({len(torn)} bytes" in res.stderr
    rows = _rows(out)  # every row whole: export reads the file again
    assert len(rows) == 1 + 4 and rows[0]["line"] == "x"
    assert [r["offset"] for r in rows[1:]] == [i * (len(DECODE.format(s=0)) + 1)
                                               for i in range(4)]


def test_append_refuses_a_gzip_or_foreign_file_and_a_gz_name(tmp_path):
    """`--append` onto a gzip record file took its compressed bytes for a torn row and cut
    the file to 0 bytes (40 rows lost); `--out x.jsonl.gz` wrote plain text under a gz name."""
    import gzip

    log = _decode_log(tmp_path / "s.log", 2)
    rows = "".join(json.dumps({"server": "srv", "path": "/l", "offset": i, "line": "x",
                               "received_at": 1.0, "record": None}) + "\n" for i in range(40))
    for name, data, said in (("rec.jsonl", gzip.compress(rows.encode()), "gzip-compressed"),
                             ("notes.txt", b"my notes, no newline at the end", "no specmon")):
        out = tmp_path / name
        out.write_bytes(data)
        res = subprocess.run(_record(tmp_path, log, out, "--append", "--duration", "1"),
                             capture_output=True, text=True, timeout=120, env=_env(tmp_path))
        assert res.returncode != 0 and said in res.stderr, res.stderr
        assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
        assert out.read_bytes() == data  # untouched
    gz = tmp_path / "new.jsonl.gz"
    res = subprocess.run(_record(tmp_path, log, gz, "--duration", "1"),
                         capture_output=True, text=True, timeout=120, env=_env(tmp_path))
    assert res.returncode != 0 and "not gzip" in res.stderr and not gz.exists()


@contextlib.contextmanager
def small_fs(path: Path, size: str = "256k", *, fill: bool = False) -> Iterator[Path]:
    """A real, small file system (tmpfs) at `path`; `fill`: then filled up to the last byte.
    Skipped where the test cannot mount (not root)."""
    path.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill_up(folder: Path) -> None:
    """Fill the file system of `folder` to the last byte."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 16, 4096, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)


def test_record_on_a_full_disk_leaves_no_torn_row_and_says_one_line(tmp_path):
    log = _decode_log(tmp_path / "s.log", 3000)
    with small_fs(tmp_path / "fs", "64k") as fs:
        out = fs / "rec.jsonl"  # a row is ~600 bytes: the disk fills inside a row
        res = subprocess.run(_record(tmp_path, log, out, "--whole-file", "--duration", "20"),
                             capture_output=True, text=True, timeout=120, env=_env(tmp_path))
        assert res.returncode == 2, res.stderr
        err = [ln for ln in res.stderr.splitlines() if "cannot write" in ln]
        assert len(err) == 1 and str(out) in err[0] and "last whole row" in err[0], res.stderr
        assert "No space left" in err[0] and "Traceback" not in res.stderr
        data = out.read_bytes()
        assert len(data) > 0 and data.endswith(b"\n")
        rows = _rows(out)
        assert [r["offset"] for r in rows] == [i * (len(DECODE.format(s=0)) + 1)
                                               for i in range(len(rows))]


# --- long lines and signals ----------------------------------------------------------------

MIB = 1 << 20


def _megabyte_log(path: Path, n: int) -> Path:
    """n 1 MiB lines of name characters (the redaction regex backtracked on them), each
    followed by a decode line."""
    with open(path, "w") as f:
        for i in range(n):
            f.write(("a_key" * (MIB // 5 + 1))[:MIB - 1] + "\n")
            f.write(DECODE.format(s=i % 60) + "\n")
    return path


def _wait_rows(out: Path, n: int, proc: subprocess.Popen, limit: float = 120) -> None:
    deadline = time.monotonic() + limit
    while not (out.exists() and out.read_bytes().count(b"\n") >= n):
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else proc.returncode
        assert time.monotonic() < deadline, f"fewer than {n} rows in {limit}s"
        time.sleep(0.05)


@contextlib.contextmanager
def _reaped(proc: subprocess.Popen) -> Iterator[None]:
    """A failing test still ends the process it started (and only that one)."""
    try:
        yield
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _stop_within(proc: subprocess.Popen, sig: int, limit: float) -> float:
    """Send `sig`; the seconds until the process ended (a hang detector: main took 39 min)."""
    t = time.monotonic()
    proc.send_signal(sig)
    try:
        proc.wait(limit)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"still running {limit}s after signal {sig}")
    return time.monotonic() - t


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_record_of_megabyte_lines_stops_on_a_signal(tmp_path, sig):
    log = _megabyte_log(tmp_path / "s.log", 6)
    out = tmp_path / "rec.jsonl"
    proc = subprocess.Popen(_record(tmp_path, log, out, "--whole-file"), env=_env(tmp_path),
                            stderr=subprocess.PIPE, text=True)
    with _reaped(proc):
        _wait_rows(out, 2, proc)
        _stop_within(proc, sig, 10)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    rows = _rows(out)
    assert rows and all(r["line"].startswith("a_key") or r["record"] for r in rows)
    long = [r for r in rows if r["line"].startswith("a_key")]
    assert long and all(len(r["line"]) == MIB - 1 for r in long)  # whole, not redacted


def test_record_of_megabyte_lines_honours_duration(tmp_path):
    log = _megabyte_log(tmp_path / "s.log", 6)
    out = tmp_path / "rec.jsonl"
    t = time.monotonic()
    res = subprocess.run(_record(tmp_path, log, out, "--whole-file", "--duration", "3"),
                         capture_output=True, text=True, timeout=120, env=_env(tmp_path))
    took = time.monotonic() - t
    assert res.returncode == 0, res.stderr
    assert len(_rows(out)) == 12  # every line of the file, each once
    assert took < 3 + 30, took  # a hang detector only (main: 39 minutes at 100 % CPU)


def _record_file_of_megabyte_lines(path: Path, n: int) -> Path:
    with open(path, "w") as f:
        for i in range(n):
            for off, text in ((2 * i * MIB, ("a_key" * (MIB // 5 + 1))[:MIB - 1]),
                              ((2 * i + 1) * MIB, DECODE.format(s=i % 60))):
                f.write(json.dumps({"server": "srv", "path": "/s.log", "offset": off,
                                    "line": text, "received_at": 1.7e9 + i,
                                    "record": None}) + "\n")
    return path


@pytest.mark.parametrize("command", ["export", "parse"])
def test_offline_commands_on_megabyte_lines_stop_on_sigint_and_sigterm(tmp_path, command):
    """export redacts every line (it wedged on the first), parse reads a backlog: both end
    soon after SIGINT (exit 130) and SIGTERM, leaving no temp file behind."""
    if command == "export":
        src = _record_file_of_megabyte_lines(tmp_path / "rec.jsonl", 160)
        argv = ["export", str(src), "-o", str(tmp_path / "snap.json")]
    else:  # megabyte lines, then a backlog of decode lines for parse's forked workers
        src = _megabyte_log(tmp_path / "s.log", 100)
        with open(src, "a") as f:
            block = "".join(DECODE.format(s=s) + "\n" for s in range(60))
            for _ in range(20_000):
                f.write(block)
        argv = ["parse", "--json", str(src)]
    for sig in (signal.SIGINT, signal.SIGTERM):
        proc = subprocess.Popen([sys.executable, "-m", "specmon", *argv], env=_env(tmp_path),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        with _reaped(proc):
            time.sleep(1.5)  # importing, then reading: busy when the signal comes
            assert proc.poll() is None, "finished before the signal: make the input larger"
            workers = _children(proc.pid)
            _stop_within(proc, sig, 10)
        # export reads, builds and encodes under the signals' default action (it writes
        # nothing then: specmon/interrupt.py), so the signal itself ends it; parse exits 130/143
        assert proc.returncode == (-sig if command == "export" else 128 + sig), \
            (sig, proc.returncode, proc.stderr.read())
        assert "Traceback" not in (proc.stderr.read() if proc.stderr else "")
        assert not [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name]
        # no worker it forked outlives it
        wait_until(lambda w=workers: not [c for c in w if Path(f"/proc/{c}").exists()], 10,
                   f"its workers {workers} to be gone")
        if command == "parse" and len(os.sched_getaffinity(0)) > 1:
            assert workers  # (what is checked: parse --json had forked its workers)


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


# --- terminal injection from a log, CR-only line endings -----------------------------------

EVIL = "\x1b]52;c;ZXZpbA==\x07\x1b]0;pwned\x07\x1b[2J\x9b31m\u202eevil"
RAW = ("\x1b", "\x07", "\x9b", "\u202e")


def _evil_log(path: Path) -> Path:
    from kit.snapshots import decode_line

    args = (f"[2026-02-26 19:16:40] server_args=ServerArgs(model_path='Qwen/{EVIL}', "
            "tp_size=1, port=30000)")
    path.write_text("\n".join([args] + [decode_line(80.0 + (i % 7) * 0.5)
                                        for i in range(200)]) + "\n")
    return path


def test_parse_runs_and_baseline_show_print_no_escape_sequence(tmp_path, capsys, monkeypatch):
    """Issue 22: `parse --runs` and `baseline show` printed OSC 52 (clipboard write), OSC 0,
    CSI 2J, C1 and U+202E from server_args / the stored fingerprint raw."""
    from specmon.cli import main

    monkeypatch.setenv("SPECMON_DATA_DIR", str(tmp_path / "data"))
    log = _evil_log(tmp_path / f"s{EVIL}.log")
    outputs = []
    for argv in (["parse", "--runs", str(log)],
                 ["baseline", "record", "b1", "--log", str(log), "--note", EVIL],
                 ["baseline", "show", "b1"], ["baseline", "list"],
                 ["parse", str(tmp_path / f"missing{EVIL}.log")]):
        main(argv)
        cap = capsys.readouterr()
        outputs.append((argv, cap.out + cap.err))
    for argv, text in outputs:
        assert not any(c in text for c in RAW), (argv, text)
    shown = dict((a[1] if a[0] == "baseline" else " ".join(a[:2]), t) for a, t in outputs)
    assert "\\x1b]52;c;" in shown["parse --runs"] and "\\u202e" in shown["parse --runs"]
    assert "\\x1b]0;pwned" in shown["show"]  # shown as text, not sent to the terminal


def test_cr_only_line_endings_are_line_breaks_offline_and_live(tmp_path, capsys):
    """Issue 22: 40 decode lines written with CR-only endings were read as one line."""
    from specmon.cli import main

    lines = [DECODE.format(s=i) for i in range(40)]
    log = tmp_path / "cr.log"
    log.write_bytes(("\r".join(lines) + "\r").encode() + b"tail line\r\n")
    assert main(["parse", "--json", str(log)]) == 0
    recs = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [r["timestamp"][-2:] for r in recs if r["kind"] == "decode"] == \
        [f"{i:02d}" for i in range(40)]
    assert main(["parse", str(log)]) == 0
    assert "n 40" in capsys.readouterr().out.replace(",", "")
    out = tmp_path / "rec.jsonl"  # live: the tail splits them too, with exact offsets
    res = subprocess.run(_record(tmp_path, log, out, "--whole-file", "--duration", "2"),
                         capture_output=True, text=True, timeout=120, env=_env(tmp_path))
    assert res.returncode == 0, res.stderr
    rows = _rows(out)
    step = len(lines[0]) + 1
    assert [r["offset"] for r in rows] == [i * step for i in range(41)]
    assert [r["line"] for r in rows] == lines + ["tail line"]  # (CRLF: its CR ends it)
    assert all(r["record"]["kind"] == "decode" for r in rows[:40])


# --- the baseline store never stops monitoring ----------------------------------------------

def _good_store(data: Path) -> Path:
    from specmon.session.baselines import DB_NAME, BaselineStore

    data.mkdir(parents=True, exist_ok=True)
    BaselineStore(data / DB_NAME)
    return data / DB_NAME


def _break_store(kind: str, data: Path) -> Path:
    from specmon.session.baselines import DB_NAME

    db = data / DB_NAME
    data.mkdir(parents=True, exist_ok=True)
    if kind == "garbage":
        db.write_bytes(b"this is not sqlite\x00" * 300)
    elif kind == "directory":
        db.mkdir()
    elif kind == "truncated":
        import sqlite3

        _good_store(data)
        con = sqlite3.connect(db)
        con.execute("PRAGMA journal_mode=DELETE")
        con.executemany("INSERT INTO baselines (name, host, server, created_at, schema, data) "
                        "VALUES (?,?,?,?,?,?)",
                        [(f"b{i}", "h", "s", 1.0, 1, "x" * 3000) for i in range(50)])
        con.commit()
        con.close()
        with open(db, "r+b") as f:
            f.truncate(db.stat().st_size // 3)
    return db


@pytest.mark.parametrize("kind", ["garbage", "directory", "truncated"])
def test_a_broken_baseline_store_is_one_line_and_monitoring_goes_on(tmp_path, kind):
    db = _break_store(kind, tmp_path / "data")
    env = _env(tmp_path)
    for argv in (["baseline", "list"], ["baseline", "show", "x"],
                 ["baseline", "record", "b", "--log", str(_decode_log(tmp_path / "b.log", 50))]):
        res = subprocess.run([sys.executable, "-m", "specmon", *argv], capture_output=True,
                             text=True, timeout=120, env=env)
        assert res.returncode == 2 and "Traceback" not in res.stderr, (argv, res.stderr)
        err = res.stderr.strip().splitlines()
        assert len(err) == 1 and str(db) in err[0], (argv, res.stderr)
        assert ("remove or rename" if kind == "directory" else "move it aside") in err[0]
    log = _decode_log(tmp_path / "s.log", 5)
    out = tmp_path / "rec.jsonl"
    res = subprocess.run(_record(tmp_path, log, out, "--duration", "1"), capture_output=True,
                         text=True, timeout=120, env=env)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    said = [ln for ln in res.stderr.splitlines() if str(db) in ln]
    assert len(said) == 1 and "drift watching is off" in said[0], res.stderr
    assert len(_rows(out)) == 5


def test_a_fifo_as_the_baseline_store_is_one_line_not_a_wait(tmp_path):
    """SQLite's open() of a FIFO at baselines.sqlite3 (or its -wal) waited for a writer for
    ever: `baseline list` and `record` hung, deaf to SIGINT and SIGTERM."""
    env = _env(tmp_path)
    data = Path(env["SPECMON_DATA_DIR"])
    data.mkdir(parents=True, exist_ok=True)
    for name in ("baselines.sqlite3", "baselines.sqlite3-wal"):
        for p in data.iterdir():
            p.unlink()
        if name.endswith("-wal"):
            _good_store(data)
            for p in data.glob("*-wal"):
                p.unlink()
        os.mkfifo(data / name)
        res = subprocess.run([sys.executable, "-m", "specmon", "baseline", "list"],
                             capture_output=True, text=True, timeout=60, env=env)
        err = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(err) == 1 and "a FIFO" in err[0], res.stderr
        assert str(data / name) in err[0] and "remove it" in err[0]
        log = _decode_log(tmp_path / "s.log", 3)
        out = tmp_path / "rec.jsonl"
        res = subprocess.run(_record(tmp_path, log, out, "--duration", "1"),
                             capture_output=True, text=True, timeout=60, env=env)
        assert res.returncode == 0 and "drift watching is off" in res.stderr, res.stderr
        assert len(_rows(out)) == 3


def test_baseline_store_on_a_full_or_read_only_disk_is_one_line(tmp_path):
    from kit.snapshots import decode_line

    log = tmp_path / "b.log"
    log.write_text("\n".join(decode_line(80.0 + (i % 7) * 0.5) for i in range(300)) + "\n")
    env = dict(os.environ, SPECMON_DATA_DIR=str(tmp_path / "fs" / "data"))

    def cli(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "specmon", *argv], capture_output=True,
                              text=True, timeout=120, env=env)

    with small_fs(tmp_path / "fs", "1m") as fs:
        db = _good_store(fs / "data")
        fill_up(fs)
        res = cli("baseline", "record", "b", "--log", str(log))
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        err = res.stderr.strip().splitlines()
        assert len(err) == 1 and str(db) in err[0] and "free space" in err[0], res.stderr
        for shm in (fs / "data").glob("*-shm"):  # (a reader sizes the WAL index afresh)
            shm.unlink()
        fill_up(fs)
        # reading writes nothing: a full disk stopped `baseline list` and `check` ("disk
        # full, nothing was saved")
        listed = cli("baseline", "list")
        assert listed.returncode == 0 and listed.stdout.strip() == "no baselines recorded", \
            listed
        (fs / "filler").unlink()
        assert cli("baseline", "list").stdout.strip() == "no baselines recorded"
        assert cli("baseline", "record", "b", "--log", str(log)).returncode == 0
        subprocess.run(["mount", "-o", "remount,ro", str(fs)], check=True)
        res = cli("baseline", "record", "c", "--log", str(log))
        err = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(err) == 1 and str(db) in err[0], res.stderr
        assert "SPECMON_DATA_DIR" in err[0] and "Traceback" not in res.stderr
        listed = cli("baseline", "list")  # a read-only store is still read
        assert listed.returncode == 0 and listed.stdout.split()[0] == "b", listed
        out = tmp_path / "rec.jsonl"  # record goes on and reads the store, saying nothing of it
        res = subprocess.run(_record(tmp_path, _decode_log(tmp_path / "s.log", 5), out,
                                     "--duration", "1"),
                             capture_output=True, text=True, timeout=120, env=env)
        assert res.returncode == 0 and len(_rows(out)) == 5, res.stderr
        assert str(db) not in res.stderr and "drift watching is off" not in res.stderr, res.stderr


# --- log time that breaks starts a time segment ----------------------------------------------

def _stamped(t: float, gt: float) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
    return (f"[{stamp}] Decode batch, #running-req: 1, #token: 100, token usage: 0.01, "
            f"gen throughput (token/s): {gt:.2f}, #queue-req: 0, ")


def _stepped_log(path: Path, step_s: float) -> Path:
    """Issue 22's case: 60 lines at 88 tok/s, the clock steps by `step_s`, 60 at 60 tok/s."""
    t0 = 1_767_000_000.0
    lines = [_stamped(t0 + i, 88.0) for i in range(60)]
    lines += [_stamped(t0 + 60 + step_s + i, 60.0) for i in range(60)]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("step_s", [-3600.0, -30.0, 3600.0])
def test_log_time_that_breaks_starts_a_segment_no_window_spans(tmp_path, capsys, step_s):
    """The clock stepped back 1 h blended both sides into a median of 74.1 (n 120), a number
    that was never true; now the window holds only the segment after the break, and the
    panel's text and `parse --runs` say where log time broke."""
    from specmon.cli import main
    from specmon.session.runs import read_runs
    from specmon.session.window import current_stats, group_rows, run_stats_text

    log = _stepped_log(tmp_path / "s.log", step_s)
    state = read_runs(log.read_bytes().splitlines())
    assert len(state.runs) == 1
    w = current_stats(state, None, 60.0)
    assert w is not None and (w.median, w.n) == (60.0, 60)
    assert [r.stats.n for r in group_rows(state, 60.0) if r.stats] == [60]
    run = state.runs[-1]
    assert [(sg.index, sg.step_s) for sg in run.segments] == [(1, step_s + 1)]
    word = "went back" if step_s < 0 else "jumped ahead"
    assert f"log time {word} {abs(step_s + 1):.0f} s" in run_stats_text(state, w)
    assert main(["parse", "--runs", str(log)]) == 0
    out = capsys.readouterr().out
    assert "time segment 2 from" in out and word in out, out
    assert main(["parse", "--runs", "--json", str(log)]) == 0
    row = json.loads(capsys.readouterr().out)
    assert [s["step_s"] for s in row["time_segments"]] == [step_s + 1]


def test_steady_log_time_has_one_segment(tmp_path):
    from specmon.session.runs import read_runs
    from specmon.session.window import current_stats

    t0 = 1_767_000_000.0
    log = tmp_path / "s.log"
    log.write_text("\n".join(_stamped(t0 + i * 0.5, 88.0 + i % 3) for i in range(200)) + "\n")
    state = read_runs(log.read_bytes().splitlines())
    assert state.runs[-1].segments == [] and state.runs[-1].segment_text() is None
    w = current_stats(state, None, 60.0)
    assert w is not None and w.n == 122  # 61 printed seconds (both ends in), two lines each


def test_a_long_line_is_cut_live_exactly_as_offline(tmp_path):
    """Lines are capped live as offline: the first MAX_LINE bytes and the same marker."""
    from specmon.analysis.logfile import MAX_LINE, capped_lines

    log = tmp_path / "s.log"
    log.write_bytes(b"x" * (MAX_LINE + MAX_LINE // 2) + b"\n" + DECODE.format(s=1).encode()
                    + b"\n")
    with open(log, "rb") as f:
        offline = [ln.decode().rstrip("\n") for ln in capped_lines(f)]
    out = tmp_path / "rec.jsonl"
    res = subprocess.run(_record(tmp_path, log, out, "--whole-file", "--duration", "2"),
                         capture_output=True, text=True, timeout=120, env=_env(tmp_path))
    assert res.returncode == 0, res.stderr
    live = [r["line"] for r in _rows(out)]
    assert live == offline
    assert live[0].endswith(f"[specmon: line cut at {MAX_LINE} of {MAX_LINE * 3 // 2} bytes]")
