"""The speedup line: current runs only, drift against the recorded baseline, run differences."""

from __future__ import annotations

from datetime import datetime

from specmon.analysis.drift import DriftParams, baseline_from_records
from specmon.analysis.fingerprint import fingerprint_from
from specmon.parse.sglang import parse_line
from specmon.session.speedup import fingerprint_differences, format_speedup, speedup_view
from specmon.session.state import ServerState

T0 = datetime(2026, 5, 1, 14, 0, 0).timestamp()
ARGS = "[{ts}] server_args=ServerArgs(model_path='m', tp_size=8, port=30000{spec})"
LINE = ("[{ts} TP0] Decode batch, #running-req: 1, #token: 1500, token usage: 0.01, {acc}"
        "cuda graph: True, gen throughput (token/s): {g:.2f}, #queue-req: 0")


def stamp(t: float) -> str:
    return datetime.fromtimestamp(T0 + t).strftime("%Y-%m-%d %H:%M:%S")


def run(state: ServerState, t0: float, values: list[float], spec: bool = False) -> list[str]:
    extra = ", speculative_algorithm='EAGLE3'" if spec else ""
    lines = [ARGS.format(ts=stamp(t0), spec=extra)]
    acc = "accept len: 2.40, accept rate: 0.70, " if spec else ""
    lines += [LINE.format(ts=stamp(t0 + 5 + i), acc=acc, g=g) for i, g in enumerate(values)]
    for ln in lines:
        state.apply(ln, parse_line(ln), 1e9 + t0)
    return lines


def test_speedup_against_the_live_run_says_the_drift_and_vs_recorded():
    base = ServerState("baseline", role="baseline")
    spec = ServerState("speculative", role="speculative")
    tuned = run(base, 0, [88.8] * 60)
    recorded = baseline_from_records(((parse_line(x), None) for x in tuned), DriftParams())
    run(base, 100, [88.8, 88.9] * 20)  # run 2 starts tuned...
    run(base, 200, [62.9] * 40)  # run 3: the untuned restart
    run(spec, 0, [94.4] * 300, spec=True)
    v = speedup_view(base, spec, window_s=60, recorded=recorded, drift_active=True)
    assert v.base_run == 3 and v.spec_run == 1 and v.base_median == 62.9
    assert v.n_base == 40  # only run 3's lines, though run 2 is within 60 s of log time
    assert format_speedup(v) == ("1.50x vs live baseline 62.9 (run 3) · baseline DRIFT -29% vs "
                                 "recorded 88.8 · 1.06x vs recorded")
    # every value equal: no spread is measured, which is no zero spread (not 1.50-1.50)
    assert v.ci95 is None and v.detail.ci_reason == "95% interval N/A: no spread measured"
    # no drift alert: the plain line
    v = speedup_view(base, spec, window_s=60, recorded=recorded, drift_active=False)
    assert format_speedup(v) == "1.50x vs live baseline 62.9 (run 3)"


def test_too_few_samples_in_the_new_run_is_na_and_an_ended_run_has_an_age():
    base = ServerState("baseline", role="baseline")
    spec = ServerState("speculative", role="speculative")
    run(base, 0, [88.8] * 60)
    run(base, 100, [62.9] * 2)  # restart: two lines so far
    run(spec, 0, [94.4] * 200, spec=True)
    v = speedup_view(base, spec, window_s=60)
    assert v.value is None and "baseline run 2" in format_speedup(v)
    run(base, 110, [62.9] * 10)
    base.process_exited(0)
    v = speedup_view(base, spec, window_s=60, now=1e9 + 110 + 300)  # received at 1e9 + 110
    assert v.value is not None and v.base_ended_age_s == 300
    assert format_speedup(v).startswith(f"{v.value:.2f}x vs baseline 62.9 (run 3, ended 5 min ago)")
    assert "live" not in format_speedup(v)  # an ended run is not the live baseline


def test_fingerprint_differences_name_what_matters():
    def nccl(vars_: dict[str, str]) -> list[str]:
        return [f"h:1:1 [{r}] NCCL INFO {k} set by environment to {v}" for r in range(2)
                for k, v in vars_.items()]

    a = fingerprint_from(server_args={"tp_size": 8}, nccl_lines=nccl({"NCCL_PROTO": "LL"}),
                         modified_files=[], modified_method="RECORD")
    b = fingerprint_from(server_args={"tp_size": 4}, nccl_lines=nccl({}) + [
        "h:1:1 [0] NCCL INFO NCCL version 2.27.3"],
        modified_files=["sglang/srt/layers/communicator.py"], modified_method="RECORD")
    diffs = fingerprint_differences(a, b)
    assert "tp_size: 8 vs 4" in diffs
    assert any(d.startswith("NCCL env seen by workers: NCCL_PROTO LL vs unset") for d in diffs), diffs
    assert any("speculative: sglang/srt/layers/communicator.py" in d for d in diffs)
    assert fingerprint_differences(a, a) == []


def test_a_run_without_its_launch_line_is_said_beside_the_live_speedup():
    """The headline (session_speedup_view) says what it cannot compare, as compare does."""
    from specmon.session.drift_watch import session_speedup_view
    from specmon.session.state import HostState

    session = HostState(host="h")
    base, spec = session.server("baseline"), session.server("speculative")
    base.role, spec.role = "baseline", "speculative"
    lines = run(base, 0, [88.8] * 40)
    run(spec, 0, [94.4] * 40, spec=True)
    v = session_speedup_view(session, base, spec, None, 60.0, 1e9 + 100)
    assert v.conditions_unknown == () and "unknown" not in format_speedup(v)
    late = HostState(host="h")  # the baseline's log read from after its launch line
    b2, s2 = late.server("baseline"), late.server("speculative")
    b2.role, s2.role = "baseline", "speculative"
    for ln in lines[1:]:
        b2.apply(ln, parse_line(ln), 1e9)
    run(s2, 0, [94.4] * 40, spec=True)
    v = session_speedup_view(late, b2, s2, None, 60.0, 1e9 + 100)
    assert v.value == spec.runs[-1].decode[-1].rec.gen_throughput / 88.8
    assert format_speedup(v).split(" · ")[1:] == [
        "conditions unknown: the baseline's server args (no launch line in its run): the "
        "speedup may measure more than speculation"]


def test_a_side_idle_while_the_other_is_live_is_said():
    """An idle speculative server (its last decode line 100 s before the baseline's) against a
    live baseline: two windows that do not overlap, said beside the speedup; both idle alike
    is no statement (their windows end together)."""
    base = ServerState("baseline", role="baseline")
    spec = ServerState("speculative", role="speculative")
    run(spec, 0, [94.4, 94.6] * 20, spec=True)  # received at 1e9
    run(base, 100, [88.8, 88.9] * 20)  # received at 1e9 + 100
    v = speedup_view(base, spec, window_s=60, now=1e9 + 161)
    assert v.spec_idle_s == 161 and v.base_idle_s is None
    assert format_speedup(v).endswith(" · speculative idle: its last decode line 3 min ago "
                                      "(its window ends there)")
    both = ServerState("speculative", role="speculative")
    run(both, 100, [94.4, 94.6] * 20, spec=True)
    v = speedup_view(base, both, window_s=60, now=1e9 + 400)
    assert v.spec_idle_s is None and v.base_idle_s is None and "idle" not in format_speedup(v)
