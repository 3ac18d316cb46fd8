"""What every command that watches hosts shares: TARGETs and the config's [hosts.NAME] as host
plans, --log NAME=PATH, --prometheus, the config itself, the baseline store lookup.

`connect`, `record`, `demo` and `replay` resolve their command lines here, so they agree on
what a TARGET, a --log and a config mean.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from specmon.errors import CliError
from specmon.hosts import Host, make_host
from specmon.sources.tail import TailSpec
from specmon.textsafe import visible

if TYPE_CHECKING:
    from specmon.config import Config


def _make_host(target: str, args: argparse.Namespace, name: str | None = None,
               ssh_config: str | None = None, known_hosts: str | None = None,
               python: str | None = None) -> Host:
    """python: [hosts.NAME] python, the interpreter the host agent runs with (default: the
    host's python3; for `local`, this one)."""
    try:
        if target == "local":
            from specmon.hosts.local import LocalHost

            return LocalHost(name or "local", python=python)
        kw: dict[str, Any] = {"name": name} if name else {}
        if python:
            kw["python"] = python
        return make_host(target, ssh_config=args.ssh_config or ssh_config,
                         known_hosts=args.known_hosts or known_hosts,
                         accept_new=args.accept_new, **kw)
    except ValueError as exc:
        raise CliError(f"bad TARGET: {exc}") from None


@dataclass
class HostPlan:
    """One host to watch: the Host, its --log/logs files (empty: discover), agent python,
    whether discovery lists every user's servers (--all-users)."""

    host: Host
    specs: list[TailSpec] = field(default_factory=list)
    python: str | None = None
    all_users: bool = False


def plans_from_args(args: argparse.Namespace, cfg: Config | None = None) -> list[HostPlan]:
    """TARGETs from the command line (a [hosts.NAME] of the config by its name, or by its
    target when one host has it: its ssh config, known hosts and python apply), else the
    config's [hosts.NAME]; one plan per host."""
    targets = list(getattr(args, "targets", None) or [])
    specs = specs_from_args(args)
    plans: list[HostPlan] = []
    if specs and len(targets) > 1:
        raise CliError("--log NAME=PATH needs exactly one TARGET; for several hosts put "
                       'logs = { NAME = "PATH" } under each [hosts.NAME] of the config')
    dup = sorted({t for t in targets if targets.count(t) > 1})
    if dup:
        raise CliError(f"TARGET given twice: {', '.join(dup)}")
    cfg = cfg if cfg is not None else config_from_args(args)
    if targets:
        for i, t in enumerate(targets):
            hp = cfg.hosts.get(t) if cfg is not None else None
            if hp is not None:  # a [hosts.NAME] of the config, by its name
                host = _make_host(hp.target, args, hp.name, hp.ssh_config, hp.known_hosts,
                                  hp.python)
                hs = list(specs) or [TailSpec(n, p) for n, p in hp.logs.items()]
                plans.append(HostPlan(host, hs if i == 0 or not specs else [], hp.python))
                continue
            by_target = [h for h in cfg.hosts.values() if h.target == t] if cfg else []
            if len(by_target) == 1:  # its target: how to reach it and its python hold too
                hp = by_target[0]    # (the agent ran the default python), its logs do not
                host = _make_host(t, args, t, hp.ssh_config, hp.known_hosts, hp.python)
                plans.append(HostPlan(host, list(specs) if i == 0 else [], hp.python))
            else:
                plans.append(HostPlan(_make_host(t, args), list(specs) if i == 0 else []))
    else:
        path = cfg.path if cfg is not None else None
        hosts = list(cfg.hosts.values()) if cfg is not None else []
        if not hosts:
            where = f"{path} has no [hosts.NAME]" if path is not None else "no config file found"
            raise CliError(f"no TARGET given and {where}; pass TARGET (e.g. 'local') or add "
                           '[hosts.NAME] with target = "HOST" to the config')
        if specs and len(hosts) > 1:
            raise CliError("--log NAME=PATH needs exactly one host; use logs = { NAME = \"PATH\" } "
                           "under each [hosts.NAME] instead")
        for h in hosts:
            hs = [TailSpec(n, p) for n, p in h.logs.items()] or list(specs)
            plans.append(HostPlan(_make_host(h.target, args, h.name, h.ssh_config, h.known_hosts,
                                             h.python), hs, h.python))
    for p in plans:
        p.all_users = bool(getattr(args, "all_users", False))
    names = [p.host.name for p in plans]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise CliError(f"TARGET given twice: {', '.join(dup)}")
    return plans


def config_from_args(args: argparse.Namespace) -> Config | None:
    """The config when one is given or found (hosts-only files too); None when there is none."""
    from specmon.config import ConfigError, load_path, locate_config

    try:
        path = locate_config(getattr(args, "config", None))
        return load_path(path, require_servers=False) if path is not None else None
    except ConfigError as exc:
        raise CliError(exc.one_line()) from None


def listen_from_args(args: argparse.Namespace) -> tuple[str, int] | None:
    text = getattr(args, "prometheus", None)
    if not text:
        return None
    from specmon.export.prometheus import parse_listen

    try:
        return parse_listen(text)
    except ValueError as exc:
        raise CliError(f"--prometheus: {exc}") from None


def default_baselines(say: Callable[[str], None] | None = None) -> Any:
    """Lookup of the newest recorded baseline for (host, server), if a baseline store exists.
    A store that cannot be opened never stops monitoring: `say` gets one line (the file, the
    fix, "drift watching off") and there is no lookup."""
    from specmon.session.baselines import DB_NAME, BaselineStore, StoreError, data_dir

    path = data_dir() / DB_NAME
    if not os.path.lexists(path) and not os.path.isfile(path.parent):
        return None  # (no store yet; a file where the folder should be is said below)
    try:
        store = BaselineStore(path, create=False, warn=say)  # (a damaged row: said once)
    except StoreError as exc:
        if say is not None:
            say(f"{exc}; drift watching is off, monitoring goes on")
        return None

    def lookup(host: str, server: str, role: str | None) -> Any:
        try:
            rows = store.list(host=host, server=server)
            return store.get(rows[-1]["name"]) if rows else None
        except Exception:  # a broken store must not stop monitoring
            return None

    return lookup


def specs_from_args(args: argparse.Namespace) -> list[TailSpec]:
    """--log NAME=PATH, each with its name and path (a bare PATH is refused: say which server)."""
    specs = []
    for text in args.log or []:
        name, sep, path = text.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise CliError(f"--log {text!r}: expected NAME=PATH (e.g. --log base=/var/log/sglang.log)")
        if "/" in name or ".." in name:
            raise CliError(f"--log {text!r}: NAME must not contain '/' or '..'")
        specs.append(TailSpec(name.strip(), path.strip()))
    names = [s.name for s in specs]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise CliError(f"--log names must be unique; repeated: {', '.join(sorted(dup))}")
    return specs


def print_notes(host: Host) -> None:
    """What the host connection wants the user to know (e.g. a host key trusted for this session
    only), one line each on stderr, before any UI takes the screen."""
    for note in getattr(host, "notes", ()):
        print(f"specmon: {visible(host.name)}: {visible(note)}", file=sys.stderr)
