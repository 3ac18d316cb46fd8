"""Hostile log lines: impossible numbers are invalid fields, never a crash, never Infinity/NaN;
the fast path agrees with the general one; damaged gzip and giant lines are one-line errors."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import zlib
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from kit.hostile import HOSTILE_LINES, REGRESSION_LINES

from specmon.analysis.logfile import MAX_LINE, summarise_buffer, summarise_general
from specmon.jsonout import dumps
from specmon.parse.sglang import BatchRecord, parse_line

GOOD = ("[2026-02-26 19:16:{s:02d} TP0] Decode batch, #running-req: 1, #token: 900, "
        "token usage: 0.04, cuda graph: True, gen throughput (token/s): {gt:.2f}, #queue-req: 0")


def _strict(text: str) -> object:
    """json.loads that refuses the non-standard constants Python would otherwise accept."""
    def bad(name: str) -> object:
        raise AssertionError(f"non-standard JSON constant {name}")
    return json.loads(text, parse_constant=bad)


def cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specmon", *args], input=stdin,
                          capture_output=True, timeout=300)


def test_each_impossible_number_is_an_invalid_field_and_the_record_is_kept() -> None:
    expect = ["gen_throughput", "gen_throughput", "gen_throughput", "gen_throughput",
              "gen_throughput", "running_req", "tokens"]
    for line, field in zip(REGRESSION_LINES, expect, strict=True):
        rec = parse_line(line)
        assert isinstance(rec, BatchRecord), line[:80]
        assert getattr(rec, field) is None
        assert field in rec.invalid
        assert rec.kind == "decode" and rec.timestamp == "2025-07-06 09:10:11"
    last = parse_line(REGRESSION_LINES[-1])
    assert last.accept_len is None and "accept_len" in last.invalid
    assert last.gen_throughput == 50.0  # the good fields of the line survive


def test_a_huge_rank_or_pid_in_the_prefix_keeps_the_record() -> None:
    line = ("(SGLangEngine pid=" + "7" * 5000 + ") [2026-01-01 00:00:00 TP" + "9" * 40 + "] "
            "Decode batch. #running-req: 2, #token: 9, token usage: 0.01, "
            "gen throughput (token/s): 12.00, #queue-req: 0")
    rec = parse_line(line)
    assert isinstance(rec, BatchRecord) and rec.gen_throughput == 12.0
    assert rec.pid is None and rec.tp_rank is None and {"pid", "tp_rank"} <= set(rec.invalid)


@settings(max_examples=400, suppress_health_check=list(HealthCheck), deadline=None)
@given(HOSTILE_LINES)
def test_no_line_yields_a_non_finite_number_or_unprintable_json(line: str) -> None:
    rec = parse_line(line)
    if rec is None:
        return
    text = json.dumps(rec.to_json(), allow_nan=False)  # raises on Infinity/NaN
    _strict(text)


@settings(max_examples=600, suppress_health_check=list(HealthCheck), deadline=None)
@given(HOSTILE_LINES, HOSTILE_LINES)
def test_fast_and_general_path_agree_on_hostile_lines(a: str, b: str) -> None:
    good = GOOD.format(s=1, gt=80.0)
    for lines in ([a], [a, good], [good, a, b], [b]):
        buf = ("\n".join(x.replace("\n", " ") for x in lines) + "\n").encode("utf-8",
                                                                            "surrogatepass")
        assert summarise_buffer(buf).comparable() == summarise_general(buf).comparable()


def test_fast_and_general_path_agree_on_each_regression_line() -> None:
    goods = [GOOD.format(s=i, gt=80.0 + i) for i in range(5)]
    for line in REGRESSION_LINES:
        buf = ("\n".join(goods + [line] + goods) + "\n").encode()
        fast, general = summarise_buffer(buf), summarise_general(buf)
        assert fast.comparable() == general.comparable()
        assert general.invalid >= 1 and general.decode == 11


def test_parse_json_and_summary_on_hostile_lines(tmp_path: Path) -> None:
    log = tmp_path / "hostile.log"
    log.write_text("\n".join([GOOD.format(s=1, gt=90.0)] + REGRESSION_LINES) + "\n")
    res = cli("parse", "--json", str(log))
    assert res.returncode == 0, res.stderr
    rows = [_strict(x) for x in res.stdout.decode().splitlines()]
    assert len(rows) == 1 + len(REGRESSION_LINES)
    assert all(r["gen_throughput"] is None for r in rows[1:6])
    assert rows[1]["invalid"] == ["gen_throughput"]
    summary = cli("parse", str(log))
    assert summary.returncode == 0 and b"Traceback" not in summary.stderr
    assert b"decode 8" in summary.stdout and b"7 invalid value(s)" in summary.stdout  # 5 gt, rr, accept len


def test_jsonout_never_writes_non_standard_json() -> None:
    out = dumps({"a": float("inf"), "b": [float("nan"), 1.5], "c": 10 ** 5000, "d": "x"})
    assert _strict(out) == {"a": None, "b": [None, 1.5], "c": None, "d": "x"}


def _gz_lines(n: int) -> bytes:
    return gzip.compress(("\n".join(GOOD.format(s=i % 60, gt=50.0 + i) for i in range(n))
                          + "\n").encode(), mtime=0)


def test_gzip_crc_error_summary_says_what_was_read_then_the_error(tmp_path: Path) -> None:
    data = bytearray(_gz_lines(200))
    data[-8] ^= 0xFF  # CRC32 of the member
    bad = tmp_path / "crc.log.gz"
    bad.write_bytes(bytes(data))
    res = cli("parse", str(bad))
    assert res.returncode == 2
    assert b"Traceback" not in res.stderr and len(res.stderr.decode().strip().splitlines()) == 1
    assert b"lines read: 200" in res.stdout and b"decode 200" in res.stdout
    assert b"read error after 200 lines" in res.stderr and b"CRC" in res.stderr
    js = cli("parse", "--json", str(bad))
    assert len(js.stdout.splitlines()) == 200 and js.returncode == 2


def test_truncated_gzip_and_corrupt_deflate_are_one_line_errors(tmp_path: Path) -> None:
    data = _gz_lines(3000)
    trunc = tmp_path / "trunc.log.gz"
    trunc.write_bytes(data[: len(data) // 2])
    corrupt = tmp_path / "corrupt.log.gz"
    mid = bytearray(data)
    for i in range(40, 80):
        mid[i] = 0xFF
    corrupt.write_bytes(bytes(mid))
    try:  # the corruption must really be a zlib.error, or this test proves nothing
        gzip.decompress(bytes(mid))
    except zlib.error:
        pass
    for path in (trunc, corrupt):
        for mode in ([], ["--json"], ):
            res = cli("parse", *mode, str(path))
            err = res.stderr.decode()
            assert res.returncode == 2, (path, mode, err)
            assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
            assert path.name in err and "read error" in err
    chk = cli("check", str(trunc), "--baseline-value", "80")
    assert chk.returncode == 2 and b"Traceback" not in chk.stderr and b"read error" in chk.stderr


def test_huge_ints_through_every_parse_mode(tmp_path: Path) -> None:
    log = tmp_path / "huge_int_gt.log"
    lines = [GOOD.format(s=i, gt=60.0) for i in range(5)]
    lines.append(GOOD.format(s=9, gt=1.0).replace("1.00", "1" * 400))  # OverflowError before
    lines.append(GOOD.format(s=9, gt=1.0).replace("#running-req: 1", "#running-req: "
                                                  + "9" * 5000))  # 4300-digit limit before
    log.write_text("\n".join(lines) + "\n")
    for mode in ([], ["--json"]):
        res = cli("parse", *mode, str(log))
        assert res.returncode == 0 and b"Traceback" not in res.stderr, res.stderr
    assert b"decode 7" in cli("parse", str(log)).stdout


def test_a_giant_line_is_cut_and_costs_bounded_memory(tmp_path: Path) -> None:
    log = tmp_path / "giant.log"
    with open(log, "wb") as f:
        f.write(GOOD.format(s=1, gt=70.0).encode() + b"\n")
        f.write(b"Decode batch. " + b"x" * (60 << 20) + b"\n")
        f.write(GOOD.format(s=2, gt=71.0).encode() + b"\n")
    # VmHWM is this process image's peak RSS (ru_maxrss would include the forked pytest's)
    code = ("import re, sys; from specmon.cli import main; rc = main(sys.argv[1:]); "
            "hwm = re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1); "
            "print('MAXRSS', hwm, file=sys.stderr); sys.exit(rc)")
    for mode in ([], ["--json"]):
        res = subprocess.run([sys.executable, "-c", code, "parse", *mode, str(log)],
                             capture_output=True, timeout=300)
        assert res.returncode == 0, res.stderr
        rss_kib = int(res.stderr.decode().split("MAXRSS")[1].split()[0])
        assert rss_kib < 100 * 1024, f"{mode}: {rss_kib} KiB for a 60 MiB line"  # was 322 MiB
    js = subprocess.run([sys.executable, "-m", "specmon", "parse", "--json", str(log)],
                        capture_output=True, timeout=300)
    rows = [_strict(x) for x in js.stdout.decode().splitlines()]
    assert [r["line_no"] for r in rows if r["kind"] == "decode"][::2] == [1, 3]
    summary = cli("parse", str(log)).stdout.decode()
    assert "lines read: 3" in summary and "decode 3" in summary
    assert MAX_LINE == 1 << 20


def test_parse_usage_errors_and_garbage(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text(GOOD.format(s=1, gt=70.0) + "\n")
    res = cli("parse", "--frobnicate", str(log))
    assert res.returncode == 2
    assert res.stderr.decode().startswith("usage: specmon parse ")
    assert "unrecognized arguments: --frobnicate" in res.stderr.decode()
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(bytes(range(256)) * 64)
    for mode in ([], ["--json"]):
        res = cli("parse", *mode, str(garbage))
        assert res.returncode == 3, res
        assert b"no SGLang lines found" in res.stderr
    assert cli("parse", "--kind", "prefill", "--json", str(log)).returncode == 0


_PARSE_COST_CHILD = r"""
import json, resource, sys, time
resource.setrlimit(resource.RLIMIT_CPU, (60, 60))  # quadratic would take hours: die instead
from specmon.parse.sglang import parse_line
out = {}
for head, unit in json.loads(sys.argv[1]):
    costs = {}
    # the same number of bytes in all, enough for tens of ms (the CPU clock ticks in ms)
    for n, times in ((1 << 16, 64), (1 << 20, 4)):
        text = head + (unit * (n // len(unit) + 1))[:n]
        best = float("inf")
        for _ in range(3):
            t = time.process_time()
            for _ in range(times):
                parse_line(text)
            best = min(best, time.process_time() - t)
        costs[n] = best
    out[head + unit] = [costs[1 << 16], costs[1 << 20]]
print(json.dumps(out))
"""

_VLLM_HEAD = "(APIServer pid=1) INFO 11-20 10:00:00 [utils.py:1] "
_VLLM_CFG = _VLLM_HEAD + "Initializing a V1 LLM engine (v0.6.0) with config: "


def test_parse_line_is_linear_in_the_line_length() -> None:
    """Issue 22: a vLLM `non-default args: {` or `speculative_config=SpeculativeConfig(`
    repeated over a 1 MiB line cost 33 s (a regex searched from each marker to the line's
    end); `parse` and `record` spent that on one line. A 1 MiB line costs about what 16 lines
    of 64 KiB cost, as a linear pass does (quadratic: 16x more); CPU time in one child."""
    import subprocess
    import sys

    units = [[_VLLM_HEAD, "non-default args: {"],
             [_VLLM_CFG, "speculative_config=SpeculativeConfig("],
             [_VLLM_CFG, " model='\\'"],
             [_VLLM_HEAD, "Engine 000: Avg prompt throughput: 1 tokens/s, "],
             [_VLLM_HEAD, "SpecDecoding metrics: Per-position acceptance rate: 1"],
             ["[2026-01-01 00:00:00] ", "server_args=ServerArgs("],
             ["[2026-01-01 00:00:00 TP0] ", "Decode batch, #running-req: 1, "],
             ["[2026-01-01 00:00:00 TP0] Decode batch, ", "accept len: "]]
    res = subprocess.run([sys.executable, "-c", _PARSE_COST_CHILD, json.dumps(units)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    for unit, (small, big) in json.loads(res.stdout).items():
        assert big < 4 * small + 0.02, (unit[:80], small, big)  # (+ a few clock ticks)
