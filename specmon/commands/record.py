"""`specmon record TARGET... --out FILE.jsonl`: the live path without a UI.

The same HostFeeds and session model as `connect` (one host is a fleet of one): connects to
each TARGET (`local`, `[USER@]HOST[:PORT]`, an ssh_config alias or a [hosts.NAME] of the
config), finds the SGLang and vLLM servers (or takes --log NAME=PATH), tails their logs and writes one
JSON object per received line: {"server", "path", "offset", "line", "received_at", "record",
"host"} ("skipped": bytes not read before it, on the first line after a run's unread middle;
"lost": bytes written while disconnected and never read, on the first line after them),
and one per GPU poll: {"gpus": [...], "received_at"}, flushed as it goes. Ends cleanly on
SIGINT/SIGTERM or after --duration seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from specmon.commands.hostargs import (
    HostPlan,
    default_baselines,
    listen_from_args,
    plans_from_args,
    print_notes,
)
from specmon.commands.options import add_config, add_hosts
from specmon.errors import CliError
from specmon.hosts import HostError
from specmon.hosts.base import ConnectionState
from specmon.jsonout import dumps_line
from specmon.parse.gpu_sample import GpuSample
from specmon.parse.sglang import EventRecord, Record, parse_line
from specmon.redact import redact_obj, redact_text
from specmon.sources.tail import LogLine
from specmon.textsafe import json_safe

if TYPE_CHECKING:
    from specmon.session.fleet import FleetSession


DRAIN_S = 0.7  # at most this long writing what was received when told to stop (SIGTERM: 1 s)


def _log(msg: str) -> None:
    print(f"specmon record: {msg}", file=sys.stderr, flush=True)


def parse_record(text: str) -> dict[str, Any] | None:
    """The parsed record as JSON, or None for lines the parser does not use."""
    try:
        rec = parse_line(text)
    except Exception:  # parse_line promises not to raise; a recording must survive anyway
        return None
    return rec.to_json() if rec is not None else None


_UNPARSED: Any = object()


@lru_cache(maxsize=8)
def _micros(t: float) -> float:
    """round(t, 6): 0.74 us a call (it goes through the decimal string), paid per row, while the
    lines of one agent message share one receive time."""
    return round(t, 6)


def line_json(ev: LogLine, record: Record | None = _UNPARSED, *, server: str | None = None,
              host: str | None = None, whole: bool = False) -> str:
    """One JSONL row; the line is redacted (a recording is a way out like any export). `record`
    is what the feed already parsed from the line (each line is parsed once); a line that
    redaction changed is parsed again from its redacted text, so no secret reaches the file
    by either field. `whole`: the parser read every byte of the line as a known stats field
    (`parse_known`), so it holds no free text to redact (the redaction rules cost more than
    the parse)."""
    text = ev.text if whole and record is not _UNPARSED else redact_text(ev.text)
    if record is _UNPARSED or text != ev.text:
        rec = parse_record(text)
    else:
        rec = record.to_json() if record is not None else None
    obj: dict[str, Any] = {
        "server": ev.server if server is None else server,
        "path": ev.path,
        "offset": ev.offset,
        "line": text,
        "received_at": _micros(ev.received_at),
        "record": rec,
    }
    if ev.skipped:  # the run's log before this line was not read (history after the head)
        obj["skipped"] = ev.skipped
    if ev.lost:  # bytes written while disconnected, never read (in a copytruncate's copy)
        obj["lost"] = ev.lost
    if host is not None:
        obj["host"] = host
    return dumps_line(obj)


def _fleet_line_json(host: str, ev: LogLine, rec: Record | None, whole: bool,
                     multi: bool) -> str:
    if not multi:  # (the host too: export names the snapshot's host by it)
        return line_json(ev, rec, host=host, whole=whole)
    return line_json(ev, rec, server=f"{host}/{ev.server}", host=host, whole=whole)


def gpu_json(host: str, samples: list[GpuSample], multi: bool) -> str:
    """One GPU poll as a record row (`specmon export` reads it; it downsamples long runs)."""
    t = max((g.ts for g in samples if g.ts is not None), default=time.time())
    obj: dict[str, Any] = {"gpus": [g.to_json() for g in samples], "received_at": round(t, 6)}
    if multi:
        obj["host"] = host
    return dumps_line(obj)


class RecordOut:
    """The --out file, whole rows only. Rows are buffered and written in batches (a write per
    row costs more than the row at 20k lines/s; `flush` runs every 0.1 s and at the end); a
    failed write (disk full) is cut back to the last whole row, so the file never ends in a
    torn row, and `error` says so in one line (recording then stops)."""

    FLUSH_BYTES = 1 << 18

    def __init__(self, fd: int, path: str) -> None:
        self.fd = fd
        self.path = path
        self.good = os.lseek(fd, 0, os.SEEK_END)  # the size after the last whole row
        self.buf: list[str] = []
        self.size = 0
        self.rows = 0
        self.error: str | None = None
        self.failed = asyncio.Event()

    def write(self, row: str) -> None:
        if self.error is not None:
            return
        row = json_safe(row)  # every row (lines, GPU names): `tail -f` gets no C1 or bidi
        self.buf.append(row)
        self.size += len(row) + 1
        if self.size >= self.FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        if not self.buf or self.error is not None:
            return
        data = ("\n".join(self.buf) + "\n").encode("utf-8", "replace")
        n = len(self.buf)
        self.buf, self.size = [], 0
        view, done = memoryview(data), 0
        try:
            while done < len(data):
                done += os.write(self.fd, view[done:])
        except OSError as exc:
            kept = data.rfind(b"\n", 0, done) + 1  # the rows of this batch that went whole
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, self.good + kept)  # no torn row: back to a whole one
            went = data.count(b"\n", 0, kept)
            self.rows += went
            self.error = (f"cannot write {self.path}: {exc.strerror or exc}; stopped, the file "
                          f"ends at its last whole row ({self.rows} rows written, the last "
                          f"{n - went} received were not): free space and record again")
            self.failed.set()
            return
        self.good += len(data)
        self.rows += n


def open_out(path: str, *, append: bool, force: bool) -> int:
    """The --out file's descriptor: never through a symbolic link unless `force` (another user
    may have planted one where the file goes); with `append`, a torn last row (a writer killed
    mid-row) is cut off first and said, so new rows do not glue onto it."""
    if path.endswith(".gz"):  # (it wrote plain text under a .gz name)
        raise CliError(f"--out {path}: record writes plain JSON lines, not gzip; name a plain "
                       "file (gzip it afterwards: export and report read .gz)")
    flags = (os.O_RDWR if append else os.O_WRONLY) | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
    if not force:
        flags |= getattr(os, "O_NOFOLLOW", 0)
        from specmon.export.snapshot import symlink_refusal  # (export's and report's words)

        refusal = symlink_refusal(path, "--out ")
        if refusal is not None:
            raise CliError(refusal)
    try:
        fd = os.open(path, flags | (0 if append else os.O_TRUNC), 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise CliError(f"--out {path} is a symbolic link: not writing through it; name the "
                           "file itself, or --force") from None
        raise CliError(f"cannot write {path}: {exc.strerror}") from None
    if append:
        try:
            if (head := os.pread(fd, 2, 0)) and head[:1] != b"{":
                os.close(fd)  # (the torn-row repair cut a gzip record file to 0 bytes)
                what = "gzip-compressed" if head == b"\x1f\x8b" else "no specmon record file"
                raise CliError(f"--append: {path} is {what} (record files are JSON lines, each "
                               "a {...} row): not appending to it; name a new file")
            _repair_torn_tail(fd, path)
        except OSError as exc:
            os.close(fd)
            raise CliError(f"--append: cannot repair the torn last row of {path}: "
                           f"{exc.strerror}; not appending") from None
    return fd


def _repair_torn_tail(fd: int, path: str) -> None:
    """Cut a last row that has no newline (written by a writer that was killed or ran out of
    space) back to the end of the last whole row, and say how many bytes went."""
    size = os.lseek(fd, 0, os.SEEK_END)
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    pos, step = size, 1 << 16
    while pos > 0:  # back to the last newline, a block at a time
        start = max(0, pos - step)
        nl = os.pread(fd, pos - start, start).rfind(b"\n")
        if nl >= 0:
            pos = start + nl + 1
            break
        pos = start
    os.ftruncate(fd, pos)
    _log(f"--append: {path} ended in a torn row ({size - pos} bytes after its last whole row, "
         "from a writer that was stopped mid-row): cut it off before appending")


def alert_line(fleet: FleetSession, host: str, server: str, a: Any, multi: bool) -> str | None:
    """The stderr line of an alert change, or None: by the rule the screen notifies by
    (`should_notify`: once when raised, once when cleared), so an alert raised and cleared
    while the history was read (never seen raised) is not said "cleared"."""
    if not fleet.should_notify(host, server, a):
        return None
    name = f"{host}/{server}" if multi else server
    return (f"{name}: {'cleared: ' if a.cleared else a.level + ': '}{a.text}"
            + "".join(f"; cause: {c}" for c in a.causes))


def stop_line_text(host: str, server: str, rec: EventRecord) -> str:
    """What `record` says of a log's graceful-stop line (its run ended there), as the feed's
    exit watch says a discovered process's exit: a server tailed by --log has no other."""
    when = rec.timestamp or rec.time_of_day
    return (f"{host}: {server}: its log says the server stopped"
            + (f" at {when}" if when else "")
            + f" (Finished server process [{rec.data.get('pid')}]): its run ended")


