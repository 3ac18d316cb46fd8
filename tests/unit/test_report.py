"""`specmon report`: the key figures a person pastes into a thread, checked against known data."""

from __future__ import annotations

import re

from kit.snapshots import (
    BASE_ARGS,
    SPEC_ARGS,
    T0,
    decode_line,
    reference_session,
    write_record,
)

from specmon.cli import main
from specmon.export.snapshot import snapshot_from_record, write_snapshot
from specmon.session.window import speedup

BASE_BS1 = [88.0, 89.0, 90.0, 88.5, 89.5]
SPEC_BS1 = [93.0, 94.0, 95.0, 94.5, 93.5]


def _rows():
    rows = [("base", BASE_ARGS, T0), ("spec", SPEC_ARGS, T0 + 0.5)]
    rows += [("base", decode_line(v), T0 + 1 + i) for i, v in enumerate(BASE_BS1)]
    rows += [("base", decode_line(400.0 + i, rr=8), T0 + 10 + i) for i in range(5)]
    rows += [("spec", decode_line(v, accept=2.4), T0 + 1.5 + i) for i, v in enumerate(SPEC_BS1)]
    return sorted(rows, key=lambda r: r[2])


def _gpus():
    samples = [(1980, 300.0, 60, 0), (1455, 690.0, 70, 0x4), (1455, 700.0, 75, 0x4)]
    return [(T0 + 2 * i, [{"index": 0, "name": "NVIDIA H200", "ts": T0 + 2 * i, "clock_sm": c,
                           "max_clock_sm": 1980, "power_w": p, "power_limit_w": 700.0,
                           "temp_gpu": t, "clocks_event_reasons": r}])
            for i, (c, p, t, r) in enumerate(samples)]


def _snapshot(tmp_path):
    snap = snapshot_from_record(write_record(tmp_path / "r.jsonl", _rows(), _gpus()), host="gpu-7")
    snap.alerts = [{"t": T0 + 12, "server": "spec", "kind": "drift",
                    "message": "baseline decode throughput 11.2% below its stored baseline",
                    "cause": "NCCL_ALGO unset (was Ring)"}]
    return write_snapshot(snap, tmp_path / "s.json")


def _row(md: str, first: str) -> list[str]:
    for line in md.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == first:
            return cells
    raise AssertionError(f"no row starting {first!r}")


def test_markdown_report_has_the_key_figures(tmp_path, capsys):
    path = _snapshot(tmp_path)
    assert main(["report", str(path)]) == 0
    md = (tmp_path / "s.report.md").read_text()
    assert md.startswith("# specmon report: gpu-7")
    # servers and their profiles
    assert "| base | baseline | ready | /var/log/base.log | Qwen/Qwen3-8B | 1 | N/A |" in md
    assert "| spec | speculative | ready | /var/log/spec.log | Qwen/Qwen3-8B | 1 | EAGLE3 steps 2 " \
           "topk 1 draft 3 |" in md
    # throughput per batch size, with spread and n, never mixed across sizes
    base_sec = md.split("### base (baseline)")[1].split("###")[0]
    assert _row(base_sec, "1")[:5] == ["1", "5", "89.00", "88.20", "89.80"]
    assert _row(base_sec, "8")[:5] == ["8", "5", "402.00", "400.40", "403.60"]
    spec_sec = md.split("### spec (speculative)")[1].split("##")[0]
    assert _row(spec_sec, "1")[:5] == ["1", "5", "94.00", "93.20", "94.80"]
    assert _row(spec_sec, "1")[6] == "2.40"
    # speedup: the same numbers as the live speedup bar would compute over the whole session
    ref = reference_session(_rows())
    sp = speedup(ref.servers["base"], ref.servers["spec"], now=T0 + 20, window_s=1e6)
    assert sp is not None and sp.running_req == 1
    assert f"**Speedup {sp.ratio:.3f}×** (95% {sp.low:.3f}–{sp.high:.3f}) at bs 1" in md
    assert f"{94 / 89:.3f}×" == f"{sp.ratio:.3f}×"
    assert "| 8 |" not in md.split("## Speedup")[1].split("##")[0]  # bs 8 only on one side
    # accept length and the recomputed rate: (2.4 - 1) / (3 - 1)
    assert "median 2.40, p10 2.40, p90 2.40, n 5" in md and "draft tokens 3) 0.70." in md
    # GPU clocks and power
    assert _row(md, "0") == ["0", "NVIDIA H200", "3", "1455", "1455–1980", "1980", "690", "700",
                             "700", "75", "SwPowerCap 67%"]
    # alerts with causes
    assert "| baseline decode throughput 11.2% below its stored baseline | NCCL_ALGO unset " \
           "(was Ring) |" in md
    # charts: SVG files made by pygal, linked from the report, one series per server and bs
    assert "![decode throughput over log time, per run](s.report-throughput.svg)" in md
    svg = (tmp_path / "s.report-throughput.svg").read_text()
    assert "pygal" in svg and "base (baseline) run 1 bs 1" in svg
    assert "spec (speculative) run 1 bs 1" in svg and "base (baseline) run 1 bs 8" in svg
    assert not re.search(r"<script[^>]+src=", svg)  # no external JavaScript
    # GPU charts per server (tp 1 at GPU 0: base's by its arguments)
    gpu_svg = (tmp_path / "s.report-gpu-clock-0-base.svg").read_text()
    assert "base (1 GPU) median" in gpu_svg and "SM clock MHz" in gpu_svg
    power_svg = (tmp_path / "s.report-gpu-power-0-base.svg").read_text()
    assert "power W" in power_svg
    capsys.readouterr()


