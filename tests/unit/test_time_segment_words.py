"""What `parse` and `parse --runs` say of a log whose time broke is what the figures do: a step
back cuts the run's figures (they count the lines after it), a jump ahead does not (each gen
throughput is the server's own interval); a summary whose time span ends before it starts says
the log's time went back."""

from __future__ import annotations

import time
from pathlib import Path

from specmon.cli import main

T0 = time.mktime(time.strptime("2026-05-28 20:26:40", "%Y-%m-%d %H:%M:%S"))


def line(t: float, gt: float) -> str:
    return (time.strftime("[%Y-%m-%d %H:%M:%S TP0] ", time.localtime(t))
            + f"Decode batch, #running-req: 1, #token: 100, token usage: 0.01, "
            f"gen throughput (token/s): {gt:.2f}, #queue-req: 0, \n")


def report_md(tmp_path: Path, texts: list[str]) -> str:
    """The Markdown report of a recording of `texts` (server "base", a line a second)."""
    from kit.snapshots import write_record

    rec = write_record(tmp_path / "r.jsonl",
                       [("base", t.rstrip("\n"), T0 + i) for i, t in enumerate(texts)])
    snap = tmp_path / "s.json"
    assert main(["export", str(rec), "-o", str(snap)]) == 0
    assert main(["report", str(snap), "--format", "md"]) == 0
    return (tmp_path / "s.report.md").read_text()


def test_a_step_back_cuts_the_run_figures_and_a_jump_ahead_does_not(tmp_path: Path,
                                                                     capsys) -> None:
    log = tmp_path / "t.log"
    back = T0 + 60 - 3600
    log.write_text("".join([line(T0 + 2 * i, 80) for i in range(30)]
                           + [line(back + 2 * i, 40) for i in range(30)]
                           + [line(back + 600 + 2 * i, 60) for i in range(30)]))
    assert main(["parse", "--runs", str(log)]) == 0
    out = capsys.readouterr().out
    # the figures: the 60 lines after the step back, both sides of the jump (40s and 60s)
    assert "median 50.00 tok/s, p10-p90 40.00-60.00, n 60" in out, out
    back_line, jump_line = [ln for ln in out.splitlines() if "time segment" in ln]
    assert "went back" in back_line and "none of the run's figures above reach behind it" \
        in back_line
    assert "jumped ahead" in jump_line and "figures above count both sides" in jump_line
    assert "no statistic spans it" not in out  # (what it said of both, true of neither fully)
    assert main(["parse", str(log)]) == 0
    span = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("time span"))
    # the summary's rows count both sides: said (they read 74.1 where the run after the step
    # ran at 60, with only "lists where" beside them)
    assert span.endswith("(the log's time went back: the rows below count the lines on both "
                         "sides of the step; `specmon parse --runs` lists where, and its "
                         "figures are the run's after it)"), span


def test_a_log_in_order_says_nothing_of_time(tmp_path: Path, capsys) -> None:
    log = tmp_path / "ok.log"
    log.write_text("".join(line(T0 + 2 * i, 80) for i in range(30)))
    assert main(["parse", str(log)]) == 0
    out = capsys.readouterr().out
    assert "went back" not in out and "time span: 2026-05-28 20:26:40 -> " in out


def test_compare_says_where_log_time_broke_in_the_words_parse_uses(tmp_path: Path,
                                                                  capsys) -> None:
    """`compare` printed the figures after a step back (n 60 of 120 lines) and said nothing
    of it; now each break is a note, in the words of `parse --runs` (one function)."""
    base, spec = tmp_path / "b.log", tmp_path / "s.log"
    back = T0 + 60 - 3600
    base.write_text("".join([line(T0 + 2 * i, 80) for i in range(30)]
                            + [line(back + 2 * i, 40) for i in range(30)]))
    spec.write_text("".join(line(T0 + 2 * i, 60) for i in range(30)))
    assert main(["compare", str(base), str(spec)]) == 0
    out = capsys.readouterr().out
    assert "median 40.00 tok/s, n 30" in out  # the figures: after the step back
    note = next(ln for ln in out.splitlines() if "time segment" in ln)
    assert note.startswith("note: baseline run 1: time segment 2 from ")
    assert "log time went back 3598 s" in note  # 20:27:38 -> 19:27:40
    assert "none of the run's figures above reach behind it" in note
    assert main(["parse", "--runs", str(base)]) == 0
    parse_line = next(ln for ln in capsys.readouterr().out.splitlines() if "time segment" in ln)
    assert parse_line.strip() == note.removeprefix("note: baseline run 1: ")


def test_the_report_says_where_log_time_broke_in_each_run(tmp_path: Path, capsys) -> None:
    """The report printed a run's figures (after a step back: n 30 of 60) without a word of
    the break; now each break follows the run's table, in the words of `parse --runs`."""
    back = T0 + 60 - 3600
    texts = [line(T0 + 2 * i, 80) for i in range(30)] + [line(back + 2 * i, 40) for i in range(30)]
    md = report_md(tmp_path, texts)
    assert "time segment 2 from " in md and "log time went back 3598 s" in md
    assert "none of the run's figures above reach behind it" in md
    assert md.index("time segment 2") > md.index("| #running-req")  # after its table
    capsys.readouterr()


def test_an_idle_servers_many_gaps_are_three_notes_and_one_line_not_one_each(tmp_path: Path,
                                                                            capsys) -> None:
    """A baseline benchmarked every ~8 min logs nothing between: a day's log held 24 jumps
    ahead, and `compare` printed 24 notes of them (the real cli991 log in tests/data). Now
    `compare` and the report list the first three jumps and every step back, then one line
    for the rest; `parse --runs`, where that line points, lists each."""
    base, spec = tmp_path / "b.log", tmp_path / "s.log"
    lines: list[str] = []
    t = T0
    for k in range(7):  # 7 bursts of 10 lines; gaps of 500 + 10k s: 6 jumps ahead
        lines += [line(t + 2 * i, 80) for i in range(10)]
        t += 18 + 500 + 10 * k
    lines += [line(t - 7200 + 2 * i, 80) for i in range(10)]  # and a step back
    base.write_text("".join(lines))
    spec.write_text("".join(line(T0 + 2 * i, 120) for i in range(30)))
    assert main(["compare", str(base), str(spec)]) == 0
    notes = [ln for ln in capsys.readouterr().out.splitlines() if "log time" in ln]
    assert [("went back" in n, "jumped ahead" in n) for n in notes] == \
        [(False, True)] * 3 + [(True, False), (False, True)], notes
    assert notes[-1] == ("note: baseline run 1: log time jumped ahead 3 more time(s), by "
                         "530-550 s, each the start of a time segment where time windows "
                         "restart (`specmon parse --runs FILE` lists them)")
    assert main(["parse", "--runs", str(base)]) == 0
    listed = [ln for ln in capsys.readouterr().out.splitlines() if "time segment" in ln]
    assert len(listed) == 7 and sum("jumped ahead" in ln for ln in listed) == 6
    md = report_md(tmp_path, lines)
    assert md.count("log time jumped ahead") == 4 and "3 more time(s)" in md
    capsys.readouterr()
