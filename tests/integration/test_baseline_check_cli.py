"""Baseline store (SQLite WAL, concurrent writers) and the `baseline` / `check` commands."""

from __future__ import annotations

import json
import math
import random
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from specmon.analysis.drift import BaselineStats, Sample, Stratum, build_baseline
from specmon.cli import main
from specmon.session.baselines import Baseline, BaselineExists, BaselineStore

# rank 0 of a TP-8 run in real NCCL's line shapes (tests/data/nccl-h200*): the version and the
# communicator's rank count tell specmon which missing lines prove a variable unset
NCCL_INIT = ["h:1:1 [0] NCCL INFO NCCL version 2.27.3+cuda12.9",
             "h:1:1 [0] NCCL INFO ncclCommInitRankConfig comm 0x3ba2b960 rank 0 nranks 8 cudaDev 0 "
             "nvmlDev 0 busId 60 commId 0x91ef - Init START",
             "h:1:1 [0] NCCL INFO NCCL_CUMEM_ENABLE set by environment to 0."]  # SGLang sets it
NCCL = [*NCCL_INIT, "h:1:1 [0] NCCL INFO NCCL_PROTO set by environment to LL",
        "h:1:1 [0] NCCL INFO NCCL_ALGO set by environment to Ring"]


def log_lines(n: int, level: float, seed: int, start_s: int = 0, spec: bool = False,
              nccl: list[str] | None = None) -> list[str]:
    rng = random.Random(seed)
    out = ["[2026-05-01 10:00:00] server_args=ServerArgs(model_path='m', tp_size=8, port=30000)"]
    out += nccl or []
    for i in range(n):
        thr = level * math.exp(rng.gauss(0, 0.01))
        s = start_s + 2 * i
        ts = f"2026-05-01 10:{s // 60 % 60:02d}:{s % 60:02d}"
        acc = ", accept len: 3.00" if spec else ""
        out.append(f"[{ts}] Decode batch, #running-req: 1, #token: 1500, token usage: 0.01{acc}, "
                   f"cuda graph: True, gen throughput (token/s): {thr:.2f}, #queue-req: 0")
    return out


