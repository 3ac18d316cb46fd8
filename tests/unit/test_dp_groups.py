"""DP attention: one series per (run, DP group), summed per interval to the server's figure."""

from __future__ import annotations

import gzip
from itertools import combinations

import pytest
from kit.paths import TESTS

from specmon.parse.sglang import BatchRecord, parse_line
from specmon.session.state import SILENT_ROUNDS, ServerState
from specmon.session.window import current_stats, group_rows, run_stats_text

DP4 = TESTS / "data" / "sglang-longlogs" / "ascend-qwen3coder-480b-dp4.log.gz"


def dp4_lines() -> list[str]:
    with gzip.open(DP4, "rt", encoding="utf-8") as fh:
        return [ln.rstrip("\n") for ln in fh]


def decode_recs(ls: list[str]) -> list[BatchRecord]:
    out = []
    for ln in ls:
        r = parse_line(ln)
        if isinstance(r, BatchRecord) and r.kind == "decode":
            out.append(r)
    return out


def test_dp4_log_per_group_series_and_server_level_sum():
    ls = dp4_lines()
    s = ServerState("dp4", role="baseline")
    for ln in ls:
        s.apply(ln, parse_line(ln), 1.0)
    run = s.run
    recs = decode_recs(ls)
    assert sorted(k for k in run.groups if k is not None) == [0, 1, 2, 3]
    for k, g in run.groups.items():  # each group's series is exactly its own lines, in order
        mine = [r.gen_throughput for r in recs if r.dp_rank == k]
        assert [p.rec.gen_throughput for p in g.points] == mine and g.total == len(mine)
    # each server-level point is the sum of one line of each group it covers, taken in each
    # group's own order (checked by walking the groups' lines, whichever subset sums to it)
    queues = {k: [r for r in recs if r.dp_rank == k] for k in range(4)}
    heads = dict.fromkeys(queues, 0)
    for p in run.decode:
        match = None
        for subset in combinations(sorted(queues), p.groups):
            if any(heads[k] >= len(queues[k]) for k in subset):
                continue
            lines_ = [queues[k][heads[k]] for k in subset]
            if (sum(r.gen_throughput for r in lines_) == pytest.approx(p.rec.gen_throughput)
                    and sum(r.running_req for r in lines_) == p.rec.running_req):
                match = subset
                break
        assert match is not None, p
        for k in match:
            heads[k] += 1
    assert sum(len(q) - heads[k] for k, q in queues.items()) == len(run._round)
    full = [p for p in run.decode if p.groups == 4]
    assert len(full) >= 0.95 * min(len(q) for q in queues.values())  # nearly every interval
    # server level: 4 groups x 20 running = 80, throughput ~4 x 414 tok/s (INDEX.md, DP0: 413.78)
    st = current_stats(s, window_s=60)
    assert st is not None and st.running_req == 80
    assert 4 * 380 < st.median < 4 * 440
    # every line counted once: the server-level series sums to the lines' total (less the open round)
    total_lines = sum(r.gen_throughput for r in recs)
    total_points = sum(p.rec.gen_throughput for p in run.decode)
    open_round = sum(p.rec.gen_throughput for p in run._round.values())
    assert total_points + open_round == pytest.approx(total_lines)


def test_dp_accept_len_is_weighted_by_verified_tokens():
    head = "[2026-01-07 07:02:0{s} DP{d} TP{t}] Decode batch, #running-req: {rr}, #token: 100, " \
           "token usage: 0.10, accept len: {a:.2f}, accept rate: 0.50, cuda graph: True, " \
           "gen throughput (token/s): {g:.2f}, #queue-req: 0"
    s = ServerState("spec")
    for sec in range(3):
        for d, (a, g, rr) in enumerate([(3.0, 300.0, 4), (1.5, 100.0, 2)]):
            ln = head.format(s=sec, d=d, t=d * 8, rr=rr, a=a, g=g)
            s.apply(ln, parse_line(ln), 1.0)
    p = s.run.decode[-1]
    assert p.groups == 2 and p.rec.running_req == 6 and p.rec.gen_throughput == pytest.approx(400.0)
    assert p.rec.accept_len == pytest.approx((3.0 * 300 + 1.5 * 100) / 400)  # not the plain mean 2.25


