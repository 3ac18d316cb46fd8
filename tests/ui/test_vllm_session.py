# ruff: noqa: UP031  (vLLM's own %-format strings)
"""vLLM logs through the session model and the offline front ends (parse, compare, runs)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from kit.paths import TESTS

from specmon.parse.sglang import parse_line
from specmon.parse.vllm import MixedEngines
from specmon.session.runs import compare, read_runs
from specmon.session.state import ServerState

DATA = TESTS / "data" / "vllm-logs"
SPEC_LOG = DATA / "gen-eagle3-0.11.log"
BASE_LOG = DATA / "gen-baseline-0.11.log"
ENG = ("Engine %03d: Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f "
       "tokens/s, Running: %d reqs, Waiting: %d reqs, GPU KV cache usage: %.1f%%, "
       "Prefix cache hit rate: %.1f%%")
F2 = ("SpecDecoding metrics: " "Draft acceptance rate: %.1f%%, " "Mean acceptance length: %.2f, "
      "Accepted: %d tokens, " "Drafted: %d tokens, " "Per-position acceptance rate: %s")


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specmon", *args], capture_output=True,
                          timeout=120, text=True)


def test_read_runs_joins_spec_lines_and_maps_config() -> None:
    state = read_runs(SPEC_LOG.read_text().splitlines(), "spec")
    assert state.engine == "vllm" and len(state.runs) == 1
    run = state.runs[0]
    assert run.start_reason == "server_args"
    assert run.args["speculative_algorithm"] == "eagle3"
    assert (run.args["speculative_num_steps"], run.args["speculative_num_draft_tokens"]) == (3, 4)
    pts = list(run.decode)
    assert len(pts) == 40 and all(p.rec.accept_len is not None for p in pts)
    for p in pts:  # bonus included: 1 + accepted / drafts, as printed by 0.9+
        assert p.rec.accept_len == pytest.approx(1 + sum(p.rec.spec["per_position"]), abs=0.006)
        assert p.rec.accept_rate == pytest.approx(p.rec.spec["accepted"] / p.rec.spec["drafted"])
    assert state.is_speculative and state.role == "speculative"


def test_085_accept_length_gets_its_bonus() -> None:
    h = "INFO 05-06 11:02:%02d [x.py:1] "
    lines = [h % 0 + ENG % (0, 0.0, 1500.0, 8, 0, 1.0, 0.0),
             h % 0 + F2 % (60.8, 1.82, 9339, 15360, "0.801, 0.602, 0.421")]
    state = read_runs(lines)
    rec = state.runs[0].decode[0].rec
    assert rec.accept_len == pytest.approx(2.82)
    assert "0.8.5" in (rec.accept_len_note or "")
    res = compare(state, state).result
    assert any("vLLM 0.8.5 printed them, without the bonus token: 1 added" in n
               for n in res["notes"])


def test_dp_engines_summed_and_config_copies_one_run() -> None:
    cfg = ("(EngineCore_DP%d pid=%d) INFO 07-10 14:20:00 [core.py:61] Initializing a V1 LLM engine "
           "(v0.10.1) with config: model='m', speculative_config=SpeculativeConfig(method='eagle', "
           "model='d', num_spec_tokens=3), tensor_parallel_size=1, data_parallel_size=2")
    h = "(APIServer pid=9) INFO 07-10 14:20:%02d [x.py:1] "
    lines = [cfg % (0, 10), cfg % (1, 11)]
    for s in (10, 20):
        lines += [h % s + ENG % (0, 0.0, 1000.0, 8, 0, 1.0, 0.0),
                  h % s + F2 % (60.0, 2.80, 1800, 3000, "0.800, 0.600, 0.400"),
                  h % s + ENG % (1, 0.0, 500.0, 4, 0, 1.0, 0.0),
                  h % s + F2 % (40.0, 2.20, 600, 1500, "0.600, 0.400, 0.200")]
    state = read_runs(lines)
    assert len(state.runs) == 1
    run = state.runs[0]
    assert sorted(run.groups) == [0, 1]
    assert len(run.decode) == 2
    p = run.decode[-1]
    assert (p.groups, p.rec.running_req, p.rec.gen_throughput) == (2, 12, 1500.0)
    # weighted by each engine's throughput, as SGLang DP groups are
    assert p.rec.accept_len == pytest.approx((2.8 * 1000 + 2.2 * 500) / 1500)
    # vLLM's counts summed: the rate from the sums, per-position rates weighted by drafts
    assert p.rec.accept_rate == pytest.approx((1800 + 600) / (3000 + 1500))
    assert p.rec.spec["per_position"] == pytest.approx(
        [(0.8 * 3000 + 0.6 * 1500) / 4500, (0.6 * 3000 + 0.4 * 1500) / 4500,
         (0.4 * 3000 + 0.2 * 1500) / 4500])
    assert p.rec.kv_cache_usage_pct == 1.0 and p.rec.prompt_throughput == 0.0


def test_live_baseline_points_not_delayed_spec_points_joined() -> None:
    base = ServerState("b")
    line = "(APIServer pid=1) INFO 11-20 10:00:30 [x.py:1] " + ENG % (0, 0.0, 400.0, 16, 0, 2.0, 0.0)
    assert len(base.apply(line, parse_line(line), 1.0)) == 1  # no config line, no spec: at once
    spec = ServerState("s")
    for text in SPEC_LOG.read_text().splitlines()[:2]:
        got = spec.apply(text, parse_line(text), 1.0)
    assert got == []  # the engine line waits for its spec line (the config said eagle3)
    third = SPEC_LOG.read_text().splitlines()[2]
    got = spec.apply(third, parse_line(third), 1.0)
    assert len(got) == 1 and got[0].rec.accept_len is not None


def test_mixed_engines_is_an_error() -> None:
    sg = ("[2026-02-26 19:16:00 TP0] Decode batch, #running-req: 1, #token: 900, token usage: 0.04, "
          "gen throughput (token/s): 80.00, #queue-req: 0")
    vl = SPEC_LOG.read_text().splitlines()[1]
    with pytest.raises(MixedEngines, match="line 2 is a vLLM line in a SGLang log"):
        read_runs([sg, vl], "mixed.log")


def test_mixed_engines_cli_one_line(tmp_path: Path) -> None:
    f = tmp_path / "mixed.log"
    f.write_text(SPEC_LOG.read_text() + "[2026-02-26 19:16:00 TP0] Decode batch, #running-req: 1, "
                 "#token: 900, token usage: 0.04, gen throughput (token/s): 80.00, #queue-req: 0\n")
    import os
    env = {**os.environ, "HOME": str(tmp_path)}
    for args in (("parse", str(f)), ("parse", "--json", str(f)), ("parse", "--runs", str(f)),
                 ("compare", str(BASE_LOG), str(f)), ("check", "--baseline-value", "100", str(f)),
                 ("advise", str(f)), ("baseline", "record", "m", "--log", str(f))):
        r = subprocess.run([sys.executable, "-m", "specmon", *args], capture_output=True,
                           timeout=120, text=True, env=env)
        assert r.returncode == 2, args
        err = r.stderr.strip().splitlines()
        assert len(err) == 1 and "mixes engines" in err[0] and "Traceback" not in r.stderr


def test_parse_json_contract_and_nan_warning(tmp_path: Path) -> None:
    f = tmp_path / "v085.log"
    h = "INFO 05-06 11:03:00 [metrics.py:82] "
    f.write_text(h + ENG % (0, 0.0, 10.0, 1, 0, 1.0, 0.0) + "\n"
                 + h + F2 % (float("nan"), float("nan"), 0, 0, "nan, nan, nan") + "\n")
    r = cli("parse", "--json", str(f))
    assert r.returncode == 0, r.stderr
    objs = [json.loads(x) for x in r.stdout.splitlines()]
    assert [o["kind"] for o in objs] == ["decode", "spec"] and {o["engine"] for o in objs} == {"vllm"}
    assert {"dp_rank", "gen_throughput", "prompt_throughput", "running_req", "queue_req",
            "kv_cache_usage_pct", "prefix_cache_hit_pct"} <= set(objs[0])
    assert objs[1]["mean_accept_len"] is None and objs[1]["per_position"] == [None, None, None]
    assert "warning: 5 value(s)" in r.stderr
    cfg = cli("parse", "--json", "--kind", "server_args", str(SPEC_LOG))
    obj = json.loads(cfg.stdout.splitlines()[0])
    assert obj["speculative_algorithm"] == "eagle3" and obj["speculative_num_tokens"] == 3


def test_compare_cli_on_vllm_logs_labels_throughput() -> None:
    r = cli("compare", str(BASE_LOG), str(SPEC_LOG), "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["speedup"]["running_req"] == 16
    base = res["baseline"]["median_tok_s"]
    spec = res["speculative"]["median_tok_s"]
    assert res["speedup"]["value"] == pytest.approx(spec / base, rel=0.02)
    assert any("prefill steps incl." in n for n in res["notes"])
    state = read_runs(SPEC_LOG.read_text().splitlines())
    pts = [p for p in state.runs[0].decode if p.rec.running_req == 16]
    want = sum(p.rec.spec["accepted"] for p in pts) / sum(p.rec.spec["drafted"] for p in pts)
    assert res["speculative"]["accept_rate_counts"] == round(want, 4)
    assert "accept_rate_counts" not in res["baseline"]
    assert not any("decode-only gen throughput" in n for n in res["notes"])
    direct = compare(read_runs(BASE_LOG.read_text().splitlines()),
                     read_runs(SPEC_LOG.read_text().splitlines()))
    assert direct.result["speedup"]["value"] == res["speedup"]["value"]  # one truth


def test_runs_listing_names_vllm_config() -> None:
    r = cli("parse", "--runs", "--json", str(SPEC_LOG))
    assert r.returncode == 0, r.stderr
    row = json.loads(r.stdout.splitlines()[0])
    assert row["args"] == "vLLM 0.11.0, model Qwen/Qwen3-8B, tp 1, eagle3 k 3 draft org/Qwen3-8B-eagle3"
    assert row["decode_lines"] == 40 and row["start_reason"] == "server_args"


def test_summary_labels_vllm_throughput() -> None:
    r = cli("parse", str(SPEC_LOG))
    assert r.returncode == 0, r.stderr
    assert "vLLM 'Avg generation throughput'" in r.stdout and "accept len" in r.stdout


def test_baseline_record_and_check_on_vllm_logs(tmp_path: Path) -> None:
    env_home = {"HOME": str(tmp_path)}
    import os
    env = {**os.environ, **env_home}

    def run(*a: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "specmon", *a], capture_output=True, text=True,
                              timeout=120, env=env)
    r = run("baseline", "record", "vs", "--log", str(SPEC_LOG))
    assert r.returncode == 0, r.stderr
    ok = run("check", "--baseline", "vs", "--json", str(SPEC_LOG))
    assert ok.returncode == 0, ok.stderr
    out = json.loads(ok.stdout)
    assert out["verdict"] == "ok" and out["live"]["n"] >= 20


def test_advise_uses_measured_per_position_profile() -> None:
    r = cli("advise", str(SPEC_LOG), "--baseline-log", str(BASE_LOG), "--json")
    assert r.returncode == 0, r.stderr
    adv = json.loads(r.stdout)
    assert any("per-position acceptance" in a and "rest on it" in a for a in adv["assumptions"])
    assert not any("constant per-position acceptance" in a for a in adv["assumptions"])
    assert adv["flags"].startswith("--speculative-config '{\"method\": \"eagle3\"")
    # the profile is the drafted-weighted mean of the printed rates, computed here independently
    from specmon.analysis.advisor import best_profile, measure
    segs = _session_segments(SPEC_LOG, "s")
    m = measure(segs[0], 16)
    assert m is not None and m.per_position is not None
    prof = best_profile([m])
    assert prof is not None and prof.survival == m.per_position
    from specmon.analysis.advisor import clean_lines
    lines = [x for x in clean_lines(segs[0].lines) if x.running_req == 16]
    w = sum(x.spec["drafted"] for x in lines)
    want0 = sum(x.spec["per_position"][0] * x.spec["drafted"] for x in lines) / w
    assert prof.survival[0] == pytest.approx(want0)


def test_accepted_throughput_after_idle_gap_uses_the_interval() -> None:
    """0.10.2+ divides the first spec line after an idle stretch by the whole gap; specmon's
    accepted tok/s is Accepted over the engine's measured interval instead."""
    pts = list(read_runs(SPEC_LOG.read_text().splitlines()).runs[0].decode)
    after = pts[20]  # the generator put a 300 s idle stretch before the 21st interval
    assert after.t - pts[19].t > 300
    acc = after.rec.spec["accepted"]
    assert after.rec.spec["accepted_throughput"] == pytest.approx(acc / 310.0, abs=0.01)  # printed
    assert after.rec.accepted_tok_s == pytest.approx(acc / 10.0)
    assert "idle" in (after.rec.accepted_tok_s_note or "")
    normal = pts[21]
    assert normal.rec.accepted_tok_s == pytest.approx(normal.rec.spec["accepted"] / 10.0)
    assert normal.rec.accepted_tok_s_note is None
    assert "assumed" in (pts[0].rec.accepted_tok_s_note or "")