def test_html_report_is_one_self_contained_file(tmp_path, capsys):
    path = _snapshot(tmp_path)
    out = tmp_path / "r.html"
    assert main(["report", str(path), "--format", "html", "-o", str(out)]) == 0
    html = out.read_text()
    assert html.startswith("<!DOCTYPE html>") and html.count("<svg") == 3
    assert "<td>89.00</td>" in html and "<b>Speedup 1.056×</b>" in html
    assert "NCCL_ALGO unset (was Ring)" in html
    assert not list(tmp_path.glob("r-*.svg"))
    capsys.readouterr()


def test_report_says_na_rather_than_inventing(tmp_path, capsys):
    rows = [("solo", decode_line(50.0 + i), T0 + i) for i in range(4)]
    snap = snapshot_from_record(write_record(tmp_path / "r.jsonl", rows))
    path = write_snapshot(snap, tmp_path / "solo.json.gz")
    assert main(["report", str(path), "-o", "-"]) == 0
    md = capsys.readouterr().out
    assert "Speedup: N/A (needs one baseline and one speculative server)." in md
    assert "N/A: no GPU samples in this snapshot." in md
    assert "N/A: no decode line carries an accept length or acceptance counts." in md
    assert "None recorded in this snapshot, and none raised when its lines were played" in md
    assert "role source: inferred: decode lines carry no accept len" in md


