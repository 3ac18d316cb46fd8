"""Runs and log time: every statistic inside one run, timed by the timestamps SGLang printed."""

from __future__ import annotations

import gzip
from datetime import datetime

import pytest
from kit.paths import TESTS

from specmon.parse.sglang import BatchRecord, parse_line
from specmon.session.state import ServerState, log_time
from specmon.session.window import current_stats, run_stats_text, speedup, window_points
from specmon.sim import formats

DATA = TESTS / "data" / "sglang-longlogs"
# Two real runs of one box, one after the other (INDEX.md: same smoke workload, separate runs)
RUN1 = "r9700-qwen3coder-reap25b-bs1.log.gz"
RUN2 = "r9700-qwen3coder30b-ream-bs1.log.gz"


def lines(name: str) -> list[str]:
    with gzip.open(DATA / name, "rt", encoding="utf-8") as fh:
        return [ln.rstrip("\n") for ln in fh]


def restart_line(stamp: str) -> str:
    """The start-up line SGLang prints, as the simulated host prints it (format of 0.5.11)."""
    msg = formats.server_args_message("0.5.11", {"model_path": "Qwen3-Coder-30B", "tp_size": 2,
                                                 "port": 30000})
    return f"[{stamp}] {msg}"


def ts(line: str) -> float:
    return datetime.fromisoformat(line[1:20]).timestamp()


def decode_values(ls: list[str]) -> list[tuple[float, float, int]]:
    out = []
    for ln in ls:
        rec = parse_line(ln)
        if isinstance(rec, BatchRecord) and rec.kind == "decode":
            out.append((ts(ln), rec.gen_throughput, rec.running_req))
    return out


