"""Command line entry point: the list of commands; each command module owns its options.

Only the module of the command being run is imported (its `add_arguments` and `run`), so
`specmon --help`, `specmon parse` and `specmon record` start without loading Textual or the
other commands.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
from collections.abc import Callable, Sequence

from specmon import __version__
from specmon.errors import CliError
from specmon.textsafe import SafeStream, visible_lines

Handler = Callable[[argparse.Namespace], int]

# name -> (module under specmon.commands, one-line help for `specmon --help`)
COMMANDS: dict[str, tuple[str, str]] = {
    "parse": ("parse", "parse SGLang or vLLM server logs offline (summary or JSON lines)"),
    "check": ("check_cmd",
              "compare a decode log with a baseline (exit 0 ok/improved, 1 drift, 3 insufficient)"),
    "advise": ("advise_cmd",
               "recommend speculative settings from logs (exit 0, 3 too little data, 2 usage)"),
    "compare": ("compare_cmd",
                "speedup of a speculative server's log over a baseline's (last runs, per batch size)"),
    "counters": ("counters_cmd",
                 "exact windowed acceptance and throughput from a vLLM server's /metrics counters"),
    "baseline": ("baseline_cmd", "record, list, show and delete drift baselines"),
    "record": ("record",
               "tail SGLang or vLLM server logs on a host (no UI) and write them as JSON lines"),
    "connect": ("connect_cmd", "open the live UI on a host's SGLang and vLLM servers ('local' or over SSH)"),
    "demo": ("demo_cmd",
             "the live UI on a simulated host: a baseline and a speculative server (no GPU needed)"),
    "sim": ("sim_cmd",
            "simulated SGLang/vLLM host (server processes, logs, HTTP, H200 GPUs) for demos/tests"),
    "export": ("export_cmd", "turn a `specmon record` JSONL file into a session snapshot"),
    "report": ("report_cmd", "write a Markdown, HTML or JSON report of a snapshot, with charts"),
    "replay": ("replay_cmd", "open a snapshot in the UI, read-only: play, pause, seek, speed"),
    "server": ("server_cmd",
               "start, stop, restart, benchmark or show the status of a server profile from the config"),
    "config": ("config_cmd", "check the config file (hosts and server profiles)"),
}


def _command_name(argv: Sequence[str]) -> str | None:
    """The command named on the line (the first word that is not an option), if any."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with `only`, the other commands are listed but their modules not loaded."""
    parser = argparse.ArgumentParser(
        prog="specmon", description="Live monitor for speculative decoding on SGLang and vLLM servers.")
    parser.add_argument("--version", action="version", version=f"specmon {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_) in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_)
        if only is None or name == only:
            mod = importlib.import_module(f"specmon.commands.{module}")
            mod.add_arguments(p)
            # A command with sub-actions sets its own `func` and `parser` on each of them.
            p.set_defaults(parser=p, **({"func": mod.run} if hasattr(mod, "run") else {}))
    return parser


# Commands that read files and write results: SIGTERM ends them like Ctrl-C (cleanups run, no
# temp file is left, exit 143); the live ones (record, connect, demo, replay) handle it in their
# loop (the full-screen ones end their app as its quit key does: specmon/ui/signals.py).
OFFLINE_COMMANDS = {"parse", "export", "report", "check", "baseline", "compare", "advise"}
# Textual apps own the terminal; every other command's output goes through the one text-safety
# function (specmon/textsafe.py), so text from hosts and files never reaches it as escapes.
# What the full-screen ones print themselves before or after the app (a CliError: `_run`; a
# note) goes through the same function where it is printed.
FULL_SCREEN = {"connect", "demo", "replay", "sim"}


class _Terminated(BaseException):
    """SIGTERM, raised where the offline command is (between bytecodes: a long redaction or
    parse is cut short right away)."""


def _terminate(signum: int, frame: object) -> None:
    raise _Terminated


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    out, err = sys.stdout, sys.stderr
    # from the start: argparse's errors echo the arguments (a file name from `logs/*` is text
    # someone else chose)
    sys.stdout, sys.stderr = SafeStream(out), SafeStream(err)
    try:
        try:  # (Ctrl-C while the command's modules are imported: no traceback either)
            parser = build_parser(_command_name(argv))
            args, extra = parser.parse_known_args(argv)
        except KeyboardInterrupt:
            return 130
        if extra:  # reported with the command's own usage, not the top-level one
            getattr(args, "parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
        func: Handler | None = getattr(args, "func", None)
        if func is None:
            getattr(args, "parser", parser).print_help()
            return 0
        if args.command in FULL_SCREEN:
            sys.stdout, sys.stderr = out, err
            return _run(func, args)
        old = signal.getsignal(signal.SIGTERM)
        if args.command in OFFLINE_COMMANDS:
            signal.signal(signal.SIGTERM, _terminate)
        try:
            return _run(func, args)
        finally:
            if args.command in OFFLINE_COMMANDS:
                signal.signal(signal.SIGTERM, old)
    finally:
        sys.stdout, sys.stderr = out, err


def _run(func: Handler, args: argparse.Namespace) -> int:
    try:
        return func(args)
    except CliError as exc:
        # made visible here, not only by the SafeStream: the full-screen commands run on the
        # raw streams, and their errors before the app starts (a snapshot's file name, a host
        # name) are text from elsewhere too
        print(f"specmon {args.command}: {visible_lines(str(exc))}", file=sys.stderr)
        return 2
    except _Terminated:
        return 143
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `specmon parse ... | head` closes the pipe early; that is not an error.
        sys.stderr.close()
        return 0
