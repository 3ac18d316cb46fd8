"""The hosts `connect` / `record` watch when no TARGET is given: `[hosts.NAME]` of the config.

Same tables as `specmon.config` (server control) reads, so one file serves both::

    [hosts.node1]
    target = "gpu-node-1"            # 'local', [USER@]HOST[:PORT] or an ~/.ssh/config alias
    python = "/opt/venv/bin/python"  # optional: the interpreter for the GPU agent
    ssh_config = "~/.ssh/config"     # optional, like --ssh-config
    logs = { baseline = "/var/log/sglang-base.log" }  # optional: tail these, no discovery

An array `[[hosts]]` with `target` (and optional `name`) is read too. Only these keys are read
here, without the server profiles' checks, so a hosts-only file works for `connect`/`record`;
the file is found like every specmon config (`--config`, `$SPECMON_CONFIG`, `./specmon.toml`,
the user config dir).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specmon.config import candidate_paths

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]


class ConfigError(ValueError):
    """One line naming the file, the key and what to do."""


@dataclass(frozen=True)
class HostConfig:
    target: str
    name: str | None = None
    python: str | None = None
    logs: dict[str, str] = field(default_factory=dict)
    ssh_config: str | None = None
    known_hosts: str | None = None


def locate_config(explicit: str | None = None) -> Path | None:
    """The config file to read, or None when there is none (a named one must exist)."""
    for path, how in candidate_paths(explicit):
        if path.is_file():
            return path
        if how != "current folder" and how != "user config dir":
            raise ConfigError(f"{path}: config file not found (given by {how})")
    return None


def _str(v: Any, where: str, key: str) -> str:
    if not isinstance(v, str) or not v.strip():
        raise ConfigError(f"{where}: '{key}' must be a non-empty string")
    return v


def _host(h: dict[str, Any], w: str, name: str | None, target_default: str | None) -> HostConfig:
    if "target" not in h and target_default is None:
        raise ConfigError(f"{w}: 'target' missing: add target = \"HOST\" (or \"local\")")
    logs = h.get("logs", {})
    if not isinstance(logs, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and v for k, v in logs.items()):
        raise ConfigError(f"{w}: 'logs' must be a table of NAME = \"PATH\"")
    opt = {k: _str(h[k], w, k) for k in ("python", "ssh_config", "known_hosts") if k in h}
    return HostConfig(target=_str(h["target"], w, "target") if "target" in h else str(target_default),
                      name=name, logs=dict(logs), **opt)


def hosts_from_toml(doc: dict[str, Any], where: str) -> list[HostConfig]:
    """The hosts of a parsed config (no I/O; `where` names the file in errors)."""
    raw = doc.get("hosts", {})
    out: list[HostConfig] = []
    if isinstance(raw, dict):
        for name, h in raw.items():
            w = f"{where}: hosts.{name}"
            if not isinstance(h, dict):
                raise ConfigError(f"{w}: must be a table: write [hosts.{name}]")
            out.append(_host(h, w, name, "local"))  # like specmon.config: no target = local
    elif isinstance(raw, list):
        for i, h in enumerate(raw):
            w = f"{where}: hosts[{i}]"
            if not isinstance(h, dict):
                raise ConfigError(f"{w}: must be a table ([[hosts]] with target = \"...\")")
            out.append(_host(h, w, _str(h["name"], w, "name") if "name" in h else None, None))
    else:
        raise ConfigError(f"{where}: 'hosts' must be tables: write [hosts.NAME] with target = ...")
    names = [h.name or h.target for h in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"{where}: hosts: repeated host {', '.join(dup)}; give each a unique name")
    return out


def load_hosts(path: Path) -> list[HostConfig]:
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    return hosts_from_toml(doc, str(path))
