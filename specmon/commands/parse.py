"""`specmon parse`: offline analysis of SGLang and vLLM logs, and the JSON contract other tools build on.

A log that holds several server runs is summarised one section per run (a table never blends
runs): the runs are split where the session model splits them (a `server_args` line starts a run
unless the current one has not printed a batch line yet), and each run's lines go through the
same `summarise_buffer` fast path as a one-run log.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from specmon.analysis.logfile import (
    NO_LINES,
    RUN_MARK,
    VLLM_RUN_MARKS,
    LogLines,
    VllmRun,
    json_rows,
    open_input,
    read_lines,
    run_segments,
    summarise_buffer,
)
from specmon.analysis.logsummary import LogSummary
from specmon.errors import CliError
from specmon.jsonout import dumps
from specmon.numfmt import spread_text
from specmon.parse.sglang import EventRecord, parse_line

RUN_CHUNK = 4 * 1024 * 1024  # lines of one run handed to the fast path at a time


def _vllm_event(rec: object) -> bool:
    """Whether `rec` is a vLLM event record. vLLM's parser (its patterns: ~10 ms of an SGLang
    log's parse) is imported by `parse_line` at the first vLLM line, not here: no such record
    exists before it is."""
    vllm = sys.modules.get("specmon.parse.vllm")
    return vllm is not None and isinstance(rec, vllm.VllmEventRecord)


def _repeats_config(args: dict[str, Any], data: dict[str, Any]) -> bool:
    from specmon.parse.vllm import repeats_config

    return repeats_config(args, data)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Parse SGLang (and vLLM) log files. FILE may be '-' for stdin; .gz is read "
                     "transparently. Exit status: 0 parsed, 3 no SGLang or vLLM line in any "
                     "input, 2 usage error or a damaged file (what was read before the damage "
                     "is printed first).")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--json", action="store_true", help="one JSON object per recognised line")
    p.add_argument("--kind", choices=["decode", "prefill", "spec", "server_args", "all"], default="all",
                   help="which records to emit with --json (default: all)")
    p.add_argument("--runs", action="store_true",
                   help="list each log's server runs (start, end, args, decode lines); with --json "
                   "one object per run")


def run(args: argparse.Namespace) -> int:
    if getattr(args, "runs", False):
        return list_runs(args.files, args.json)
    if args.json:
        sys.stdout.flush()
        out = sys.stdout.buffer  # ASCII rows as bytes (the CLI's stdout checks them as bytes)
        found = 0
        invalid = 0
        for name in args.files:  # rows come a few hundred at a time: one text-safety check each
            for rows, n, bad in json_rows(name, args.kind):
                found += n
                invalid += bad
                if rows:
                    out.write(rows)
        if invalid:  # e.g. vLLM 0.8.5's `nan` for an interval without drafts
            print(f"specmon parse: warning: {invalid:,} value(s) printed as nan/inf or impossible "
                  "were read as null (each record names them under \"invalid\")", file=sys.stderr)
        if not found:
            print("specmon parse: no SGLang lines found (nor vLLM lines)", file=sys.stderr)
            return NO_LINES
        return 0
    return summary_by_run(args.files)  # (files are never merged: two logs are two servers'
    # runs, or two launches; a plain file is read once, cut at its runs as it is summarised)


# --- runs in the summary --------------------------------------------------------------------------

@dataclass
class RunPart:
    """One server run of a log: its `server_args` and the summary of its lines."""

    index: int
    args: dict[str, Any] = field(default_factory=dict)
    has_args: bool = False
    start: str | None = None  # log time of its server_args line (else of its first batch line)
    summary: LogSummary = field(default_factory=LogSummary)

    def header(self) -> str:
        from specmon.session.runs import args_summary

        start = self.start or self.summary.first_time
        return (f"run {self.index}  {start or '?'} -> {self.summary.last_time or '?'}  "
                f"{args_summary(self.args)}")


def iter_runs(lines: Iterable[bytes]) -> Iterator[RunPart]:
    """Per-run summaries of a log's lines, each yielded when the next run starts (memory: one
    run's summary, whatever the number of runs). A `server_args` line starts a new run unless
    the current one has printed no batch line and no server_args yet (ServerState's
    `_run_boundary` rule; tests/integration/test_parse_cli.py holds the two to the same runs). On a read
    error the run read so far is yielded, then the error raised."""
    cur = RunPart(1)
    pending: list[bytes] = []
    size = 0
    # vLLM's launch lines are looked for until the summary knows the log's engine (its first
    # stats lines), then only in a vLLM log: two more searches a line cost an SGLang .gz ~25 %
    engine_known = vllm = False
    # a vLLM run's pieces share one state (its config, an engine line waiting at a piece's end
    # for its spec line): ended with the run (`end`)
    vrun = VllmRun(cur.args)

    def flush() -> None:
        nonlocal engine_known, vllm
        if pending:
            cur.summary.merge(summarise_buffer(b"".join(pending), vllm_run=vrun))
            pending.clear()
            if not engine_known and cur.summary.recognised:
                engine_known, vllm = True, cur.summary.engine == "vllm"

    def end(part: RunPart) -> RunPart:
        nonlocal vrun
        vrun.finish(part.summary)
        vrun = VllmRun(cur.args)
        return part

    try:
        for line in lines:
            if not line.endswith(b"\n"):
                line += b"\n"
            if RUN_MARK in line or ((vllm or not engine_known) and (
                    VLLM_RUN_MARKS[0] in line or VLLM_RUN_MARKS[1] in line)):
                rec = parse_line(line)
                if isinstance(rec, EventRecord) and rec.kind in ("server_args", "vllm_args"):
                    flush()
                    size = 0
                    done, cur = _run_at(cur, rec)
                    if done is not None:
                        yield end(done)
                    if _vllm_event(rec) and rec.kind == "server_args":
                        vrun.configure(cur.args)  # (its config line, or a DP engine's copy)
                        cur.summary.speculative = bool(cur.args.get("speculative_algorithm"))
            pending.append(line)
            size += len(line)
            if size >= RUN_CHUNK:
                flush()
                size = 0
    except CliError:
        flush()
        yield end(cur)  # what was read before the damage is still reported
        raise
    flush()
    yield end(cur)


def _run_at(cur: RunPart, rec: EventRecord) -> tuple[RunPart | None, RunPart]:
    """The run rule at a `server_args` line, or vLLM's `non-default args` line that starts its
    launch (ServerState's `_run_boundary` rule): (the run it ended, if any; the run it is in)."""
    done = None
    if rec.kind == "vllm_args":  # a new run after one with stats lines; its config line follows
        if cur.summary.recognised:
            done, cur = cur, RunPart(cur.index + 1)
        cur.start = cur.start or rec.timestamp or rec.time_of_day
        return done, cur
    if (_vllm_event(rec) and cur.has_args and not cur.summary.recognised
            and _repeats_config(cur.args, rec.data)):
        return None, cur  # the next DP engine's copy of the config line: the same launch
    if cur.summary.recognised or cur.has_args:
        done, cur = cur, RunPart(cur.index + 1)
    cur.args, cur.has_args = dict(rec.data), True
    cur.start = cur.start or rec.timestamp or rec.time_of_day
    return done, cur


def runs_of_segments(segments: list[tuple[bytes | None, LogSummary]]) -> Iterator[RunPart]:
    """`iter_runs` over a file already cut at its lines with the mark (`run_segments`)."""
    cur = RunPart(1)
    for head, summary in segments:
        rec = parse_line(head) if head is not None else None
        if isinstance(rec, EventRecord) and rec.kind == "server_args":
            done, cur = _run_at(cur, rec)
            if done is not None:
                yield done
        cur.summary.merge(summary)
    yield cur


def _file_runs(name: str) -> Iterator[RunPart] | None:
    """A plain file's runs from its pieces between server_args lines, summarised at once over
    the usable CPUs; None: read it in order (stdin, gzip, CRs, an error on the way)."""
    if name == "-":
        return None
    try:
        segments = run_segments(name)
    except CliError:  # a read error, engines mixed in a run: the in-order read prints the
        return None  # runs before it, then says what is wrong, where
    if segments is None or any(part.engine == "vllm" for _, part in segments):
        return None  # (vLLM's launches are no `server_args=` lines: read in order, by runs)
    return runs_of_segments(segments)


def summary_by_run(files: list[str]) -> int:
    """Each file's runs, one section each, printed as each run ends (a one-run file: its
    summary without a run header)."""
    found = False
    for name in files:
        runs = _file_runs(name)
        fh = None
        if runs is None:  # in order, one run in memory at a time
            fh = open_input(name)
            runs = iter_runs(read_lines(fh, name))
        first: RunPart | None = None
        n = 0
        try:
            for part in runs:
                n += 1
                found = found or bool(part.summary.recognised or part.summary.events
                                      or part.has_args)  # (start-up lines: a server log)
                if n == 1:
                    first = part
                    continue
                if n == 2 and first is not None:
                    print(f"{name}: several server runs; one section per run (no number spans "
                          "two runs)")
                    print(section(first))
                print(section(part))
        finally:
            if fh is not None and fh is not sys.stdin.buffer:
                fh.close()
            if n == 1 and first is not None:  # (one file: its summary, as plain or .gz)
                print((f"{name}: 1 run\n" if len(files) > 1 else "") + first.summary.render())
            elif n > 1:
                print(f"\n{name}: {n} server runs")
    if not found:
        print("specmon parse: no SGLang lines found (nor vLLM lines)", file=sys.stderr)
        return NO_LINES
    return 0


def section(p: RunPart) -> str:
    out = ["", "=" * 4 + f" {p.header()}"]
    out += ["  " + x if x else x for x in p.summary.render().splitlines()]
    return "\n".join(out)


# --- parse --runs ---------------------------------------------------------------------------------

def list_runs(files: list[str], as_json: bool) -> int:
    """`specmon parse --runs`: each log's runs, as the session model splits them."""
    from specmon.session.runs import read_runs, run_row, time_break_texts

    damage: CliError | None = None
    listed = 0
    for name in files:
        with LogLines(name) as log:
            state = read_runs(log, name)
        damage = damage or log.error  # the runs before the damage are listed, then it is said
        rows = [run_row(r) for r in state.runs]
        listed += len(rows)
        if as_json:
            for row in rows:
                print(dumps({"file": name, **row}))
            continue
        print(f"{name}: {len(rows)} run{'s' if len(rows) != 1 else ''}")
        for row in rows:
            dp = f", {row['dp_groups']} DP groups" if row['dp_groups'] > 1 else ""
            print(f"  run {row['run']}: {row['start'] or '?'} -> {row['end'] or '?'} "
                  f"({row['start_reason']}; {row['end_reason'] or 'last'}), "
                  f"{row['decode_lines']} decode lines{dp}; {row['args']}")
            for b in row["by_running_req"]:
                acc = b["accept_len_median"]
                print(f"    #running-req {b['running_req']}: median {b['median_tok_s']:.2f} tok/s, "
                      f"p10-p90 {spread_text(b['p10'], b['p90'])}, n {b['n']}"
                      + ("" if acc is None else f", accept len {acc:.2f}"))
            for text in time_break_texts(row["time_segments"], None):  # windows restart there
                print(f"    {text}")
        if log.error is not None and not as_json:
            print("  (the rest of the file could not be read: the error follows)")
    if damage is not None:
        raise damage
    if not listed:  # as parse and parse --json: no SGLang (nor vLLM) line in any input
        print("specmon parse: no server run found (no SGLang or vLLM lines)", file=sys.stderr)
        return NO_LINES
    return 0

