"""`specmon parse` end to end: JSON contract, summary numbers, inputs, errors, the fast path."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from kit.paths import ROOT

from specmon.analysis.logfile import summarise, summarise_buffer, summarise_general

sys.path.insert(0, str(ROOT / "bench"))
from loggen import generate_lines  # noqa: E402

BASE = ("[2026-02-26 19:16:{s:02d} TP0] Decode batch, #running-req: {rr}, #token: 900, "
        "token usage: 0.04, cuda graph: True, gen throughput (token/s): {gt:.2f}, #queue-req: 0")
SPEC = ("[2026-02-26 19:17:{s:02d} TP0] Decode batch, #running-req: {rr}, #token: 900, "
        "token usage: 0.04, accept len: {al:.2f}, accept rate: 0.50, cuda graph: True, "
        "gen throughput (token/s): {gt:.2f}, #queue-req: 0")
PREFILL = ("[2026-02-26 19:16:00 TP0] Prefill batch, #new-seq: 1, #new-token: 512, #cached-token: 0, "
           "token usage: 0.01, #running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False, "
           "input throughput (token/s): 8123.45")


def run(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specmon", "parse", *args], input=stdin,
                          capture_output=True, timeout=120)


@pytest.fixture
def small_log(tmp_path) -> Path:
    lines = [PREFILL]
    lines += [BASE.format(s=i, rr=1, gt=gt) for i, gt in enumerate([80.0, 90.0, 85.0, 70.0, 100.0])]
    lines += [BASE.format(s=10, rr=8, gt=400.0)]
    lines += [SPEC.format(s=i, rr=1, gt=gt, al=al)
              for i, (gt, al) in enumerate([(94.0, 2.4), (96.0, 2.6), (92.0, 2.2)])]
    lines += ['[2026-02-26 19:17:30] INFO:     127.0.0.1:1 - "GET /health HTTP/1.1" 200 OK']
    p = tmp_path / "server.log"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_json_output_contract(small_log):
    res = run(str(small_log), "--json")
    assert res.returncode == 0, res.stderr
    objs = [json.loads(line) for line in res.stdout.splitlines()]
    assert [o["kind"] for o in objs] == ["prefill"] + ["decode"] * 9
    first_decode = objs[1]
    assert first_decode["file"] == str(small_log)
    assert first_decode["line_no"] == 2
    assert first_decode["timestamp"] == "2026-02-26 19:16:00"
    assert first_decode["time_of_day"] is None
    assert first_decode["tp_rank"] == 0 and first_decode["dp_rank"] is None
    assert first_decode["gen_throughput"] == 80.0 and first_decode["running_req"] == 1
    assert first_decode["cuda_graph"] is True and first_decode["graph_kind"] == "cuda"
    for key in ("ep_rank", "pp_rank", "attn_cp_rank", "moe_dp_rank", "accept_len", "queue_req",
                "new_seq", "input_throughput", "pending_token"):
        assert key in first_decode
    assert objs[0]["input_throughput"] == 8123.45 and objs[0]["pending_token"] == 0
    assert objs[-1]["accept_len"] == 2.2


def test_kind_filter(small_log):
    res = run(str(small_log), "--json", "--kind", "prefill")
    objs = [json.loads(line) for line in res.stdout.splitlines()]
    assert len(objs) == 1 and objs[0]["kind"] == "prefill"


def test_summary_numbers(small_log):
    res = run(str(small_log))
    assert res.returncode == 0
    out = res.stdout.decode()
    assert "lines read: 11" in out
    assert "decode 9, prefill 1" in out
    assert "decode-only" in out
    # baseline bs1: values 70, 80, 85, 90, 100 -> median 85, p10 74, p90 96 (linear)
    base_block = out.split("baseline")[1].split("speculative")[0]
    row = next(r for r in base_block.splitlines() if r.split()[:1] == ["1"])
    assert row.split()[1:] == ["5", "85.00", "74.00", "96.00"]
    row8 = next(r for r in base_block.splitlines() if r.split()[:1] == ["8"])
    assert row8.split()[1:3] == ["1", "400.00"]
    spec_block = out.split("speculative")[1]
    row = next(r for r in spec_block.splitlines() if r.split()[:1] == ["1"])
    assert row.split()[1:3] == ["3", "94.00"]
    assert "median 2.40" in spec_block
    assert "2026-02-26 19:16:00 -> 2026-02-26 19:17:02" in out


def test_stdin_and_gzip(small_log, tmp_path):
    gz = tmp_path / "server.log.gz"
    gz.write_bytes(gzip.compress(small_log.read_bytes()))
    a = run(str(small_log), "--json").stdout
    b = run("-", "--json", stdin=small_log.read_bytes()).stdout
    c = run(str(gz), "--json").stdout
    strip = lambda out: [{k: v for k, v in json.loads(x).items() if k != "file"}  # noqa: E731
                         for x in out.splitlines()]
    assert strip(a) == strip(b) == strip(c)
    assert b"decode 9" in run(str(gz)).stdout


def test_stdin_is_summarised_by_runs_as_the_file_is(tmp_path):
    """`parse - < log` printed one table blending the log's three runs (88.6, 62.7 and
    81.8 tok/s read as one median); the file by name gave three sections."""
    args = "[2026-02-26 19:{m:02d}:00] server_args=ServerArgs(model_path='m', tp_size=1)"
    lines = []
    for m, gt in ((10, 88.6), (20, 62.7), (30, 81.8)):
        lines.append(args.format(m=m))
        lines += [BASE.format(s=i, rr=1, gt=gt).replace("19:16:", f"19:{m + 1:02d}:")
                  for i in range(5)]
    log = tmp_path / "three.log"
    log.write_text("\n".join(lines) + "\n")
    by_name = run(str(log)).stdout.decode()
    by_stdin = run("-", stdin=log.read_bytes()).stdout.decode()
    assert "3 server runs" in by_name
    assert by_stdin.replace("-:", "NAME:") == by_name.replace(f"{log}:", "NAME:")
    assert "62.70" in by_stdin and "88.60" in by_stdin


def test_missing_file_one_line_error_exit_2(tmp_path):
    res = run(str(tmp_path / "nope.log"))
    assert res.returncode == 2
    err = res.stderr.decode().strip()
    assert len(err.splitlines()) == 1 and "nope.log" in err and "Traceback" not in err


def test_directory_and_corrupt_gzip_errors(tmp_path):
    res = run(str(tmp_path))
    assert res.returncode == 2 and len(res.stderr.decode().strip().splitlines()) == 1
    bad = tmp_path / "bad.gz"
    text = "\n".join(generate_lines(20_000, seed=1)) + "\n"
    packed = gzip.compress(text.encode())
    bad.write_bytes(packed[: len(packed) // 2])
    res = run(str(bad))
    err = res.stderr.decode()
    assert res.returncode == 2 and "bad.gz" in err and "read error" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    # what was read before the damage is still summarised
    assert b"lines read: " in res.stdout and b"lines read: 0 " not in res.stdout


def test_fast_path_agrees_with_general_parser_on_generated_log():
    buf = ("\n".join(generate_lines(60_000, seed=3)) + "\n").encode()
    assert summarise_buffer(buf).comparable() == summarise_general(buf).comparable()


def test_fast_path_falls_back_exactly_on_unusual_lines():
    lines = generate_lines(2_000, seed=5)
    odd = [
        # accept len after the graph label: not where the fast regex expects it
        "[2026-01-01 00:00:00] Decode batch, #running-req: 1, #token: 5, token usage: 0.00, "
        "cuda graph: True, accept len: 2.50, gen throughput (token/s): 50.00, #queue-req: 0",
        "Receive: obj=GenerateReqInput(text='Decode batches and Prefill batches')",
        "[2026-01-01 00:00:00] Decode batch, #running-req: 1, #token: 5, token usage: 0.00, "
        "gen throughput (token/s): 5O.00, #queue-req: 0",
    ]
    buf = ("\n".join(lines[:1000] + odd + lines[1000:]) + "\n").encode()
    fast = summarise_buffer(buf)
    assert fast.comparable() == summarise_general(buf).comparable()
    assert fast.accept[2.5] >= 1


def test_parallel_file_summary_equals_general(tmp_path, monkeypatch):
    import specmon.analysis.logfile as pc

    p = tmp_path / "big.log"
    data = ("\n".join(generate_lines(30_000, seed=11)) + "\n").encode()
    p.write_bytes(data[:-1])  # last line without newline is still a line
    monkeypatch.setattr(pc, "PARALLEL_MIN", 1)
    monkeypatch.setattr(pc, "_usable_cpus", lambda: 3)
    assert summarise(str(p)).comparable() == summarise_general(data[:-1]).comparable()


def _medians_by_run(lines: list[str]) -> list[float]:
    """The test's own reading: decode gen throughput at bs 1 per run (a run per server_args)."""
    from specmon.analysis.stats import median
    from specmon.parse.sglang import BatchRecord, EventRecord, parse_line

    runs: list[list[float]] = []
    for line in lines:
        rec = parse_line(line)
        if isinstance(rec, EventRecord) and rec.kind == "server_args":
            runs.append([])
        elif isinstance(rec, BatchRecord) and rec.kind == "decode" and rec.running_req == 1:
            assert rec.gen_throughput is not None
            runs[-1].append(rec.gen_throughput)
    out = [median(r) for r in runs]
    assert None not in out
    return [float(x) for x in out if x is not None]