def test_a_group_that_stops_logging_is_shown_as_silent():
    ls = dp4_lines()
    recs_seen = 0
    s = ServerState("dp4")
    for ln in ls:
        r = parse_line(ln)
        if isinstance(r, BatchRecord) and r.kind == "decode":
            recs_seen += 1
            if recs_seen > 600 and r.dp_rank == 3:
                continue  # DP3 stops logging
        s.apply(ln, parse_line(ln), 1.0)
    run = s.run
    assert run.groups[3].silent and run.groups[3].missed_rounds >= SILENT_ROUNDS
    assert run.silent_groups() == [3]
    st = current_stats(s)
    assert "silent DP group 3" in run_stats_text(s, st)
    assert run.decode[-1].groups == 3  # the sum covers the groups that still log
    rows = group_rows(s)
    assert [(r.dp_rank, r.silent) for r in rows] == [(0, False), (1, False), (2, False), (3, True)]
    assert rows[3].stats is None  # no line of DP3 in the last 60 s: nothing to show for it
    assert all(r.stats is not None and r.stats.running_req == 20 for r in rows[:3])


def test_a_vllm_dp_servers_first_interval_waits_for_every_engine(tmp_path, capsys):
    """vLLM DP 2 (real formats: the config line says data_parallel_size=2): the first interval
    sums both engines' lines, not engine 0's alone (parse --runs once read `#running-req 8:
    median 270.70, n 1` beside `16: n 29`, and compare printed a bs-8 row of engine 0 alone)."""
    from kit.vllm_logs import vllm_log

    from specmon.cli import main
    from specmon.session.runs import read_runs

    lines = vllm_log("0.11.0", engines=2, intervals=30, running=8)
    run = read_runs(lines, "spec").run
    assert run.args["dp_size"] == 2
    assert [p.groups for p in run.decode] == [2] * 30
    assert {p.rec.running_req for p in run.decode} == {16}
    log = tmp_path / "spec-dp2.log"
    log.write_text("\n".join(lines) + "\n")
    assert main(["parse", "--runs", str(log)]) == 0
    out = capsys.readouterr().out
    assert "#running-req 8:" not in out and ", n 30, accept len 2.82" in out
    # an engine that never logs (idle: vLLM prints nothing) holds nothing up once engine 0
    # repeats: every interval is counted, each engine 0's own
    only0 = [x for i, x in enumerate(lines) if "Engine 001:" not in x
             and not ("SpecDecoding" in x and "Engine 001:" in lines[i - 1])]
    run0 = read_runs(only0, "spec").run
    assert len(run0.decode) == 30 and {p.groups for p in run0.decode} == {1}
    assert run0.decode[0].rec.gen_throughput == run.groups[0].points[0].rec.gen_throughput


def test_an_sglang_dp_attention_servers_first_interval_waits_for_its_groups():
    """SGLang with `dp_size=4, enable_dp_attention=True` (the real DP-4 log behind its launch
    line): the first server-level point sums four groups, not the first group's line alone."""
    args = ("[2026-01-07 07:01:40] server_args=ServerArgs(model_path='Qwen/Qwen3-Coder-480B-A35B', "
            "tp_size=16, dp_size=4, enable_dp_attention=True, speculative_algorithm=None)")
    s = ServerState("dp4")
    for ln in [args, *dp4_lines()]:
        s.apply(ln, parse_line(ln), 1.0)
    assert s.run.decode[0].groups == 4
    plain = ServerState("dp4")  # without its launch line: nothing announces the groups
    for ln in dp4_lines():
        plain.apply(ln, parse_line(ln), 1.0)
    assert plain.run.decode[0].groups == 1
