"""vLLM prints the interval in which its last requests finished as `Running: 0 reqs` with the
tokens they emitted (a real line: tests/data/vllm-logs/real-lines.jsonl, line 1, 28.4 tok/s).
Such a line measures no batch size: read as batch size 0 it made a "0.33x speedup at bs 0,
speculation loses" headline, a false `record` alert, and a ZeroDivisionError that ended the UI,
the demo, replay and report (ms/token at bs 0)."""

from __future__ import annotations

import json
from pathlib import Path

from kit.paths import TESTS

from specmon.analysis.advisor import PaysState, speculation_no_longer_pays
from specmon.cli import main
from specmon.parse.sglang import parse_line, sample_batch
from specmon.session.state import ServerState
from specmon.session.window import current_stats, speedup

VLLM = TESTS / "data" / "vllm-logs"
REAL = json.loads((VLLM / "real-lines.jsonl").read_text().splitlines()[0])["line"]
HEAD = "(APIServer pid=100) INFO 11-20 {clock} [loggers.py:127] "
SPEC = ("(APIServer pid=100) INFO 11-20 {clock} [metrics.py:96] SpecDecoding metrics: Mean "
        "acceptance length: 2.10, Accepted throughput: 10.00 tokens/s, Drafted throughput: 30.00 "
        "tokens/s, Accepted: 100 tokens, Drafted: 300 tokens, Per-position acceptance rate: "
        "0.500, 0.300, 0.200, Avg Draft acceptance rate: 33.3%")


def drained(clock: str, tok_s: float, spec: bool) -> list[str]:
    """The real drained line's body (Running: 0, tokens emitted), at `clock`, as Engine 000."""
    body = REAL[REAL.index("Engine 000:"):].replace("28.4 tokens/s", f"{tok_s:.1f} tokens/s", 1)
    lines = [HEAD.format(clock=clock) + body]
    return lines + ([SPEC.format(clock=clock)] if spec else [])


def with_drain(src: str, tmp: Path, spec: bool) -> Path:
    """The real-format log with a drained interval after its last one (10 s later)."""
    lines = (VLLM / src).read_text().splitlines()
    last = [x for x in lines if "Engine 000:" in x][-1]
    hh, mm, ss = (int(x) for x in last.split()[4].split(":"))
    t = hh * 3600 + mm * 60 + ss + 10
    clock = f"{t // 3600:02d}:{t // 60 % 60:02d}:{t % 60:02d}"
    out = tmp / src
    out.write_text("\n".join(lines + drained(clock, 40.0, spec)) + "\n")
    return out


def test_the_rule_a_line_with_no_request_running_measures_no_batch_size():
    rec = parse_line(REAL)
    assert rec is not None and rec.running_req == 0 and rec.gen_throughput == 28.4
    assert rec.sample_rr is None  # kept as printed (parse --json) but no sample
    assert sample_batch(0, 28.4) is None and sample_batch(16, 0.0) is None
    assert sample_batch(16, 795.8) == 16 and sample_batch(None, 795.8) is None


def test_the_speedup_stays_at_the_batch_size_measured_after_a_drained_interval(tmp_path):
    base, spec = ServerState("baseline"), ServerState("speculative")
    for state, src, sp in ((base, "gen-baseline-0.11.log", False),
                           (spec, "gen-eagle3-0.11.log", True)):
        for i, ln in enumerate(with_drain(src, tmp_path, sp).read_text().splitlines()):
            state.apply(ln, parse_line(ln), 1e9 + i)
    assert spec.runs[-1].last is not None and spec.runs[-1].last.running_req == 0
    assert spec.runs[-1].bs == 16 and base.runs[-1].bs == 16
    w = current_stats(spec, None, 1e9)
    # (the log's 300 s idle gap starts a time segment: the window holds the 20 lines after it)
    assert w is not None and w.running_req == 16 and w.n == 20
    sp = speedup(base, spec, 0.0, 1e9)
    assert sp is not None and sp.running_req == 16
    assert sp.ci95 is not None and sp.ci95[0] > 1.0  # the log's 2.1x, not a loss at bs 0
    assert sp.break_even_accept_len is not None and sp.break_even_accept_len > 1.0


def test_compare_and_the_summary_leave_the_drained_interval_out(tmp_path, capsys):
    b = with_drain("gen-baseline-0.11.log", tmp_path, False)
    s = with_drain("gen-eagle3-0.11.log", tmp_path, True)
    assert main(["compare", str(b), str(s), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = {r["running_req"] for r in doc["by_running_req"]}
    assert rows == {16}, doc["by_running_req"]
    assert main(["parse", str(s)]) == 0
    out = capsys.readouterr().out
    row = next(x for x in out.splitlines() if x.split()[:1] == ["0"])
    assert row.split()[1] == "0" and "+1 printed with no request running" in row
    sixteen = next(x for x in out.splitlines() if x.split()[:1] == ["16"])
    assert sixteen.split()[1] == "40"


def test_the_pays_rule_names_no_cause_from_a_zero_ms_per_token():
    now = PaysState(speedup=0.5, low=0.4, high=0.6, accept_len=2.0, base_ms_per_token=0.0,
                    t_cycle_ms=10.0)
    ref = PaysState(speedup=1.5, low=1.4, high=1.6, accept_len=2.0, base_ms_per_token=20.0,
                    t_cycle_ms=10.0)
    alert = speculation_no_longer_pays(now, ref)  # raised ZeroDivisionError (the report)
    assert alert is not None and "baseline faster" not in alert.text