def test_ui_server_panel_rows_for_vllm() -> None:
    """The server panel's rows (the UI's model) say what vLLM's numbers are."""
    from specmon.ui.widgets import summary_rows

    state = read_runs(SPEC_LOG.read_text().splitlines(), "spec")
    last = state.last_decode
    assert last is not None
    rows = {r[0]: r for r in summary_rows(state, now=state.runs[-1].decode[-1].t, window_s=1e9)}
    assert "prefill steps incl." in rows["last interval"][2]
    assert "decode-only" not in rows["last interval"][2]
    assert rows["accepted"][1] == f"{last.accept_rate:.2f}"
    pp = last.spec["per_position"]
    assert " ".join(f"{x:.2f}" for x in pp) in rows["accepted"][2]
    assert rows["KV cache"][1] == f"{last.kv_cache_usage_pct:.1f}%"
    base = read_runs(BASE_LOG.read_text().splitlines(), "base")
    brows = {r[0]: r for r in summary_rows(base, now=0.0, window_s=1e9)}
    assert "accepted" not in brows and "accept len" not in brows


def test_metrics_exporter_labels_vllm_servers() -> None:
    """specmon's own /metrics: a vLLM server's throughput and accept length, and what they are."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from specmon.export.prometheus import registry_for
    from specmon.session.events import LineItem
    from specmon.session.fleet import FleetSession

    fleet = FleetSession(["h"])
    lines = SPEC_LOG.read_text().splitlines()
    fleet.lines("h", "vspec", [LineItem(x, parse_line(x), 1000.0 + i) for i, x in enumerate(lines)])
    state = fleet.host("h").session.servers["vspec"]
    text = generate_latest(registry_for(fleet, clock=lambda: 2000.0)).decode()
    fams = {f.name: f.samples for f in text_string_to_metric_families(text)}
    info = [s for s in fams["specmon_server_engine_info"] if s.labels["server"] == "vspec"]
    assert len(info) == 1 and info[0].labels["engine"] == "vllm"
    assert "prefill steps incl." in info[0].labels["throughput"]
    acc = [s.value for s in fams.get("specmon_server_accept_length", [])
           if s.labels["server"] == "vspec"]
    assert acc and 2.7 < acc[0] < 2.95  # the joined, bonus-included accept length
    assert state.role == "speculative"


def test_export_and_report_from_a_recording(tmp_path: Path) -> None:
    import os
    rows = []
    for i, (name, path) in enumerate((("vspec", SPEC_LOG), ("vbase", BASE_LOG))):
        for j, line in enumerate(path.read_text().splitlines()):
            rows.append({"server": name, "path": f"/logs/{name}.log", "offset": j * 400,
                         "line": line, "received_at": 1.79e9 + j * 5 + i * 0.1, "record": None})
    rows.sort(key=lambda r: r["received_at"])
    rec = tmp_path / "rec.jsonl"
    rec.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    env = {**os.environ, "HOME": str(tmp_path)}
    snap = tmp_path / "snap.json"
    for args in (("export", str(rec), "-o", str(snap)),
                 ("report", str(snap), "-o", str(tmp_path / "rep.md"))):
        r = subprocess.run([sys.executable, "-m", "specmon", *args], capture_output=True,
                           text=True, timeout=120, env=env)
        assert r.returncode == 0, r.stderr
    md = (tmp_path / "rep.md").read_text()
    assert "vLLM servers: throughput is" in md and "prefill steps incl." in md
    assert "accept rate (vLLM's counts" in md
    assert "| vLLM 0.11.0: eagle3 k 3 draft org/Qwen3-8B-eagle3 |" in md
    from specmon.export.snapshot import read_snapshot
    s = read_snapshot(str(snap))
    dec = [e.record for sv in s.servers if sv.name == "vspec" for e in sv.entries
           if getattr(e.record, "kind", None) == "decode"]
    assert dec and all(getattr(d, "spec", None) is not None for d in dec)  # lossless round trip


async def test_ui_replay_of_vllm_servers_shows_speedup_and_labels(tmp_path: Path) -> None:
    """The UI on a recording of two vLLM servers: the headline's speedup and its wording."""
    import asyncio

    from specmon.export.snapshot import snapshot_from_record
    from specmon.ui.replay_app import ReplayApp
    from specmon.ui.widgets import SpeedupBar

    rows = []
    for i, (name, path) in enumerate((("speculative", SPEC_LOG), ("baseline", BASE_LOG))):
        for j, line in enumerate(path.read_text().splitlines()):
            rows.append({"server": name, "path": f"/logs/{name}.log", "offset": j * 400,
                         "line": line, "received_at": 1.79e9 + j * 5 + i * 0.1, "record": None})
    rows.sort(key=lambda r: r["received_at"])
    rec = tmp_path / "rec.jsonl"
    rec.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    snap = snapshot_from_record(str(rec))
    app = ReplayApp(snap, playing=False)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("G")
        for _ in range(400):
            s = app.session.servers.get("speculative")
            if s is not None and s.decode_total >= 39:
                break
            await asyncio.sleep(0.02)
        await pilot.pause()
        app.refresh_view()
        await pilot.pause()
        bar = str(app.query_one(SpeedupBar).content)
        assert "speedup" in bar and "N/A" not in bar.split("\n")[0], bar
        assert "vLLM gen throughput" in bar and "decode-only" not in bar


