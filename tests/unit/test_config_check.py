"""`specmon config check` through the real CLI entry (specmon.cli.main): a path that is not a
regular file says what it is (never "not found", never read: a FIFO cannot hang it), an
unreadable file says "permission denied", every numeric setting is range-checked with one line
`FILE: KEY = VALUE: why (expected ...)`, strings are strings without NUL (and one line where they
are a path or a name: `[hosts.NAME] python`), and the exit status is 0 valid, 1 problems,
2 could not be checked."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

from specmon import config
from specmon.cli import main

GOOD = """\
[hosts.box]
target = "me@box:2222"
python = "/opt/venv/bin/python"

[servers.base]
host = "box"
role = "baseline"
model_path = "org/model"
tp = 2
port = 30000
gpus = [0, 1]
ready_timeout = 1200

[servers.spec]
host = "box"
role = "speculative"
model_path = "org/model"
tp = 2
port = 30001
gpus = [0, 1]
[servers.spec.speculative]
algorithm = "EAGLE3"
num_steps = 2
eagle_topk = 1
num_draft_tokens = 3
"""

VLLM = """\
[servers.v]
role = "speculative"
engine = "vllm"
model_path = "org/model"
port = 8000
[servers.v.speculative]
algorithm = "eagle3"
num_speculative_tokens = 3
"""


def check(capsys, *argv: str) -> tuple[int, list[str], str]:
    """`specmon config check ARGV`: (exit status, stdout lines, stderr)."""
    code = main(["config", "check", *argv])
    out = capsys.readouterr()
    return code, out.out.splitlines(), out.err


def write(tmp_path: Path, text: str, name: str = "specmon.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def one_error(err: str) -> str:
    """The single stderr line of an exit-2 `config check`."""
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# -- 1. what the path is -------------------------------------------------------------------------
def test_a_directory_is_named_a_directory_not_missing(tmp_path, capsys):
    code, out, err = check(capsys, "--config", str(tmp_path))
    line = one_error(err)
    assert code == 2 and out == []
    assert line.startswith(f"specmon config: {tmp_path}: (file): is a directory, expected a TOML "
                           "file (given by --config)")
    assert "not found" not in line
    write(tmp_path, GOOD)  # a folder holding a config: the fix names the file
    code, _, err = check(capsys, "--config", str(tmp_path))
    assert code == 2 and f"(fix: give the file: {tmp_path / 'specmon.toml'})" in one_error(err)


def test_a_character_device_is_named_and_not_read(capsys):
    code, out, err = check(capsys, "--config", "/dev/null")
    assert code == 2 and out == []
    assert ("/dev/null: (file): is a character device, expected a TOML file (given by --config)"
            in one_error(err))


def _spy_open(monkeypatch) -> list[str]:
    """Every path os.open is asked for (then opened as usual)."""
    opened: list[str] = []
    real = os.open

    def spy(path, flags, *a, **kw):
        opened.append(os.fspath(path))
        return real(path, flags, *a, **kw)

    monkeypatch.setattr(os, "open", spy)
    return opened


def _in_thread(fn, timeout: float = 10.0):
    """fn() in a thread; fails instead of hanging when it does not return within `timeout`."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["r"] = fn()
        except BaseException as exc:  # handed to the test's thread
            box["e"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), "hung (read a FIFO with no writer?)"
    if "e" in box:
        raise box["e"]
    return box["r"]


def test_a_fifo_is_never_opened(tmp_path, capsys, monkeypatch):
    fifo = tmp_path / "cfg.toml"
    os.mkfifo(fifo)
    opened = _spy_open(monkeypatch)
    code = _in_thread(lambda: main(["config", "check", "--config", str(fifo)]))
    err = capsys.readouterr().err
    assert code == 2
    assert f"{fifo}: (file): is a named pipe (FIFO), expected a TOML file" in one_error(err)
    assert str(fifo) not in opened  # stat only


