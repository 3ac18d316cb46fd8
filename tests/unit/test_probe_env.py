"""The environment the live probe reads from a server's processes belongs to that launch only,
and a probe read back from a file is checked before it becomes a fingerprint."""

from __future__ import annotations

from dataclasses import asdict

from specmon.analysis.fingerprint import EnvSnapshot, env_snapshots
from specmon.parse.sglang import parse_line
from specmon.session.drift_watch import run_fingerprint
from specmon.session.state import HostState

ARGS = "[2026-05-25 17:56:00] server_args=ServerArgs(model_path='m', tp_size=2, port=30000)"


def test_env_snapshots_keep_what_reads_as_one_and_drop_the_rest():
    ok = asdict(EnvSnapshot(11, "sglang::scheduler_TP0", "ok", {"NCCL_PROTO": "LL"}))
    launcher, workers = env_snapshots({"launcher": ok, "workers": [
        ok, "junk", {"pid": "x", "title": 1, "status": "ok"}, {"bogus": 1}, None]})
    assert launcher == EnvSnapshot(11, "sglang::scheduler_TP0", "ok", {"NCCL_PROTO": "LL"})
    assert workers == [launcher]
    assert env_snapshots("junk") == (None, [])
    assert env_snapshots({"launcher": [1], "workers": {"a": 1}}) == (None, [])


def test_the_probed_environment_stays_with_the_run_it_was_read_from():
    s = HostState(host="h")
    st = s.server("base")
    st.apply(ARGS, parse_line(ARGS), 1.0)
    env = {"launcher": asdict(EnvSnapshot(7, "launcher", "ok", {"NCCL_ALGO": "Ring"})),
           "workers": []}
    st.set_probe({"version": "0.5.9", "env": env}, running=True)
    fp = run_fingerprint(s, st)
    assert fp.launcher is not None and fp.launcher.vars == {"NCCL_ALGO": "Ring"}
    st.apply(ARGS, parse_line(ARGS), 2.0)  # a restart: other processes
    assert st.runs_total == 2
    fp = run_fingerprint(s, st)
    assert fp.launcher is None and fp.version == "0.5.9"  # host facts carry over, env not