@pytest.fixture()
def store_dir(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "data"
    monkeypatch.setenv("SPECMON_DATA_DIR", str(d))
    return d


def write(tmp_path: Path, name: str, lines: list[str]) -> str:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return str(p)


def _stats() -> BaselineStats:
    st = Stratum(1, 5, False, True)
    return build_baseline([Sample(float(i), 88.8 + (i % 3), 1, None, st) for i in range(40)])


# --- the store ---------------------------------------------------------------------------------

def test_store_round_trip_conflict_replace_delete(tmp_path):
    store = BaselineStore(tmp_path / "b.sqlite3")
    b = Baseline("tuned", _stats(), host="gpu1", server="sglang-30000", role="baseline")
    store.save(b)
    with pytest.raises(BaselineExists):
        store.save(Baseline("tuned", _stats()))
    got = store.get("tuned")
    assert got is not None and got.host == "gpu1" and got.stats.strata.keys() == b.stats.strata.keys()
    assert got.stats.best().mu == pytest.approx(b.stats.best().mu)
    store.save(Baseline("tuned", _stats(), host="gpu2"), replace=True)
    assert [r["host"] for r in store.list()] == ["gpu2"]
    assert store.list(host="gpu1") == []
    assert store.delete("tuned") and not store.delete("tuned") and store.get("tuned") is None
    mode = sqlite3.connect(tmp_path / "b.sqlite3").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_the_store_keeps_no_secret_whoever_saves_and_finds_it_by_what_was_typed(tmp_path):
    """Host, server, name, note and source are redacted in the file itself (`--host` and
    `--server` went into their columns as typed); a lookup by the typed text still finds
    the row."""
    from specmon.redact import MASK

    store = BaselineStore(tmp_path / "b.sqlite3")
    hf = "hf_AbCdEfGhIjKlMnOpQr"
    store.save(Baseline(f"tuned {hf}", _stats(), host="gpu1 api_key=ZQhost01",
                        server=f"srv token={hf}", note=f"with {hf}",
                        source={"log": f"/logs/{hf}.log"}))
    raw = (tmp_path / "b.sqlite3").read_bytes() + b"".join(
        p.read_bytes() for p in tmp_path.glob("b.sqlite3-*"))
    assert hf.encode() not in raw and b"ZQhost01" not in raw
    got = store.get(f"tuned {hf}")
    assert got is not None and got.host == f"gpu1 api_key={MASK}" and got.note == f"with {MASK}"
    assert [r["name"] for r in store.list(host="gpu1 api_key=ZQhost01",
                                          server=f"srv token={hf}")] == [f"tuned {MASK}"]
    assert store.delete(f"tuned {hf}") and store.list() == []


WRITER = """
import sys
from specmon.analysis.drift import Sample, Stratum, build_baseline
from specmon.session.baselines import Baseline, BaselineStore
store = BaselineStore(sys.argv[1])
st = Stratum(1, 5, False, True)
stats = build_baseline([Sample(float(i), 88.8, 1, None, st) for i in range(40)])
print("go", flush=True)
sys.stdin.readline()
for i in range(25):
    store.save(Baseline(f"{sys.argv[2]}-{i}", stats, server=sys.argv[2]))
    store.save(Baseline("shared", stats, server=sys.argv[2]), replace=True)
    store.list()
"""


def test_two_processes_writing_at_once_lose_nothing(tmp_path):
    db = tmp_path / "b.sqlite3"
    BaselineStore(db)
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(db), name], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for name in ("a", "b")]
    try:
        for p in procs:  # both ready, then released together
            assert p.stdout.readline().strip() == b"go"
        for p in procs:
            p.stdin.write(b"x\n")
            p.stdin.flush()
        for p in procs:
            assert p.wait(timeout=120) == 0, p.stderr.read().decode()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    store = BaselineStore(db)
    names = sorted(r["name"] for r in store.list())
    assert names == sorted([f"a-{i}" for i in range(25)] + [f"b-{i}" for i in range(25)] + ["shared"])
    ok = sqlite3.connect(db).execute("PRAGMA integrity_check").fetchone()[0]
    assert ok == "ok"


# --- CLI: baseline record / list / show / delete -------------------------------------------------

