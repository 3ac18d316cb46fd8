"""specmon's TOML config, the one reader: hosts, server profiles and the UI's `[keys]`.

Every command reads it here: `specmon server ...` and `config check` (profiles), `connect` and
`record` (the `[hosts.NAME]` to watch when no TARGET is given, their `logs`, and the profiles'
control keys), the UI (`[keys]`, checked against the real binding ids). Located by `--config`,
then `$SPECMON_CONFIG`, then `./specmon.toml`, then the platformdirs user config dir
(`specmon.toml` there). Every problem is reported as file, key and fix (a value that cannot work
as `FILE: KEY = VALUE: why (expected ...)`: every number has a range), all of them at once (not
the first only), so `specmon config check` is one round trip. A path that is not a regular file is
named for what it is, from stat alone (a FIFO or device is never read). See
`examples/specmon.toml`.

    [hosts.node1]
    target = "gpu-node-1"            # 'local', [USER@]HOST[:PORT] or an ~/.ssh/config alias
    python = "/opt/venv/bin/python"  # optional: the interpreter for the agents
    logs = { baseline = "/var/log/sglang-base.log" }  # optional: tail these, no discovery

An array `[[hosts]]` with `target` (and optional `name`) is read too.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import shlex
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from specmon.keymap import BINDING_IDS, key_problem
from specmon.sshtarget import read_target
from specmon.textsafe import cut

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

CONFIG_NAME = "specmon.toml"
ENV_VAR = "SPECMON_CONFIG"
DEFAULT_RUN_DIR = "~/.cache/specmon/run"
DEFAULT_READY_TIMEOUT_S = 1800.0  # a 70B model with CUDA graphs can take many minutes
ROLES = ("baseline", "speculative")
LAUNCHERS = ("sglang", "vllm", "sim")
ENGINES = ("sglang", "vllm")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# server, host and log names become file names (pidfiles, default logs) and widget ids
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@:-]*\Z")
# Bounds a user would expect of each number; beyond them a value cannot be meant (and would only
# fail later, on the host or in a sleep): config check says so, with the value and the range.
MAX_CONFIG_BYTES = 1 << 20  # a config is a few KiB; a larger "config" is the wrong file
MAX_READY_TIMEOUT_S = 86400.0  # a day: even a 400B model loads in well under that
MAX_GPUS = 1024  # n_gpus, tp, and GPU indices below it
MAX_SPEC_COUNT = 1024  # num_steps, eagle_topk, num_draft_tokens, num_speculative_tokens
# the settings that are one path, name or word: a newline (or NUL anywhere) cannot work there
_ONE_LINE = {"target", "python", "run_dir", "ssh_config", "known_hosts", "sim_dir", "host",
             "listen_host", "model_path", "workdir", "log", "algorithm", "draft_model_path"}

Role = Literal["baseline", "speculative"]


def seconds_ok(v: float, most: float = MAX_READY_TIMEOUT_S, zero: bool = False) -> bool:
    """The one rule for a duration (a config's ready_timeout, `server --timeout/--grace`):
    finite, more than 0 (0 too where `zero`), at most `most` seconds. NaN fails it."""
    return (0 <= v if zero else 0 < v) and v <= most


def seconds_expected(most: float = MAX_READY_TIMEOUT_S, zero: bool = False) -> str:
    """What `seconds_ok` expects, in words (config check and usage errors say the same)."""
    return (f"seconds, {'0 or more' if zero else 'more than 0'} and at most {most:g}"
            + (", a day" if most == 86400 else ""))


class ConfigError(Exception):
    """The config cannot be used; `issues` lists every problem found."""

    def __init__(self, issues: list[ConfigIssue]) -> None:
        self.issues = issues
        super().__init__("; ".join(i.format() for i in issues))

    def one_line(self, limit: int = 3) -> str:
        """The first `limit` issues on one line, and how many more `config check` would list."""
        text = "; ".join(i.format() for i in self.issues[:limit])
        more = len(self.issues) - limit
        return text + (f" (+{more} more: run specmon config check)" if more > 0 else "")


class ConfigFileError(ConfigError):
    """The file itself cannot be read: missing, not a regular file, unreadable, too large
    (`config check` exits 2 on these, 1 on problems inside a file it read)."""


@dataclass(frozen=True)
class ConfigIssue:
    file: str
    key: str
    message: str
    fix: str = ""
    value: str | None = None  # the offending value as TOML writes it, when there is one

    def format(self) -> str:
        """`FILE: KEY: message (fix: ...)`, or `FILE: KEY = VALUE: why (expected ...)`."""
        key = self.key if self.value is None else f"{self.key} = {self.value}"
        text = f"{self.file}: {key}: {self.message}"
        return f"{text} (fix: {self.fix})" if self.fix else text


@dataclass
class HostProfile:
    name: str
    target: str = "local"  # 'local', [USER@]HOST[:PORT] or an ~/.ssh/config alias
    python: str | None = None  # interpreter for the agent and helpers (default python3)
    run_dir: str = DEFAULT_RUN_DIR  # pidfiles and default logs, on the host
    ssh_config: str | None = None
    known_hosts: str | None = None
    sim_dir: str | None = None  # a simulated host: GPUs come from `specmon sim gpus`
    n_gpus: int = 8
    logs: dict[str, str] = field(default_factory=dict)  # connect/record: NAME = PATH to tail


@dataclass
class SpeculativeArgs:
    algorithm: str
    draft_model_path: str | None = None
    num_steps: int | None = None
    eagle_topk: int | None = None
    num_draft_tokens: int | None = None

    def vllm_argv(self) -> list[str]:
        """vLLM's `--speculative-config` JSON: method, draft model, num_speculative_tokens (the
        profile's num_steps: vLLM drafts a chain of k tokens)."""
        cfg: dict[str, Any] = {"method": self.algorithm}
        if self.draft_model_path is not None:
            cfg["model"] = self.draft_model_path
        if self.num_steps is not None:
            cfg["num_speculative_tokens"] = self.num_steps
        return ["--speculative-config", json.dumps(cfg)]

    def argv(self) -> list[str]:
        out = ["--speculative-algorithm", self.algorithm]
        for flag, v in (("--speculative-draft-model-path", self.draft_model_path),
                        ("--speculative-num-steps", self.num_steps),
                        ("--speculative-eagle-topk", self.eagle_topk),
                        ("--speculative-num-draft-tokens", self.num_draft_tokens)):
            if v is not None:
                out += [flag, str(v)]
        return out


@dataclass
class ServerProfile:
    name: str
    role: Role
    host: str = "local"
    port: int = 30000
    listen_host: str = "127.0.0.1"  # what --host the server binds (and we forward to)
    model_path: str | None = None
    tp: int = 1
    speculative: SpeculativeArgs | None = None
    extra_args: list[str] = field(default_factory=list)
    command: list[str] | None = None  # full launch argv instead of launcher + generated args
    launcher: str = "sglang"  # "sglang": python -m sglang.launch_server; "sim": specmon sim server
    engine: str = "sglang"  # "vllm": python -m vllm.entrypoints.openai.api_server (or the sim's)
    python: str | None = None  # interpreter for the launcher (default: the host's python)
    env: dict[str, str] = field(default_factory=dict)
    spt_noenv: bool = True  # SPT_NOENV=1 keeps the workers' /proc/PID/environ auditable
    workdir: str | None = None
    log: str | None = None  # default: <run_dir>/<name>.log
    gpus: list[int] = field(default_factory=list)
    ready_timeout: float = DEFAULT_READY_TIMEOUT_S

    def launch_argv(self, host_python: str = "python3") -> list[str]:
        """The command that starts the server (without env and setsid)."""
        if self.command is not None:
            return list(self.command)
        py = self.python or host_python
        if self.engine == "vllm":
            head = ([py, "-m", "specmon", "sim", "server", "--engine", "vllm"]
                    if self.launcher == "sim" else [py, "-m", "vllm.entrypoints.openai.api_server"])
            args = ["--model", str(self.model_path), "--tensor-parallel-size", str(self.tp),
                    "--host", self.listen_host, "--port", str(self.port)]
            if self.speculative is not None:
                args += self.speculative.vllm_argv()
            return head + args + list(self.extra_args)
        if self.launcher == "sim":
            head = [py, "-m", "specmon", "sim", "server"]
        else:
            head = [py, "-m", "sglang.launch_server"]
        args = ["--model-path", str(self.model_path), "--tp-size", str(self.tp),
                "--host", self.listen_host, "--port", str(self.port)]
        if self.speculative is not None:
            args += self.speculative.argv()
        return head + args + list(self.extra_args)

    def launch_env(self) -> dict[str, str]:
        env = dict(self.env)
        if self.spt_noenv:
            env.setdefault("SPT_NOENV", "1")
        return env


@dataclass
class Config:
    path: Path | None
    hosts: dict[str, HostProfile] = field(default_factory=dict)
    servers: dict[str, ServerProfile] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)  # binding id -> key(s), for the UI keymap

    def server(self, name: str) -> ServerProfile:
        try:
            return self.servers[name]
        except KeyError:
            hint = _suggest(name, self.servers)
            known = ", ".join(sorted(self.servers)) or "none"
            raise KeyError(f"no server {name!r} in {self.path}{hint} (servers: {known})") from None

    def host_for(self, server: ServerProfile) -> HostProfile:
        return self.hosts.get(server.host) or HostProfile(server.host, target=server.host)


