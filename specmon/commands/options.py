"""Option groups that several commands share, defined once (same names, same help everywhere)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from specmon.numfmt import ascii_int

CONFIG_DEFAULT = "default: $SPECMON_CONFIG, ./specmon.toml, then the user config dir"

# --- option values checked where they are parsed: a bad one is argparse's one-line usage error
# (exit 2) naming the option, before anything is started. One rule per kind of value, shared.


def _shown(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:37] + "...")


def count(most: int) -> Callable[[str], int]:
    """An argparse `type`: a whole number 1..`most`, written in ASCII digits (a count of
    requests, lines, tokens: 0 or a negative one is no count, and `--last -5` is no "last")."""
    def parse(text: str) -> int:
        v = ascii_int(text, 1, most)
        if v is None:
            raise argparse.ArgumentTypeError(
                f"must be a positive whole number (ASCII digits), at most {most}, "
                f"got {_shown(text)}")
        return v
    return parse


def seconds(zero: bool = False) -> Callable[[str], float]:
    """An argparse `type`: a duration by the config's one rule (`config.seconds_ok`, as
    ready_timeout is checked): finite, more than 0 (or 0 where `zero`), at most a day."""
    def parse(text: str) -> float:
        from specmon.config import seconds_expected, seconds_ok

        try:
            v = float(text)
        except ValueError:
            v = float("nan")
        if not seconds_ok(v, zero=zero):
            raise argparse.ArgumentTypeError(f"must be {seconds_expected(zero=zero)}, "
                                             f"got {_shown(text)}")
        return v
    return parse


def add_config(p: argparse.ArgumentParser, purpose: str) -> None:
    """`--config FILE`; `purpose` says what this command takes from the config."""
    p.add_argument("--config", metavar="FILE", help=f"specmon TOML config: {purpose} ({CONFIG_DEFAULT})")


def add_ssh(p: argparse.ArgumentParser) -> None:
    """How to reach a host over SSH: the client config, known_hosts and the unknown-key policy."""
    g = p.add_argument_group("SSH")
    g.add_argument("--ssh-config", metavar="FILE", help="OpenSSH client config (default: ~/.ssh/config)")
    g.add_argument("--known-hosts", metavar="FILE",
                   help="known_hosts file (default: UserKnownHostsFile from the ssh config, else "
                   "~/.ssh/known_hosts)")
    g.add_argument("--accept-new", action="store_true",
                   help="add an unknown host key to known_hosts (OpenSSH accept-new); a changed key "
                   "is always refused")


def add_hosts(p: argparse.ArgumentParser) -> None:
    """TARGETs and what to tail on them (`record`, `connect`); the SSH group comes with it."""
    p.add_argument("targets", nargs="*", metavar="TARGET",
                   help="'local', [USER@]HOST[:PORT], or a Host alias from ~/.ssh/config; several "
                   "watch several hosts at once (default: the [hosts.NAME] of the config)")
    p.add_argument("--log", action="append", metavar="NAME=PATH",
                   help="tail exactly this file as server NAME (repeatable, one TARGET only); "
                   "default: discover servers")
    p.add_argument("--prometheus", metavar="[ADDR]:PORT",
                   help="serve Prometheus /metrics here (e.g. :9464; loopback unless ADDR is given)")
    p.add_argument("--history", type=int, default=2000, metavar="N",
                   help="lines of existing log to read on first connect (default: 2000)")
    p.add_argument("--whole-file", action="store_true", help="read each log from its start")
    p.add_argument("--all-users", action="store_true",
                   help="discovery lists every user's servers, not only yours (shown, never trusted: "
                   "their logs are not tailed unless --log names them)")
    add_ssh(p)


def add_export_dir(p: argparse.ArgumentParser, default: str | None = None) -> None:
    """Where the UI's `e` (snapshot) and `s` (screenshot) write."""
    p.add_argument("--export-dir", metavar="DIR", default=default,
                   help="where e (snapshot) and s (screenshot) write (default: current folder)")


def add_json(p: argparse.ArgumentParser, what: str = "print one JSON object") -> None:
    p.add_argument("--json", action="store_true", help=what)


def add_running_req(p: argparse.ArgumentParser, what: str = "use only lines at this #running-req") -> None:
    p.add_argument("--running-req", metavar="N", type=int, help=what)
