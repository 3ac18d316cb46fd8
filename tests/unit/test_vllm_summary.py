"""`specmon parse` (the summary) of vLLM logs built from vLLM's own format strings
(tests/kit/vllm_logs.py, specmon.sim.vllm_formats): the same intervals, accept rate and accept
length as `parse --runs` and `compare` read from the same run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kit.vllm_logs import vllm_log

import specmon.commands.parse as parse_cmd
from specmon.cli import main


def _write(tmp_path: Path, name: str, lines: list[str]) -> str:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return str(p)


def _parse(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["parse", *args]) == 0
    return capsys.readouterr().out


def _rows(out: str) -> dict[str, list[str]]:
    """#running-req -> the row's words (the summary's tables)."""
    return {x.split()[0]: x.split() for x in out.splitlines() if re.match(r"\s+\d+\s+\d", x)}


def test_an_f1_speculative_log_is_summarised_as_speculative_with_its_counts(tmp_path, capsys):
    """vLLM 0.8.3/0.8.4 (F1: `Draft acceptance rate, Accepted, Drafted`, no mean length): every
    interval has its spec line, so the summary's rows are speculative and it prints the counted
    accept rate and the accept length every other front end derives (1 + Accepted x k /
    Drafted, k from the config line); it once put every interval under "no 'SpecDecoding
    metrics' line in the interval" and printed neither."""
    log = _write(tmp_path, "spec083.log", vllm_log("0.8.3", intervals=30, running=4))
    out = _parse(capsys, log)
    assert "speculative (" in out and "baseline (" not in out and "no 'SpecDecoding" not in out
    assert _rows(out)["4"][1] == "30"
    runs = _parse(capsys, "--runs", log)
    runs_len = re.search(r"#running-req 4: .* n 30, accept len (\d\.\d\d)", runs)
    assert runs_len is not None
    assert f"bonus included): median {runs_len.group(1)}, " in out
    m = re.search(r"accept rate \(vLLM's counts, accepted / drafted over the log\): (\d\.\d{3}) "
                  r"\(([\d,]+) / ([\d,]+)\)", out)
    assert m is not None
    acc, dra = (int(x.replace(",", "")) for x in m.groups()[1:])
    assert m.group(1) == f"{acc / dra:.3f}" and dra > 0
    # without its config line (k unknown) the length is not derivable: N/A, the rest stays
    out = _parse(capsys, _write(tmp_path, "nocfg.log",
                                vllm_log("0.8.3", intervals=30, running=4, config=False)))
    assert "speculative (" in out and "bonus included): median N/A" in out
    assert f"accept rate (vLLM's counts, accepted / drafted over the log): {acc / dra:.3f}" in out


def test_a_run_read_in_pieces_keeps_each_engine_line_with_its_spec_line(tmp_path, capsys,
                                                                        monkeypatch):
    """`parse` hands a run to the summary in pieces: an engine line at a piece's end is joined
    with the spec line at the next one's start (it was counted without it, its counts lost)."""
    log = _write(tmp_path, "spec011.log", vllm_log("0.11.0", intervals=40, running=4))
    whole = _parse(capsys, log)
    monkeypatch.setattr(parse_cmd, "RUN_CHUNK", 1500)  # a piece every ~3 intervals
    pieces = _parse(capsys, log)
    assert pieces == whole and "baseline (" not in pieces


def test_the_summary_counts_a_speculative_runs_intervals_as_parse_runs_and_compare(tmp_path,
                                                                                   capsys):
    """A 0.5 s log whose first interval is prefill only (no drafts: 0.9+ prints no spec line):
    the summary's speculative row at bs 4 read n 39 where `parse --runs` and `compare` read 40.
    Every interval of a speculative run counts, and the row says how many had no spec line."""
    spec = _write(tmp_path, "spec.log", vllm_log("0.33.0", intervals=40, running=4,
                                                  interval_s=0.5, prefill_first=True))
    base = _write(tmp_path, "base.log", vllm_log("0.33.0", spec=False, intervals=40, running=4,
                                                  interval_s=0.5))
    out = _parse(capsys, spec)
    row = _rows(out)["4"]
    assert row[1] == "40" and "(1 of them without a SpecDecoding line: no drafts)" in " ".join(row)
    assert "baseline (" not in out
    assert ", n 40, accept len" in _parse(capsys, "--runs", spec)
    assert main(["compare", base, spec]) == 0
    table = {x.split()[0]: x.split() for x in capsys.readouterr().out.splitlines()
             if re.match(r"\s+4\s", x)}
    assert table["4"][-1] == "40"  # n spec
    assert _rows(_parse(capsys, base))["4"][1] == "40"

    # a run whose config names a method is speculative even where no interval drafted
    quiet = [x for x in vllm_log("0.33.0", intervals=10, running=4) if "SpecDecoding" not in x]
    out = _parse(capsys, _write(tmp_path, "quiet.log", quiet))
    assert "speculative (" in out and "(10 of them without a SpecDecoding line" in out


