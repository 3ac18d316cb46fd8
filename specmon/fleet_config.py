"""`[[hosts]]` tables of the specmon TOML config: the hosts `connect`/`record` watch.

Kept small and self-contained so it can be folded into the general config module later::

    [[hosts]]
    target = "gpu-node-1"          # 'local', [USER@]HOST[:PORT] or an ~/.ssh/config alias
    name = "node1"                 # optional display name (default: the target)
    python = "/opt/venv/bin/python" # optional: the interpreter for the GPU agent
    logs = { baseline = "/var/log/sglang-base.log" }  # optional: tail these instead of discovery

The file is found like every specmon config: `--config FILE`, `$SPECMON_CONFIG`,
`./specmon.toml`, then the user config dir. Other tables and keys are left to their own readers.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

HOST_KEYS = {"target", "name", "python", "logs"}


class ConfigError(ValueError):
    """One line naming the file, the key and what to do."""


@dataclass(frozen=True)
class HostConfig:
    target: str
    name: str | None = None
    python: str | None = None
    logs: dict[str, str] = field(default_factory=dict)


def locate_config(explicit: str | None = None) -> Path | None:
    """The config file to read, or None when there is none (an explicit one must exist)."""
    if explicit:
        p = Path(explicit).expanduser()
        if not p.is_file():
            raise ConfigError(f"{p}: config file not found")
        return p
    env = os.environ.get("SPECMON_CONFIG")
    if env:
        p = Path(env).expanduser()
        if not p.is_file():
            raise ConfigError(f"{p}: config file not found (from $SPECMON_CONFIG)")
        return p
    local = Path("specmon.toml")
    if local.is_file():
        return local
    from platformdirs import user_config_dir

    user = Path(user_config_dir("specmon", appauthor=False)) / "specmon.toml"
    return user if user.is_file() else None


def _str(v: Any, where: str, key: str) -> str:
    if not isinstance(v, str) or not v.strip():
        raise ConfigError(f"{where}: '{key}' must be a non-empty string")
    return v


def hosts_from_toml(doc: dict[str, Any], where: str) -> list[HostConfig]:
    """The [[hosts]] entries of a parsed config (no I/O; `where` names the file in errors)."""
    raw = doc.get("hosts", [])
    if not isinstance(raw, list):
        raise ConfigError(f"{where}: 'hosts' must be an array of tables: write [[hosts]]")
    out: list[HostConfig] = []
    for i, h in enumerate(raw):
        w = f"{where}: hosts[{i}]"
        if not isinstance(h, dict):
            raise ConfigError(f"{w}: must be a table ([[hosts]] with target = \"...\")")
        if "target" not in h:
            raise ConfigError(f"{w}: 'target' missing: add target = \"HOST\" (or \"local\")")
        logs = h.get("logs", {})
        if not isinstance(logs, dict) or not all(
                isinstance(k, str) and isinstance(v, str) and v for k, v in logs.items()):
            raise ConfigError(f"{w}: 'logs' must be a table of NAME = \"PATH\"")
        out.append(HostConfig(
            target=_str(h["target"], w, "target"),
            name=_str(h["name"], w, "name") if "name" in h else None,
            python=_str(h["python"], w, "python") if "python" in h else None,
            logs=dict(logs),
        ))
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