def test_a_fifo_swapped_in_after_the_stat_does_not_hang(tmp_path, monkeypatch):
    """The descriptor is opened non-blocking and its type checked again (a race with stat)."""
    fifo = tmp_path / "cfg.toml"
    os.mkfifo(fifo)
    monkeypatch.setattr(config, "_not_a_file", lambda path: None)  # stat said "regular file"
    with pytest.raises(config.ConfigFileError) as exc:
        _in_thread(lambda: config.load_path(fifo))
    assert exc.value.issues[0].message == "is a named pipe (FIFO), expected a TOML file"


def test_env_var_and_current_folder_say_what_they_found(tmp_path, capsys, monkeypatch):
    import platformdirs

    user = tmp_path / "user"
    user.mkdir()
    write(user, GOOD)  # a valid config further down the search order
    monkeypatch.setattr(platformdirs, "user_config_dir", lambda app: str(user))
    monkeypatch.setenv("SPECMON_CONFIG", "/dev/null")
    code, _, err = check(capsys)
    assert code == 2 and "/dev/null: (file): is a character device, expected a TOML file (given by "\
        "$SPECMON_CONFIG)" in one_error(err)
    monkeypatch.delenv("SPECMON_CONFIG")
    cwd = tmp_path / "cwd"
    (cwd / "specmon.toml").mkdir(parents=True)
    monkeypatch.chdir(cwd)
    code, _, err = check(capsys)  # never a silent fall-through to the user config dir's file
    assert code == 2 and (f"{cwd / 'specmon.toml'}: (file): is a directory, expected a TOML file "
                          "(found in the current folder)") in one_error(err)
    (cwd / "specmon.toml").rmdir()
    code, out, _ = check(capsys)
    assert code == 0 and out == [f"{user / 'specmon.toml'}: ok"]


def test_a_broken_symbolic_link_says_so(tmp_path, capsys):
    link = tmp_path / "specmon.toml"
    link.symlink_to(tmp_path / "gone.toml")
    code, _, err = check(capsys, "--config", str(link))
    assert code == 2 and "(file): is a broken symbolic link (given by --config)" in one_error(err)


def test_unreadable_file_says_permission_denied(tmp_path, capsys, monkeypatch):
    """os.open refusing with EACCES (what a 0000 file gives a non-root user; as root, simulated)."""
    p = write(tmp_path, GOOD)
    real = os.open

    def refuse(path, flags, *a, **kw):
        if os.fspath(path) == str(p):
            raise PermissionError(errno.EACCES, "Permission denied", str(p))
        return real(path, flags, *a, **kw)

    monkeypatch.setattr(os, "open", refuse)
    code, out, err = check(capsys, "--config", str(p))
    assert code == 2 and out == []
    assert one_error(err).startswith(f"specmon config: {p}: (file): permission denied (fix: ")


def test_a_file_in_an_unsearchable_folder_says_permission_denied(tmp_path, capsys, monkeypatch):
    """stat refused with EACCES (a folder without x; as root, simulated): one line, exit 2 (it
    was a PermissionError traceback from Path.is_file)."""
    p = write(tmp_path, GOOD)
    real = os.stat

    def refuse(path, *a, **kw):
        if os.fspath(path) == str(p):
            raise PermissionError(errno.EACCES, "Permission denied", str(p))
        return real(path, *a, **kw)

    monkeypatch.setattr(os, "stat", refuse)
    code, out, err = check(capsys, "--config", str(p))
    assert code == 2 and out == []
    assert one_error(err).startswith(f"specmon config: {p}: (file): permission denied (given by "
                                     "--config) (fix: ")


def _as_nobody(argv: list[str]) -> tuple[int, str]:
    """(exit status, stderr) of `specmon ARGV` run by a user the kernel refuses files to: a
    forked child of this process that drops root for uid/gid 65534 when run as root (the code
    is already in memory: no venv path needs to be readable by that user)."""
    import sys

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 70
        try:
            os.close(r)
            os.dup2(w, 2)
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
            sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
            sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
            code = main(argv)
            sys.stderr.flush()
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        err = fh.read().decode()
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), err


