"""Command line entry point.

Headless commands import only the core (stdlib, parsers, sources); Textual is imported inside
the TUI commands so `specmon --help`, `specmon parse` and `specmon record` start fast.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable, Sequence

from specmon import __version__
from specmon.errors import CliError
from specmon.textsafe import SafeStream

Handler = Callable[[argparse.Namespace], int]


def _cmd_parse(args: argparse.Namespace) -> int:
    from specmon.commands.parse import run

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
    p.add_argument("--runs", action="store_true",
                   help="list each log's server runs (start, end, args, decode lines); with --json "
                   "one object per run")
    p.set_defaults(func=_cmd_parse)


def add_host_args(p: argparse.ArgumentParser) -> None:
    """TARGET and the SSH/log options shared by `record` and `connect`."""
    p.add_argument(
        "targets",
        nargs="*",
        metavar="TARGET",
        help="'local', [USER@]HOST[:PORT], or a Host alias from ~/.ssh/config; several watch "
        "several hosts at once (default: the [hosts.NAME] of the config)",
    )
    p.add_argument(
        "--log",
        action="append",
        metavar="NAME=PATH",
        help="tail exactly this file as server NAME (repeatable, one TARGET only); default: "
        "discover servers",
    )
    p.add_argument("--prometheus", metavar="[ADDR]:PORT",
                   help="serve Prometheus /metrics here (e.g. :9464; loopback unless ADDR is "
                   "given)")
    p.add_argument(
        "--ssh-config", metavar="FILE", help="OpenSSH client config (default: ~/.ssh/config)"
    )
    p.add_argument(
        "--known-hosts",
        metavar="FILE",
        help="known_hosts file (default: UserKnownHostsFile from the ssh config, else "
        "~/.ssh/known_hosts)",
    )
    p.add_argument(
        "--accept-new",
        action="store_true",
        help="add an unknown host key to known_hosts (OpenSSH accept-new); a changed key is "
        "always refused",
    )
    p.add_argument(
        "--history",
        type=int,
        default=2000,
        metavar="N",
        help="lines of existing log to read on first connect (default: 2000)",
    )
    p.add_argument("--whole-file", action="store_true", help="read each log from its start")


def _cmd_record(args: argparse.Namespace) -> int:
    from specmon.commands.record import run

    return run(args)


def _add_record(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "record",
        help="tail SGLang server logs on a host (no UI) and write them as JSON lines",
        description="Connect to TARGET, find its SGLang servers (or use --log) and write one "
        'JSON object per received log line: {"server","path","offset","line","received_at",'
        '"record"}. Stops on Ctrl-C, SIGTERM or after --duration.',
    )
    add_host_args(p)
    p.add_argument("--out", required=True, metavar="FILE.jsonl", help="output file")
    p.add_argument("--append", action="store_true",
                   help="append to --out instead of replacing it (a torn last row is cut off "
                   "first, and said)")
    p.add_argument("--force", action="store_true",
                   help="write --out even when it is a symbolic link (refused otherwise)")
    p.add_argument("--duration", type=float, metavar="SECONDS", help="stop after this long")
    p.add_argument("--config", metavar="FILE",
                   help="specmon TOML config whose [hosts.NAME] are recorded when no TARGET is "
                   "given (default: $SPECMON_CONFIG, ./specmon.toml, the user config dir)")
    p.set_defaults(func=_cmd_record)


def _cmd_connect(args: argparse.Namespace) -> int:
    from specmon.commands.connect_cmd import run

    return run(args)


def _add_connect(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "connect",
        help="open the live UI on a host's SGLang servers ('local' or over SSH)",
        description="Connect to TARGET over SSH (or 'local'), find its SGLang servers (or tail "
        "--log NAME=PATH), and show them live. A --log NAME containing 'base' or 'spec' sets "
        "the server's role; otherwise it is read from the log.",
    )
    add_host_args(p)
    p.add_argument("--config", metavar="FILE",
                   help="specmon TOML config: its server profiles on TARGET are tailed and get "
                   "start/stop/restart/swap/benchmark keys; with no TARGET its [hosts.NAME] are "
                   "watched (default: $SPECMON_CONFIG, ./specmon.toml, the user config dir)")
    p.add_argument("--export-dir", metavar="DIR", default=None,
                   help="where e (snapshot) and s (screenshot) write (default: current folder)")
    p.set_defaults(func=_cmd_connect)
def _cmd_sim_server(args: argparse.Namespace) -> int:
    from specmon.commands.sim_cmd import run_server

    return run_server(args)


def _cmd_sim_gpus(args: argparse.Namespace) -> int:
    from specmon.commands.sim_cmd import run_gpus

    return run_gpus(args)


def _cmd_sim_power_limit(args: argparse.Namespace) -> int:
    from specmon.commands.sim_cmd import run_power_limit

    return run_power_limit(args)


def _add_sim(sub: argparse._SubParsersAction) -> None:
    from specmon.sim.cli_args import add_server_arguments

    p = sub.add_parser(
        "sim",
        help="simulated SGLang host (server processes, logs, HTTP, H200 GPUs) for demos/tests",
    )
    simsub = p.add_subparsers(dest="sim_command", metavar="SIMCOMMAND", required=True)
    srv = simsub.add_parser(
        "server",
        help="run a simulated `python -m sglang.launch_server`",
        description="Behaves like sglang.launch_server from outside: TP worker processes, "
        "version-exact log lines, /health, /get_server_info, /metrics, /generate.",
    )
    add_server_arguments(srv)
    srv.set_defaults(func=_cmd_sim_server)
    for name, func, help_ in (
        ("gpus", _cmd_sim_gpus, "print the simulated GPUs as JSON lines"),
        ("power-limit", _cmd_sim_power_limit, "set a simulated power limit (like nvidia-smi -pl)"),
    ):
        q = simsub.add_parser(name, help=help_)
        q.add_argument("--sim-dir", default=None, help="default $SPECMON_SIM_DIR")
        q.add_argument("--n-gpus", type=int, default=8)
        if name == "power-limit":
            q.add_argument("watts", type=float)
            q.add_argument("--gpu", type=int, default=None, help="one GPU (default: all)")
        q.set_defaults(func=func)


def _cmd_demo(args: argparse.Namespace) -> int:
    from specmon.commands.demo_cmd import run

    return run(args)


def _add_demo(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="the live UI on a simulated host: a baseline and a speculative server (no GPU needed)",
    )
    p.add_argument("--format-version", metavar="V", default=None,
                   help="SGLang release whose log format the simulated servers write (default newest)")
    p.add_argument("--concurrency", type=int, default=1, metavar="N",
                   help="requests the built-in clients keep in flight per server (default 1)")
    p.add_argument("--keep", action="store_true", help="keep the demo's log files on exit")
    p.add_argument("--export-dir", metavar="DIR", default=None,
                   help="where e (snapshot) and s (screenshot) write (default: current folder)")
    p.add_argument("--config", metavar="FILE", help="specmon TOML config whose [keys] remap the UI "
                   "(default: $SPECMON_CONFIG, ./specmon.toml, the user config dir)")
    p.add_argument("--scenario", choices=["default", "phantom-baseline"], default="default",
                   help="phantom-baseline: record a tuned baseline, then restart it without the "
                   "NCCL variables, then with a power cap and a patched file; drift alerts follow")
    p.set_defaults(func=_cmd_demo)


def _cmd_check(args: argparse.Namespace) -> int:
    from specmon.commands.check_cmd import run

    return run(args)


def _add_check(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check",
        help="compare a decode log with a baseline (exit 0 ok/improved, 1 drift, 3 insufficient)",
        description="Stream a decode log through the drift detector and print the verdict. "
        "Exit status: 0 ok or improved, 1 drift, 3 insufficient data, 2 usage error.",
    )
    p.add_argument("log", metavar="LOG", help="SGLang log file, or '-' for stdin")
    p.add_argument("--baseline", metavar="NAME", help="a recorded baseline (specmon baseline list)")
    p.add_argument("--baseline-value", metavar="TOKS", type=float,
                   help="a known baseline gen throughput (tok/s) instead of a recorded baseline")
    p.add_argument("--baseline-spread", metavar="PCT", type=float,
                   help="per-sample robust spread of --baseline-value in %% (default: the live spread)")
    p.add_argument("--running-req", metavar="N", type=int, help="compare only lines at this #running-req")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_cmd_check)


def _add_compare(sub: argparse._SubParsersAction) -> None:
    from specmon.commands.compare_cmd import add_parser

    add_parser(sub)


def _cmd_baseline(args: argparse.Namespace) -> int:
    from specmon.commands.baseline_cmd import run

    return run(args)


def _add_baseline(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("baseline", help="record, list, show and delete drift baselines",
                       description="Recorded baselines live in SQLite under the user data dir "
                       "(override with SPECMON_DATA_DIR).")
    bs = p.add_subparsers(dest="baseline_action", metavar="ACTION")
    r = bs.add_parser("record", help="record a baseline from a log file")
    r.add_argument("name", metavar="NAME")
    r.add_argument("--log", metavar="FILE", help="SGLang log ('-' for stdin); the last server run is used")
    r.add_argument("--server-info", metavar="JSON", help="/get_server_info output (a file or inline JSON)")
    r.add_argument("--running-req", metavar="N", type=int, help="keep only this #running-req")
    r.add_argument("--last", metavar="LINES", type=int, help="only the last LINES decode lines")
    r.add_argument("--host", help="host the server ran on (default: local)")
    r.add_argument("--server", help="server name (e.g. sglang-30000)")
    r.add_argument("--role", choices=["baseline", "speculative"], help="default: from the log")
    r.add_argument("--note", help="free text kept with the baseline")
    r.add_argument("--replace", action="store_true", help="replace a baseline of the same name")
    ls = bs.add_parser("list", help="list recorded baselines")
    ls.add_argument("--host")
    ls.add_argument("--server")
    ls.add_argument("--json", action="store_true")
    sh = bs.add_parser("show", help="show one baseline: strata and fingerprint")
    sh.add_argument("name", metavar="NAME")
    sh.add_argument("--json", action="store_true")
    d = bs.add_parser("delete", help="delete a baseline")
    d.add_argument("name", metavar="NAME")
    p.set_defaults(func=_cmd_baseline, baseline_action=None)


def _cmd_export(args: argparse.Namespace) -> int:
    from specmon.commands.export_cmd import run

    return run(args)


def _add_export(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="turn a `specmon record` JSONL file into a session snapshot",
        description="Convert RECORD.jsonl (one object per received line: server, path, offset, "
        "line, received_at, record) into a specmon.snapshot/1 document. Written atomically; "
        "secrets are redacted; gzip when -o ends in .gz or with --gzip.",
    )
    p.add_argument("record", metavar="RECORD.jsonl")
    p.add_argument("-o", "--out", required=True, metavar="SNAPSHOT", help="snapshot file to write")
    p.add_argument("--gzip", action="store_true", help="gzip the snapshot whatever its name")
    p.add_argument("--host", help="host name to record in the snapshot (default: unknown)")
    p.add_argument("--log-lines", type=int, default=5000, metavar="N",
                   help="raw log lines kept per server (records are always all kept; default 5000)")
    p.add_argument("--gpu-max-samples", type=int, default=2000, metavar="N",
                   help="GPU samples per GPU before downsampling (default 2000)")
    p.add_argument("--no-redact", action="store_true",
                   help="keep secrets (tokens, keys, passwords) in the snapshot; off by default")
    p.set_defaults(func=_cmd_export)


def _cmd_report(args: argparse.Namespace) -> int:
    from specmon.commands.report_cmd import run

    return run(args)


def _add_report(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="write a Markdown or HTML report of a snapshot, with charts",
        description="Servers and fingerprints, throughput per batch size (median, p10-p90, n), "
        "speedup with its 95%% interval, accept length, GPU clocks and power, alerts, and SVG "
        "charts of throughput over time.",
    )
    p.add_argument("snapshot", metavar="SNAPSHOT")
    p.add_argument("--format", choices=["md", "html"], default="md")
    p.add_argument("-o", "--out", metavar="FILE",
                   help="report file (default: next to SNAPSHOT, .report.md/.report.html); '-' "
                   "prints Markdown without chart files")
    p.set_defaults(func=_cmd_report)


def _cmd_replay(args: argparse.Namespace) -> int:
    from specmon.commands.replay_cmd import run

    return run(args)


def _add_replay(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "replay",
        help="open a snapshot in the UI, read-only: play, pause, seek, speed",
        description="Replay SNAPSHOT through the live UI on its recorded times. Keys: space "
        "play/pause, , . seek 10 s, < > seek 60 s, [ ] speed, g/G start/end, e export, "
        "s SVG screenshot.",
    )
    p.add_argument("snapshot", metavar="SNAPSHOT")
    p.add_argument("--speed", type=float, default=1.0, help="playback speed (default 1)")
    p.add_argument("--paused", action="store_true", help="start paused at the beginning")
    p.add_argument("--export-dir", default=".", metavar="DIR",
                   help="folder for exports and screenshots (default: current folder)")
    p.add_argument("--config", metavar="FILE", help="specmon TOML config whose [keys] remap the UI "
                   "(default: $SPECMON_CONFIG, ./specmon.toml, the user config dir)")
    p.set_defaults(func=_cmd_replay)


def _cmd_server(args: argparse.Namespace) -> int:
    from specmon.commands.server_cmd import run

    return run(args)


def _add_server(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "server",
        help="start, stop, restart, benchmark or show a server profile from the config",
        description="Control a server defined in the config (see examples/specmon.toml). start "
        "launches it in its own session with the profile's env (SPT_NOENV=1 by default), follows "
        "its start-up lines, waits for /health and audits its workers' environment; stop "
        "signals only the process group specmon recorded. Exit 1 when the action failed.",
    )
    p.add_argument("action", choices=["start", "stop", "restart", "status", "bench"])
    p.add_argument("name", metavar="NAME", help="server name ([servers.NAME] in the config)")
    p.add_argument("target", metavar="TARGET", nargs="?", default=None,
                   help="override the profile's host: 'local', [USER@]HOST[:PORT] or an alias")
    p.add_argument("--config", metavar="FILE", help="config file (default: $SPECMON_CONFIG, "
                   "./specmon.toml, then the user config dir)")
    p.add_argument("--ssh-config", metavar="FILE")
    p.add_argument("--known-hosts", metavar="FILE")
    p.add_argument("--accept-new", action="store_true", help="add an unknown host key")
    p.add_argument("--timeout", type=float, metavar="S", help="readiness timeout (default: "
                   "the profile's ready_timeout)")
    p.add_argument("--grace", type=float, default=30.0, metavar="S",
                   help="seconds between SIGTERM and SIGKILL (default 30)")
    p.add_argument("--quiet", action="store_true", help="no start-up progress lines")
    p.add_argument("--json", action="store_true", help="status/bench as JSON")
    p.add_argument("--num-prompts", type=int, default=8, help="bench: requests (default 8)")
    p.add_argument("--concurrency", type=int, default=1, help="bench: in flight (default 1)")
    p.add_argument("--output-len", type=int, default=128, help="bench: tokens per request")
    p.add_argument("--builtin", action="store_true",
                   help="bench: the built-in client even when sglang.bench_serving exists")
    p.set_defaults(func=_cmd_server)


def _cmd_config_check(args: argparse.Namespace) -> int:
    from specmon.commands.server_cmd import run_config_check

    return run_config_check(args)


def _add_config(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("config", help="check the config file (hosts and server profiles)")
    cs = p.add_subparsers(dest="config_action", metavar="ACTION", required=True)
    c = cs.add_parser("check", help="validate a config: every problem with its file, key and fix")
    c.add_argument("--config", metavar="FILE", help="default: $SPECMON_CONFIG, ./specmon.toml, "
                   "then the user config dir")
    c.set_defaults(func=_cmd_config_check)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specmon",
        description="Live monitor for speculative decoding on SGLang servers.",
    )
    parser.add_argument("--version", action="version", version=f"specmon {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_parse(sub)
    _add_check(sub)
    from specmon.commands.advise_cmd import add_parser as _add_advise

    _add_advise(sub)
    _add_compare(sub)
    _add_baseline(sub)
    _add_record(sub)
    _add_connect(sub)
    _add_demo(sub)
    _add_sim(sub)
    _add_export(sub)
    _add_report(sub)
    _add_replay(sub)
    _add_server(sub)
    _add_config(sub)
    return parser


def _command_parser(parser: argparse.ArgumentParser,
                    args: argparse.Namespace) -> argparse.ArgumentParser:
    """The (sub)parser of the command given, e.g. `parse` for `specmon parse --frobnicate`."""
    p = parser
    while True:
        subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        name = getattr(args, subs[0].dest, None) if subs and subs[0].dest else None
        if not subs or name not in subs[0].choices:
            return p
        p = subs[0].choices[name]


# Commands that read files and write results: SIGTERM ends them like Ctrl-C (cleanups run, no
# temp file is left, exit 143); the live ones (record, connect, demo) handle it in their loop.
OFFLINE_COMMANDS = {"parse", "export", "report", "check", "baseline", "compare", "advise"}
# Textual apps own the terminal; every other command's output goes through the one text-safety
# function (specmon/textsafe.py), so text from hosts and files never reaches it as escapes.
FULL_SCREEN = {"connect", "demo", "replay", "sim"}


class _Terminated(BaseException):
    """SIGTERM, raised where the offline command is (between bytecodes: a long redaction or
    parse is cut short right away, no regex runs for minutes since issue 22)."""


def _terminate(signum: int, frame: object) -> None:
    raise _Terminated


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # reported with the command's own usage, not the top-level one
        _command_parser(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    func: Handler | None = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 0
    if args.command in FULL_SCREEN:
        return _run(func, args)
    old = signal.getsignal(signal.SIGTERM)
    if args.command in OFFLINE_COMMANDS:
        signal.signal(signal.SIGTERM, _terminate)
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = SafeStream(out), SafeStream(err)
    try:
        return _run(func, args)
    finally:
        sys.stdout, sys.stderr = out, err
        if args.command in OFFLINE_COMMANDS:
            signal.signal(signal.SIGTERM, old)


def _run(func: Handler, args: argparse.Namespace) -> int:
    try:
        return func(args)
    except CliError as exc:
        print(f"specmon {args.command}: {exc}", file=sys.stderr)
        return 2
    except _Terminated:
        return 143
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `specmon parse ... | head` closes the pipe early; that is not an error.
        sys.stderr.close()
        return 0