def test_live_log_mixing_engines_is_said() -> None:
    state = ServerState("x")
    sg = ("[2026-02-26 19:16:00 TP0] Decode batch, #running-req: 1, #token: 900, token usage: 0.04, "
          "gen throughput (token/s): 80.00, #queue-req: 0")
    vl = SPEC_LOG.read_text().splitlines()[1]
    for line in (sg, vl, sg, vl):
        state.apply(line, parse_line(line), 1.0)
    assert state.mixed_engines
    assert sum("mixes SGLang and vLLM" in n for n in state.notices) == 1  # said once


def test_real_record_of_vllm_logs_then_report(tmp_path: Path) -> None:
    """`specmon record local --whole-file` tails two vLLM logs; each row carries its vLLM record;
    `export` + `report` of that recording give the vLLM speedup."""
    import os
    import signal
    import time

    out = tmp_path / "rec.jsonl"
    want = len(SPEC_LOG.read_text().splitlines()) + len(BASE_LOG.read_text().splitlines())
    env = {**os.environ, "HOME": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "specmon", "record", "local", "--whole-file",
                             "--log", f"vbase={BASE_LOG}", "--log", f"vspec={SPEC_LOG}",
                             "--out", str(out)], stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            start_new_session=True, env=env)
    try:
        for _ in range(3000):
            if out.exists() and out.read_bytes().count(b"\n") >= want:
                break
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()
    rows = [json.loads(x) for x in out.read_text().splitlines() if '"line"' in x]
    assert len(rows) == want
    kinds = {r["record"]["kind"] for r in rows if r["record"]}
    assert {"decode", "spec", "server_args"} <= kinds
    assert {r["record"]["engine"] for r in rows if r["record"]} == {"vllm"}
    snap, md = tmp_path / "s.json", tmp_path / "r.md"
    for args in (("export", str(out), "-o", str(snap)), ("report", str(snap), "-o", str(md))):
        r = subprocess.run([sys.executable, "-m", "specmon", *args], capture_output=True,
                           text=True, timeout=120, env=env)
        assert r.returncode == 0, r.stderr
    text = md.read_text()
    assert "**Speedup 2.1" in text and "vLLM servers: throughput is" in text