def test_parse_speaks_in_runs_on_the_phantom_baseline_log(tmp_path):
    """Issue 21: a three-run log gets one section per run, never a blended table; `--runs
    --json` carries each run's statistics per batch size, the same numbers as the sections."""
    import re

    from kit.phantom_runs import baseline_lines

    lines = baseline_lines()
    log = tmp_path / "base.log"
    log.write_text("\n".join(lines) + "\n")
    want = _medians_by_run(lines)
    assert 85 < want[0] < 92 and 60 < want[1] < 66 and 79 < want[2] < 85  # the scenario's levels
    res = run(str(log))
    assert res.returncode == 0, res.stderr
    text = res.stdout.decode()
    heads = re.findall(r"^==== run (\d)  (\S+ \S+) -> (\S+ \S+)  (.*)$", text, re.M)
    assert [h[0] for h in heads] == ["1", "2", "3"], text
    assert all("tp 8" in h[3] for h in heads)
    rows = re.findall(r"^\s+1\s+(\d+)\s+(\d+\.\d\d)\s+\d+\.\d\d\s+\d+\.\d\d$", text, re.M)
    assert [float(m) for _, m in rows] == pytest.approx(want, abs=0.006)  # one row per run
    assert text.count("#running-req") == 3

    res = run(str(log), "--runs", "--json")
    assert res.returncode == 0, res.stderr
    objs = [json.loads(x) for x in res.stdout.splitlines()]
    assert [o["run"] for o in objs] == [1, 2, 3]
    assert [(o["start"], o["end"]) for o in objs] == [(h[1], h[2]) for h in heads]
    for o, (n, med), w in zip(objs, rows, want, strict=True):
        (row,) = o["by_running_req"]
        assert {"running_req", "n", "median_tok_s", "p10", "p90", "accept_len_median"} <= set(row)
        assert row["running_req"] == 1 and row["n"] == int(n) == o["decode_lines"]
        assert row["median_tok_s"] == pytest.approx(w, abs=1e-4) == pytest.approx(float(med), abs=0.006)
        assert row["p10"] < row["median_tok_s"] < row["p90"] and row["accept_len_median"] is None
    # a damaged .gz of the same log: the runs read before the damage are still reported
    packed = gzip.compress(log.read_bytes())
    bad = tmp_path / "base.log.gz"
    bad.write_bytes(packed[: len(packed) * 3 // 4])
    res = run(str(bad))
    err = res.stderr.decode()
    assert res.returncode == 2 and "read error" in err and len(err.strip().splitlines()) == 1
    assert re.findall(r"^==== run (\d)", res.stdout.decode(), re.M)[:2] == ["1", "2"]


def test_parse_one_run_log_keeps_one_summary(small_log):
    res = run(str(small_log))
    assert res.returncode == 0 and b"==== run" not in res.stdout and b"server runs" not in res.stdout


def test_parse_runs_and_compare_show_the_same_per_run_medians(tmp_path):
    """One truth (issue 21): `parse --runs --json` and `compare --json` give the same median,
    p10, p90 and n for the same run at the same batch size (one window code, no second median)."""
    from kit.phantom_runs import write_logs

    base, spec = write_logs(tmp_path)
    res = run(str(base), "--runs", "--json")
    runs = {o["run"]: o["by_running_req"] for o in map(json.loads, res.stdout.splitlines())}
    assert list(runs) == [1, 2, 3]
    sres = run(str(spec), "--runs", "--json")
    (srun,) = [json.loads(x) for x in sres.stdout.splitlines()]
    lines = base.read_text().splitlines()
    starts = [i for i, x in enumerate(lines) if "server_args=" in x] + [len(lines)]
    for k in (1, 2, 3):  # compare takes each log's last run: the baseline cut after run k
        cut = tmp_path / f"base{k}.log"
        cut.write_text("\n".join(lines[:starts[k]]) + "\n")
        cmp = subprocess.run([sys.executable, "-m", "specmon", "compare", str(cut), str(spec),
                              "--json"], capture_output=True, timeout=120)
        assert cmp.returncode == 0, cmp.stderr
        d = json.loads(cmp.stdout)
        b, s = d["baseline"], d["speculative"]
        assert b["run"] == k
        (row,) = [r for r in runs[k] if r["running_req"] == d["speedup"]["running_req"]]
        assert (b["median_tok_s"], b["p10"], b["p90"], b["n"]) == (
            row["median_tok_s"], row["p10"], row["p90"], row["n"])
        (srow,) = [r for r in srun["by_running_req"] if r["running_req"] == row["running_req"]]
        assert (s["median_tok_s"], s["n"], s["accept_len_median"]) == (
            srow["median_tok_s"], srow["n"], srow["accept_len_median"])
        assert srow["accept_len_median"] is not None and 2.0 < srow["accept_len_median"] < 3.0


def test_a_vllm_log_with_two_launches_gets_one_section_per_run(tmp_path):
    """`parse` of a vLLM log with two launches blended them into one table (its launches are no
    `server_args=` lines), where `parse --runs` listed two runs; an idle line (0 tok/s) counted
    in `parse`'s medians and nowhere else. Now: a section per run, with `--runs`' own numbers
    and times (the second run starts at its `non-default args` line), the idle line apart.
    The lines: tests/data/vllm-logs/gen-baseline-0.11.log (vLLM's format strings), twice."""
    import re
    from datetime import datetime, timedelta

    lines = (ROOT / "tests/data/vllm-logs/gen-baseline-0.11.log").read_text().splitlines()
    last = [x for x in lines if "Engine 000:" in x][-1]
    when = re.search(r"11-20 (\d\d:\d\d:\d\d)", last).group(1)
    later = (datetime.strptime(when, "%H:%M:%S") + timedelta(seconds=10)).strftime("%H:%M:%S")
    idle = re.sub(r"Avg generation throughput: [\d.]+", "Avg generation throughput: 0.0",
                  last.replace(when, later))  # (an interval without tokens, at Running: 16)
    nd = ("(APIServer pid={p}) INFO 11-20 {t} [utils.py:233] non-default args: "
          "{{'max_num_seqs': {n}}}")
    log = tmp_path / "vllm.log"
    log.write_text("\n".join([
        nd.format(p=200, t="09:59:59", n=64), *lines, idle,
        "INFO:     Finished server process [200]",
        nd.format(p=300, t="11:00:00", n=128), *(x.replace("11-20 10:", "11-20 11:") for x in lines),
    ]) + "\n")
    res = run(str(log))
    assert res.returncode == 0, res.stderr
    text = res.stdout.decode()
    heads = re.findall(r"^==== run (\d)  (\S+ \S+) -> (\S+ \S+)  ", text, re.M)
    rows = re.findall(r"^\s+16\s+(\d+)\s+(\d+\.\d\d)\s+(\d+\.\d\d)\s+(\d+\.\d\d)(.*)$", text, re.M)
    assert [h[0] for h in heads] == ["1", "2"] and len(rows) == 2, text
    # the same log after more than the first MiB of other lines (the engine is told from the
    # head; a log cut by rotation may start with request lines): the same sections
    late = tmp_path / "late.log"
    junk = "".join(f"(APIServer pid=200) INFO 11-20 09:59:58 [logger.py:41] Received request "
                   f"cmpl-{i:06d}: prompt: 'hello', params: SamplingParams(n=1)\n"
                   for i in range(12_000))
    assert len(junk) > 1 << 20
    late.write_text(junk + log.read_text())
    res2 = run(str(late))
    assert res2.returncode == 0, res2.stderr
    def sections(out: str) -> str:  # (run 1 has the other lines too: "lines read" differs)
        body = out.split("==== run 1", 1)[1].replace(str(late), str(log))
        return re.sub(r"lines read: [\d,]+", "lines read: N", body)

    assert sections(res2.stdout.decode()) == sections(text)
    packed = tmp_path / "late.log.gz"  # read in order (gzip): the same runs
    packed.write_bytes(gzip.compress(late.read_bytes()))
    res3 = run(str(packed))
    assert res3.returncode == 0, res3.stderr
    assert sections(res3.stdout.decode().replace(str(packed), str(late))) == sections(text)
    assert "(+1 at 0 tok/s: no token in the interval, not counted)" in rows[0][4] and not rows[1][4]
    res = run(str(log), "--runs", "--json")
    objs = [json.loads(x) for x in res.stdout.splitlines()]
    assert [(o["start"], o["end"]) for o in objs] == [(h[1], h[2]) for h in heads]
    assert objs[0]["end"].endswith(later) and objs[0]["end_reason"] == "exit"
    assert objs[1]["start"].endswith("11:00:00") and objs[1]["start_reason"] == "server_args"
    for o, (n, med, p10, p90, _) in zip(objs, rows, strict=True):
        (row,) = [r for r in o["by_running_req"] if r["running_req"] == 16]
        assert row["n"] == int(n) == 40
        assert (row["median_tok_s"], row["p10"], row["p90"]) == pytest.approx(
            (float(med), float(p10), float(p90)), abs=0.006)


def test_compare_says_when_the_two_logs_look_swapped(tmp_path):
    """`compare SPEC BASE` gave 'speedup 0.669x' and nothing more: the baseline's run has
    accept len, the speculative one none, so the note says the logs look swapped."""
    rows = [f"[2026-05-01 10:00:{i:02d}] Decode batch, #running-req: 1, #token: 9, token usage: "
            "0.01, {acc}gen throughput (token/s): {g:.2f}, #queue-req: 0" for i in range(30)]
    base = tmp_path / "b.log"
    base.write_text("".join(r.format(acc="", g=88.0 + i % 3) + "\n" for i, r in enumerate(rows)))
    spec = tmp_path / "s.log"
    spec.write_text("".join(r.format(acc="accept len: 2.50, ", g=120.0 + i % 3) + "\n"
                            for i, r in enumerate(rows)))
    def compare(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "specmon", "compare", *args],
                              capture_output=True, timeout=120)
    swapped = compare(str(spec), str(base), "--json")
    assert swapped.returncode == 0, swapped.stderr
    notes = json.loads(swapped.stdout)["notes"]
    assert any("the two logs look swapped" in n for n in notes)
    right = json.loads(compare(str(base), str(spec), "--json").stdout)
    assert not any("swapped" in n for n in right["notes"])
