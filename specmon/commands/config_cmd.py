"""`specmon config check`: every problem of a config file with its file, key and fix."""

from __future__ import annotations

import argparse
import sys

from specmon.commands.options import add_config
from specmon.errors import CliError

EXIT_VALID = 0  # the file was read and every setting can work
EXIT_INVALID = 1  # the file was read and has problems: each is printed on stdout
EXIT_UNREADABLE = 2  # no file to check (CliError): not found, not a regular file, unreadable, ...

EXIT_CODES = (f"exit status: {EXIT_VALID} the config is valid; {EXIT_INVALID} it has problems (each "
              "on one line on stdout: FILE: KEY: message (fix: ...), or FILE: KEY = VALUE: why "
              f"(expected ...)); {EXIT_UNREADABLE} it could not be checked (not found, a directory, "
              "device or FIFO, permission denied, larger than 1 MiB) or a usage error")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = f"config check's {EXIT_CODES}"
    cs = p.add_subparsers(dest="config_action", metavar="ACTION", required=True)
    c = cs.add_parser("check", help="validate a config: every problem with its file, key and fix "
                      f"(exit {EXIT_VALID} valid, {EXIT_INVALID} problems, {EXIT_UNREADABLE} "
                      "unreadable)",
                      description="Validate a specmon config: types, ranges, names and what the "
                      "settings refer to, every problem at once, each with its file, key (and "
                      "value) and the fix.", epilog=EXIT_CODES[0].upper() + EXIT_CODES[1:] + ".")
    add_config(c, "the file to check")
    c.set_defaults(func=run_check, parser=c)


def run_check(args: argparse.Namespace) -> int:
    from specmon.config import ConfigFileError, check_path, find_config

    try:
        path = find_config(args.config)
        issues = check_path(path)
    except ConfigFileError as exc:  # not found, not a regular file, unreadable: exit 2
        raise CliError(exc.issues[0].format()) from None
    for i in issues:
        print(i.format())
    if issues:
        print(f"{path}: {len(issues)} problem{'s' if len(issues) != 1 else ''}", file=sys.stderr)
        return EXIT_INVALID
    print(f"{path}: ok")
    return EXIT_VALID