def test_parse_start_up_only_vllm_log(tmp_path: Path) -> None:
    f = tmp_path / "start.log"
    f.write_text(SPEC_LOG.read_text().splitlines()[0] + "\n")
    r = cli("parse", str(f))
    assert r.returncode == 0, r.stderr  # a vLLM log that has not served yet, not garbage
    assert "vLLM 'Avg generation throughput'" in r.stdout and "no decode lines found" in r.stdout


def test_snapshot_spec_field_is_checked() -> None:
    from specmon.export.snapshot import SnapshotError, record_from_json, record_to_json

    state = read_runs(SPEC_LOG.read_text().splitlines())
    rec = state.runs[0].decode[3].rec
    d = record_to_json(rec)
    back = record_from_json(json.loads(json.dumps(d)))
    assert back == rec  # lossless
    for bad in ({"accepted": "many"}, {"per_position": [0.5, 7.0]}, {"mean_accept_len": -1}):
        with pytest.raises(SnapshotError, match="spec field"):
            record_from_json({**d, "spec": {**d["spec"], **bad}})


def test_parse_json_differences_v0_cumulative_counts(tmp_path: Path) -> None:
    rows = [json.loads(x) for x in (DATA / "real-lines.jsonl").read_text().splitlines()]
    v0 = [r["line"] for r in rows if "Speculative metrics:" in r["line"]][:2]  # issue #7301
    f = tmp_path / "v0.log"
    f.write_text("\n".join(v0) + "\n")
    r = cli("parse", "--json", str(f))
    assert r.returncode == 0, r.stderr
    a, b = (json.loads(x) for x in r.stdout.splitlines())
    assert a["accepted"] is None and a["accepted_total"] == 1 and a["cumulative"] is True
    assert (b["accepted"], b["drafted"], b["emitted"]) == (0, 10, 2)  # 1-1, 15-5, 3-1
    assert b["draft_accept_rate_pct"] == 0.0 and b["draft_accept_rate_pct_total"] == 6.7