# -- locating -------------------------------------------------------------------------------------
def candidate_paths(explicit: str | os.PathLike[str] | None = None) -> list[tuple[Path, str]]:
    """Where the config is looked for, in order, with how each place was chosen."""
    if explicit is not None:
        return [(Path(explicit).expanduser(), "--config")]
    out = []
    env = os.environ.get(ENV_VAR)
    if env:
        out.append((Path(env).expanduser(), f"${ENV_VAR}"))
    out.append((Path.cwd() / CONFIG_NAME, "current folder"))
    import platformdirs

    out.append((Path(platformdirs.user_config_dir("specmon")) / CONFIG_NAME, "user config dir"))
    return out


def find_config(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The config file to use; ConfigFileError naming every place looked at when there is none.

    An explicit --config or $SPECMON_CONFIG that does not exist is an error, not a fall-through:
    silently using another file would start the wrong servers. Whatever is found at a place and
    is not a regular file (a directory, a device, a FIFO, a broken link) or cannot be stat'ed is
    an error that says what it is; only stat is used, nothing is opened here.
    """
    cands = candidate_paths(explicit)
    for path, how in cands:
        problem = _not_a_file(path)
        if problem is None:
            return path
        named = how in ("--config", f"${ENV_VAR}")
        if named or problem != "not found":
            # a directory, device or unreadable file where a config is looked for is an error
            # too: going on to the next place would silently use another file
            raise ConfigFileError([ConfigIssue(
                str(path), "(file)", f"{problem} ({'given by' if named else 'found in the'} {how})",
                _file_fix(path, problem))])
    looked = ", ".join(str(p) for p, _ in cands)
    raise ConfigFileError([ConfigIssue("(no config)", "(file)", f"no {CONFIG_NAME} found; looked "
                                       f"in {looked}", "pass --config FILE or set SPECMON_CONFIG; "
                                       "see examples/specmon.toml")])


def locate_config(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """The config to read, or None when there is none at all (a named one must exist)."""
    try:
        return find_config(explicit)
    except ConfigError as exc:
        if exc.issues[0].file == "(no config)":
            return None
        raise


def load_config(explicit: str | os.PathLike[str] | None = None) -> Config:
    return load_path(find_config(explicit))


_FILE_TYPES = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
               (stat.S_ISSOCK, "a socket"))


def _file_type(mode: int) -> str:
    """What a non-regular file is, as `is ..., expected a TOML file`."""
    what = next((name for test, name in _FILE_TYPES if test(mode)), "not a regular file")
    return f"is {what}, expected a TOML file"


def _not_a_file(path: Path) -> str | None:
    """None when `path` is a regular file (through symbolic links), else what it is instead.

    Only stat, never open: a FIFO or a device is named, not read (reading a FIFO with no writer
    would wait forever)."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return "is a broken symbolic link" if os.path.islink(path) else "not found"
    except PermissionError:
        return "permission denied"
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}"
    return None if stat.S_ISREG(st.st_mode) else _file_type(st.st_mode)