def test_unreadable_file_says_permission_denied_for_real(tmp_path):
    import shutil
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="specmon-perm-"))  # (tmp_path's folders are root's 0700)
    try:
        top.chmod(0o755)
        p = write(top, GOOD)
        p.chmod(0)
        code, err = _as_nobody(["config", "check", "--config", str(p)])
        assert code == 2 and f"{p}: (file): permission denied" in one_error(err), err
        locked = top / "locked"
        locked.mkdir()
        q = write(locked, GOOD)
        q.chmod(0o644)
        locked.chmod(0o744)  # no x for others: stat of the file inside is refused
        code, err = _as_nobody(["config", "check", "--config", str(q)])
        assert code == 2, err
        assert f"{q}: (file): permission denied (given by --config)" in one_error(err), err
    finally:
        for d in (top / "locked", top):
            if d.exists():
                d.chmod(0o755)
        shutil.rmtree(top)


def test_a_huge_file_is_not_read_whole(tmp_path, capsys):
    p = write(tmp_path, GOOD + "#" * (config.MAX_CONFIG_BYTES + 1) + "\n")
    code, _, err = check(capsys, "--config", str(p))
    assert code == 2 and "is larger than 1 MiB, too large for a config" in one_error(err)


# -- 2. ranges and types --------------------------------------------------------------------------
def _with(line: str, after: str = "port = 30000\n") -> str:
    assert after in GOOD
    return GOOD.replace(after, after + line + "\n", 1)


