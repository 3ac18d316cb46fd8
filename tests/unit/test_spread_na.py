"""A p10-p90 spread of one or two values is no spread: every front end says N/A below
MIN_SPREAD_N samples (the live panel already did), and gives the spread from there on."""

from __future__ import annotations

import json
from pathlib import Path

from specmon.analysis.stats import MIN_SPREAD_N
from specmon.cli import main

LINE = ("[2026-05-25 17:57:{s:02d}] Decode batch, #running-req: {rr}, #token: 900, token usage: "
        "0.04, {acc}cuda graph: True, gen throughput (token/s): {g:.2f}, #queue-req: 0")


def log(path: Path, spec: bool) -> str:
    """#running-req 1: two intervals (no spread); #running-req 2: five (a spread)."""
    acc = "accept len: 2.50, accept rate: 0.70, " if spec else ""
    base = 100.0 if spec else 80.0
    vals = [(1, base), (1, base + 4)] + [(2, 2 * base + i) for i in range(5)]
    path.write_text("".join(LINE.format(s=i, rr=rr, acc=acc, g=g) + "\n"
                            for i, (rr, g) in enumerate(vals)))
    return str(path)


def test_every_front_end_says_na_for_the_spread_of_too_few_samples(tmp_path: Path,
                                                                     capsys) -> None:
    assert MIN_SPREAD_N == 3
    b, s = log(tmp_path / "b.log", False), log(tmp_path / "s.log", True)
    assert main(["parse", "--runs", b]) == 0
    rows = [x.strip() for x in capsys.readouterr().out.splitlines() if "#running-req" in x]
    assert rows == ["#running-req 1: median 82.00 tok/s, p10-p90 N/A, n 2",
                    "#running-req 2: median 162.00 tok/s, p10-p90 160.40-163.60, n 5"]
    assert main(["parse", "--runs", "--json", b]) == 0
    by_rr = json.loads(capsys.readouterr().out)["by_running_req"]
    assert [(r["p10"], r["p90"]) for r in by_rr] == [(None, None), (160.4, 163.6)]
    assert main(["parse", b]) == 0
    table = [x.split() for x in capsys.readouterr().out.splitlines()
             if x.strip()[:1].isdigit()]
    assert table == [["1", "2", "82.00", "N/A", "N/A"], ["2", "5", "162.00", "160.40", "163.60"]]
    assert main(["compare", b, s, "--running-req", "1", "--json"]) == 3  # too few: no speedup
    res = json.loads(capsys.readouterr().out)
    assert (res["baseline"]["p10"], res["speculative"]["p90"]) == (None, None)
    assert main(["compare", b, s, "--running-req", "1"]) == 3
    out = capsys.readouterr().out
    assert "median 82.00 tok/s, n 2, p10-p90 N/A" in out
    assert main(["compare", b, s, "--running-req", "2"]) == 0
    assert "median 162.00 tok/s, n 5, p10-p90 160.40-163.60" in capsys.readouterr().out