@pytest.mark.parametrize(("interval_s", "said"), [(0.5, "~0.5 s"), (10.0, "~10.0 s"), (2.0, "~2.0 s")])
def test_the_summary_says_the_stats_interval_the_log_shows(tmp_path, capsys, interval_s, said):
    """vLLM's stats interval as measured from the log (VLLM_LOG_STATS_INTERVAL=0.5 read "~10 s"
    before): vLLM stamps whole seconds, so a 0.5 s log's gaps read 0 and 1 s; an idle stretch
    (nothing printed) is no interval. Two DP engines: each engine's own gaps."""
    lines = vllm_log("0.33.0", engines=2, intervals=41, running=4, interval_s=interval_s,
                     idle=(20, 1200.0))  # 20 idle minutes in the middle
    out = _parse(capsys, _write(tmp_path, "spec.log", lines))
    assert f"stats interval: {said} (measured: the mean gap between an engine's lines" in out
    assert "~10 s" not in out
    one = _parse(capsys, _write(tmp_path, "one.log", lines[:4]))  # one line per engine
    assert "stats interval: N/A (no engine printed two lines at different times)" in one


def test_a_spec_log_without_accept_length_is_speculative_everywhere(tmp_path, capsys,
                                                                    monkeypatch):
    """vLLM 0.8.3/0.8.4 print no accept length, and without a config line (or with ngram's)
    none is derived: `parse` called the run speculative, `baseline record` stored it as a
    baseline and the panel showed no acceptance rows (the test was `accept_len is not None`)."""
    from kit.vllm_logs import vllm_log

    from specmon.cli import main
    from specmon.parse.sglang import parse_line
    from specmon.session.baselines import BaselineStore
    from specmon.session.state import ServerState

    lines = vllm_log("0.8.3", config=False, intervals=40)
    state = ServerState("s")
    for i, ln in enumerate(lines):
        state.apply(ln, parse_line(ln), 1e9 + i)
    assert state.last_decode is not None and state.last_decode.accept_len is None
    assert state.is_speculative
    log = tmp_path / "spec083.log"
    log.write_text("\n".join(lines) + "\n")
    monkeypatch.setenv("SPECMON_DATA_DIR", str(tmp_path / "data"))
    assert main(["baseline", "record", "s83", "--log", str(log)]) == 0
    rec = BaselineStore.open_default().get("s83")
    assert rec is not None and rec.role == "speculative"
    capsys.readouterr()


def test_compare_sees_swapped_logs_without_accept_length(tmp_path, capsys):
    """compare's "the two logs look swapped" read speculation off accept len: a 0.8.3 spec
    log without a config line (no accept length) given as the baseline was not seen."""
    import json

    from kit.vllm_logs import vllm_log

    from specmon.cli import main

    spec, base = tmp_path / "spec.log", tmp_path / "base.log"
    spec.write_text("\n".join(vllm_log("0.8.3", config=False, intervals=30)) + "\n")
    base.write_text("\n".join(vllm_log("0.8.3", spec=False, intervals=30)) + "\n")
    main(["compare", str(spec), str(base), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert any("look swapped" in n for n in doc["notes"]), doc["notes"]


@pytest.mark.parametrize(("version", "said_summary", "said_compare"), [
    ("0.8.3", "of them derived: vLLM 0.8.3-0.8.4 print no length",
     "accept lengths derived (vLLM 0.8.3-0.8.4 print none)"),
    ("0.8.5", "of them as vLLM 0.8.5 printed them, without the bonus token: 1 added",
     "accept lengths as vLLM 0.8.5 printed them, without the bonus token"),
])
def test_an_accept_length_not_as_printed_is_said_by_parse_and_compare(
        tmp_path, capsys, version, said_summary, said_compare):
    """compare and the report said 0.8.5's added bonus token; parse's summary said nothing,
    and no front end said a 0.8.3 length was derived from the counts and k."""
    import json

    from kit.vllm_logs import vllm_log

    from specmon.cli import main

    spec, base = tmp_path / "spec.log", tmp_path / "base.log"
    spec.write_text("\n".join(vllm_log(version, intervals=30)) + "\n")
    base.write_text("\n".join(vllm_log(version, spec=False, intervals=30)) + "\n")
    assert main(["parse", str(spec)]) == 0
    assert said_summary in capsys.readouterr().out
    main(["compare", str(base), str(spec), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert any(said_compare in n for n in doc["notes"]), doc["notes"]


@pytest.mark.parametrize(("version", "said"), [
    ("0.8.3", "(1 of them with a SpecDecoding line that drafted nothing)"),
    ("0.8.5", "(1 of them with a SpecDecoding line that drafted nothing)"),
    ("0.11.0", "(1 of them without a SpecDecoding line: no drafts)"),
])
def test_a_prefill_only_interval_is_said_in_every_release(tmp_path, capsys, version, said):
    """0.9+ prints no spec line for an interval without drafts, and the summary said so; 0.8.x
    prints one with `Drafted: 0` (or nan), and the same interval counted without a word."""
    from kit.vllm_logs import vllm_log

    from specmon.cli import main

    log = tmp_path / "p.log"
    log.write_text("\n".join(vllm_log(version, prefill_first=True, intervals=20)) + "\n")
    assert main(["parse", str(log)]) == 0
    row = next(x for x in capsys.readouterr().out.splitlines() if x.split()[:2] == ["8", "20"])
    assert said in row, row
