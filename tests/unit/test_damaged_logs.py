"""Damaged or odd log inputs for the commands that read a log in order (compare, check, parse
--runs): what was read before the damage is still reported and the damage is one line; CR-only
endings are line breaks; a long line costs MAX_LINE, not its length; a device is refused, a FIFO
is read once (never probed); a gzip bomb stops at its bound. Real log lines from tests/data."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import threading
import tracemalloc
from pathlib import Path

import pytest
from kit.paths import TESTS

from specmon.analysis import logfile
from specmon.cli import main
from specmon.parse.sglang import BatchRecord, parse_line

DATA = TESTS / "data" / "sglang-longlogs"


def real() -> list[bytes]:
    with gzip.open(DATA / "r9700-qwen3coder-reap25b-bs1.log.gz", "rb") as fh:
        return fh.read().splitlines(keepends=True)


def decodes(lines: list[bytes]) -> int:
    return sum(1 for ln in lines
               if isinstance(r := parse_line(ln), BatchRecord) and r.kind == "decode")


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def logs(tmp_path: Path) -> dict[str, object]:
    lines = real()
    whole = gzip.compress(b"".join(lines))
    head = lines[: len(lines) // 2]
    (tmp_path / "base.log").write_bytes(b"".join(lines))
    # a truncated .gz: the first member whole (half the lines), the second cut short
    (tmp_path / "trunc.log.gz").write_bytes(
        gzip.compress(b"".join(head)) + gzip.compress(b"".join(lines[len(head):]))[:10])
    # corrupt deflate data after a whole first member: zlib.error, not OSError
    bad = bytearray(gzip.compress(b"".join(lines[len(head):])))
    bad[10] = 0x07  # BFINAL 1, BTYPE 11: "invalid block type"
    (tmp_path / "corrupt.log.gz").write_bytes(gzip.compress(b"".join(head)) + bytes(bad))
    return {"dir": tmp_path, "lines": lines, "head": head, "whole": whole}


def test_compare_keeps_what_a_truncated_or_corrupt_gzip_held_and_says_where_it_broke(
        capsys, logs) -> None:
    d = logs["dir"]
    n_head = decodes(logs["head"])  # type: ignore[arg-type]
    for name in ("trunc.log.gz", "corrupt.log.gz"):
        code, out, err = run_cli(capsys, "compare", str(d / "base.log"), str(d / name), "--json")
        assert code == 2, (name, err)
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert f"read error after {len(logs['head']):,} lines" in err, err  # type: ignore[arg-type]
        result = __import__("json").loads(out)
        assert result["speculative"]["n"] == n_head, result["speculative"]


def test_parse_runs_and_check_print_the_runs_before_the_damage(capsys, logs) -> None:
    d = logs["dir"]
    n_head = decodes(logs["head"])  # type: ignore[arg-type]
    code, out, err = run_cli(capsys, "parse", "--runs", str(d / "corrupt.log.gz"))
    assert code == 2 and "corrupt compressed data" in err, err
    assert f"{n_head} decode lines" in out, out
    code, out, err = run_cli(capsys, "check", str(d / "trunc.log.gz"), "--baseline-value", "80")
    assert code == 2 and "truncated" in err and "verdict above" in err, err
    assert out.startswith("verdict: "), out


def test_cr_only_line_endings_are_line_breaks_in_compare(capsys, logs, tmp_path: Path) -> None:
    lines: list[bytes] = logs["lines"]  # type: ignore[assignment]
    cr = tmp_path / "cr.log"
    cr.write_bytes(b"".join(ln.rstrip(b"\r\n") + b"\r" for ln in lines))
    code, out, err = run_cli(capsys, "compare", str(logs["dir"] / "base.log"), str(cr), "--json")
    assert code == 0, err
    assert __import__("json").loads(out)["speculative"]["n"] == decodes(lines)


def test_a_long_line_costs_max_line_not_its_length(capsys, logs, tmp_path: Path) -> None:
    lines: list[bytes] = logs["lines"]  # type: ignore[assignment]
    big = tmp_path / "long.log"
    big.write_bytes(b"".join(lines[:50]) + b"y" * (40 << 20) + b"\n" + b"".join(lines[50:]))
    tracemalloc.start()
    try:
        code, out, err = run_cli(capsys, "compare", str(logs["dir"] / "base.log"), str(big),
                                 "--json")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert code == 0, err
    assert __import__("json").loads(out)["speculative"]["n"] == decodes(lines)
    assert peak < 12 * logfile.MAX_LINE, peak  # reading the line whole takes 40 MiB


def test_an_empty_file_name_is_said_to_be_empty() -> None:
    for argv in (("parse", ""), ("parse", "--json", ""), ("advise", "")):
        res = subprocess.run([sys.executable, "-m", "specmon", *argv], capture_output=True,
                             text=True, timeout=60)
        assert (res.returncode, res.stderr) == (
            2, f"specmon {argv[0]}: empty file name: expected a log file, or - for stdin\n"), argv


def test_devices_are_refused_in_one_line(logs) -> None:
    for argv in (("parse", "/dev/zero"), ("parse", "--json", "/dev/zero"),
                 ("compare", str(logs["dir"] / "base.log"), "/dev/zero"),
                 ("check", "/dev/zero", "--baseline-value", "80"), ("parse", "--runs", "/dev/null")):
        # (in a child: /dev/zero never ends, and the timeout only ends such a read)
        res = subprocess.run([sys.executable, "-m", "specmon", *argv], capture_output=True,
                             text=True, timeout=60)
        assert res.returncode == 2, (argv, res.stderr[-300:])
        assert res.stderr.strip() == f"specmon {argv[0]}: {argv[-1] if argv[0] != 'check' else argv[1]}: " \
            "is a character device, expected a log file", (argv, res.stderr)


@pytest.mark.parametrize("mode", [[], ["--json"], ["--runs"]])
def test_a_fifo_is_read_once_not_probed_and_lost(tmp_path: Path, logs, mode: list[str]) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    data = b"".join(logs["lines"])  # type: ignore[arg-type]

    def writer() -> None:
        with open(fifo, "wb") as fh:  # blocks until specmon opens it; a probe's close = EPIPE
            try:
                fh.write(data)
            except BrokenPipeError:
                pass

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    # (the timeout only ends a hang: a probe that opened the FIFO waits for a second writer)
    res = subprocess.run([sys.executable, "-m", "specmon", "parse", *mode, str(fifo)],
                         capture_output=True, timeout=60)
    assert res.returncode == 0, res.stderr
    n = decodes(logs["lines"])  # type: ignore[arg-type]
    if mode == ["--json"]:
        assert res.stdout.count(b'"kind":"decode"') == n
    elif mode == ["--runs"]:
        assert f"{n} decode lines".encode() in res.stdout, res.stdout
    else:
        assert f"{n:,}".encode() in res.stdout or str(n).encode() in res.stdout, res.stdout


def test_a_gzip_bomb_stops_at_its_bound_with_what_came_before(capsys, tmp_path: Path,
                                                              monkeypatch, logs) -> None:
    lines: list[bytes] = logs["lines"]  # type: ignore[assignment]
    bomb = tmp_path / "bomb.log.gz"
    with gzip.open(bomb, "wb") as fh:
        fh.write(b"".join(lines))
        for _ in range(64):
            fh.write(b"\0" * (1 << 20))
    monkeypatch.setattr(logfile, "GZIP_FLOOR", 16 << 20)
    assert bomb.stat().st_size * logfile.GZIP_RATIO < 16 << 20  # the floor is the bound here
    code, out, err = run_cli(capsys, "parse", "--runs", str(bomb))
    assert code == 2 and "gzip bomb" in err and "inflates past" in err, err
    assert f"{decodes(lines)} decode lines" in out, out


def test_capped_lines_end_lines_at_lf_crlf_and_lone_cr_at_any_length() -> None:
    """Against a plain split on LF/CRLF/CR: lines of every length around MAX_LINE, CR-only runs
    longer than MAX_LINE (read as one line and cut, before), a CRLF split across two reads."""
    import io
    import random
    import re

    m = logfile.MAX_LINE
    rng = random.Random(7)
    for _ in range(40):
        chunks = []
        for _ in range(rng.randint(0, 2000)):
            n = (rng.choice([0, 5, m - 1, m, m + 1, 3 * m]) if rng.random() < 0.01
                 else rng.randint(0, 80))
            chunks.append(b"a" * n + rng.choice([b"\r", b"\r", b"\n", b"\r\n"]))
        data = b"".join(chunks) + rng.choice([b"", b"tail"])
        want = re.split(rb"\r\n|\r|\n", data)
        if want and want[-1] == b"":
            want.pop()
        got = list(logfile.capped_lines(io.BytesIO(data)))
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            if len(w) <= m:
                assert g.rstrip(b"\r\n") == w
            else:
                assert g.startswith(w[:m] + " \u2026[specmon: line cut".encode()), g[-80:]
                assert f"at {m} of {len(w)} bytes]".encode() in g, (g[-80:], len(w))


def _decode(sec: int, rr: str = "1", acc: str | None = None) -> str:
    a = f"accept len: {acc}, " if acc is not None else ""
    return (f"[2026-05-25 17:56:{sec % 60:02d} TP0] Decode batch, #running-req: {rr}, #token: 100, "
            f"token usage: 0.01, {a}gen throughput (token/s): 80.00, #queue-req: 0, \n")


def test_an_absurd_accept_len_is_invalid_on_every_path(capsys, tmp_path: Path) -> None:
    """1e300 made `advise` die in sqrt (OverflowError) and `check` see drift; a 15-digit one read
    by the known-line path was a value. Each front end reads them as N/A, the same way."""
    from specmon.parse.fastscan import scan_buffer  # noqa: F401 - the summary's path

    log = tmp_path / "acc.log"
    log.write_text("".join(_decode(i, acc=("1e300", "99999999999999.0", "1000.00")[i % 3])
                           for i in range(60)))
    for text in log.read_text().splitlines():
        rec = parse_line(text)
        assert isinstance(rec, BatchRecord) and rec.accept_len is None, text
        assert rec.invalid == ["accept_len"], text
    code, out, err = run_cli(capsys, "advise", str(log))
    assert code == 3 and "Traceback" not in err, err
    code, out, err = run_cli(capsys, "parse", str(log))
    assert code == 0 and "60 invalid value(s)" in out, out
    ok = parse_line(_decode(1, acc="999.50"))
    assert isinstance(ok, BatchRecord) and ok.accept_len == 999.5  # the bound is 1000


def test_a_decode_line_whose_running_req_is_no_number_is_said_unreadable(capsys,
                                                                         tmp_path: Path) -> None:
    log = tmp_path / "rr.log"
    log.write_text("".join(_decode(i, rr=("-1", "1e400", "2")[i % 3]) for i in range(30)))
    code, out, err = run_cli(capsys, "parse", str(log))
    assert code == 0, err
    rows = {ln.split()[0]: ln.split()[1] for ln in out.splitlines()[-2:]}
    assert rows == {"2": "10", "unreadable": "20"}, out


def test_parse_runs_and_compare_of_a_log_without_server_lines_exit_3_as_parse_does(capsys,
                                                                       tmp_path: Path) -> None:
    log = tmp_path / "none.log"
    log.write_text("hello\nnothing SGLang printed\n")
    good = tmp_path / "good.log"
    good.write_text("".join(_decode(i) for i in range(10)))
    for argv in (["parse", str(log)], ["parse", "--json", str(log)], ["parse", "--runs", str(log)],
                 ["compare", str(log), str(good)], ["compare", str(good), str(log)]):
        code, out, err = run_cli(capsys, *argv)
        assert code == 3 and "no " in err and "Traceback" not in err, (argv, code, err)
