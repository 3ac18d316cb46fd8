"""specmon's NCCL env audit on real captures (tests/data/nccl-h200*, one H200, NCCL 2.28.9, 1 rank).

The captures show that NCCL prints "X set by environment to Y" only for variables its code reads
in that configuration: with 1 rank NCCL_PROTO/NCCL_ALGO were set and never printed. So a missing
line must not read as "not set" for them; the cause says what /proc environ says instead.
"""

from __future__ import annotations

import json

from kit.paths import TESTS

from specmon.analysis.fingerprint import (
    NCCL_REPORTED,
    NCCL_TUNING_MODEL_VARS,
    Fingerprint,
    diff,
    env_from_environ,
    fingerprint_from,
    nccl_debug_env,
    nccl_debug_meta,
    nccl_debug_subsystems,
    nccl_log_proves_unset,
)

DATA = TESTS / "data"
CAP = DATA / "nccl-h200-launcher"
CASES = ("env-spt", "env-noenv", "late-spt", "late-noenv", "prespawn-spt", "prespawn-noenv", "none-spt",
         "none-noenv", "env-subsys-all")
TUNING = ("NCCL_PROTO", "NCCL_ALGO", "NCCL_P2P_LEVEL", "NCCL_CUMEM_ENABLE", "NCCL_BUFFSIZE")


def run_of(case: str) -> dict:
    return json.loads((CAP / case / "run.json").read_text())


def stdout_lines(case: str) -> list[str]:
    return (CAP / case / "TP0.stdout").read_text().splitlines()


def case_fp(case: str, *, launcher: bool = True, workers: bool = True) -> Fingerprint:
    """A fingerprint as `specmon` would collect it from that run: the worker's NCCL output and
    /proc/PID/environ of the launcher and of the worker."""
    run = run_of(case)
    w = run["workers"][0]
    return fingerprint_from(
        nccl_lines=stdout_lines(case),
        launcher=env_from_environ((CAP / case / "launcher.environ").read_bytes(), run["launcher_pid"],
                                  "launcher") if launcher else None,
        workers=[env_from_environ((CAP / case / "TP0.environ").read_bytes(), w["pid"], w["cmdline"])]
        if workers else [])


def nccl_causes(rec: Fingerprint, live: Fingerprint) -> list[str]:
    """The worker-NCCL causes (the launcher-env and other lines are tested elsewhere)."""
    return [c for c in diff(rec, live)[0] if c.startswith(("TP workers", "NCCL "))]


# --- what the captures are -----------------------------------------------------------------------

def test_nccl_debug_goes_to_stdout_sglang_log_to_stderr():
    for case in CASES:
        out = (CAP / case / "TP0.stdout").read_text()
        err = (CAP / case / "TP0.stderr").read_text()
        assert "NCCL INFO NCCL version 2.28.9+cuda13.0" in out, case
        assert "NCCL INFO" not in err and "Init torch distributed begin." in err, case
        assert run_of(case)["workers"][0]["cmdline"] == "sglang::scheduler_TP0"


def test_one_rank_reports_some_set_variables_and_never_proto_or_algo():
    for case in ("env-spt", "env-noenv", "prespawn-spt", "prespawn-noenv", "env-subsys-all"):
        worker = run_of(case)["workers"][0]
        assert all(worker["os_environ"].get(k) for k in TUNING), case  # all five were set in the worker
        seen = nccl_debug_env(stdout_lines(case))
        assert nccl_debug_meta(stdout_lines(case)) == ("2.28.9", 1)
        assert seen == {"rank 0": {"NCCL_CUMEM_ENABLE": "0", "NCCL_P2P_LEVEL": "SYS", "NCCL_NVLS_ENABLE": "0",
                                   "NCCL_BUFFSIZE": "4194304"}}, case
        # specmon's table is exactly what was printed; the rest of what was set is the tuning model's
        assert set(seen["rank 0"]) == set(NCCL_REPORTED[("2.28.9", 1)])
        assert set(TUNING) - set(seen["rank 0"]) == NCCL_TUNING_MODEL_VARS
    every_subsystem = (CAP / "env-subsys-all" / "TP0.stdout").read_text()
    assert len(every_subsystem.splitlines()) > 500  # NCCL_DEBUG_SUBSYS=ALL was really on
    assert "PROTO" not in every_subsystem.upper() and "ALGO" not in every_subsystem.upper()
    for case in ("late-spt", "late-noenv", "none-spt", "none-noenv"):
        assert nccl_debug_env(stdout_lines(case)) == {"rank 0": {"NCCL_NVLS_ENABLE": "0"}}, case