def test_non_default_args_belong_to_the_launch_after_them() -> None:
    nd = "(APIServer pid={p}) INFO 11-20 {t} [utils.py:233] non-default args: {{'max_num_seqs': {n}}}"
    lines = SPEC_LOG.read_text().splitlines()
    log = [nd.format(p=1, t="09:59:59", n=64), *lines,
           nd.format(p=2, t="10:30:00", n=128), lines[0].replace("10:00:00", "10:30:01"),
           *lines[1:5]]
    state = read_runs(log)
    assert len(state.runs) == 2
    assert state.runs[0].args["non_default_args"] == {"max_num_seqs": 64}
    assert state.runs[1].args["non_default_args"] == {"max_num_seqs": 128}


def _session_segments(path: Path, label: str) -> list:
    """The advisor's segments of a log, from the session's runs (as the UI and `advise` build them)."""
    from specmon.commands.advise_cmd import read_state
    from specmon.session.advice import segments

    return segments(read_state(str(path)), label)


def test_ui_advisor_segments_from_a_live_vllm_log() -> None:
    """The advisor reads the session's runs: vLLM's spec lines are joined there."""
    from specmon.analysis.advisor import advise

    segs = _session_segments(SPEC_LOG, "vspec")
    base = _session_segments(BASE_LOG, "vbase")
    adv = advise(segs, base)
    assert adv.engine == "vllm" and len(adv.profile.survival) == 3
    assert adv.current.accept_len is not None and adv.current.per_position is not None
    assert adv.flags.startswith("--speculative-config")