def said_state(state: ConnectionState) -> str:
    """A host's state in a line of its own (a retry says why: the panel shows the reason
    beside `describe()`, a headless line had none)."""
    why = f" ({state.reason})" if state.state == "reconnecting" and state.reason else ""
    return state.describe() + why


class _LoggingSink:
    """The session model's events, plus one stderr line for what a headless user must know
    (connection changes, discovery, notices, files that cannot be read)."""

    def __init__(self, fleet: FleetSession, log: Callable[[str], None],
                 row: Callable[[str, str, dict[str, Any]], None] | None = None) -> None:
        self.fleet = fleet
        self.log = log
        self.row = row  # (host, server, event row): the events a report must replay too
        self.connected: set[str] = set()  # hosts that were connected at some point
        self._gpu_said: dict[str, str | None] = {}  # the GPU error said last, per host

    def server_probe(self, host: str, server: str, probe: dict[str, Any],
                     running: bool = False, t: float | None = None) -> None:
        self.fleet.server_probe(host, server, probe, running, t)
        if self.row is not None:
            self.row(host, server, {"probe": redact_obj(probe), "running": running})

    def server_exited(self, host: str, server: str, code: int | None) -> None:
        self.fleet.server_exited(host, server, code)
        if self.row is not None:
            self.row(host, server, {"exit": code})

    def server_pids(self, host: str, server: str, pids: Sequence[int]) -> None:
        self.fleet.server_pids(host, server, pids)
        if self.row is not None:
            self.row(host, server, {"pids": sorted(pids)})

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fleet, name)

    def host_state(self, host: str, state: ConnectionState) -> None:
        prev = self.fleet.host(host).state
        self.fleet.host_state(host, state)
        if (prev.state, prev.reason) != (state.state, state.reason) and state.state != "closed":
            self.log(f"{host}: {said_state(state)}")
        if state.state == "connected":
            self.connected.add(host)

    def gpus(self, host: str, samples: Sequence[GpuSample], error: str | None = None) -> None:
        """The panel shows why a host gives no GPU data; headless, one line says it (and one
        when the data comes back), never once a poll."""
        self.fleet.gpus(host, samples, error)
        said = self._gpu_said.get(host)
        if error and error != said:
            self.log(f"{host}: no GPU data: {error}; the logs are still recorded")
            self._gpu_said[host] = error
        elif samples and said:
            self.log(f"{host}: GPU data again ({len(samples)} GPU(s))")
            self._gpu_said[host] = None

    def declare_server(self, host: str, server: str, role: str | None, path: str | None) -> None:
        self.fleet.declare_server(host, server, role, path)
        self.log(f"{host}: {server}: tailing {path}" + (f" ({role})" if role else ""))

    def notice(self, host: str, server: str, text: str) -> None:
        self.fleet.notice(host, server, text)
        self.log(f"{host}: {text}" if server == "*" else f"{host}: {server}: {text}")

    def tail_missing(self, host: str, server: str, path: str, reason: str) -> None:
        self.fleet.tail_missing(host, server, path, reason)