def test_proc_environ_of_launcher_and_workers_per_mode():
    def snap(case: str, who: str):
        return env_from_environ((CAP / case / f"{who}.environ").read_bytes(), 1, who)

    for case in CASES:
        titled = not case.endswith("-noenv")
        assert snap(case, "TP0").status == ("unreadable" if titled else "ok"), case  # setproctitle wiped it
    for mode in ("late", "prespawn"):
        launcher = snap(f"{mode}-noenv", "launcher")
        assert not set(TUNING) & set(launcher.vars)  # set in os.environ: never in /proc
        assert set(TUNING) <= set(run_of(f"{mode}-noenv")["launcher_os_environ"])
    assert not set(TUNING) & set(snap("late-noenv", "TP0").vars)  # after the spawn: too late
    assert snap("prespawn-noenv", "TP0").vars["NCCL_PROTO"] == "LL"  # before the spawn: inherited
    assert snap("env-spt", "launcher").vars["NCCL_ALGO"] == "Ring"


# --- specmon's audit on them ---------------------------------------------------------------------

def test_seed_incident_one_rank_late_variables_named_with_what_proves_it():
    rec, live = case_fp("env-noenv"), case_fp("late-spt")
    causes = nccl_causes(rec, live)
    # NCCL prints these at 1 rank when set (proven by the captures): a missing line is evidence
    assert causes[0] == ("TP workers lack NCCL_BUFFSIZE=4194304, NCCL_CUMEM_ENABLE=0, NCCL_P2P_LEVEL=SYS "
                         "that the recorded run had")
    # PROTO/ALGO: the recorded run had them (its /proc environ), NCCL's log cannot say either way
    for var, val in (("NCCL_ALGO", "Ring"), ("NCCL_PROTO", "LL")):
        cause = next(c for c in causes if c.startswith(f"TP workers: {var}={val} "))
        assert cause == (
            f"TP workers: {var}={val} of the recorded run not visible in NCCL's log (NCCL reports {var} only "
            "when a communicator of 2+ ranks runs its tuning model; this run's communicators have 1 rank); "
            "/proc environ says the launcher's exec-time environ lacks it (set later in its os.environ, it "
            "shows nowhere: before the spawn it still reaches the workers, after it it does not)")
    assert not any("lack" in c and ("NCCL_PROTO" in c or "NCCL_ALGO" in c) and "recorded run had" in c
                   for c in causes)
    assert len(causes) == 3


def test_readable_worker_environ_is_the_evidence_when_the_log_cannot_be():
    causes = nccl_causes(case_fp("env-noenv"), case_fp("late-noenv"))
    assert [c.rsplit("; ", 1)[-1] for c in causes[1:]] == ["/proc environ says the TP workers lack it"] * 2
    # the worker really had them: no NCCL cause, though its log never showed PROTO/ALGO
    assert nccl_causes(case_fp("env-noenv"), case_fp("prespawn-noenv")) == []
    assert nccl_causes(case_fp("env-noenv"), case_fp("env-spt")) == []  # launcher exec'd with them