def _file_fix(path: Path, problem: str) -> str:
    if problem == "not found":
        return "check the path"
    if problem == "permission denied":
        return "make it readable (chmod u+r FILE, and x on its folders) or run as its owner"
    if problem.startswith("is a directory") and (path / CONFIG_NAME).is_file():
        return f"give the file: {path / CONFIG_NAME}"
    return f"give a TOML file (e.g. {CONFIG_NAME}); see examples/specmon.toml"


def _file_error(p: Path, problem: str) -> ConfigFileError:
    return ConfigFileError([ConfigIssue(str(p), "(file)", problem, _file_fix(p, problem))])


def read_config_text(path: str | os.PathLike[str]) -> str:
    """The text of a config file; ConfigFileError (one issue) when it cannot be read as one.

    The type is checked by stat before opening, and again on the open descriptor (opened
    non-blocking, so a FIFO swapped in between cannot hang it); at most MAX_CONFIG_BYTES are read.
    """
    p = Path(path)
    problem = _not_a_file(p)
    if problem is not None:
        raise _file_error(p, problem)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except PermissionError:
        raise _file_error(p, "permission denied") from None
    except OSError as exc:
        raise _file_error(p, f"cannot read: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "rb") as fh:
            mode = os.fstat(fh.fileno()).st_mode
            if not stat.S_ISREG(mode):
                raise _file_error(p, _file_type(mode))
            data = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise _file_error(p, f"cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise _file_error(p, f"is larger than {MAX_CONFIG_BYTES >> 20} MiB, too large for a "
                          "config")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError([ConfigIssue(str(p), "(file)", "not UTF-8 text", "save it as UTF-8")]
                          ) from None
    return text.replace("\r\n", "\n").replace("\r", "\n")  # as a text-mode read did


def load_path(path: str | os.PathLike[str], *, require_servers: bool = True) -> Config:
    """Read and validate one file; ConfigError with every issue when it is not usable
    (ConfigFileError when the file cannot be read at all).

    `require_servers=False` for `connect`/`record`, which also accept a hosts-only file.
    """
    p = Path(path)
    text = read_config_text(p)
    cfg, issues = parse_config(text, p, require_servers=require_servers)
    issues += _local_checks(cfg)
    if issues:
        raise ConfigError(issues)
    return cfg


def _local_checks(cfg: Config) -> list[ConfigIssue]:
    """What only this machine can check: a local server's model directory must exist."""
    out = []
    for name, s in cfg.servers.items():
        mp = s.model_path
        if s.command is not None or not mp or cfg.host_for(s).target != "local":
            continue
        if mp.startswith(("/", "./", "../", "~")) and not Path(mp).expanduser().exists():
            out.append(ConfigIssue(str(cfg.path), f"servers.{name}.model_path",
                                   f"missing model path: {mp} does not exist on this machine",
                                   "give an existing model directory or a hub id (org/model)"))
    return out


def check_path(path: str | os.PathLike[str]) -> list[ConfigIssue]:
    """Every issue in one file ([] when it is fine); ConfigFileError when it cannot be read at
    all (missing, not a regular file, unreadable, too large): `config check` exits 2 on that."""
    try:
        load_path(path)
    except ConfigFileError:
        raise
    except ConfigError as exc:
        return exc.issues
    return []


# -- validation -----------------------------------------------------------------------------------
def _suggest(word: str, choices: Any) -> str:
    m = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {m[0]!r}?" if m else ""


_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false",
               list: "an array", dict: "a table"}