async def record_fleet(plans: list[HostPlan], out: RecordOut, *, listen: tuple[str, int] | None,
                       duration: float | None = None, history_lines: int | None = 2000,
                       stop: asyncio.Event | None = None, baselines: Any = None,
                       gpu_retry_s: float = 10.0) -> int:
    """1..N hosts (and /metrics): every received line and GPU poll into `out`; servers named
    `host/server` (with a "host" key) when there is more than one host."""
    from specmon.feeds.host import HostFeed, HostFeeds
    from specmon.session.fleet import FleetSession

    stop = stop or asyncio.Event()
    multi = len(plans) > 1
    fleet = FleetSession([p.host.name for p in plans], baselines=baselines)
    count = 0

    def tap(host: str, ev: LogLine, rec: Record | None, whole: bool) -> None:
        nonlocal count
        out.write(_fleet_line_json(host, ev, rec, whole, multi))
        count += 1
        if isinstance(rec, EventRecord) and rec.kind == "exit":
            _log(stop_line_text(host, ev.server, rec))
        if ev.skipped:
            name = ev.server if not multi else f"{host}/{ev.server}"
            _log(f"{name}: the history starts {ev.skipped:,} bytes after the run's start-up "
                 "lines: its lines between them are not recorded, and its figures will cover "
                 "the lines read (--whole-file records the whole log)")

    def gpu_tap(host: str, samples: list[GpuSample]) -> None:
        if samples:
            out.write(gpu_json(host, samples, multi))

    feed = HostFeeds([HostFeed(p.host, p.specs, history_lines=history_lines, python=p.python,
                               tap=tap, gpu_tap=gpu_tap, gpu_retry_s=gpu_retry_s,
                               all_users=p.all_users)
                      for p in plans])
    server = None
    if listen is not None:
        from specmon.export.prometheus import registry_for, serve

        try:
            server = await serve(registry_for(fleet), *listen)
        except OSError as exc:
            raise CliError(f"--prometheus: cannot listen on {listen[0]}:{listen[1]}: "
                           f"{exc.strerror or exc}") from None
        _log(f"Prometheus metrics on http://{server.host}:{server.port}/metrics")
    def alert(host: str, server: str, a: Any) -> None:  # drift on a stored baseline, headless
        line = alert_line(fleet, host, server, a, multi)
        if line is not None:
            _log(line)

    fleet.alert_listeners.append(alert)

    def event_row(host: str, server: str, obj: dict[str, Any]) -> None:
        obj.update(server=f"{host}/{server}" if multi else server,
                   received_at=round(time.time(), 6), **({"host": host} if multi else {}))
        out.write(dumps_line(obj))

    sink = _LoggingSink(fleet, _log, event_row)
    task = asyncio.create_task(feed.run(sink))
    waiter = asyncio.create_task(stop.wait())
    failed = asyncio.create_task(out.failed.wait())

    async def tick() -> None:
        n, said = 0, False
        while True:
            out.flush()
            if n % 10 == 0:
                try:
                    fleet.tick()
                except Exception as exc:  # a bug in the rules must not stop the flushes:
                    if not said:  # the task died unseen and rows waited in memory till exit
                        said = True
                        _log(f"internal error in the alert rules ({type(exc).__name__}: "
                             f"{exc}); alerts are off, every line is still recorded")
            n += 1
            await asyncio.sleep(0.1)

    ticker = asyncio.create_task(tick())
    try:
        await asyncio.wait({task, waiter, failed}, timeout=duration,
                           return_when=asyncio.FIRST_COMPLETED)
        if task.done() and not failed.done():  # every host gave up (refused key or login)
            bad = [f"{h}: {hv.state.describe()}" for h, hv in fleet.hosts.items()]
            raise CliError("no host could be watched: " + "; ".join(bad))
        if not failed.done():  # stopped: the lines already received are written, not dropped
            await feed.drain(DRAIN_S)
    finally:
        for t in (task, waiter, ticker, failed):
            t.cancel()
        for t in (task, waiter, ticker, failed):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        out.flush()
        if server is not None:
            await server.close()
    if out.error is not None:
        raise CliError(out.error)
    if multi:  # (one host that never connects is the command's error, said above)
        for h in (p.host.name for p in plans if p.host.name not in sink.connected):
            _log(f"{h}: never connected during the recording ({said_state(fleet.host(h).state)}"
                 "): nothing of it is in the file")
    unwritten = feed.lines_received() - count
    if unwritten > 0:  # (the drain's deadline ran out first: said, never silent)
        _log(f"stopped with {unwritten} received line(s) not written (the {DRAIN_S:g} s to write "
             "them ran out): the recording ends at its last row's offset")
    return count