def test_set_before_spawn_is_not_called_missing_on_launcher_evidence():
    """prespawn: the workers had PROTO/ALGO (their log could not show it; their environ was wiped);
    the launcher's /proc lacks them. The cause must say both possibilities, not "lack"."""
    causes = nccl_causes(case_fp("env-noenv"), case_fp("prespawn-spt"))
    assert len(causes) == 2 and all("not visible in NCCL's log" in c and "before the spawn it still reaches "
                                    "the workers" in c for c in causes)


def test_nothing_readable_says_so_instead_of_guessing():
    causes = nccl_causes(case_fp("env-noenv"), case_fp("late-spt", launcher=False))
    assert sorted(c.split(" of the recorded run")[0] for c in causes[1:]) == [
        "TP workers: NCCL_ALGO=Ring", "TP workers: NCCL_PROTO=LL"]
    assert all(c.endswith("/proc environ says nothing (TP workers unreadable: setproctitle wipes it, "
                          "launch with SPT_NOENV=1; launcher environ not read)") for c in causes[1:])


def test_recorded_log_proves_only_its_own_version_and_rank_count():
    """The recording's own PROTO line proves NCCL prints it, but only for the same NCCL version and
    rank count; any other configuration is "not visible"."""
    real = stdout_lines("env-spt")
    head = [ln for ln in real if "NCCL version" in ln]

    def log(version: str, nranks: int, extra: dict[str, str]) -> list[str]:
        lines = [h.replace("2.28.9", version) for h in head]
        for r in range(nranks):
            lines.append(f"vm:4{r}:4{r} [{r}] NCCL INFO ncclCommInitRankConfig comm 0xe85467{r} rank {r} "
                         f"nranks {nranks} cudaDev {r} nvmlDev {r} busId 60 commId 0x66 - Init START")
            lines += [f"vm:4{r}:4{r} [{r}] NCCL INFO {k} set by environment to {v}" for k, v in extra.items()]
            lines.append(f"vm:4{r}:4{r} [{r}] NCCL INFO NCCL_NVLS_ENABLE set by environment to 0.")
        return lines

    rec = fingerprint_from(nccl_lines=log("2.28.9", 2, {"NCCL_PROTO": "LL"}))
    assert nccl_log_proves_unset(fingerprint_from(nccl_lines=log("2.28.9", 2, {})), "NCCL_PROTO", rec)
    assert nccl_causes(rec, fingerprint_from(nccl_lines=log("2.28.9", 2, {}))) == [
        "TP workers lack NCCL_PROTO=LL that the recorded run had"]
    for version, nranks in (("2.28.3", 2), ("2.28.9", 4)):
        live = fingerprint_from(nccl_lines=log(version, nranks, {}))
        assert not nccl_log_proves_unset(live, "NCCL_PROTO", rec)
        cause, *more = nccl_causes(rec, live)
        assert more == ([] if version == "2.28.9" else [f"NCCL 2.28.9 -> {version} (NCCL_DEBUG lines)"])
        assert cause.startswith("TP workers: NCCL_PROTO=LL of the recorded run not visible in NCCL's log "
                                f"(NCCL reports NCCL_PROTO only when a communicator of 2+ ranks runs its "
                                f"tuning model; no real log of NCCL {version} with {nranks} ranks")


def test_debug_subsystems_from_the_captures():
    """NCCL_DEBUG_SUBSYS=INIT alone: only P2P_LEVEL's line came (integer params need ENV); unset:
    NCCL's default printed them all."""
    only_init = stdout_lines("subsys-INIT")
    assert nccl_debug_env(only_init) == {"rank 0": {"NCCL_P2P_LEVEL": "SYS"}}
    assert nccl_debug_subsystems(only_init) == ["INIT"]
    assert nccl_debug_env(stdout_lines("subsys-default")) == nccl_debug_env(stdout_lines("env-spt"))
    assert nccl_debug_subsystems(stdout_lines("subsys-default")) == ["ENV", "INIT"]
    for case, want in (("subsys-INIT", "INIT"), ("subsys-default", None)):
        assert run_of(case)["launcher_environ_start"]["tracked"].get("NCCL_DEBUG_SUBSYS") == want
    assert all(v in ("ENV", "INIT") for v in NCCL_REPORTED[("2.28.9", 1)].values())
    assert NCCL_REPORTED[("2.28.9", 1)]["NCCL_P2P_LEVEL"] == "INIT"