class _Checker:
    def __init__(self, path: Path) -> None:
        self.file = str(path)
        self.issues: list[ConfigIssue] = []
        self.bad: set[str] = set()  # keys already reported: checks built on them are skipped

    def name(self, name: str, where: str) -> bool:
        """Names become file names and ids: no '/', no '..', no leading dot or space."""
        if _NAME.match(name) and ".." not in name:
            return True
        self.add(where, f"bad name {name!r}", "use letters, digits, '.', '_', '-' (no '/' or '..')")
        return False

    def add(self, key: str, message: str, fix: str = "") -> None:
        self.issues.append(ConfigIssue(self.file, key, message, fix))

    def unknown(self, table: dict[str, Any], allowed: dict[str, Any], where: str) -> None:
        for k in table:
            if k not in allowed:
                m = difflib.get_close_matches(k, list(allowed), n=1, cutoff=0.6)
                fix = f"did you mean {m[0]!r}?" if m else "remove it; allowed: " + ", ".join(allowed)
                self.add(f"{where}.{k}", "unknown key", fix)

    def value(self, where: str, key: str, v: Any, why: str, expected: str) -> None:
        """A value that cannot work: `FILE: KEY = VALUE: why (expected ...)`; checks built on
        it are skipped."""
        self.issues.append(ConfigIssue(self.file, f"{where}.{key}", f"{why} (expected {expected})",
                                       value=_toml(v)))
        self.bad.add(f"{where}.{key}")

    def text_ok(self, where: str, key: str, v: str, one_line: bool | None = None) -> bool:
        """No NUL anywhere (no argv, path or environment can carry one); one line where the
        setting is one path, name or word (`one_line`; default: the key is in _ONE_LINE)."""
        if "\0" in v:
            self.value(where, key, v, "contains a NUL character", "text without NUL")
            return False
        if (key in _ONE_LINE if one_line is None else one_line) and ("\n" in v or "\r" in v):
            self.value(where, key, v, "contains a line break", "one line (a path or a name)")
            return False
        return True

    def get(self, table: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str,
            default: Any = None, *, finite: str = "a finite number") -> Any:
        """table[key] when it is of `kind` (an int is a float too; a bool is never an int), a
        finite number, and text without NUL; else `default` and one issue. `finite`: what the
        non-finite message says is expected."""
        if key not in table:
            return default
        v = table[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        ok = isinstance(v, kinds) and not (isinstance(v, bool) and bool not in kinds)
        if float in kinds and isinstance(v, int) and not isinstance(v, bool):
            ok, v = True, float(v)
        if ok and isinstance(v, float) and not math.isfinite(v):
            self.value(where, key, v, "not a finite number", finite)
            return default
        if ok and isinstance(v, str) and not self.text_ok(where, key, v):
            return default
        if not ok:
            want = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)
            self.add(f"{where}.{key}", f"must be {want}, got {type(v).__name__} {_short(v)}",
                     f"write it as {want}")
            self.bad.add(f"{where}.{key}")
            return default
        return v

    def int_in(self, table: dict[str, Any], key: str, where: str, lo: int, hi: int,
               expected: str) -> int | None:
        """An integer in lo..hi, else None and one issue naming the value and the range."""
        v = self.get(table, key, int, where)
        if v is not None and not lo <= v <= hi:
            self.value(where, key, v, "out of range", f"{expected} {lo}-{hi}")
            return None
        return v

    def seconds(self, table: dict[str, Any], key: str, where: str,
                most: float = MAX_READY_TIMEOUT_S) -> float | None:
        """A duration: finite, more than 0, at most `most` seconds (`seconds_ok`)."""
        expected = seconds_expected(most)
        v = self.get(table, key, float, where, finite=expected)
        if v is not None and not seconds_ok(v, most):
            self.value(where, key, table[key], "out of range", expected)  # as written: -5, not -5.0
            return None
        return v

    def str_list(self, table: dict[str, Any], key: str, where: str) -> list[str] | None:
        v = self.get(table, key, (list, str), where)
        if v is None:
            return None
        if isinstance(v, str):
            try:
                return shlex.split(v)
            except ValueError as exc:  # "No closing quotation"
                self.add(f"{where}.{key}", f"cannot split {v!r}: {exc}",
                         f'close the quote, or write {key} = ["--flag", "value"]')
                self.bad.add(f"{where}.{key}")
                return None
        if not all(isinstance(x, str) for x in v):
            self.add(f"{where}.{key}", "must be an array of strings", f'e.g. {key} = ["--flag", "1"]')
            return None
        if not all(self.text_ok(where, key, x) for x in v):
            return None
        return list(v)