def test_held_engine_line_released_after_a_quiet_while() -> None:
    """An interval without drafts has no spec line; if the server then goes idle (prints
    nothing), the held engine line still counts, 2 s (receive time) later, via the fleet tick."""
    from specmon.session.events import LineItem
    from specmon.session.fleet import FleetSession

    lines = SPEC_LOG.read_text().splitlines()
    fleet = FleetSession(["h"], clock=lambda: 0.0)
    fleet.lines("h", "v", [LineItem(lines[0], parse_line(lines[0]), 100.0),
                           LineItem(lines[1], parse_line(lines[1]), 101.0)])
    st = fleet.host("h").session.servers["v"]
    assert st.decode_total == 0  # held: its spec line may follow
    fleet.tick(102.0)
    assert st.decode_total == 0
    fleet.tick(103.5)
    assert st.decode_total == 1 and st.last_decode is not None
    assert st.last_decode.accept_len is None  # no spec line came: not invented


def test_summary_sums_vllm_counts() -> None:
    from specmon.analysis.logfile import summarise

    s = summarise(str(SPEC_LOG))
    spec = [json.loads(x) for x in cli("parse", "--json", "--kind", "spec", str(SPEC_LOG))
            .stdout.splitlines()]
    acc, dra = sum(x["accepted"] for x in spec), sum(x["drafted"] for x in spec)
    assert (s.spec_accepted, s.spec_drafted) == (acc, dra) and len(spec) == 40
    want0 = sum(x["per_position"][0] * x["drafted"] for x in spec) / dra
    assert s.spec_pos[0] / s.spec_pos_drafted == pytest.approx(want0)
    assert f"{acc / dra:.3f} ({acc:,} / {dra:,})" in s.render()