def test_json_report_is_the_same_document_with_runs_and_the_speedup(tmp_path, capsys):
    import json

    path = _snapshot(tmp_path)
    assert main(["report", str(path), "--format", "json", "-o", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    sp = doc["speedup"]
    assert {k: sp[k] for k in ("running_req", "base_run", "spec_run", "n_base", "n_spec")} == \
        {"running_req": 1, "base_run": 1, "spec_run": 1, "n_base": 5, "n_spec": 5}
    assert sp["value"] == round(94 / 89, 3) and sp["ci95"][0] < sp["value"] < sp["ci95"][1]
    assert sp["conditions_differ"] == []
    servers = {s["name"]: s for s in doc["servers"]}
    assert [s["role"] for s in doc["servers"]] == ["baseline", "speculative"]
    [run] = servers["base"]["runs"]
    assert [(w["running_req"], w["n"], w["median_tok_s"]) for w in run["by_running_req"]] == \
        [(1, 5, 89.0), (8, 5, 402.0)]
    assert servers["spec"]["speculative"] == "EAGLE3 steps 2 topk 1 draft 3"
    assert any(line.startswith("SGLang N/A, model Qwen/Qwen3-8B, tp 1")
               for line in servers["base"]["fingerprint"])  # readable lines, not a dict dump
    # the Markdown says the same numbers
    assert main(["report", str(path), "-o", "-"]) == 0
    md = capsys.readouterr().out
    assert f"**Speedup {sp['value']:.3f}×** (95% {sp['ci95'][0]:.3f}–{sp['ci95'][1]:.3f}) at bs 1: " \
           "spec run 1 94.00 / base run 1 89.00" in md


def test_history_read_at_connect_is_charted_on_log_time_per_run(tmp_path):
    from kit.snapshots import write_record

    from specmon.export.report import report_model, throughput_series
    from specmon.export.snapshot import snapshot_from_record

    # 20 lines printed one a minute across a restart, all received at the same instant (the
    # history a connect reads): the chart spreads them over the 19 minutes SGLang printed
    lines = [BASE_ARGS] + [decode_line(88.0 + i % 3) for i in range(10)] + \
        [BASE_ARGS.replace("2026-02-26 19:16:40", "2026-02-26 19:27:00")] + \
        [decode_line(62.0 + i % 3) for i in range(10)]
    minute = 0

    def stamped(text: str) -> str:
        nonlocal minute
        if "server_args" in text:
            return text
        minute += 1
        return text.replace("19:16:45", f"{19 + (16 + minute) // 60}:{(16 + minute) % 60:02d}:45")

    rows = [("base", stamped(x), T0) for x in lines]
    snap = snapshot_from_record(write_record(tmp_path / "r.jsonl", rows))
    series = dict(throughput_series(report_model(snap)))
    assert sorted(series) == ["base (baseline) run 1 bs 1", "base (baseline) run 2 bs 1"]
    xs1 = [x for x, _ in series["base (baseline) run 1 bs 1"]]
    xs2 = [x for x, _ in series["base (baseline) run 2 bs 1"]]
    assert xs1 == [float(i) for i in range(10)]  # one a minute from the first line, not all 0
    assert xs2[0] == 10.0 and xs2[-1] == 19.0
    assert {y for _, y in series["base (baseline) run 2 bs 1"]} == {62.0, 63.0, 64.0}


def test_report_says_when_a_run_has_no_launch_line(tmp_path):
    """The report's speedup carries compare's caveat: the baseline was read without its
    server_args line, so its conditions cannot be compared."""
    from kit.snapshots import write_record
    from kit.ui import ARGS_SPEC, decode_line

    t0 = 1.78e9
    rows = [("spec", ARGS_SPEC, t0)]
    for i in range(30):
        rows.append(("base", decode_line(i, 88.0 + (i % 3) * 0.2), t0 + 1 + i))
        rows.append(("spec", decode_line(i, 94.0 + (i % 3) * 0.2, 2.5), t0 + 1 + i))
    rec = write_record(tmp_path / "r.jsonl", rows)
    assert main(["export", str(rec), "-o", str(tmp_path / "s.json")]) == 0
    assert main(["report", str(tmp_path / "s.json"), "--format", "md"]) == 0
    md = (tmp_path / "s.report.md").read_text()
    assert ("**conditions unknown**: the baseline's server args (no launch line in its run): the "
            "speedup may measure more than speculation.") in md.splitlines()


def test_a_live_snapshot_that_lost_the_launch_line_still_knows_the_args(tmp_path):
    """A live snapshot keeps only its last lines: the server's `args` it carries are those of
    the current run, so the report compares them (no false "conditions unknown")."""
    import json

    from kit.snapshots import write_record
    from kit.ui import ARGS_BASE, ARGS_SPEC, decode_line

    t0 = 1.78e9
    rows = [("base", ARGS_BASE, t0), ("spec", ARGS_SPEC, t0)]
    for i in range(30):
        rows.append(("base", decode_line(i, 88.0 + (i % 3) * 0.2), t0 + 1 + i))
        rows.append(("spec", decode_line(i, 94.0 + (i % 3) * 0.2, 2.5), t0 + 1 + i))
    rec = write_record(tmp_path / "r.jsonl", rows)
    snap = tmp_path / "s.json"
    assert main(["export", str(rec), "-o", str(snap)]) == 0
    doc = json.loads(snap.read_text())
    for sd in doc["servers"]:  # as if --log-lines had dropped the launch lines
        assert sd["args"]["tp_size"] == 8
        sd["lines"] = [e for e in sd["lines"] if "server_args=" not in e[1]]
    snap.write_text(json.dumps(doc))
    assert main(["report", str(snap), "--format", "json"]) == 0
    rep = json.loads((tmp_path / "s.report.json").read_text())
    assert rep["speedup"]["conditions_unknown"] == []
    assert rep["speedup"]["value"] is not None


def test_a_huge_model_path_is_cut_in_the_servers_table(tmp_path):
    """A model path of 200 kB (a hostile launch line) is one cell, cut, not the whole page."""
    huge = "org/" + "m" * 200_000
    rows = [(n, a.replace("Qwen/Qwen3-8B", huge), t) if t == T0 or t == T0 + 0.5 else (n, a, t)
            for n, a, t in _rows()]
    snap = snapshot_from_record(write_record(tmp_path / "r.jsonl", rows, _gpus()), host="gpu-7")
    path = write_snapshot(snap, tmp_path / "s.json")
    assert main(["report", str(path)]) == 0
    md = (tmp_path / "s.report.md").read_text()
    cell = _row(md, "base")[4]
    assert cell.startswith("org/mmm") and cell.endswith("...") and len(cell) <= 160
    assert len(md) < 100_000


def test_a_cut_earlier_run_never_borrows_the_current_runs_args(tmp_path):
    """A live snapshot whose last lines hold a restart: decode lines of a previous launch (its
    launch line cut), then the current launch (tp 2). The snapshot's `args` are the current
    run's; the report and the replay both leave the earlier run's args unknown (before, the
    replay gave it the current run's) and agree run by run."""
    import json

    from kit.snapshots import write_record
    from kit.ui import decode_line

    from specmon.export.report import report_model
    from specmon.export.snapshot import read_snapshot
    from specmon.feeds.replay import ReplayFeed, replay_session
    from specmon.session.fleet import FleetSession

    t0 = 1.78e9
    launch = ("[2026-05-25 17:56:00] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', "
              "tp_size=2, port=30000)")
    rows = [("base", decode_line(i, 70.0), t0 + i) for i in range(5)]
    rows.append(("base", launch, t0 + 6))
    rows += [("base", decode_line(i, 88.0), t0 + 7 + i) for i in range(5)]
    snap_path = tmp_path / "s.json"
    assert main(["export", str(write_record(tmp_path / "r.jsonl", rows)), "-o",
                 str(snap_path)]) == 0
    snap = read_snapshot(snap_path)
    assert snap.servers[0].args["tp_size"] == 2  # the live (current) run's args

    reported = report_model(snap).states["base"].runs
    fleet = FleetSession([snap.host])
    fleet.reset_host(snap.host, replay_session(snap))
    feed = ReplayFeed(snap, playing=False)
    feed._push_due(fleet, feed.end)
    replayed = fleet.host(snap.host).session.server("base").runs
    assert [r.args.get("tp_size") for r in reported] == [None, 2]
    assert [r.args.get("tp_size") for r in replayed] == [None, 2]
    assert main(["report", str(snap_path), "--format", "json"]) == 0
    runs = json.loads((tmp_path / "s.report.json").read_text())["servers"][0]["runs"]
    assert "no server_args line" in runs[0]["args"] and "tp 2" in runs[1]["args"]


def test_report_and_replay_play_the_same_events(tmp_path):
    """The report's session model and the replay's, played to the end, agree on what the
    snapshot holds: the exit that ended the run (the report ignored it), the GPUs the server
    owns (the replay never declared the pids) and each run's figures."""
    from specmon.export.report import report_model
    from specmon.export.snapshot import snapshot_from_record
    from specmon.feeds.replay import ReplayFeed, replay_session
    from specmon.session.fleet import FleetSession
    snap = snapshot_from_record(write_record(tmp_path / "r.jsonl", _rows(), _gpus()), host="gpu-7")
    snap.servers[0].exit_code = 1
    snap.servers[0].pids = [101, 102]
    reported = report_model(snap)
    fleet = FleetSession([snap.host])
    fleet.reset_host(snap.host, replay_session(snap))
    feed = ReplayFeed(snap, playing=False)
    feed._declare(fleet)  # what `run` does first
    feed._push_due(fleet, feed.end)
    replayed = fleet.host(snap.host).session
    for s in snap.servers:
        rep, rpl = reported.states[s.name], replayed.server(s.name)
        assert [(r.end_reason, r.exit_code, r.lines_total) for r in rep.runs] == \
            [(r.end_reason, r.exit_code, r.lines_total) for r in rpl.runs]
        assert rep.pids == rpl.pids == set(s.pids)
    base = reported.states[snap.servers[0].name]
    assert base.runs[-1].end_reason == "exit" and base.runs[-1].exit_code == 1


def test_the_sessions_benchmarks_are_reported_as_the_ui_showed_them(tmp_path, capsys):
    """A snapshot keeps the benchmarks run in the UI; the report lists them (it dropped them)
    with the accept length every front end shows (vLLM's counters over the run, said so) and
    the end-to-end ratio only between runs of the same shape; a damaged entry is skipped."""
    import json
    import math

    from specmon.control.benchmark import BenchResult

    def bench(server: str, tok_s: float, n: int = 8, counters: dict | None = None) -> dict:
        return BenchResult(server=server, kind="builtin", started_at=T0 + 20, completed=n,
                           failed=0, concurrency=1, output_len=128, duration_s=30.0,
                           total_output_tokens=128 * n, output_tok_s=tok_s, mean_ttft_ms=20.0,
                           median_ttft_ms=20.0, mean_itl_ms=None, median_itl_ms=None,
                           p99_itl_ms=None, accept_length=None, vllm_counters=counters,
                           notes=["ITL N/A: vLLM's OpenAI stream chunks carry text"]).to_json()

    snap = snapshot_from_record(write_record(tmp_path / "r.jsonl", _rows(), _gpus()), host="g")
    ok = bench("spec", 60.0, counters={"accept_len": 3.08, "accept_rate": 0.69, "drafts": 166.0,
                                       "gen_tok_s": 38.8})
    snap.benchmarks = [bench("base", 40.0), bench("spec", 45.0, n=4), ok, "junk",
                       {"server": "spec\x1b[2J", "output_tok_s": math.inf}]
    path = write_snapshot(snap, tmp_path / "s.json")
    assert main(["report", str(path)]) == 0
    md = (tmp_path / "s.report.md").read_text()
    rows = [r for r in md.splitlines() if r.startswith("| ") and "builtin" in r]
    assert len(rows) == 3, rows
    assert "| 3.08 (vLLM counters over the run) | 1.500× (base) |" in rows[2]
    assert rows[1].endswith("| N/A |")  # 4 requests against 8: no ratio
    assert "\x1b" not in md and "ITL N/A: vLLM's OpenAI stream chunks carry text" in md
    assert main(["report", str(path), "--format", "json"]) == 0
    doc = json.loads((tmp_path / "s.report.json").read_text())
    [last] = [b for b in doc["benchmarks"] if b["accept"] is not None]
    assert last["line"] == BenchResult(**{k: v for k, v in ok.items()}).describe()
    assert last["vs_baseline"]["ratio"] == 1.5 and len(doc["benchmarks"]) == 4


def test_a_server_seen_gone_without_an_exit_code_ends_its_run_in_report_and_replay(tmp_path):
    """A server started by hand that `connect` saw exit has no exit code (nobody waited on it):
    its snapshot says status "stopped" with exit_code None. Report and replay end its run
    there as the live session did; they played it as still running."""
    from specmon.export.report import report_model
    from specmon.export.snapshot import snapshot_from_record
    from specmon.feeds.replay import ReplayFeed, replay_session
    from specmon.session.fleet import FleetSession
    snap = snapshot_from_record(write_record(tmp_path / "r.jsonl", _rows(), _gpus()), host="gpu-7")
    snap.servers[0].status, snap.servers[0].exit_code = "stopped", None
    reported = report_model(snap).states[snap.servers[0].name]
    fleet = FleetSession([snap.host])
    fleet.reset_host(snap.host, replay_session(snap))
    feed = ReplayFeed(snap, playing=False)
    feed._declare(fleet)
    feed._push_due(fleet, feed.end)
    replayed = fleet.host(snap.host).session.server(snap.servers[0].name)
    for st in (reported, replayed):
        assert st.runs[-1].end_reason == "exit" and st.runs[-1].exit_code is None
        assert st.status == "stopped"


def test_the_workers_environment_the_live_session_read_is_in_the_snapshot_report_and_replay():
    """The live probe read each server's workers' environment (no NCCL_DEBUG lines in their
    logs): the headline said the two differ in NCCL_PROTO. A snapshot of that session kept
    no probe, so its report and replay compared nothing there and said nothing."""
    from dataclasses import asdict

    from kit.ui import DEMO_NOW, _start, demo_decode

    from specmon.analysis.fingerprint import EnvSnapshot
    from specmon.export.report import report_doc, report_model
    from specmon.export.snapshot import decode, encode, snapshot_from_session
    from specmon.feeds.replay import ReplayFeed, replay_session
    from specmon.parse.sglang import parse_line
    from specmon.session.drift_watch import session_speedup_view
    from specmon.session.events import LineItem
    from specmon.session.fleet import FleetSession

    now = {"t": DEMO_NOW}
    fleet = FleetSession(["demo"], clock=lambda: now["t"])

    def feed(name: str, text: str, t: float) -> None:
        if "NCCL INFO" not in text:  # the env is known from the processes only
            fleet.lines("demo", name, [LineItem(text, parse_line(text), t)])

    def env(proto: str | None) -> dict:
        v = {"NCCL_PROTO": proto} if proto else {}
        return {"launcher": asdict(EnvSnapshot(10, "launcher", "ok", dict(v), {})),
                "workers": [asdict(EnvSnapshot(11 + r, f"sglang::scheduler_TP{r}", "ok",
                                               dict(v), {})) for r in range(2)]}

    s = fleet.host("demo").session
    t0 = DEMO_NOW - 100
    for name, proto in (("baseline", "LL"), ("speculative", None)):
        s.server(name).role = name
        _start(feed, name, t0, spec=name == "speculative", nccl=False)
        now["t"] = t0 + 1
        fleet.server_probe("demo", name, {"dist": "sglang", "version": "0.5.23",
                                          "env": env(proto)}, running=True)
    for k in range(40):
        t = t0 + 2 + 2 * k
        feed("baseline", demo_decode(t, k, 88.8), t)
        feed("speculative", demo_decode(t + 0.5, k, 94.0, 2.4), t + 0.5)
    now["t"] = t0 + 90
    live = session_speedup_view(s, s.server("baseline"), s.server("speculative"), None, 60.0,
                                now["t"]).fingerprint_diffs
    assert any("NCCL_PROTO LL vs unset" in d for d in live), live
    snap = decode(encode(snapshot_from_session(s)))
    assert [len(x.probes) for x in snap.servers] == [1, 1]
    doc = report_doc(snap, report_model(snap))
    assert doc["speedup"]["conditions_differ"] == list(live)
    replayed = FleetSession([snap.host])
    replayed.reset_host(snap.host, replay_session(snap))
    rf = ReplayFeed(snap, playing=False)
    rf._declare(replayed)
    rf._push_due(replayed, rf.end)
    rs = replayed.host(snap.host).session
    assert session_speedup_view(rs, rs.server("baseline"), rs.server("speculative"), None, 60.0,
                                now["t"]).fingerprint_diffs == live


def test_a_snapshots_probes_are_checked():
    """Each probe of a snapshot file is checked: a bad row is one line naming where, and a
    probe's unknown or mistyped fields are left out (a list of objects as modified files
    would break the comparisons that read it)."""
    import json

    import pytest

    from specmon.export.snapshot import SnapshotError, decode, encode, snapshot_from_record

    snap = snapshot_from_record(write_record(_tmp() / "r.jsonl", _rows(), _gpus()), host="h")
    doc = json.loads(encode(snap))
    doc["servers"][0]["probes"] = [[1772133400.0, True, {
        "modified_files": [{"x": 1}, "sglang/srt/a.py"], "version": 5, "env": [], "x": "y"}]]
    got = decode(json.dumps(doc).encode()).servers[0].probes
    assert got == [(1772133400.0, True, {"modified_files": ["sglang/srt/a.py"]})]
    for bad, why in (([[1.0, "yes", {}]], "expected [time, running, probe]"),
                     ([[1.0, True, []]], "the probe is not an object"),
                     ([[1e300, True, {}]], "out of range"),
                     ([[1.0, True, {}]] * 17, "at most 16")):
        doc["servers"][0]["probes"] = bad
        with pytest.raises(SnapshotError, match=re.escape(why)) as ei:
            decode(json.dumps(doc).encode())
        assert "servers[0]: probes" in str(ei.value) and "\n" not in str(ei.value)


def _tmp():
    import tempfile
    from pathlib import Path

    return Path(tempfile.mkdtemp())


def test_the_recorded_baselines_fingerprint_is_labelled_and_the_runs_own_is_shown(tmp_path):
    """A snapshot keeps, per server, the fingerprint of the baseline recorded on it. The report
    printed it as '<server> fingerprint' beside a current run that differed (tp 2 shown for a
    tp 1 run): the run's own is shown as the run's, the recorded one as the recorded one's."""
    import json

    from specmon.analysis.fingerprint import fingerprint_from
    from specmon.export.snapshot import read_snapshot

    path = _snapshot(tmp_path)
    snap = read_snapshot(path)
    snap.servers[0].fingerprint = fingerprint_from(
        server_args={"model_path": "Qwen/Qwen3-8B", "tp_size": 2}).to_json()
    write_snapshot(snap, path)
    assert main(["report", str(path), "--format", "json"]) == 0
    base = next(s for s in json.loads((tmp_path / "s.report.json").read_text())["servers"]
                if s["name"] == "base")
    assert any("tp 1" in x for x in base["fingerprint"])  # its run's own launch line
    assert any("tp 2" in x for x in base["recorded_fingerprint"])
    assert main(["report", str(path), "--format", "md"]) == 0
    md = (tmp_path / "s.report.md").read_text()
    assert "| base run 1 fingerprint (its own lines) |" in md
    assert "| base recorded baseline's fingerprint |" in md


def test_the_alerts_table_gives_each_alerts_level(tmp_path):
    """A critical drift and an info 'improved' read alike without it."""
    from specmon.export.snapshot import read_snapshot

    path = _snapshot(tmp_path)
    snap = read_snapshot(path)
    snap.alerts[0]["level"] = "critical"
    write_snapshot(snap, path)
    assert main(["report", str(path), "--format", "md"]) == 0
    md = (tmp_path / "s.report.md").read_text()
    assert "| time | server | level | alert | likely cause |" in md
    row = next(x for x in md.splitlines() if "baseline decode throughput 11.2%" in x)
    assert [c.strip() for c in row.strip().strip("|").split("|")][2] == "critical"


def test_an_alert_updated_while_it_lasts_is_one_row():
    """The session logs an alert again when its numbers or causes move: the report listed
    'the same warning 5 times'. One row: raised when, its latest text, how many updates."""
    from specmon.export.report import _merge_updates

    def a(t, text, level="warning", cleared=False, server="base"):
        return {"t": t, "server": server, "level": level, "kind": "throughput", "text": text,
                "cause": f"c{t}", "cleared": cleared}
    rows = _merge_updates([a(1, "-6%"), a(2, "-7%"), a(3, "-8%"), a(4, "-8%", cleared=True),
                           a(5, "-9%"), a(6, "-30%", level="critical"), a(7, "-2%", server="x")])
    assert [(r["t"], r["text"], r["cause"], r["updates"], r["cleared"]) for r in rows] == [
        (1, "-8%", "c3", 2, False), (4, "-8%", "c4", 0, True), (5, "-9%", "c5", 0, False),
        (6, "-30%", "c6", 0, False), (7, "-2%", "c7", 0, False)]


def test_an_alert_with_list_fields_in_a_snapshot_is_data_not_a_crash(tmp_path):
    """(The snapshot fuzz test's case: server, level, kind and cause as lists.)"""
    from specmon.export.snapshot import read_snapshot

    path = _snapshot(tmp_path)
    snap = read_snapshot(path)
    snap.alerts = [{"t": T0 + 12, "server": ["x"], "level": ["warning"], "kind": [1],
                    "cause": ["c"], "text": "odd"}] * 2
    write_snapshot(snap, path)
    assert main(["report", str(path), "--format", "md"]) == 0
    assert "| N/A | N/A | odd (updated 1 times" in (tmp_path / "s.report.md").read_text()


def test_a_vllm_snapshots_chart_says_what_vllm_counts_and_charts_samples_only(tmp_path):
    """The chart's axis said "decode tok/s (SGLang gen throughput)" for a vLLM-only snapshot
    whose text says vLLM's throughput is not decode-only; and a drained interval (`Running: 0
    reqs` with tokens) was a series "bs 0" beside the real batch size."""
    import json

    from kit.paths import TESTS
    from kit.snapshots import write_record

    from specmon.export.report import report_model, throughput_chart, throughput_series

    vl = TESTS / "data" / "vllm-logs"
    lines = (vl / "gen-eagle3-0.11.log").read_text().splitlines()
    real = json.loads((vl / "real-lines.jsonl").read_text().splitlines()[0])["line"]
    last = max(i for i, x in enumerate(lines) if "Engine 000:" in x)
    spec = lines[last + 1].replace("10:12:00", "10:11:55")
    lines[last:last] = ["(APIServer pid=100) INFO 11-20 10:11:55 [loggers.py:127] "
                        + real[real.index("Engine 000:"):], spec]  # Running: 0 reqs, 28.4 tok/s
    snap = snapshot_from_record(write_record(tmp_path / "r.jsonl",
                                             [("spec", x, T0) for x in lines]))
    model = report_model(snap)
    assert [k for k, _ in throughput_series(model)] == ["spec (speculative) run 1 bs 16"]
    svg = throughput_chart(snap, model)
    assert svg is not None and "vLLM Avg generation throughput" in svg
    assert "SGLang gen throughput" not in svg and "Generation throughput over log time" in svg


def test_numbers_no_float_or_clock_holds_are_na_not_a_traceback(tmp_path, capsys):
    """JSON has no size limit: a snapshot's recorded baseline made at 10**400 (OverflowError
    in the timeline's isfinite and in FleetSession.watch_recorded's float()), a benchmark of
    10**400 tok/s (in benchmarks.finite) and one started at 1e300 (gmtime's 'timestamp out of
    range' in the Markdown report) are values that cannot be trusted: N/A, the report made."""
    import json

    from specmon.analysis.drift import DriftParams, baseline_from_records
    from specmon.export.report import report_model
    from specmon.export.snapshot import read_snapshot
    from specmon.parse.sglang import parse_line

    path = _snapshot(tmp_path)
    doc = json.loads(path.read_text())
    stats = baseline_from_records([(parse_line(decode_line(88.0 + i % 3)), None)
                                   for i in range(60)], DriftParams()).to_json()
    doc["baselines"] = [{"name": "b1", "server": "base", "role": "baseline",
                         "created_at": 10 ** 400, "stats": stats}]
    doc["benchmarks"] = [{"server": "base", "kind": "builtin", "output_tok_s": 10 ** 400,
                          "mean_ttft_ms": 20.0},
                         {"server": "spec", "kind": "builtin", "started_at": 1e300,
                          "output_tok_s": 80.0}]
    path.write_text(json.dumps(doc))
    model = report_model(read_snapshot(path))
    [watch] = model.fleet.watches.values()  # watched again, from the server's first line
    assert watch.baseline.created_at == 0.0 and watch.baseline.name == "b1"
    assert main(["report", str(path), "--format", "json"]) == 0
    benches = json.loads((tmp_path / "s.report.json").read_text())["benchmarks"]
    assert [(b["output_tok_s"], b["started_at"]) for b in benches] == [(None, None), (80.0, None)]
    assert main(["report", str(path), "--format", "md"]) == 0
    assert "Traceback" not in capsys.readouterr().err
    md = (tmp_path / "s.report.md").read_text()
    rows = [r for r in md.splitlines() if r.startswith("| ") and "builtin" in r]
    assert [r.split(" | ")[0] for r in rows] == ["| N/A", "| N/A"]
    assert _row(md, "N/A")[6] == "N/A"  # base's tok/s
    from specmon.export.report import _when

    assert _when(1e300) == "N/A" == _when(-1e300)  # no clock shows it (was OverflowError)


def test_a_benchmark_ratio_no_float_holds_is_na_in_every_format(tmp_path, capsys):
    """1e300 over 1e-300 tok/s is inf: the JSON report wrote null (jsonout) while the Markdown
    and HTML reports printed 'inf×'. No ratio: null, and N/A beside the baseline it was
    against."""
    import json

    snap = snapshot_from_record(write_record(tmp_path / "r.jsonl", _rows(), _gpus()), host="g")
    shape = {"kind": "builtin", "concurrency": 1, "output_len": 128, "completed": 8}
    snap.benchmarks = [{"server": "base", "output_tok_s": 1e-300, **shape},
                       {"server": "spec", "output_tok_s": 1e300, **shape}]
    path = write_snapshot(snap, tmp_path / "s.json")
    for fmt in ("md", "html"):
        assert main(["report", str(path), "--format", fmt]) == 0
        text = (tmp_path / f"s.report.{fmt}").read_text()
        assert "inf×" not in text and "N/A (base)" in text, fmt
    assert main(["report", str(path), "--format", "json"]) == 0
    doc = json.loads((tmp_path / "s.report.json").read_text())
    assert [b["vs_baseline"] for b in doc["benchmarks"]] == [
        None, {"baseline": "base", "started_at": None, "ratio": None}]


def test_a_vllm_dp_report_says_what_its_rows_are(tmp_path, capsys):
    """A vLLM DP-2 snapshot's report: the heading said "Decode throughput", the JSON's
    `throughput` was SGLang's decode-only note, and nothing said a row sums the engines
    (compare says so)."""
    import json

    from kit.snapshots import write_record
    from kit.vllm_logs import vllm_log

    lines = vllm_log("0.11.0", engines=2, intervals=20)
    snap = snapshot_from_record(write_record(tmp_path / "r.jsonl",
                                             [("spec", x, T0) for x in lines]))
    path = write_snapshot(snap, tmp_path / "s.json")
    assert main(["report", str(path), "-o", str(tmp_path / "r.md")]) == 0
    md = (tmp_path / "r.md").read_text()
    assert "## Generation throughput (vLLM) per run and batch size" in md
    assert "Decode throughput per run" not in md
    assert "2 DP groups, summed per interval" in md
    assert main(["report", str(path), "--format", "json", "-o", str(tmp_path / "r.json")]) == 0
    doc = json.loads((tmp_path / "r.json").read_text())
    assert "SGLang's own" not in doc["throughput"] and "vLLM" in doc["throughput"]
    capsys.readouterr()


def test_a_vllm_run_with_counts_but_no_accept_length_reports_its_accept_rate(tmp_path):
    """vLLM 0.8.3 without a config line: no accept length, but vLLM's accepted and drafted
    counts; parse and compare print the rate (0.607), the report said "N/A: no decode line
    carries an accept length" and dropped it."""
    from kit.snapshots import write_record
    from kit.vllm_logs import vllm_log

    lines = vllm_log("0.8.3", config=False, intervals=20)
    snap = snapshot_from_record(write_record(tmp_path / "r.jsonl",
                                             [("spec", x, T0) for x in lines]))
    path = write_snapshot(snap, tmp_path / "s.json")
    assert main(["report", str(path), "-o", str(tmp_path / "r.md")]) == 0
    md = (tmp_path / "r.md").read_text()
    sec = md.split("## Accept length", 1)[1].split("\n## ", 1)[0]
    m = re.search(r"accept rate \(vLLM's counts, accepted ÷ drafted over the run\) (\d\.\d+)", sec)
    assert m is not None and abs(float(m.group(1)) - 1.82 / 3) < 0.01, sec
    assert "accept length N/A" in sec
