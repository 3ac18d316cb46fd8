"""bench/nccl_tp_launcher.py without a GPU (`--no-nccl`): spawn, titles and /proc captures, 2 ranks.

The GPU part ran on one H200 (tests/data/nccl-h200-launcher); this checks that the harness itself
captures what the N-rank run needs, with two workers, on any Linux machine.
"""

from __future__ import annotations

import json
import subprocess
import sys

from kit.paths import ROOT

from specmon.analysis.fingerprint import env_from_environ

LAUNCHER = ROOT / "bench" / "nccl_tp_launcher.py"


def test_capture_two_workers_late_and_prespawn(tmp_path):
    out = tmp_path / "cap"
    r = subprocess.run([sys.executable, str(LAUNCHER), "capture", "--world-size", "2", "--no-nccl",
                        "--modes", "late,prespawn", "--tuning", "NCCL_PROTO=LL,NCCL_ALGO=Ring",
                        "--timeout", "60", "--out", str(out)], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    cases = {"late-spt", "late-noenv", "prespawn-spt", "prespawn-noenv"}
    assert {p.name for p in out.iterdir() if p.is_dir()} == cases
    assert len((out / "commands.txt").read_text().splitlines()) == 4
    for case in cases:
        run = json.loads((out / case / "run.json").read_text())
        assert run["exit_codes"] == [0, 0]
        assert run["launcher_environ_start"]["tracked"]["NCCL_NVLS_ENABLE"] == "0"  # forced for every case
        # the launcher's os.environ got the variables; its /proc environ never shows them
        assert run["launcher_os_environ"]["NCCL_PROTO"] == "LL"
        launcher = env_from_environ((out / case / "launcher.environ").read_bytes(), 1, "launcher")
        assert "NCCL_PROTO" not in launcher.vars
        for rank in (0, 1):
            w = run["workers"][rank]
            assert w["cmdline"] == f"sglang::scheduler_TP{rank}"
            assert (out / case / f"TP{rank}.stdout").exists() and (out / case / f"TP{rank}.stderr").exists()
            snap = env_from_environ((out / case / f"TP{rank}.environ").read_bytes(), w["pid"], w["cmdline"])
            inherited = case.startswith("prespawn")
            assert ("NCCL_PROTO" in w["os_environ"]) == inherited
            if case.endswith("-spt"):  # setproctitle wiped it; before the title it was readable
                assert snap.status == "unreadable" and not w["self_environ_before_title"]["all_nul"]
            else:
                assert snap.status == "ok" and (snap.vars.get("NCCL_PROTO") == "LL") == inherited


def test_mode_env_refuses_a_launcher_without_the_variables(tmp_path):
    env = {"PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, str(LAUNCHER), "launch", "--mode", "env", "--no-nccl", "--tuning",
                        "NCCL_PROTO=LL", "--out", str(tmp_path)], capture_output=True, text=True, env=env,
                       timeout=60)
    assert r.returncode == 2 and "start the launcher with NCCL_PROTO set" in r.stderr
    assert "Traceback" not in r.stderr