def test_two_runs_read_as_history_window_holds_last_run_at_log_times():
    run1, run2 = lines(RUN1), lines(RUN2)
    log = [*run1, restart_line("2026-05-25 18:04:00"), *run2]
    s = ServerState("base", role="baseline")
    received = 2_000_000_000.0  # history read on connect: everything arrives at once, later
    for ln in log:
        s.apply(ln, parse_line(ln), received)
    assert [r.index for r in s.runs] == [1, 2]
    r1, r2 = s.runs
    assert r1.end_reason == "next_run" and r2.start_reason == "server_args"
    assert r2.start_t == ts("[2026-05-25 18:04:00]")
    assert r2.since_text().startswith("run 2 since ") and r2.since_text().endswith(":04:00")
    # points sit at the times SGLang printed, with the receive time kept beside them
    exp2 = decode_values(run2)
    assert [(p.t, p.rec.gen_throughput) for p in r2.decode] == [(t, g) for t, g, _ in exp2]
    assert all(p.received == received and p.t_log for p in r2.decode)
    assert r1.decode_total == len(decode_values(run1))
    # "last 60 s" = the last 60 s of run 2's log time; nothing of run 1
    last = exp2[-1][0]
    want = sorted(g for t, g, rr in exp2 if t >= last - 60 and rr == 1)
    st = current_stats(s, window_s=60)
    assert st is not None and st.n == len(want) and 3 <= st.n < len(exp2)
    assert st.median == pytest.approx(want[len(want) // 2] if len(want) % 2 else
                                      (want[len(want) // 2 - 1] + want[len(want) // 2]) / 2)
    # a whole-run window is still only run 2 (run 1 had other throughputs)
    whole = window_points(s, None, float("inf"))
    assert len(whole) == len(exp2) and min(p.t for p in whole) >= r2.start_t
    assert run_stats_text(s, st) == f"{r2.since_text()}, n {st.n}"


def test_restart_starts_a_fresh_window_too_few_samples_is_na():
    run1 = lines(RUN1)
    s = ServerState("base", role="baseline")
    for ln in run1:
        s.apply(ln, parse_line(ln), 1.0)
    assert current_stats(s).n >= 3
    s.process_exited(-15)
    assert s.runs[-1].end_reason == "exit" and s.runs[-1].exit_code == -15
    s.apply(restart_line("2026-05-25 18:04:00"), parse_line(restart_line("2026-05-25 18:04:00")), 2.0)
    for ln in [x for x in lines(RUN2) if "Decode batch" in x][:2]:
        s.apply(ln, parse_line(ln), 3.0)
    st = current_stats(s)
    assert s.runs[-1].index == 2 and st is not None and st.n == 2  # not run 1's numbers
    assert run_stats_text(s, st).endswith(", n 2")
    # the speedup against a speculative server needs >= 3 samples of this run: N/A
    spec = ServerState("spec", role="speculative")
    for ln in run1:
        spec.apply(ln, parse_line(ln), 1.0)
    assert speedup(s, spec, 0.0) is None


def test_process_start_then_server_args_is_one_run():
    s = ServerState("b")
    s.process_started(10.0)
    line = restart_line("2026-05-25 18:04:00")
    s.apply(line, parse_line(line), 11.0)
    assert len(s.runs) == 1 and s.runs[0].start_reason == "process_start"
    assert s.runs[0].args["tp_size"] == 2


def test_log_time_variants_and_receive_time_fallback():
    rec = parse_line("[2026-05-25 18:04:00.250 TP0] Decode batch, #running-req: 1, #token: 9, "
                     "token usage: 0.00, cuda graph: True, gen throughput (token/s): 20.00, #queue-req: 0")
    assert log_time(rec, 0.0) == datetime(2026, 5, 25, 18, 4, 0, 250000).timestamp()
    # clock only (0.3.x): the date is the receive day's, the nearest to the receive time
    rec = parse_line("[23:59:58 TP0] Decode batch. #running-req: 1, #token: 9, token usage: 0.00, "
                     "gen throughput (token/s): 20.00, #queue-req: 0")
    recv = datetime(2026, 5, 26, 0, 0, 3).timestamp()
    assert log_time(rec, recv) == datetime(2026, 5, 25, 23, 59, 58).timestamp()
    # no timestamp at all (custom logging config): receive time, marked as such
    s = ServerState("b")
    text = ("Decode batch, #running-req: 1, #token: 9, token usage: 0.00, cuda graph: True, "
            "gen throughput (token/s): 20.00, #queue-req: 0")
    s.apply(text, parse_line(text), 123.5)
    p = s.run.decode[-1]
    assert p.t == 123.5 and not p.t_log and s.run.untimed == 1


async def test_history_read_on_connect_through_the_real_tail(tmp_path):
    """`connect local --log base=FILE` on a log holding two runs: the tailer reads the history
    at once (received within a second), the window holds only the last run at its log times."""
    import asyncio

    from specmon.feeds.common import pump_tail
    from specmon.hosts.local import LocalHost
    from specmon.sources.tail import LogTailer, TailSpec

    run1, run2 = lines(RUN1), lines(RUN2)
    path = tmp_path / "base.log"
    path.write_text("\n".join([*run1, restart_line("2026-05-25 18:04:00"), *run2]) + "\n")
    from specmon.session.fleet import FleetSession

    fleet = FleetSession(["t"])  # the session model, as connect feeds it
    fleet.declare_server("t", "base", "baseline", str(path))
    s = fleet.server("t", "base")
    tailer = LogTailer(LocalHost("t"), [TailSpec("base", str(path))], history_lines=None)
    task = asyncio.create_task(pump_tail(tailer, "t", fleet))
    n_decode = len(decode_values(run1)) + len(decode_values(run2))
    for _ in range(200):
        await asyncio.sleep(0.05)
        if s.decode_total >= n_decode:
            break
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert s.decode_total == n_decode and [r.index for r in s.runs] == [1, 2]
    received = [p.received for p in s.decode]
    assert max(received) - min(received) < 5  # read at once ...
    exp2 = decode_values(run2)
    assert [p.t for p in s.run.decode] == [t for t, _, _ in exp2]  # ... placed at its real times
    last = exp2[-1][0]
    st = current_stats(s, window_s=60)
    assert st is not None and st.n == len([1 for t, _, rr in exp2 if t >= last - 60 and rr == 1])


def test_unreadable_timestamps_fall_back_to_receive_time():
    s = ServerState("b")
    for stamp in ("0001-01-01 00:00:00", "2026-13-40 99:99:99"):
        text = (f"[{stamp} TP0] Decode batch, #running-req: 1, #token: 9, token usage: 0.00, "
                "cuda graph: True, gen throughput (token/s): 20.00, #queue-req: 0")
        s.apply(text, parse_line(text), 50.0)
    assert [(p.t, p.t_log) for p in s.run.decode] == [(50.0, False), (50.0, False)]


def test_a_run_owns_the_gpu_samples_taken_while_it_ran():
    from specmon.parse.gpu_sample import GpuSample
    from specmon.session.state import HostState

    sess = HostState()
    s = sess.server("base")
    for ln in [restart_line("2026-05-25 18:00:00"), *lines(RUN1)[:5]]:
        s.apply(ln, parse_line(ln), 1.0)
    sess.set_gpus([GpuSample(ts=1.0, index=0, power_limit_w=700.0)])
    s.process_exited(-15)
    sess.set_gpus([GpuSample(ts=2.0, index=0, power_limit_w=500.0)])  # between runs: nobody's
    ln = restart_line("2026-05-25 18:04:00")
    s.apply(ln, parse_line(ln), 3.0)
    sess.set_gpus([GpuSample(ts=4.0, index=0, power_limit_w=330.0)])
    r1, r2 = s.runs
    assert [g.power_limit_w for g in r1.gpu_samples] == [700.0]
    assert [g.power_limit_w for g in r2.gpu_samples] == [330.0]


def test_offline_clock_only_stamps_pass_midnight_and_show_no_invented_date(tmp_path):
    """SGLang 0.3.x prints `[HH:MM:SS TP0]`. Offline there is no receive day: the times were
    placed by the day nearest to 1970-01-01 00:00 (a log from 10:00 to 00:05 read 23:59 as the
    day before: a step back in time that never happened), and shown as 1969/1970 dates. The
    clock going back by over half a day is midnight; a real step back still is one."""
    import subprocess
    import sys

    from specmon.session.runs import run_row

    def line(clock: str, gt: float) -> str:
        return (f"[{clock} TP0] Decode batch. #running-req: 8, #token: 9, token usage: 0.00, "
                f"gen throughput (token/s): {gt:.2f}, #queue-req: 0")

    # every 30 s from 11:00:00 to 00:10:00 (13 h 10 min, across midnight)
    clocks = [f"{(11 + i // 120) % 24:02d}:{i // 2 % 60:02d}:{i % 2 * 30:02d}" for i in range(1581)]
    s = ServerState("b")
    for c in clocks:
        text = line(c, 90.0)
        s.apply(text, parse_line(text), 0.0)
    row = run_row(s.runs[-1])
    assert (row["start"], row["end"]) == ("11:00:00", "00:10:00 (day 2)")
    assert row["time_segments"] == []  # midnight: no step back
    back = ServerState("b")
    for c in ["12:00:00", "12:00:05", "11:00:00", "11:00:05"]:  # an hour back: a step back
        text = line(c, 90.0)
        back.apply(text, parse_line(text), 0.0)
    assert len(run_row(back.runs[-1])["time_segments"]) == 1
    log = tmp_path / "old.log"
    log.write_text("".join(line(c, 90.0 + i % 3) + "\n" for i, c in enumerate(clocks)))
    out = subprocess.run([sys.executable, "-m", "specmon", "parse", "--runs", str(log)],
                         capture_output=True, text=True, timeout=60).stdout
    assert "run 1: 11:00:00 -> 00:10:00 (day 2)" in out and "1970" not in out and "1969" not in out