async def _main(args: argparse.Namespace, plans: list[HostPlan],
                listen: tuple[str, int] | None) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        if len(plans) == 1:  # one host: a refused key or login is the CLI error (one line)
            try:
                await plans[0].host.connect()
            except HostError as exc:
                raise CliError(str(exc)) from None
            print_notes(plans[0].host)
        fd = open_out(args.out, append=args.append, force=args.force)
        t0 = time.monotonic()
        try:
            n = await record_fleet(plans, RecordOut(fd, args.out), listen=listen,
                                   duration=args.duration,
                                   history_lines=None if args.whole_file else args.history,
                                   stop=stop, baselines=default_baselines(_log))
        finally:
            os.close(fd)
        _log(f"{n} lines from {len(plans)} host(s) in {time.monotonic() - t0:.1f}s -> {args.out}")
        return 0
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        for p in plans:
            with contextlib.suppress(Exception):
                await p.host.close()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Connect to TARGET, find its SGLang and vLLM servers (or use --log) and write one JSON "
                     'object per received log line: {"server","path","offset","line","received_at","host",'
                     '"record"}. Stops on Ctrl-C, SIGTERM or after --duration.')
    add_hosts(p)
    p.add_argument("--out", required=True, metavar="FILE.jsonl", help="output file")
    p.add_argument("--append", action="store_true",
                   help="append to --out instead of replacing it (a torn last row is cut off "
                   "first, and said)")
    p.add_argument("--force", action="store_true",
                   help="write --out even when it is a symbolic link (refused otherwise)")
    p.add_argument("--duration", type=float, metavar="SECONDS", help="stop after this long")
    add_config(p, "its [hosts.NAME] are recorded when no TARGET is given")


def run(args: argparse.Namespace) -> int:
    if args.duration is not None and not 0 < args.duration < float("inf"):  # NaN fails too
        raise CliError(f"--duration must be a positive number of seconds, got {args.duration}")
    if args.history < 0:
        raise CliError(f"--history must be >= 0, got {args.history}")
    listen = listen_from_args(args)
    plans = plans_from_args(args)
    return asyncio.run(_main(args, plans, listen))