_E_TIMEOUT = "(expected seconds, more than 0 and at most 86400, a day)"
_E_TARGET = "(expected 'local', [USER@]HOST[:PORT] with PORT 1-65535, or an ~/.ssh/config alias)"
RANGE_CASES = [
    # (config text, the one line expected after "FILE: ")
    (_with("ready_timeout = 1e308").replace("ready_timeout = 1200\n", ""),
     f"servers.base.ready_timeout = 1e+308: out of range {_E_TIMEOUT}"),
    (_with("ready_timeout = inf").replace("ready_timeout = 1200\n", ""),
     f"servers.base.ready_timeout = inf: not a finite number {_E_TIMEOUT}"),
    (_with("ready_timeout = -inf").replace("ready_timeout = 1200\n", ""),
     f"servers.base.ready_timeout = -inf: not a finite number {_E_TIMEOUT}"),
    (_with("ready_timeout = nan").replace("ready_timeout = 1200\n", ""),
     f"servers.base.ready_timeout = nan: not a finite number {_E_TIMEOUT}"),
    (GOOD.replace("ready_timeout = 1200", "ready_timeout = -5"),
     f"servers.base.ready_timeout = -5: out of range {_E_TIMEOUT}"),
    (GOOD.replace("ready_timeout = 1200", "ready_timeout = 0"),
     f"servers.base.ready_timeout = 0: out of range {_E_TIMEOUT}"),
    (GOOD.replace("ready_timeout = 1200", "ready_timeout = 86401"),
     f"servers.base.ready_timeout = 86401: out of range {_E_TIMEOUT}"),
    (GOOD.replace("port = 30000", "port = 99999999"),
     "servers.base.port = 99999999: out of range (expected a TCP port 1-65535)"),
    (GOOD.replace("port = 30000", "port = 0"),
     "servers.base.port = 0: out of range (expected a TCP port 1-65535)"),
    (GOOD.replace("port = 30000", "port = -1"),
     "servers.base.port = -1: out of range (expected a TCP port 1-65535)"),
    (GOOD.replace("port = 30001", "port = 65536"),  # the other's default 30000: no follow-on
     "servers.spec.port = 65536: out of range (expected a TCP port 1-65535)"),
    (GOOD.replace("tp = 2\nport = 30000", "tp = 0\nport = 30000"),
     "servers.base.tp = 0: out of range (expected GPUs per server 1-1024)"),
    (GOOD.replace("tp = 2\nport = 30000", "tp = 99999999\nport = 30000"),
     "servers.base.tp = 99999999: out of range (expected GPUs per server 1-1024)"),
    (GOOD.replace("gpus = [0, 1]\nready", "gpus = [0, 99999999]\nready"),
     "servers.base.gpus = [0, 99999999]: out of range (expected GPU indices 0-1023)"),
    (GOOD.replace("gpus = [0, 1]\nready", "gpus = [-1, 0]\nready"),
     "servers.base.gpus = [-1, 0]: out of range (expected GPU indices 0-1023)"),
    (_with("n_gpus = 0", 'python = "/opt/venv/bin/python"\n'),
     "hosts.box.n_gpus = 0: out of range (expected a GPU count 1-1024)"),
    (_with("n_gpus = 99999999", 'python = "/opt/venv/bin/python"\n'),
     "hosts.box.n_gpus = 99999999: out of range (expected a GPU count 1-1024)"),
    (GOOD.replace("me@box:2222", "me@box:99999999"),
     f"hosts.box.target = \"me@box:99999999\": bad SSH port '99999999' {_E_TARGET}"),
    (GOOD.replace("me@box:2222", "me@box:0"),
     f"hosts.box.target = \"me@box:0\": bad SSH port '0' {_E_TARGET}"),
    (GOOD.replace("me@box:2222", "me@box:-1"),
     f"hosts.box.target = \"me@box:-1\": bad SSH port '-1' {_E_TARGET}"),
    (GOOD.replace("me@box:2222", "me@gpu box"),
     f"hosts.box.target = \"me@gpu box\": bad host name {_E_TARGET}"),
    (GOOD.replace("num_steps = 2", "num_steps = 0"),
     "servers.spec.speculative.num_steps = 0: out of range (expected an integer 1-1024)"),
    (GOOD.replace("eagle_topk = 1", "eagle_topk = 99999999"),
     "servers.spec.speculative.eagle_topk = 99999999: out of range (expected an integer 1-1024)"),
    (GOOD.replace("num_draft_tokens = 3", "num_draft_tokens = -3"),
     "servers.spec.speculative.num_draft_tokens = -3: out of range (expected an integer 1-1024)"),
    (GOOD + VLLM.replace("num_speculative_tokens = 3", "num_speculative_tokens = 5000"),
     "servers.v.speculative.num_speculative_tokens = 5000: out of range (expected an integer "
     "1-1024)"),  # and no "missing for vLLM" after it
]


@pytest.mark.parametrize("text,line", RANGE_CASES, ids=[c[1].split(":")[0] for c in RANGE_CASES])
def test_out_of_range_is_one_line_with_file_key_value_and_range(tmp_path, capsys, text, line):
    p = write(tmp_path, text)
    code, out, err = check(capsys, "--config", str(p))
    assert (code, out) == (1, [f"{p}: {line}"]), out
    assert err == f"{p}: 1 problem\n"


def test_the_bounds_themselves_are_valid(tmp_path, capsys):
    text = (GOOD.replace("port = 30000", "port = 65535").replace("port = 30001", "port = 1")
            .replace("ready_timeout = 1200", "ready_timeout = 86400")
            .replace('python = "/opt/venv/bin/python"\n', 'python = "/opt/venv/bin/python"\n'
                     "n_gpus = 1024\n")
            .replace("num_steps = 2", "num_steps = 1024"))
    text = text.replace("[servers.spec]", "[servers.one]\nrole = \"baseline\"\nhost = \"box\"\n"
                        "model_path = \"m\"\nport = 30002\ntp = 1\ngpus = [1023]\n"
                        "ready_timeout = 0.5\n\n[servers.spec]")
    code, out, _ = check(capsys, "--config", str(write(tmp_path, text)))
    assert (code, out) == (0, [f"{tmp_path / 'specmon.toml'}: ok"])