def test_dp_panel_prefix_cache_hit_rate_is_the_engines_mean_and_says_so() -> None:
    """DP 2 (vLLM's format strings): every engine line prints `Prefix cache hit rate`; the
    panel's server-level figure was N/A. It is the engines' mean, labelled (vLLM's aggregated
    line weights by queries, which the engine lines do not print)."""
    from kit.vllm_logs import vllm_log

    from specmon.ui.widgets import summary_rows

    state = read_runs(vllm_log("0.11.0", engines=2, prefix_hits=[50.0, 30.0]), "spec")
    last = state.runs[-1].last
    assert last is not None and last.prefix_cache_hit_pct == pytest.approx(40.0)
    rows = {r[0]: r for r in summary_rows(state, now=state.runs[-1].decode[-1].t, window_s=60)}
    assert "prefix cache hit 40.0% (mean of 2 engines, unweighted)" in rows["KV cache"][2]
    # 0.31+ prints the rate only for an engine whose cache saw queries
    state = read_runs(vllm_log("0.33.0", engines=2, prefix_hits=[62.5, None]), "spec")
    rows = {r[0]: r for r in summary_rows(state, now=state.runs[-1].decode[-1].t, window_s=60)}
    assert "prefix cache hit 62.5% (1 of 2 engines prints it)" in rows["KV cache"][2]


@pytest.mark.parametrize("version", ["0.9.0", "0.11.0"])
def test_accepted_throughput_at_a_sub_second_stats_interval(version: str) -> None:
    """VLLM_LOG_STATS_INTERVAL=0.5 (the demo's): vLLM stamps whole seconds, so consecutive
    lines read 0 s or 1 s apart. The accepted tok/s divided by a 1 s "usual" gap (half the
    real rate) and a 0 s gap was called "first line of the engine". Now it is vLLM's own
    printed figure (0.10.2+) or Accepted over the measured mean interval (0.5 s)."""
    from kit.vllm_logs import vllm_log

    lines = vllm_log(version, intervals=40, interval_s=0.5)
    pts = list(read_runs(lines).runs[0].decode)
    assert len(pts) >= 38
    later = pts[10:]  # (past the first lines, as the interval is learnt)
    for p in later:
        acc = p.rec.spec["accepted"]
        assert p.rec.accepted_tok_s == pytest.approx(acc / 0.5, rel=0.1), (p.rec.timestamp,)
        assert "first line" not in (p.rec.accepted_tok_s_note or "")
