"""Issue 21, one truth: the phantom-baseline scenario's logs (tests/phantom_logs.py, made by the
simulator) through `record` -> `export` -> `report --format json`, through `compare`, through
the app's session model (a snapshot replay), `parse --runs --json` and `check --json`: the same
per-run medians, the same speedup and the same alert list everywhere (`check` judges one run
against a given value, so its verdict, not the session's alerts, is checked)."""

from __future__ import annotations

import json
import statistics

import pytest
from kit.phantom import scenario, write_logs, write_record

from specmon.cli import main
from specmon.export.snapshot import iter_record_file, read_snapshot
from specmon.parse.sglang import BatchRecord, EventRecord, parse_line
from specmon.session.events import LineItem
from specmon.session.fleet import FleetSession
from specmon.session.offline import play
from specmon.session.runs import compare, run_by_rr


@pytest.fixture(scope="module")
def phantom(tmp_path_factory):
    d = tmp_path_factory.mktemp("phantom")
    sc = scenario()
    logs = write_logs(d, sc)
    rec = write_record(d / "record.jsonl", sc)
    return d, sc, logs, rec


def cli(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def medians_from_lines(lines: list[str], rr: int = 1) -> list[float]:
    """Each run's median gen throughput at `rr`, straight from the log text (a run starts at
    each server_args line): the reference the front ends are checked against."""
    runs: list[list[float]] = []
    for text in lines:
        r = parse_line(text)
        if isinstance(r, EventRecord) and r.kind == "server_args":
            runs.append([])
        elif isinstance(r, BatchRecord) and r.kind == "decode" and r.running_req == rr \
                and r.gen_throughput:
            runs[-1].append(r.gen_throughput)
    return [round(statistics.median(v), 4) for v in runs]


def rr1(run: dict) -> dict:
    return next(w for w in run["by_running_req"] if w["running_req"] == 1)


def test_phantom_baseline_same_medians_speedup_and_alerts_everywhere(phantom, capsys):
    d, sc, logs, rec = phantom
    ref = {name: medians_from_lines([x for _, x in rows]) for name, rows in sc.items()}
    assert len(ref["baseline"]) == 3 and len(ref["speculative"]) == 1
    # the scenario: tuned ~88.8, no NCCL tuning ~62.9, patched and capped ~82 (speculative ~78)
    assert 85 < ref["baseline"][0] < 92 and 60 < ref["baseline"][1] < 66
    assert 78 < ref["baseline"][2] < 85

    # record -> export -> report --format json
    snap = d / "snap.json"
    assert main(["export", str(rec), "-o", str(snap)]) == 0
    code, out = cli(capsys, "report", str(snap), "--format", "json", "-o", "-")
    assert code == 0
    doc = json.loads(out)
    servers = {s["name"]: s for s in doc["servers"]}
    report_medians = {n: [rr1(r)["median_tok_s"] for r in s["runs"]] for n, s in servers.items()}
    assert report_medians == ref
    sp = doc["speedup"]
    assert (sp["base_run"], sp["spec_run"], sp["running_req"]) == (3, 1, 1)
    assert sp["value"] == round(ref["speculative"][0] / ref["baseline"][2], 3)
    assert sp["n_base"] == rr1(servers["baseline"]["runs"][2])["n"]
    assert sp["ci95"][0] < sp["value"] < sp["ci95"][1] < 1.0  # the capped baseline still wins

    # compare: each baseline run against the speculative run
    for k, med in enumerate(ref["baseline"], start=1):
        code, out = cli(capsys, "compare", str(logs["baseline"]), str(logs["speculative"]),
                        "--json", "--base-run", str(k))
        assert code == 0
        res = json.loads(out)
        assert (res["baseline"]["run"], res["baseline"]["median_tok_s"]) == (k, med)
        assert res["speculative"]["median_tok_s"] == ref["speculative"][0]
        # run 2 lacks the NCCL variables the speculative server has: said, not hidden
        assert any(c.startswith("NCCL env seen by workers") for c in res["conditions_differ"]) \
            == (k == 2)
    # the last runs (compare's default): the report's speedup, interval and n
    assert {k: res["speedup"][k] for k in ("value", "ci95", "running_req", "n_base", "n_spec")} \
        == {k: sp[k] for k in ("value", "ci95", "running_req", "n_base", "n_spec")}
    assert res["conditions_differ"] == sp["conditions_differ"] == []

    # alerts: the session model that `record` runs (1 Hz ticks, an alert listener) on the same
    # lines raises exactly the report's alerts
    fleet = FleetSession(["h"])
    heard: list[tuple[str, str, str, bool]] = []
    fleet.alert_listeners.append(lambda h, n, a: heard.append((n, a.kind, a.text, a.cleared)))
    play(fleet, "h", ((it.received_at, "lines", it.server,
                       LineItem(it.line, parse_line(it.line), it.received_at))
                      for it in iter_record_file(rec) if not isinstance(it, tuple)))
    assert heard == [(a["server"], a["kind"], a["text"], a["cleared"]) for a in doc["alerts"]]
    assert heard and heard[0][1] == "speculation_pays" and not heard[0][3]  # not vacuous

    # parse --runs --json: the same runs (numbers, starts, decode lines)
    code, out = cli(capsys, "parse", "--runs", "--json", str(logs["baseline"]))
    rows = [json.loads(x) for x in out.splitlines()]
    assert [(r["run"], r["start"], r["decode_lines"]) for r in rows] == \
        [(r["run"], r["start"], r["decode_lines"]) for r in servers["baseline"]["runs"]]

    # check --json against the first run's median: the last run drifted, at the same batch size
    code, out = cli(capsys, "check", str(logs["baseline"]), "--baseline-value",
                    str(ref["baseline"][0]), "--json")
    chk = json.loads(out)
    assert code == 1 and chk["verdict"] == "drift" and chk["running_req"] == sp["running_req"]


async def test_phantom_baseline_app_session_model_has_the_same_runs_and_speedup(phantom, capsys):
    from specmon.ui.replay_app import ReplayApp

    d, sc, _, rec = phantom
    snap_path = d / "snap-app.json"
    assert main(["export", str(rec), "-o", str(snap_path)]) == 0
    code, out = cli(capsys, "report", str(snap_path), "--format", "json", "-o", "-")
    doc = json.loads(out)
    snap = read_snapshot(snap_path)
    total = sum(len(s.entries) for s in snap.servers)
    app = ReplayApp(snap, playing=False)
    async with app.run_test(size=(160, 50)) as pilot:
        app.replay.seek(app.replay.end)
        for _ in range(500):
            if app.replay.pushed_lines >= total:
                break
            await pilot.pause(0.02)
        await pilot.pause()
        assert app.replay.pushed_lines == total
        states = app.session.servers
        for s in doc["servers"]:  # every run's per-batch-size numbers, the same
            assert [run_by_rr(r) for r in states[s["name"]].runs] == \
                [r["by_running_req"] for r in s["runs"]]
        res = compare(states["baseline"], states["speculative"]).result
        assert res["speedup"]["value"] == doc["speedup"]["value"]
        assert res["speedup"]["ci95"] == doc["speedup"]["ci95"]
        assert (res["baseline"]["run"], res["speculative"]["run"]) == \
            (doc["speedup"]["base_run"], doc["speedup"]["spec_run"])
        # the replay ticks the model at each recorded second, as the report does: the same alerts
        def key(a: dict) -> tuple:
            return (a.get("server"), a.get("kind"),
                    str(a.get("message") or a.get("text") or a.get("kind")), bool(a.get("cleared")))

        assert [key(a) for a in app.session.alerts] == [key(a) for a in doc["alerts"]]
        assert doc["alerts"]  # not vacuous


def test_phantom_baseline_check_judges_the_last_run(phantom, capsys):
    d, sc, logs, _ = phantom
    last = medians_from_lines([x for _, x in sc["baseline"]])[-1]
    code, out = cli(capsys, "check", str(logs["baseline"]), "--baseline-value", "88.6",
                    "--json")
    res = json.loads(out)
    assert res["run"] == res["runs_total"] == 3  # the last run, named
    # the run's own median is the one parse --runs, compare and the report show; `live` is the
    # drift detector's estimate over its clean samples (warm-up and prefill intervals left out)
    assert [r["median_tok_s"] for r in res["by_running_req"]] == [round(last, 2)]