def test_baseline_commands(tmp_path, store_dir, capsys):
    log = write(tmp_path, "base.log", log_lines(70, 88.8, 1, nccl=NCCL))
    info = json.dumps({"version": "0.5.9", "tp_size": 8})
    assert main(["baseline", "record", "tuned", "--log", log, "--server-info", info, "--server", "s1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("recorded tuned: 88.") and "n=65" in out  # 70 minus 5 warm-up lines
    assert main(["baseline", "record", "tuned", "--log", log]) == 2
    assert "exists (use --replace)" in capsys.readouterr().err
    assert main(["baseline", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["name"], r["server"], r["n"]) for r in rows] == [("tuned", "s1", 65)]
    assert main(["baseline", "show", "tuned", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["fingerprint"]["version"] == "0.5.9"
    assert shown["fingerprint"]["nccl_debug"] == {"rank 0": {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring",
                                                             "NCCL_CUMEM_ENABLE": "0"}}
    assert shown["excluded"] == {"warmup": 5}
    assert main(["baseline", "show", "tuned"]) == 0
    assert "NCCL_DEBUG rank 0: NCCL_ALGO=Ring NCCL_CUMEM_ENABLE=0 NCCL_PROTO=LL" in capsys.readouterr().out
    assert main(["baseline", "delete", "tuned"]) == 0
    assert main(["baseline", "show", "tuned"]) == 2
    assert "no baseline named 'tuned'" in capsys.readouterr().err


def test_record_refuses_too_few_samples_and_bad_input(tmp_path, store_dir, capsys):
    short = write(tmp_path, "short.log", log_lines(20, 88.8, 2))
    assert main(["baseline", "record", "x", "--log", short]) == 2
    assert "not enough clean decode samples" in capsys.readouterr().err
    assert main(["baseline", "record", "x", "--log", str(tmp_path / "nope.log")]) == 2
    assert "no such file" in capsys.readouterr().err
    log = write(tmp_path, "ok.log", log_lines(60, 88.8, 3))
    assert main(["baseline", "record", "x", "--log", log, "--server-info", "{not json"]) == 2
    assert "--server-info" in capsys.readouterr().err
    # nested past jsonout.MAX_DEPTH (redaction recursed: RecursionError), or past the parser
    for levels, why in ((500, "--server-info: x[0][0][0]…: nested more than 64 levels deep"),
                        (100_000, "--server-info: nested more than 64 levels deep")):
        info = write(tmp_path, "info.json", ['{"x": ' + "[" * levels + "]" * levels + "}"])
        assert main(["baseline", "record", "x", "--log", log, "--server-info", info]) == 2
        err = capsys.readouterr().err
        assert why in err and err.count("\n") == 1 and "Traceback" not in err, err


# --- CLI: check ----------------------------------------------------------------------------------

def test_check_exit_codes_and_json_shape(tmp_path, store_dir, capsys):
    base = write(tmp_path, "base.log", log_lines(70, 88.8, 4, nccl=NCCL))
    assert main(["baseline", "record", "tuned", "--log", base]) == 0
    capsys.readouterr()
    same = write(tmp_path, "same.log", log_lines(60, 88.8, 5, nccl=NCCL))
    # restarted without the tuning; NCCL_DEBUG=INFO still on: the same version, ranks and SGLang's own
    version_only = NCCL_INIT
    slow = write(tmp_path, "slow.log", log_lines(60, 82.2, 6, nccl=version_only))
    fast = write(tmp_path, "fast.log", log_lines(60, 96.0, 7, nccl=NCCL))
    tiny = write(tmp_path, "tiny.log", log_lines(8, 88.8, 8))

    assert main(["check", same, "--baseline", "tuned", "--json"]) == 0
    ok = json.loads(capsys.readouterr().out)
    assert set(ok) >= {"verdict", "live", "baseline", "delta_pct", "ci_pct", "first_alert_line", "excluded",
                       "causes"}
    assert ok["verdict"] == "ok" and ok["first_alert_line"] is None and ok["causes"] == []
    assert ok["baseline"]["n"] == 65 and ok["excluded"] == 5

    assert main(["check", slow, "--baseline", "tuned", "--json"]) == 1
    d = json.loads(capsys.readouterr().out)
    assert d["verdict"] == "drift" and -9 < d["delta_pct"] < -6
    assert d["ci_pct"][0] < d["delta_pct"] < d["ci_pct"][1]
    assert isinstance(d["first_alert_line"], int) and d["first_alert_line"] > 1
    assert d["causes"][0] == "TP workers lack NCCL_ALGO=Ring, NCCL_PROTO=LL that the recorded run had"

    assert main(["check", fast, "--baseline", "tuned", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "improved"
    assert main(["check", tiny, "--baseline", "tuned", "--json"]) == 3
    assert json.loads(capsys.readouterr().out)["verdict"] == "insufficient"

    assert main(["check", slow, "--baseline-value", "88.8", "--baseline-spread", "1"]) == 1
    text = capsys.readouterr().out
    assert text.startswith("verdict: drift\nbaseline 82.") and "first alert at line" in text
    assert main(["check", slow, "--baseline-value", "82.2", "--running-req", "1"]) == 0
    capsys.readouterr()


def test_check_reads_stdin(tmp_path, store_dir, monkeypatch, capsys):
    import io

    data = ("\n".join(log_lines(60, 82.2, 9)) + "\n").encode()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert main(["check", "-", "--baseline-value", "88.8", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["verdict"] == "drift"


@pytest.mark.parametrize("argv, msg", [
    (["--baseline", "nope"], "no baseline named 'nope'"),
    ([], "a baseline is needed"),
    (["--baseline", "a", "--baseline-value", "1"], "not both"),
    (["--baseline-value", "-3"], "positive"),
    (["--baseline-spread", "2"], "needs --baseline-value"),
    (["--baseline-value", "80", "--running-req", "0"], "--running-req"),
])
def test_check_usage_errors_exit_2(tmp_path, store_dir, capsys, argv, msg):
    log = write(tmp_path, "x.log", log_lines(5, 88.8, 10))
    assert main(["check", log, *argv]) == 2
    err = capsys.readouterr().err
    assert msg in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_check_subprocess_exit_code_and_no_textual(tmp_path, store_dir):
    slow = write(tmp_path, "slow.log", log_lines(60, 62.9, 11))
    code = ("import sys; from specmon.cli import main; rc = main(sys.argv[1:]); "
            "assert 'textual' not in sys.modules; sys.exit(rc)")
    p = subprocess.run([sys.executable, "-c", code, "check", slow, "--baseline-value", "88.8"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1, p.stderr
    assert "-29" in p.stdout or "-28" in p.stdout or "-30" in p.stdout


def test_check_judges_runs_each_with_its_own_cause(tmp_path, store_dir, capsys):
    """Issue 21 on the phantom-baseline scenario's log (tuned ~88.8, no NCCL ~62.9, power cap
    + patched file ~82.2): the last run is judged and named, `--run N` picks another, and each
    run's first alert comes with that run's cause (run 2: the NCCL variables)."""
    from kit.phantom_runs import baseline_lines

    lines = baseline_lines()
    starts = [i + 1 for i, x in enumerate(lines) if "server_args=" in x]  # 1-based line numbers
    assert len(starts) == 3
    tuned = write(tmp_path, "tuned.log", lines[:starts[1] - 1])
    assert main(["baseline", "record", "tuned", "--log", tuned]) == 0
    capsys.readouterr()
    log = write(tmp_path, "base.log", lines)
    assert main(["check", log, "--baseline", "tuned", "--json"]) == 1
    d = json.loads(capsys.readouterr().out)
    assert d["run"] == 3 and d["runs_total"] == 3 and d["verdict"] == "drift"
    assert 79 < d["live"]["median"] < 85 and starts[2] < d["first_alert_line"]
    r1, r2, r3 = d["runs"]
    assert [r["run"] for r in d["runs"]] == [1, 2, 3] and r3["causes"] == d["causes"]
    assert r1["verdict"] == "ok" and r1["first_alert_line"] is None and r1["causes"] == []
    assert r2["verdict"] == "drift" and 60 < r2["live"]["median"] < 66
    assert starts[1] < r2["first_alert_line"] < starts[2]  # run 2's own alert ...
    assert r2["causes"][0] == ("TP workers lack NCCL_ALGO=Ring, NCCL_P2P_LEVEL=NVL, NCCL_PROTO=LL "
                               "that the recorded run had")  # ... with run 2's own cause
    assert not any("NCCL" in c and "lack" in c for c in r3["causes"])  # run 3 has its tuning back
    assert [r["start"] for r in d["runs"]] == [x[1:20] for x in (lines[s - 1] for s in starts)]

    assert main(["check", log, "--baseline", "tuned", "--run", "2", "--json"]) == 1
    d2 = json.loads(capsys.readouterr().out)
    assert d2["run"] == 2 and d2["causes"] == r2["causes"] and d2["first_alert_line"] == r2[
        "first_alert_line"] and d2["runs"] == d["runs"]
    assert main(["check", log, "--baseline", "tuned", "--run", "1"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("verdict: ok\n") and "judged: run 1 of 3 (from " in text
    assert "  run 2 (from " in text and "cause: TP workers lack NCCL_ALGO=Ring" in text
    assert main(["check", log, "--baseline", "tuned", "--run", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("no run 4 (the log holds runs 1..3)") and len(err.splitlines()) == 1


VLLM_LOGS = Path(__file__).resolve().parents[1] / "data" / "vllm-logs"


def test_vllm_baseline_and_check_read_the_runs_args_as_the_session_does(tmp_path, store_dir,
                                                                        capsys):
    """A vLLM log's `non-default args` line comes before its config line: the baseline keeps
    it, `baseline show` names vLLM and its version, and `check` names the argument that
    changed (it said "no cause found in: server args"), not the port."""
    def log(name: str, nd: dict, tps: float | None = None) -> str:
        lines = (VLLM_LOGS / "gen-baseline-0.11.log").read_text().splitlines()
        if tps is not None:
            lines = [re.sub(r"Avg generation throughput: [\d.]+",
                            f"Avg generation throughput: {tps:.1f}", ln) for ln in lines]
        head = ("(APIServer pid=100) INFO 11-20 09:59:58 [utils.py:326] non-default args: "
                + repr({"model": "Qwen/Qwen3-8B", **nd}))
        return write(tmp_path, name, [head, *lines])

    base = log("b.log", {"port": 8000, "max_num_seqs": 64})
    assert main(["baseline", "record", "b1", "--log", base]) == 0
    capsys.readouterr()
    assert main(["baseline", "show", "b1"]) == 0
    shown = capsys.readouterr().out
    assert "vLLM 0.11.0, model Qwen/Qwen3-8B, tp 1" in shown
    assert main(["baseline", "show", "b1", "--json"]) == 0
    fp = json.loads(capsys.readouterr().out)["fingerprint"]
    assert fp["server_args"]["non_default_args"] == {"model": "Qwen/Qwen3-8B", "port": 8000,
                                                     "max_num_seqs": 64}
    slow = log("s.log", {"port": 8001, "enforce_eager": True}, tps=300.0)
    assert main(["check", "--baseline", "b1", slow, "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["causes"] == ["server args changed: enforce_eager default -> True; "
                             "max_num_seqs 64 -> default"]


def test_a_value_is_not_held_against_a_speculative_log(tmp_path, data_dir, capsys):
    """--baseline-value is a plain server's tok/s; a speculative line's drift sample is its
    cycle rate (gen / accept len): a spec log at exactly that tok/s read as -67 % drift. It is
    not compared, and check says why and what to use instead (real vLLM EAGLE-3 log too)."""
    spec = tmp_path / "spec.log"
    spec.write_text("\n".join(log_lines(60, 150.0, 3, spec=True)) + "\n")
    for log, value in ((spec, "150"), (data_dir / "vllm-logs/gen-eagle3-0.11.log", "850")):
        assert main(["check", str(log), "--baseline-value", value]) == 3
        text = capsys.readouterr().out
        assert text.startswith("verdict: insufficient\n") and "drift" not in text
        assert "speculative server's: --baseline-value is a plain server's tok/s" in text
        assert main(["check", str(log), "--baseline-value", value, "--json"]) == 3
        d = json.loads(capsys.readouterr().out)
        assert d["verdict"] == "insufficient" and d["excluded_by_reason"]["speculative_vs_value"] > 0
    plain = tmp_path / "base.log"
    plain.write_text("\n".join(log_lines(60, 150.0, 3)) + "\n")
    assert main(["check", str(plain), "--baseline-value", "150"]) == 0  # a plain log still is
    capsys.readouterr()


def test_an_ok_between_unlike_runs_says_what_changed(tmp_path, store_dir, capsys):
    """A speculative baseline recorded at steps 3, a run at steps 5 with the same cycle time:
    'ok' alone read as like for like; check says what changed since the recording."""
    def spec_log(name: str, steps: int) -> str:
        lines = log_lines(60, 150.0, 4, spec=True)
        lines[0] = lines[0].replace("port=30000", f"port=30000, speculative_algorithm='EAGLE3', "
                                    f"speculative_num_steps={steps}")
        return write(tmp_path, name, lines)

    assert main(["baseline", "record", "s3", "--log", spec_log("a.log", 3)]) == 0
    capsys.readouterr()
    assert main(["check", spec_log("b.log", 5), "--baseline", "s3"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("verdict: ok\n")
    assert ("note: since the recording: server args changed: speculative_num_steps 3 -> 5 "
            "(the verdict compares unlike runs)") in text
    assert main(["check", spec_log("c.log", 3), "--baseline", "s3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["conditions_changed"] == []  # like for like


def test_a_dp_log_says_the_verdict_reads_one_group(data_dir, capsys):
    """A DP-attention server prints one line per DP group: the detector reads one group's
    (1653.8 tok/s, the groups summed, read as a -75 % drift); check says which is which."""
    log = str(data_dir / "sglang-longlogs/ascend-qwen3coder-480b-dp4.log.gz")
    main(["check", log, "--baseline-value", "413"])
    text = capsys.readouterr().out
    assert "run median at #running-req 80: 1653.82 tok/s" in text
    assert "the verdict reads one group's lines (the first seen), so its tok/s and a " \
        "--baseline-value are one group's; the run medians above are the groups summed" in text


def test_baseline_record_and_check_read_the_run_after_a_step_back_of_log_time(
        tmp_path, store_dir, capsys):
    """Issue 22's probe: 70 lines at 88 tok/s, the clock back 1 h, 50 at 60: `baseline record`
    pooled both (recorded 88.0, n 115) and `check` of the same log read the two sides as one
    (its verdict against its own baseline: "drift -32 %" on one day, "improved" on another).
    Both now read the run from its last step back, as parse --runs and compare do."""
    before = log_lines(70, 88.0, 1, start_s=1800)  # 10:30 ...
    after = log_lines(50, 60.0, 2, start_s=0)[1:]  # ... then 10:00 again, the same run
    log = write(tmp_path, "back.log", before + after)
    assert main(["baseline", "record", "bk", "--log", log]) == 0
    out, err = capsys.readouterr()
    assert "log time went back" in err and "recorded from the lines after that step" in err
    rec = BaselineStore.open_default().get("bk")
    assert rec is not None
    best = rec.stats.best()
    assert best is not None and best.n <= 50 and abs(best.median_thr - 60.0) < 1.0, best.n
    assert main(["check", log, "--baseline", "bk", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == "ok" and doc["live"]["n"] <= 50, doc["live"]
    assert abs(doc["live"]["median"] - 60.0) < 1.0


@pytest.mark.parametrize("last", ["0", "-5", "x", "²"])
def test_record_last_must_be_a_positive_count(tmp_path, store_dir, capsys, last):
    """`--last 0` kept every line and `--last -5` dropped the first five (recs[decodes[-last]:]):
    a usage error now, before the log is read."""
    log = write(tmp_path, "ok.log", log_lines(60, 88.8, 3))
    with pytest.raises(SystemExit) as exc:
        main(["baseline", "record", "x", "--log", log, "--last", last])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == (
        "specmon baseline record: error: argument --last: must be a positive whole number "
        f"(ASCII digits), at most 1000000000, got {last!r}")
    assert not (store_dir / "baselines.sqlite3").exists()
    assert main(["baseline", "record", "x", "--log", log, "--last", "40"]) == 0
    assert "n=35" in capsys.readouterr().out  # the last 40, less 5 warm-up lines


@pytest.mark.parametrize(("text", "field"), [('{"a": NaN, "version": "1"}', "a"),
                                             ('{"x": [1, {"y": -Infinity}]}', "x[1].y"),
                                             ('{"tp_size": 1e400}', "tp_size")])
def test_record_says_which_server_info_field_is_not_a_finite_number(tmp_path, store_dir, capsys,
                                                                    text, field):
    """Python's json reads NaN, Infinity and 1e400: the store then refused the baseline with
    "its statistics hold a number that is not finite". The --server-info file and the field
    are named instead, in one line."""
    log = write(tmp_path, "ok.log", log_lines(60, 88.8, 3))
    info = write(tmp_path, "si.json", [text])
    for arg, where in ((info, f"--server-info {info}"), (text, "--server-info")):
        assert main(["baseline", "record", "x", "--log", log, "--server-info", arg]) == 2
        err = capsys.readouterr().err
        assert err == (f"specmon baseline: {where}: field {field} is not a finite number (NaN, "
                       "Infinity or past a float's range)\n"), err