_HOST_KEYS = {"target": str, "python": str, "run_dir": str, "ssh_config": str,
              "known_hosts": str, "sim_dir": str, "n_gpus": int, "logs": dict}
_SERVER_KEYS = {"role": str, "host": str, "port": int, "listen_host": str, "model_path": str,
                "tp": int, "speculative": dict, "extra_args": list, "command": list,
                "launcher": str, "engine": str, "python": str, "env": dict, "spt_noenv": bool, "workdir": str,
                "log": str, "gpus": list, "ready_timeout": float}
_SPEC_KEYS = {"algorithm": str, "draft_model_path": str, "num_steps": int, "eagle_topk": int,
              "num_draft_tokens": int, "num_speculative_tokens": int}
_TOP_KEYS = {"hosts": dict, "servers": dict, "keys": dict}


def _short(v: Any) -> str:
    return cut(repr(v), 60)


def _toml(v: Any, limit: int = 60) -> str:
    """A value as TOML writes it, on one line (control characters escaped), cut to `limit`."""
    if isinstance(v, bool):
        text = "true" if v else "false"
    elif isinstance(v, str):
        text = json.dumps(v)  # TOML's basic-string escapes: \n, \u0000, ...
    elif isinstance(v, float):
        text = "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    elif isinstance(v, list):
        text = "[" + ", ".join(_toml(x, limit) for x in v) + "]"
    else:
        text = _short(v)
    return cut(text, limit)