TYPE_CASES = [
    (_with("spt_noenv = 1"), "servers.base.spt_noenv: must be true or false, got int 1"),
    (_with('spt_noenv = "yes"'), "servers.base.spt_noenv: must be true or false, got str 'yes'"),
    (GOOD.replace("port = 30000", "port = true"), "servers.base.port: must be an integer, got "
     "bool True"),
    (GOOD.replace("port = 30000", "port = 30000.5"), "servers.base.port: must be an integer, got "
     "float 30000.5"),
    (GOOD.replace("ready_timeout = 1200", 'ready_timeout = "20m"'),
     "servers.base.ready_timeout: must be a number, got str '20m'"),
    (GOOD.replace('model_path = "org/model"\ntp = 2\nport = 30000', 'model_path = 7\ntp = 2\n'
                  "port = 30000"), "servers.base.model_path: must be a string, got int 7"),
    (GOOD.replace('python = "/opt/venv/bin/python"', "python = 3"),
     "hosts.box.python: must be a string, got int 3"),
    (GOOD.replace('python = "/opt/venv/bin/python"', 'python = "/opt/venv/bin/py\\u0000thon"'),
     'hosts.box.python = "/opt/venv/bin/py\\u0000thon": contains a NUL character (expected '
     "text without NUL)"),
    (GOOD.replace('python = "/opt/venv/bin/python"', 'python = "/opt/venv/bin/python\\n"'),
     'hosts.box.python = "/opt/venv/bin/python\\n": contains a line break (expected one line '
     "(a path or a name))"),
    (GOOD.replace('python = "/opt/venv/bin/python"', 'python = "/opt/venv\\r/bin/python"'),
     'hosts.box.python = "/opt/venv\\r/bin/python": contains a line break (expected one line '
     "(a path or a name))"),
    (_with('python = "/usr/bin/python3\\n"'), 'servers.base.python = "/usr/bin/python3\\n": '
     "contains a line break (expected one line (a path or a name))"),
    (GOOD.replace('model_path = "org/model"\ntp = 2\nport = 30000', 'model_path = "org/\\n'
                  'model"\ntp = 2\nport = 30000'), 'servers.base.model_path = "org/\\nmodel": '
     "contains a line break (expected one line (a path or a name))"),
    (_with('extra_args = ["--x", "a\\u0000b"]'), 'servers.base.extra_args = "a\\u0000b": contains '
     "a NUL character (expected text without NUL)"),
    (_with('env = { NCCL_ALGO = "Ri\\u0000ng" }'), 'servers.base.env.NCCL_ALGO = "Ri\\u0000ng": '
     "contains a NUL character (expected text without NUL)"),
    (_with("logs = { base = \"/var/log/b\\n.log\" }", 'python = "/opt/venv/bin/python"\n'),
     'hosts.box.logs.base = "/var/log/b\\n.log": contains a line break (expected one line '
     "(a path or a name))"),
]


@pytest.mark.parametrize("text,line", TYPE_CASES, ids=[c[1].split(":")[0].split(" =")[0]
                                                       for c in TYPE_CASES])
def test_wrong_types_and_unusable_text_are_one_line(tmp_path, capsys, text, line):
    p = write(tmp_path, text)
    code, out, _ = check(capsys, "--config", str(p))
    assert code == 1 and out[0].startswith(f"{p}: {line}"), out
    assert len(out) == 1, out


