"""`specmon config check`: every problem of a config file with its file, key and fix."""

from __future__ import annotations

import argparse
import sys

from specmon.commands.options import add_config
from specmon.errors import CliError


def add_arguments(p: argparse.ArgumentParser) -> None:
    cs = p.add_subparsers(dest="config_action", metavar="ACTION", required=True)
    c = cs.add_parser("check", help="validate a config: every problem with its file, key and fix")
    add_config(c, "the file to check")
    c.set_defaults(func=run_check, parser=c)


def run_check(args: argparse.Namespace) -> int:
    from specmon.config import ConfigError, check_path, find_config

    try:
        path = find_config(args.config)
    except ConfigError as exc:
        raise CliError(exc.issues[0].format()) from None
    issues = check_path(path)
    for i in issues:
        print(i.format())
    if issues:
        print(f"{path}: {len(issues)} problem{'s' if len(issues) != 1 else ''}", file=sys.stderr)
        return 1
    print(f"{path}: ok")
    return 0
