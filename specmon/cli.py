"""Command line entry point.

Headless commands import only the core (stdlib, parsers, sources); Textual is imported inside
the TUI commands so `specmon --help`, `specmon parse` and `specmon record` start fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from specmon import __version__

Handler = Callable[[argparse.Namespace], int]


class CliError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


def _cmd_parse(args: argparse.Namespace) -> int:
    from specmon.commands.parse_cmd import run

    return run(args)


def _add_parse(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "parse",
        help="parse SGLang server logs offline (summary or JSON lines)",
        description="Parse SGLang log files. FILE may be '-' for stdin; .gz is read transparently.",
    )
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--json", action="store_true", help="one JSON object per recognised line")
    p.add_argument(
        "--kind",
        choices=["decode", "prefill", "all"],
        default="all",
        help="which records to emit with --json (default: all)",
    )
    p.set_defaults(func=_cmd_parse)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specmon",
        description="Live monitor for speculative decoding on SGLang servers.",
    )
    parser.add_argument("--version", action="version", version=f"specmon {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_parse(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Handler | None = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 0
    try:
        return func(args)
    except CliError as exc:
        print(f"specmon {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `specmon parse ... | head` closes the pipe early; that is not an error.
        sys.stderr.close()
        return 0