def _host(ck: _Checker, name: str, t: Any, where: str, cfg: Config) -> None:
    if not isinstance(t, dict):
        ck.add(where, "must be a table", f"write [{where}]" if "[" not in where else
               '[[hosts]] with target = "..."')
        return
    ck.unknown(t, {**_HOST_KEYS, "name": str} if "[" in where else _HOST_KEYS, where)
    if not ck.name(name, where):
        return
    if name in cfg.hosts:
        ck.add(where, f"repeated host {name!r}", "give each host a unique name")
        return
    h = HostProfile(name, target=name if "[" in where else "local")
    for k, kind in _HOST_KEYS.items():
        v = None if k in ("logs", "n_gpus") else ck.get(t, k, kind, where)
        if v is None:
            continue
        if isinstance(v, str) and not v.strip():
            ck.add(f"{where}.{k}", "is empty", "remove it or give a value")
            continue
        setattr(h, k, v)
    if h.target != "local" and isinstance(why := read_target(h.target), str):
        ck.value(where, "target", h.target, why,
                 "'local', [USER@]HOST[:PORT] with PORT 1-65535, or an ~/.ssh/config alias")
    n_gpus = ck.int_in(t, "n_gpus", where, 1, MAX_GPUS, "a GPU count")
    if n_gpus is not None:
        h.n_gpus = n_gpus
    elif "n_gpus" in t:
        ck.bad.add(f"hosts.{name}.n_gpus")  # the cross-checks know hosts by name
    for log_name, log_path in (ck.get(t, "logs", dict, where) or {}).items():
        lw = f"{where}.logs"
        if not isinstance(log_path, str) or not log_path.strip():
            ck.add(f"{lw}.{log_name}", f"must be a non-empty string (a path), got {_short(log_path)}",
                   f'{log_name} = "/var/log/{log_name}.log"')
        elif ck.name(log_name, f"{lw}.{log_name}") and ck.text_ok(lw, log_name, log_path, one_line=True):
            h.logs[log_name] = log_path
    cfg.hosts[name] = h


