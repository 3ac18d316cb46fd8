"""One owner per rule (issue 21): the session raises every alert, the pays rule included, for
every front end; a /metrics scrape reads the model and changes nothing."""

from __future__ import annotations

from kit.ui import ARGS_BASE, ARGS_SPEC, T0, apply, decode_line
from prometheus_client import generate_latest

from specmon.export.prometheus import registry_for
from specmon.session.fleet import FleetSession
from specmon.session.state import HostState


def _feed(s: HostState, spec_tok: float, base_tok: float, t0: float, n: int = 30) -> None:
    for i in range(n):
        apply(s, "baseline", decode_line(int(t0 - T0) + i, base_tok + (i % 3) * 0.2), t0 + i)
        apply(s, "speculative", decode_line(int(t0 - T0) + i, spec_tok + (i % 3) * 0.2, 2.6),
              t0 + i)


def _metric(text: str, name: str, **labels: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_session_raises_no_longer_pays_for_every_front_end_and_a_scrape_changes_nothing():
    s = HostState(host="h")
    s.server("baseline").role = "baseline"
    s.server("speculative").role = "speculative"
    apply(s, "baseline", ARGS_BASE, T0)
    apply(s, "speculative", ARGS_SPEC, T0)
    now = [T0 + 31]
    fleet = FleetSession.of(s, clock=lambda: now[0], window_s=25.0)
    heard: list[tuple[str, str, str, bool]] = []  # what `record` and the UI listen to
    fleet.alert_listeners.append(lambda h, n, a: heard.append((h, n, a.kind, a.cleared)))
    _feed(s, 110.0, 88.8, T0 + 1)
    assert fleet.tick(now[0]) == []  # it pays: the reference
    _feed(s, 80.0, 88.8, T0 + 100)  # slower than the baseline, interval wholly below 1
    now[0] = T0 + 131
    reg = registry_for(fleet)
    text = generate_latest(reg).decode()
    assert _metric(text, "specmon_server_alert_level", kind="speculation_pays") is None
    assert s.alerts == [] and heard == []  # the scrape raised nothing
    changed = fleet.tick(now[0])
    assert [(h, n, a.kind, a.cleared) for h, n, a in changed] == \
        [("h", "speculative", "speculation_pays", False)]
    assert heard == [("h", "speculative", "speculation_pays", False)]
    assert [a["kind"] for a in s.alerts] == ["speculation_pays"]  # snapshots carry it
    assert [a.kind for _, _, a in fleet.active_alerts()] == ["speculation_pays"]
    assert "cycle slower" in changed[0][2].causes
    text = generate_latest(reg).decode()
    assert _metric(text, "specmon_server_alert_level", host="h", server="speculative",
                   kind="speculation_pays") == 2.0
    generate_latest(reg)
    assert len(s.alerts) == 1 and fleet.tick(now[0]) == []  # raised once


def _gpu(i: int, pids: tuple[int, ...] | None = None):  # noqa: ANN202
    from specmon.parse.gpu_sample import GpuProcess, GpuSample

    procs = None if pids is None else tuple(GpuProcess(p) for p in pids)
    return GpuSample(ts=T0, index=i, clock_sm=1980, max_clock_sm=1980, processes=procs)


def test_gpu_ownership_one_rule_pids_then_args_then_unknown_never_all():
    from specmon.export.report import gpu_groups as report_groups
    from specmon.export.snapshot import ServerSnap, Snapshot
    from specmon.session.drift_watch import server_gpus
    from specmon.session.ownership import owned_gpus
    from specmon.ui.widgets import gpu_groups as panel_groups

    no_procs = [_gpu(i) for i in range(16)]
    # 1. pids: the NVML process lists win over the arguments
    with_procs = [_gpu(i, (4242,) if i in (2, 3) else ()) for i in range(16)]
    own = owned_gpus(with_procs, {4242}, {"tp_size": 8, "base_gpu_id": 8})
    assert (own.indices, own.rule) == ((2, 3), "pids")
    # 2. args: tp x pp / nnodes GPUs from base_gpu_id
    own = owned_gpus(no_procs, {4242}, {"tp_size": 4, "pp_size": 4, "nnodes": 2,
                                        "base_gpu_id": 8})
    assert (own.indices, own.rule) == (tuple(range(8, 16)), "args")
    assert own.text() == "GPUs 8-15 (from tp x pp / nnodes at base_gpu_id)"
    # 3. unknown: nothing, never every GPU of the host
    own = owned_gpus(no_procs, set(), {})
    assert (own.indices, own.rule) == ((), "unknown")

    # every front end uses it: the session (drift causes), the panel, the report
    s = HostState(host="h")
    base, spec = s.server("base"), s.server("spec")
    base.args = {"tp_size": 8, "base_gpu_id": 0}
    spec.args = {"tp_size": 8, "base_gpu_id": 8}
    s.set_gpus(no_procs)
    unknown = s.server("other")  # no args, no pids
    assert [g.index for g in server_gpus(s, spec)] == list(range(8, 16))
    assert server_gpus(s, unknown) == []  # not all 16
    panel = {name: [g.index for g in gs] for name, gs in panel_groups(no_procs, [base, spec])}
    assert panel == {"base": list(range(8)), "spec": list(range(8, 16))}
    snap = Snapshot(servers=[ServerSnap("base", args=dict(base.args)),
                             ServerSnap("spec", args=dict(spec.args)), ServerSnap("other")],
                    gpu_samples=no_procs)
    assert {name: sorted(ix) for name, ix in report_groups(snap)} == panel


def test_one_na_formatter_and_one_spec_config_text():
    from specmon.numfmt import NA, num, spec_config_text

    assert [num(None), num(float("nan")), num(float("inf")), num(True)] == [NA] * 4
    assert num(88.849) == "88.85" and num(3, "{}") == "3" and num(0.0) == "0.00"
    args = {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 2,
            "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 3}
    assert spec_config_text(args) == "EAGLE3 steps 2 topk 1 draft 3"
    assert spec_config_text({"speculative_algorithm": "NGRAM"}) == "NGRAM"  # nothing guessed
    assert spec_config_text({"speculative_algorithm": None, "tp_size": 8}) is None


def test_conditions_differ_args_nccl_power_files_versions_not_identity_or_speculation():
    from specmon.analysis.conditions import conditions_differ
    from specmon.analysis.fingerprint import GpuState, fingerprint_from

    def fp(args: dict, nccl: dict[str, str], limit: float, files: list[str], ver: str):  # noqa: ANN202
        lines = [f"h:1:1 [0] NCCL INFO {k} set by environment to {v}" for k, v in nccl.items()]
        lines.append("h:1:1 [0] NCCL INFO NCCL version 2.27.3")  # NCCL_DEBUG on: env known
        return fingerprint_from(server_args=args, nccl_lines=lines, version=ver,
                                modified_files=files, modified_method="RECORD",
                                gpus=[GpuState(0, power_limit_w=limit)])

    base_args = {"tp_size": 8, "port": 30000, "base_gpu_id": 0, "random_seed": 1,
                 "disable_custom_all_reduce": False, "cuda_graph_max_bs": 160,
                 "mem_fraction_static": 0.88, "disable_overlap_schedule": False}
    spec_args = {**base_args, "port": 30001, "base_gpu_id": 8, "random_seed": 2,
                 "disable_overlap_schedule": True,  # SGLang sets it for EAGLE itself
                 "speculative_algorithm": "EAGLE3", "speculative_num_steps": 3}
    same = conditions_differ(fp(base_args, {"NCCL_PROTO": "LL"}, 700.0, [], "0.5.11"),
                             fp(spec_args, {"NCCL_PROTO": "LL"}, 700.0, [], "0.5.11"))
    assert same == []
    spec_args.update(disable_custom_all_reduce=True, cuda_graph_max_bs=48, tp_size=4,
                     mem_fraction_static=0.8)
    diffs = conditions_differ(
        fp(base_args, {"NCCL_PROTO": "LL"}, 700.0, [], "0.5.11"),
        fp(spec_args, {}, 330.0, ["sglang/srt/layers/communicator.py"], "0.5.12"))
    assert diffs == [
        "cuda_graph_max_bs: 160 vs 48", "disable_custom_all_reduce: False vs True",
        "mem_fraction_static: 0.88 vs 0.8", "tp_size: 8 vs 4",
        "NCCL env seen by workers: NCCL_PROTO LL vs unset",
        "GPU power limit 700 W vs 330 W",
        "modified SGLang files (speculative: sglang/srt/layers/communicator.py)",
        "SGLang version 0.5.11 vs 0.5.12"]


def test_batch_size_limits_count_only_above_the_smaller_limit():
    from specmon.analysis.conditions import args_differ

    base = {"cuda_graph_max_bs": 256, "max_running_requests": 2048}
    spec = {"cuda_graph_max_bs": 48, "max_running_requests": 48,  # SGLang's speculative defaults
            "speculative_algorithm": "EAGLE3"}
    assert args_differ(base, spec, running_req=1) == []
    assert args_differ(base, spec, running_req=64) == ["cuda_graph_max_bs: 256 vs 48",
                                                       "max_running_requests: 2048 vs 48"]
    assert len(args_differ(base, spec)) == 2  # batch size unknown: said


def test_snapshots_carry_the_server_pids_the_ownership_rule_needs(tmp_path):
    from specmon.export.snapshot import read_snapshot, snapshot_from_session, write_snapshot

    s = HostState(host="h")
    s.server("base").pids = {4242, 4243}
    s.set_gpus([_gpu(0, (4243,)), _gpu(1, ())])
    snap = read_snapshot(write_snapshot(snapshot_from_session(s), tmp_path / "s.json"))
    [base] = snap.servers
    assert base.pids == [4242, 4243]
    from specmon.export.report import gpu_groups

    assert gpu_groups(snap) == [("base", {0}), ("other GPUs", {1})]  # by its process


def test_a_snapshot_with_bad_pids_is_refused_in_one_line():
    import pytest

    from specmon.export.snapshot import SCHEMA, SnapshotError, from_doc

    doc = {"schema": SCHEMA, "servers": [{"name": "b", "pids": [1, "x"]}]}
    with pytest.raises(SnapshotError, match=r"^snapshot: servers\[0\]: pids: expected at most "
                                            r"65536 process ids \(positive integers\)$"):
        from_doc(doc)


def test_the_uis_own_snapshot_keeps_a_partial_run_partial(tmp_path):
    """The export key writes the session's rows: the gap between a run's head and its history
    goes with them, so the report of that snapshot says the run is partial as live did."""
    from specmon.export.report import report_doc, report_model
    from specmon.export.snapshot import read_snapshot, snapshot_from_session, write_snapshot
    from specmon.parse.sglang import parse_line

    s = HostState(host="h")
    base = s.server("base")
    base.apply(ARGS_BASE, parse_line(ARGS_BASE), T0)
    for i in range(40):
        text = decode_line(i, 88.0 + i % 3, None)
        base.apply(text, parse_line(text), T0 + 1 + i, 150_000 if i == 0 else 0)
    assert base.runs[-1].skipped_bytes == 150_000
    snap = read_snapshot(write_snapshot(snapshot_from_session(s), tmp_path / "s.json"))
    assert [e.skipped for e in snap.servers[0].entries if e.skipped] == [150_000]
    (run,) = report_doc(snap, report_model(snap))["servers"][0]["runs"]
    assert run["partial"].startswith("partial: 150,000 bytes of its log after the start-up lines")
    text = generate_latest(registry_for(FleetSession.of(s, clock=lambda: T0 + 60))).decode()
    assert _metric(text, "specmon_server_run_skipped_bytes", host="h", server="base") == 150_000


def test_a_snapshot_replays_its_recorded_baseline_and_the_report_gives_the_vs_recorded_speedup(
        tmp_path):
    """The phantom baseline in a snapshot: `b` recorded the tuned run (88.8), the baseline was
    relaunched untuned (62.9). Live, the headline put '1.06x vs recorded baseline 88.8' first;
    the replay had no recorded baseline ('1.50x vs live baseline') and the report no such
    figure. The snapshot keeps the baseline's stats; replay and report watch it again."""
    import random

    from specmon.export.report import report_doc, report_model
    from specmon.export.snapshot import read_snapshot, snapshot_from_session, write_snapshot
    from specmon.parse.sglang import parse_line
    from specmon.session.drift_watch import session_speedup_view
    from specmon.session.events import LineItem

    rnd = random.Random(4)
    now = [T0]
    fleet = FleetSession(["h"], clock=lambda: now[0])
    fleet.declare_server("h", "base", "baseline", "/b.log")
    fleet.declare_server("h", "spec", "speculative", "/s.log")

    def feed(server: str, values: list[float], t0: float, acc: float | None,
             args: str | None = None) -> float:
        """Lines received from T0 + t0 (each run's log from its own 10:00:00: the same
        context sizes, so the same drift stratum)."""
        items = [LineItem(args, parse_line(args), T0 + t0)] if args else []
        for i, v in enumerate(values):
            text = decode_line(i, v, acc)
            items.append(LineItem(text, parse_line(text), T0 + t0 + 1 + i))
        fleet.lines("h", server, items)
        return t0 + 1 + len(values)

    feed("base", [88.8 * (1 + rnd.gauss(0, 0.005)) for _ in range(60)], 0, None, ARGS_BASE)
    now[0] = T0 + 61
    fleet.record_baseline("h", "base", "tuned")
    t = feed("base", [62.9 * (1 + rnd.gauss(0, 0.005)) for _ in range(60)], 100, None, ARGS_BASE)
    feed("spec", [94.4 * (1 + rnd.gauss(0, 0.005)) for _ in range(160)], 0, 2.4, ARGS_SPEC)
    now[0] = T0 + t
    fleet.tick(now[0])
    hs = fleet.host("h").session
    live = session_speedup_view(hs, hs.server("base"), hs.server("spec"),
                                fleet.watches[("h", "base")], 1e9, now[0])
    assert live.drift_active and live.vs_recorded == __import__("pytest").approx(94.4 / 88.8,
                                                                               rel=0.01)
    snap = read_snapshot(write_snapshot(snapshot_from_session(hs), tmp_path / "s.json"))
    assert "stats" in snap.baselines[0]
    model = report_model(snap)
    assert ("h", "base") in model.fleet.watches  # the replay watches the recorded baseline
    vr = report_doc(snap, model)["speedup"]["vs_recorded"]
    assert vr["baseline"] == "tuned" and vr["value"] == round(live.vs_recorded, 3)


def test_a_gap_of_a_run_without_a_decode_line_after_it_stays_with_that_run(tmp_path):
    """The gap is kept on the next decode line for the snapshot; a run that printed none after
    its gap must not hand it to the next run (replayed, that run would read partial)."""
    from specmon.parse.sglang import parse_line

    s = HostState(host="h")
    base = s.server("base")
    base.apply(ARGS_BASE, parse_line(ARGS_BASE), T0)
    ready = "[2026-11-29 10:00:01] The server is fired up and ready to roll!"
    base.apply(ready, parse_line(ready), T0 + 1, 50_000)  # the gap, then no decode line
    base.apply(ARGS_BASE, parse_line(ARGS_BASE), T0 + 2)  # the next launch
    text = decode_line(0, 88.0, None)
    base.apply(text, parse_line(text), T0 + 3)
    assert [r.skipped_bytes for r in base.runs] == [50_000, 0]
    assert base.gap_points == {}