def test_env_subsystem_off_proves_nothing_for_the_lines_it_carries():
    rec = case_fp("env-noenv")
    live = case_fp("subsys-INIT", launcher=False, workers=False)  # only its log
    for var in ("NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE", "NCCL_BUFFSIZE"):
        assert not nccl_log_proves_unset(live, var)
    assert nccl_log_proves_unset(live, "NCCL_P2P_LEVEL")  # its INIT line would have come
    assert nccl_log_proves_unset(case_fp("late-spt"), "NCCL_CUMEM_ENABLE")  # ENV on there
    causes = nccl_causes(rec, live)
    assert len(causes) == 5 and not any(" lack " in c for c in causes)
    assert all("debug subsystem on, and nothing shows it was (NCCL_DEBUG_SUBSYS not known)" in c
               for c in causes if "NCCL_PROTO" not in c and "NCCL_ALGO" not in c)
    # its launcher exec'd with the variables (mode env): nothing is missing, nothing is said
    assert nccl_causes(rec, case_fp("subsys-INIT")) == []


def test_log_parser_keeps_the_lines_the_rule_needs():
    """The live session keeps only lines the parser calls `nccl_env`: with real NCCL output those
    must include the version and communicator lines, or no missing line could ever be evidence."""
    from specmon.parse.sglang import parse_event

    lines = stdout_lines("late-spt")
    kept = [ln for ln in lines if (ev := parse_event(ln)) is not None and ev.kind == "nccl_env"]
    assert len(kept) < 12 < len(lines)  # not the 64 channel lines
    fp = fingerprint_from(nccl_lines=kept)
    assert (fp.nccl_version, fp.nccl_nranks) == ("2.28.9", 1)
    assert nccl_log_proves_unset(fp, "NCCL_CUMEM_ENABLE") and not nccl_log_proves_unset(fp, "NCCL_PROTO")
    cumem = next(parse_event(ln) for ln in stdout_lines("env-spt") if "NCCL_CUMEM_ENABLE set" in ln)
    assert cumem is not None and cumem.data == {"var": "NCCL_CUMEM_ENABLE", "value": "0"}


def test_simulated_rank_prints_what_the_real_one_printed():
    """The simulator's NCCL output for the env-spt case's environment, next to the real capture."""
    from specmon.sim.worker import nccl_debug_lines

    env = {k: v for k, v in run_of("env-spt")["workers"][0]["os_environ"].items() if k.startswith("NCCL_")}
    sim = nccl_debug_lines(env, rank=0, pid=463, tid=463, nranks=1)
    real = stdout_lines("env-spt")

    def said(lines: list[str]) -> set[str]:
        return {ln.split("NCCL INFO ", 1)[1] for ln in lines if "set by environment" in ln or "version" in ln}

    assert said(sim) == said(real)
    assert nccl_debug_meta(sim) == nccl_debug_meta(real) == ("2.28.9", 1)
    only_init = dict(env, NCCL_DEBUG_SUBSYS="INIT")
    assert said(nccl_debug_lines(only_init, 0, 463, 463, 1)) == said(stdout_lines("subsys-INIT"))
    # with 2+ ranks the tuning model runs: the sim prints PROTO/ALGO there (source, not a capture)
    two = nccl_debug_env(nccl_debug_lines(env, rank=1, pid=9, tid=9, nranks=2))["rank 1"]
    assert two["NCCL_PROTO"] == "LL" and two["NCCL_ALGO"] == "Ring"