def parse_config(text: str, path: Path, *, require_servers: bool = True
                 ) -> tuple[Config, list[ConfigIssue]]:
    """Pure: TOML text -> (Config, issues). The Config is partial when there are issues."""
    ck = _Checker(path)
    cfg = Config(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        ck.add("(syntax)", str(exc), "fix the TOML syntax at that line")
        return cfg, ck.issues
    except RecursionError:
        ck.add("(syntax)", "nested too deeply", "flatten the tables and arrays")
        return cfg, ck.issues
    ck.unknown(data, _TOP_KEYS, "(top)")
    hosts = data.get("hosts", {})
    if isinstance(hosts, list):  # [[hosts]] with target (and an optional name)
        for i, t in enumerate(hosts):
            name = t.get("name", t.get("target")) if isinstance(t, dict) else None
            if isinstance(t, dict) and ("target" not in t or not isinstance(name, str)):
                ck.add(f"hosts[{i}].target", "missing", 'target = "HOST" (or "local")')
                continue
            _host(ck, str(name), t, f"hosts[{i}]", cfg)
    else:
        for name, t in ck.get(data, "hosts", dict, "(top)", {}).items():
            _host(ck, name, t, f"hosts.{name}", cfg)
    keys = ck.get(data, "keys", dict, "(top)", {})
    for k, v in keys.items():
        if k not in BINDING_IDS:
            m = difflib.get_close_matches(k, list(BINDING_IDS), n=1, cutoff=0.6)
            ck.add(f"keys.{k}", "unknown binding id" + (f"; did you mean {m[0]!r}?" if m else ""),
                   "valid ids: " + ", ".join(BINDING_IDS))
        elif not isinstance(v, str):
            ck.add(f"keys.{k}", f"must be a string, got {_short(v)}", f'"{k}" = "ctrl+u"')
        elif (why := key_problem(v)) is not None:
            ck.add(f"keys.{k}", why, f'"{k}" = "ctrl+u" (comma-separated for several keys)')
        else:
            cfg.keys[k] = v
    servers = ck.get(data, "servers", dict, "(top)", {})
    if not servers and require_servers:
        ck.add("servers", "no servers defined", "add a [servers.NAME] table with role, "
               "model_path, port and gpus")
    for name, t in servers.items():
        s = _server(ck, name, t, cfg)
        if s is not None:
            cfg.servers[name] = s
    _cross_checks(ck, cfg)
    return cfg, ck.issues


def _server(ck: _Checker, name: str, t: Any, cfg: Config) -> ServerProfile | None:
    where = f"servers.{name}"
    if not isinstance(t, dict):
        ck.add(where, "must be a table", f"write [{where}]")
        return None
    if not ck.name(name, where):
        return None
    ck.unknown(t, _SERVER_KEYS, where)
    role = ck.get(t, "role", str, where)
    if role is None and "role" not in t:
        ck.add(f"{where}.role", "missing", 'role = "baseline" or role = "speculative"')
    elif role is not None and role not in ROLES:
        ck.add(f"{where}.role", f"must be baseline or speculative, got {role!r}",
               f'role = "{"speculative" if role.startswith("spec") else "baseline"}"')
        role = None
    s = ServerProfile(name, role or "baseline")
    for k in ("host", "listen_host", "model_path", "python", "workdir", "log"):
        v = ck.get(t, k, str, where)
        if v is not None:
            setattr(s, k, v)
    port = ck.int_in(t, "port", where, 1, 65535, "a TCP port")
    if port is not None:
        s.port = port
    tp = ck.int_in(t, "tp", where, 1, MAX_GPUS, "GPUs per server")
    if tp is not None:
        s.tp = tp
    launcher = ck.get(t, "launcher", str, where)
    if launcher is not None:
        if launcher not in LAUNCHERS:
            ck.add(f"{where}.launcher", f"unknown launcher {launcher!r}{_suggest(launcher, LAUNCHERS)}",
                   'launcher = "sglang" (python -m sglang.launch_server), "vllm" or "sim"')
        else:
            s.launcher = launcher
    engine = ck.get(t, "engine", str, where)
    if engine is not None and engine not in ENGINES:
        ck.add(f"{where}.engine", f"unknown engine {engine!r}{_suggest(engine, ENGINES)}",
               'engine = "sglang" or engine = "vllm"')
    elif engine == "sglang" and s.launcher == "vllm":
        ck.add(f"{where}.engine", 'engine "sglang" with launcher "vllm"',
               'engine = "vllm", or launcher = "sglang"')
    elif engine == "vllm" or s.launcher == "vllm":
        if s.launcher == "sglang" and launcher is not None:
            ck.add(f"{where}.launcher", 'launcher "sglang" cannot start a vLLM server',
                   'launcher = "vllm" (python -m vllm.entrypoints.openai.api_server) or "sim"')
        s.engine = "vllm"
        if s.launcher == "sglang":
            s.launcher = "vllm"
    s.extra_args = ck.str_list(t, "extra_args", where) or []
    s.command = ck.str_list(t, "command", where)
    if s.command is not None and not s.command:
        ck.add(f"{where}.command", "is empty", "remove it or give the launch argv")
        s.command = None
    spt = ck.get(t, "spt_noenv", bool, where)
    if spt is not None:
        s.spt_noenv = spt
    rt = ck.seconds(t, "ready_timeout", where)
    if rt is not None:
        s.ready_timeout = rt
    env = ck.get(t, "env", dict, where, {})
    for k, v in env.items():
        if not _ENV_NAME.match(k):
            ck.add(f"{where}.env.{k}", "not a valid environment variable name",
                   "use letters, digits and _")
        elif isinstance(v, bool) or not isinstance(v, (str, int, float)):
            ck.add(f"{where}.env.{k}", f"must be a string, got {v!r}", f'{k} = "VALUE"')
        elif not isinstance(v, str) or ck.text_ok(f"{where}.env", k, v, one_line=False):
            s.env[k] = str(v)
    gpus = ck.get(t, "gpus", list, where)
    if gpus is not None:
        if not all(isinstance(g, int) and not isinstance(g, bool) for g in gpus):
            ck.add(f"{where}.gpus", f"must be GPU indices, got {_short(gpus)}", "e.g. gpus = [0, 1]")
        elif not all(0 <= g < MAX_GPUS for g in gpus):
            ck.value(where, "gpus", gpus, "out of range", f"GPU indices 0-{MAX_GPUS - 1}")
        elif len(set(gpus)) != len(gpus):
            ck.add(f"{where}.gpus", f"lists a GPU twice: {gpus!r}", "list each GPU once")
        else:
            s.gpus = list(gpus)
    spec = ck.get(t, "speculative", dict, where)
    if spec is not None:
        sw = f"{where}.speculative"
        ck.unknown(spec, _SPEC_KEYS, sw)
        algo = ck.get(spec, "algorithm", str, sw)
        if algo is None:
            ck.add(f"{sw}.algorithm", "missing", 'algorithm = "EAGLE3" (or EAGLE, NEXTN, ...)')
        else:
            sa = SpeculativeArgs(algo)
            for k in ("draft_model_path",):
                sa.draft_model_path = ck.get(spec, k, str, sw)
            for k in ("num_steps", "eagle_topk", "num_draft_tokens"):
                setattr(sa, k, ck.int_in(spec, k, sw, 1, MAX_SPEC_COUNT, "an integer"))
            _vllm_spec(ck, spec, sa, sw, s.engine == "vllm")
            s.speculative = sa
    # semantic checks
    if s.command is None and not s.model_path and f"{where}.model_path" not in ck.bad:
        ck.add(f"{where}.model_path", "missing", 'model_path = "org/model" (or a local '
               'directory), or give the full launch argv as command = [...]')
    if role == "speculative" and s.speculative is None and s.command is None and not any(
            a.startswith(("--speculative-algorithm", "--speculative-config")) for a in s.extra_args):
        ck.add(f"{where}.speculative", "missing for a speculative server",
               f'add [{where}.speculative] with algorithm = "EAGLE3", num_steps, eagle_topk, '
               "num_draft_tokens")
    if s.gpus and s.command is None and len(s.gpus) != s.tp and f"{where}.tp" not in ck.bad:
        ck.add(f"{where}.gpus", f"lists {len(s.gpus)} GPUs but tp = {s.tp}",
               f"list exactly {s.tp} GPU indices")
    return s


def _vllm_spec(ck: _Checker, spec: dict[str, Any], sa: SpeculativeArgs, sw: str,
               vllm: bool) -> None:
    """vLLM's speculative table: method, draft model and num_speculative_tokens (= num_steps);
    SGLang's tree options do not exist there."""
    k = ck.int_in(spec, "num_speculative_tokens", sw, 1, MAX_SPEC_COUNT, "an integer")
    if not vllm:
        if k is not None:
            ck.add(f"{sw}.num_speculative_tokens", "is a vLLM option",
                   'use num_steps for SGLang, or engine = "vllm"')
        return
    if k is not None and sa.num_steps is not None and k != sa.num_steps:
        ck.add(f"{sw}.num_speculative_tokens", f"{k} differs from num_steps = {sa.num_steps}",
               "give one of them")
    if k is not None:
        sa.num_steps = k
    for opt in ("eagle_topk", "num_draft_tokens"):
        if spec.get(opt) is not None:
            ck.add(f"{sw}.{opt}", "is not a vLLM option (vLLM drafts a chain of "
                   "num_speculative_tokens)", f"remove {opt}")
    if sa.num_steps is None and "num_speculative_tokens" not in spec and "num_steps" not in spec:
        ck.add(f"{sw}.num_speculative_tokens", "missing for vLLM",
               "num_speculative_tokens = 3 (the draft length k)")


def _cross_checks(ck: _Checker, cfg: Config) -> None:
    by_port: dict[tuple[str, int], str] = {}
    for name, s in cfg.servers.items():
        if s.host != "local" and s.host not in cfg.hosts:
            ck.add(f"servers.{name}.host", f"unknown host {s.host!r}{_suggest(s.host, cfg.hosts)}",
                   f'add a [hosts.{s.host}] table with target = "user@box", or use host = "local"')
        key = (s.host, s.port)
        if f"servers.{name}.port" in ck.bad:
            pass  # out of range: said once, the default port is not this server's
        elif key in by_port:
            ck.add(f"servers.{name}.port", f"port {s.port} is also used by server "
                   f"{by_port[key]!r} on host {s.host!r}", "give each server its own port")
        else:
            by_port[key] = name
        h = cfg.hosts.get(s.host)
        if h is not None and h.sim_dir is not None and f"hosts.{s.host}.n_gpus" not in ck.bad:
            bad = [g for g in s.gpus if g >= h.n_gpus]
            if bad:
                ck.add(f"servers.{name}.gpus", f"GPU(s) {bad} beyond the host's n_gpus = "
                       f"{h.n_gpus}", "use indices below n_gpus")