# -- 4. [hosts.NAME] python ----------------------------------------------------------------------
def test_host_python_is_read_in_both_host_forms(tmp_path):
    cfg = config.load_path(write(tmp_path, GOOD))
    assert cfg.hosts["box"].python == "/opt/venv/bin/python"
    arr = ('[[hosts]]\ntarget = "me@other"\npython = "/srv/py/bin/python3"\n'
           + GOOD.replace('host = "box"', 'host = "me@other"').split("\n", 4)[4])
    cfg = config.load_path(write(tmp_path, arr, "arr.toml"))
    assert cfg.hosts["me@other"].python == "/srv/py/bin/python3"
    empty = GOOD.replace('python = "/opt/venv/bin/python"', 'python = " "')
    (i,) = config.check_path(write(tmp_path, empty, "empty.toml"))
    assert (i.key, i.message) == ("hosts.box.python", "is empty")


# -- 3. exit status --------------------------------------------------------------------------------
def test_exit_status_is_0_valid_1_problems_2_unchecked(tmp_path, capsys, monkeypatch):
    good = write(tmp_path, GOOD, "good.toml")
    assert check(capsys, "--config", str(good))[:2] == (0, [f"{good}: ok"])
    bad = write(tmp_path, GOOD.replace("port = 30000", "port = 0"), "bad.toml")
    assert check(capsys, "--config", str(bad))[0] == 1
    latin1 = tmp_path / "latin1.toml"
    latin1.write_bytes(GOOD.encode() + b"# caf\xe9\n")
    code, out, _ = check(capsys, "--config", str(latin1))
    assert (code, out) == (1, [f"{latin1}: (file): not UTF-8 text (fix: save it as UTF-8)"])
    code, out, err = check(capsys, "--config", str(tmp_path / "missing.toml"))
    assert code == 2 and out == [] and "(file): not found (given by --config)" in one_error(err)
    assert check(capsys, "--config", str(tmp_path))[0] == 2  # a directory
    # no config anywhere: 2, naming the places looked at
    import platformdirs

    monkeypatch.setattr(platformdirs, "user_config_dir", lambda app: str(tmp_path / "user"))
    monkeypatch.delenv("SPECMON_CONFIG", raising=False)
    empty = tmp_path / "cwd"
    empty.mkdir()
    monkeypatch.chdir(empty)
    code, _, err = check(capsys)
    assert code == 2 and "(no config): (file): no specmon.toml found; looked in" in one_error(err)
    with pytest.raises(SystemExit) as exc:  # a usage error is 2 too (argparse)
        main(["config", "check", "--confg", str(good)])
    assert exc.value.code == 2


def test_help_documents_the_exit_status(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["config", "check", "--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert ("Exit status: 0 the config is valid; 1 it has problems (each on one line on stdout: "
            in text)
    assert "2 it could not be checked (not found, a directory, device or FIFO, permission " \
        "denied, larger than 1 MiB) or a usage error." in text
    with pytest.raises(SystemExit):
        main(["config", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(exit 0 valid, 1 problems, 2 unreadable)" in text
    assert "config check's exit status: 0 the config is valid" in text


@pytest.mark.parametrize("target", ["gpu1", "me@box:2222", "[::1]:22", "[::1]", "fe80::1",
                                    "@box", "box:0", "box:x", "box:\u00b2", "[::1", "[::1]x",
                                    "gpu box", "me@", "box:65536", "a@b@c:22"])
def test_the_config_check_and_the_ssh_connection_read_a_target_alike(tmp_path, capsys, target):
    """One reading of a target: what `config check` accepts is what connect can parse, and
    what it refuses, connect refuses with the same reason."""
    from specmon.hosts.ssh import parse_target

    p = write(tmp_path, GOOD.replace("me@box:2222", target))
    rc, out, _ = check(capsys, "--config", str(p))
    try:
        parse_target(target)
    except ValueError as exc:
        reason = str(exc).rsplit(" in ", 1)[0]
        assert rc == 1 and len(out) == 1 and out[0].startswith(f"{p}: hosts.box.target = ")
        assert out[0].endswith(f": {reason} {_E_TARGET}"), (out, exc)
    else:
        assert rc == 0, out
