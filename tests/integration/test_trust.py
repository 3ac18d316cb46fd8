"""A shared GPU host is hostile (issue 22): two real local users (made with useradd here, removed
at the end) and the real sshd (tests/sshd.py).

The attack from the issue: mallory runs
`exec -a $EVIL/python3 python3 -m sglang.launch_server --log-file $SECRET`, where $EVIL/python3
is mallory's script and $SECRET a file only root can read. Whoever runs `specmon record` (root,
or alice) must never run $EVIL/python3 and never tail $SECRET; alice's own server is tailed.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kit.sshd import Sshd

from specmon.sources.discovery import ALL_USERS_NOTE

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None or shutil.which("setpriv") is None,
    reason="needs root with useradd and setpriv (the tests create two local users)")

SECRET = "ROOT-ONLY-LINE-0421 nobody else may read this"  # (not a shape redaction masks)
DECODE = ("[2025-06-01 12:00:00 TP0] Decode batch, #running-req: 1, #token: 100, token usage: "
          "0.01, gen throughput (token/s): 88.80, #queue-req: 0, ")
FAKE_LAUNCH = textwrap.dedent("""
    import sys, time
    print(sys.argv[-1], file=sys.stderr, flush=True)
    print("ready", flush=True)
    time.sleep(300)
""")
# the servers' --port (labels only: nothing listens), distinct per test process: with -n 2
# each xdist worker makes its own world, and a shared port made the other world's mallory the
# one a test read (`user 1003` where its own was 1004)
_PORT0 = 20000 + (os.getpid() % 7000) * 6
PORT_EVIL, PORT_ALICE, PORT_ALICE_SECRET = _PORT0, _PORT0 + 1, _PORT0 + 2
# mallory's setuid-root process (`su` at its prompt), alice's server naming a file mallory
# planted, and alice's server that writes (holds open) a file mallory owns
PORT_SU, PORT_PLANTED, PORT_HELD = _PORT0 + 3, _PORT0 + 4, _PORT0 + 5
PLANTED = "FORGED-BY-MALLORY accept len: 9.99"


@dataclass
class World:
    base: Path
    sshd: Sshd
    alice: str
    mallory: str
    uids: dict[str, int]
    marks: Path  # $EVIL/python3 appends here when (if ever) it runs
    secret: Path
    alice_log: Path
    planted: Path  # mallory's file in a shared folder, named by alice's server, never opened
    held: Path  # mallory's file that alice's server has open (it writes its log there)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def config(self, user: str) -> Path:
        kh = self.sshd.write_known_hosts(self.base / "known_hosts")
        path = self.base / f"ssh_config_{user}"
        self.sshd.user, saved = user, self.sshd.user
        try:
            return self.sshd.write_client_config(path, kh)
        finally:
            self.sshd.user = saved

    def record(self, user: str, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "specmon", "record", "testbox", "--ssh-config",
             str(self.config(user)), "--out", str(out), "--duration", "4", *args],
            capture_output=True, text=True, timeout=90)

    def ran_evil(self) -> str:
        return self.marks.read_text() if self.marks.exists() else ""


def _run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True)


def _start_as(user: str, base: Path, script: str, stderr: Path | None, env: dict[str, str],
              procs: list[subprocess.Popen[bytes]]) -> None:
    """Run `bash -c script` as `user` in its own process group; wait for its "ready"."""
    uid = pwd.getpwnam(user).pw_uid
    gid = pwd.getpwnam(user).pw_gid
    err = open(stderr, "ab") if stderr is not None else subprocess.DEVNULL
    p = subprocess.Popen(
        ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "env", "-i",
         "PATH=/usr/bin:/bin", f"PYTHONPATH={base / 'pkg'}", *(f"{k}={v}" for k, v in env.items()),
         "bash", "-c", script],
        stdout=subprocess.PIPE, stderr=err, start_new_session=True, cwd=str(base))
    procs.append(p)
    assert p.stdout is not None and p.stdout.readline() == b"ready\n"


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    base = Path(tempfile.mkdtemp(prefix="specmon-trust-"))
    os.chmod(base, 0o755)  # the users' agents must reach sshd's authorized_keys and the package
    tag = os.getpid() % 100000
    alice, mallory = f"smt{tag}alice", f"smt{tag}mal"
    made: list[str] = []
    procs: list[subprocess.Popen[bytes]] = []
    sshd = None
    try:
        for name in (alice, mallory):
            # "*": no password, yet not locked ("!"), which sshd would refuse even with a key
            _run("useradd", "-m", "-d", str(base / f"home-{name}"), "-s", "/bin/sh", "-p", "*",
                 name)
            made.append(name)
        uids = {n: pwd.getpwnam(n).pw_uid for n in (alice, mallory)}
        (base / "sshd").mkdir(mode=0o755)
        sshd = Sshd(base / "sshd").start()
        # a fake SGLang every user can import: `python3 -m sglang.launch_server ...`
        (base / "pkg" / "sglang").mkdir(parents=True)
        (base / "pkg" / "sglang" / "__init__.py").write_text("")
        (base / "pkg" / "sglang" / "launch_server.py").write_text(FAKE_LAUNCH)
        marks_dir = base / "marks"
        marks_dir.mkdir()
        os.chmod(marks_dir, 0o1777)
        marks = marks_dir / "evil-ran"
        # mallory's $EVIL/python3: records that it ran (and as whom), then acts like python3
        evil = base / "evil"
        evil.mkdir()
        (evil / "python3").write_text(
            f'#!/bin/sh\necho "uid $(id -u): $*" >> {marks}\nexec /usr/bin/python3 "$@"\n')
        os.chmod(evil / "python3", 0o755)
        shutil.chown(evil, mallory)
        shutil.chown(evil / "python3", mallory)
        # $SECRET: a file only root can read
        (base / "secret").mkdir(mode=0o755)
        secret = base / "secret" / "secret.log"
        secret.write_text(f"{SECRET}\n{DECODE}\n")
        os.chmod(secret, 0o600)
        # alice's own server logs to a file of hers
        alice_dir = base / "alice"
        alice_dir.mkdir(mode=0o755)
        shutil.chown(alice_dir, alice)
        alice_log = alice_dir / "a.log"
        shared = base / "shared"  # a folder every user may write to, as /tmp
        shared.mkdir()
        os.chmod(shared, 0o1777)
        planted, held = shared / "planted.log", shared / "held.log"
        for f in (planted, held):
            f.write_text(f"{PLANTED}\n{DECODE}\n")
            os.chmod(f, 0o666)
            shutil.chown(f, mallory)
        w = World(base, sshd, alice, mallory, uids, marks, secret, alice_log, planted, held,
                  procs)
        _start_as(mallory, base, f'exec -a "$EVIL/python3" python3 -m sglang.launch_server '
                  f'--log-file {secret} --port {PORT_EVIL} x', None, {"EVIL": str(evil)}, procs)
        open(alice_log, "ab").close()
        shutil.chown(alice_log, alice)
        _start_as(alice, base, f"exec python3 -m sglang.launch_server --port {PORT_ALICE} "
                  f"'{DECODE} ALICE-LINE'", alice_log, {}, procs)
        _start_as(alice, base, f"exec python3 -m sglang.launch_server --log-file {secret} "
                  f"--port {PORT_ALICE_SECRET} x", None, {}, procs)
        _start_as(alice, base, f"exec python3 -m sglang.launch_server --log-file {planted} "
                  f"--port {PORT_PLANTED} x", None, {}, procs)
        _start_as(alice, base, f"exec 3>>{held}; exec python3 -m sglang.launch_server "
                  f"--log-file {held} --port {PORT_HELD} x", None, {}, procs)
        # what `su` is while it waits at its prompt: started by mallory (real uid), running
        # as root (effective uid), with the argv mallory chose (exec -a); it names $SECRET
        su = subprocess.Popen(
            ["python3", "-m", "sglang.launch_server", "--log-file", str(secret),
             "--port", str(PORT_SU), "x"], executable="/usr/bin/python3",
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(base / "pkg")},
            preexec_fn=lambda: os.setresuid(uids[mallory], 0, 0),  # noqa: PLW1509
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
        procs.append(su)
        assert su.stdout is not None and su.stdout.readline() == b"ready\n"
        yield w
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, 9)  # the groups we started, nothing else
            except ProcessLookupError:
                pass
            p.wait(10)
        if sshd is not None:
            sshd.stop()
        for name in made:
            subprocess.run(["userdel", "-r", name], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def _rows(out: Path) -> str:
    return out.read_text() if out.exists() else ""


def test_root_never_runs_or_tails_another_users_server(world, tmp_path):
    """The issue's case: root records over SSH. Mallory's server is not even listed; with
    --all-users it is listed (said so), its log not tailed, its argv[0] never run."""
    out = tmp_path / "root.jsonl"
    res = world.record("root", out)
    assert res.returncode == 0, res.stderr
    assert world.ran_evil() == ""
    assert SECRET not in _rows(out) and SECRET not in res.stderr
    assert f"sglang-{PORT_EVIL}" not in res.stderr  # another user's process: not listed
    assert f"sglang-{PORT_ALICE}" not in res.stderr  # (root's own servers may be listed: the
    # machine is shared with other tests)

    out = tmp_path / "root-all.jsonl"
    res = world.record("root", out, "--all-users")
    assert res.returncode == 0, res.stderr
    assert world.ran_evil() == ""
    assert SECRET not in _rows(out) and SECRET not in res.stderr
    assert ALL_USERS_NOTE in res.stderr
    evil_line = next(ln for ln in res.stderr.splitlines() if f"sglang-{PORT_EVIL}" in ln)
    assert f"user {world.uids[world.mallory]}" in evil_line
    assert "another user's process" in evil_line and "not tailed" in evil_line
    assert "ALICE-LINE" not in _rows(out)  # alice's log is not root's to tail either


def test_another_users_setuid_process_is_theirs_not_roots(world, tmp_path):
    """Mallory's setuid-root process (real uid mallory, effective uid root: `su` at its
    prompt, argv of her choosing) is hers: root's discovery does not list it as root's own
    and never tails the root-only file its argv names (the owner of /proc/PID, the effective
    uid, made it root's)."""
    from specmon.hostside.procs import op_proc_info, op_procs, process_owner

    su = next(p for p in world.procs if p.args[0] == "python3")
    assert process_owner(su.pid) == world.uids[world.mallory]
    assert su.pid not in [r[0] for r in op_procs({})]
    with pytest.raises(OSError, match="another user's"):
        op_proc_info({"pid": su.pid, "fds": [1, 2]})  # its fds, cwd and environment: not read
    out = tmp_path / "su.jsonl"
    res = world.record("root", out)
    assert res.returncode == 0, res.stderr
    assert SECRET not in _rows(out) and f"sglang-{PORT_SU}" not in res.stderr


def test_a_log_file_is_the_servers_only_when_it_writes_or_owns_it(world, tmp_path):
    """alice's server names, with --log-file, a file mallory planted in a shared folder and
    the server never opened: it is not tailed (mallory's forged line would have made the
    server speculative); a file mallory owns that the server holds open (it writes there)
    is its log."""
    out = tmp_path / "planted.jsonl"
    res = world.record(world.alice, out)
    assert res.returncode == 0, res.stderr
    rows = [json.loads(r) for r in _rows(out).splitlines() if '"gpus"' not in r]
    planted_line = next(ln for ln in res.stderr.splitlines() if f"sglang-{PORT_PLANTED}" in ln)
    assert f"owned by uid {world.uids[world.mallory]} and not open in the server" in planted_line
    assert not any(r["server"] == f"sglang-{PORT_PLANTED}" for r in rows)
    held = [r["line"] for r in rows if r["server"] == f"sglang-{PORT_HELD}" and "line" in r]
    assert held[:1] == [PLANTED]


def test_a_user_tails_only_her_own_readable_logs(world, tmp_path):
    """alice records over SSH as herself: her server's log is tailed; her server whose
    --log-file she cannot open is listed with the reason; mallory's is not listed (with
    --all-users: listed, not tailed, never run)."""
    for extra in ((), ("--all-users",)):
        out = tmp_path / f"alice{len(extra)}.jsonl"
        res = world.record(world.alice, out, *extra)
        assert res.returncode == 0, res.stderr
        rows = _rows(out)
        servers = {json.loads(r)["server"] for r in rows.splitlines() if '"gpus"' not in r}
        assert "ALICE-LINE" in rows and f"sglang-{PORT_ALICE}" in servers
        assert SECRET not in rows and SECRET not in res.stderr
        secret_line = next(ln for ln in res.stderr.splitlines()
                           if f"sglang-{PORT_ALICE_SECRET}" in ln)
        assert f"--log-file {world.secret}: not a readable file" in secret_line
        assert world.ran_evil() == ""
        listed = [ln for ln in res.stderr.splitlines() if f"sglang-{PORT_EVIL}" in ln]
        if extra:
            assert ALL_USERS_NOTE in res.stderr
            assert len(listed) == 1 and "another user's process" in listed[0]
        else:
            assert listed == [] and ALL_USERS_NOTE not in res.stderr


def test_log_names_another_users_file_on_purpose(world, tmp_path):
    """--log NAME=PATH tails a file the connecting user can read, whoever writes it."""
    out = tmp_path / "log.jsonl"
    res = world.record("root", out, "--log", f"s={world.secret}")
    assert res.returncode == 0, res.stderr
    assert SECRET in _rows(out) and world.ran_evil() == ""


def test_the_configured_python_runs_the_agent(world, tmp_path):
    """[hosts.NAME] python is the host agent's interpreter (it was ignored: the agent ran the
    host's python3)."""
    calls = tmp_path / "calls"
    wrapper = tmp_path / "agent-python"
    wrapper.write_text(f'#!/bin/sh\necho "$*" | head -c 40 >> {calls}\necho >> {calls}\n'
                       'exec /usr/bin/python3 "$@"\n')
    wrapper.chmod(0o755)
    cfg = tmp_path / "specmon.toml"
    cfg.write_text(f'[hosts.box]\ntarget = "testbox"\npython = "{wrapper}"\n'
                   f'ssh_config = "{world.config("root")}"\n')
    log = tmp_path / "x.log"
    log.write_text(f"{DECODE}\n")
    out = tmp_path / "cfg.jsonl"
    res = subprocess.run([sys.executable, "-m", "specmon", "record", "--config", str(cfg),
                          "--log", f"x={log}", "--out", str(out), "--duration", "2"],
                         capture_output=True, text=True, timeout=90)
    assert res.returncode == 0, res.stderr
    assert any(ln.startswith("-u -c import sys") for ln in calls.read_text().splitlines()), \
        calls.read_text()
    assert "88.8" in _rows(out)
    # TARGET given as that host's target, not its name: its python holds too (it ran the
    # host's default python3)
    calls.unlink()
    out = tmp_path / "by-target.jsonl"
    res = subprocess.run([sys.executable, "-m", "specmon", "record", "testbox", "--config",
                          str(cfg), "--log", f"x={log}", "--out", str(out), "--duration", "2"],
                         capture_output=True, text=True, timeout=90)
    assert res.returncode == 0, res.stderr
    assert calls.exists() and any(ln.startswith("-u -c import sys")
                                  for ln in calls.read_text().splitlines())
    assert "88.8" in _rows(out)
