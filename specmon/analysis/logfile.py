"""SGLang log files read offline: FILE, '-' or .gz into JSON rows (`json_rows`) or a per-batch-size
`LogSummary` (`summarise`, in parallel workers for large files).

The one module of analysis/ that reads files: the offline commands (`parse`, `check`,
`baseline record`) all read logs through it, so a gzip, stdin or damaged file behaves the same
in each; everything it computes is the pure `parse/` and `LogSummary` code.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import gzip
import io
import os
import re
import signal
import stat
import struct
import sys
import zlib
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, BinaryIO, cast

from specmon.analysis.logsummary import LogSummary
from specmon.errors import CliError
from specmon.jsonout import dumps_line
from specmon.parse.fastscan import scan_buffer
from specmon.parse.sglang import BatchRecord, parse_known, parse_line

CHUNK = 64 * 1024 * 1024
READ = 1024 * 1024
PARALLEL_MIN = 32 * 1024 * 1024  # below this, starting workers costs more than it saves
MAX_LINE = 1 << 20  # longer lines are cut with a marker, as the live path (hosts/agent.py) does
NO_LINES = 3  # exit status when no input held a single SGLang line
# what reading a damaged file can raise: OSError (BadGzipFile, CRC), EOFError (truncated gzip),
# zlib.error (corrupt deflate data)
READ_ERRORS = (OSError, EOFError, zlib.error)


def cut_marker(kept: int, full: int | None) -> bytes:
    """The marker a cut line ends with (the live agent's words; full None: length unknown)."""
    of = f"of {full}" if full is not None else "of more"
    return f" \u2026[specmon: line cut at {kept} {of} bytes]".encode()


def cr_lines(line: bytes) -> list[bytes]:
    """A line that holds lone CRs (a log written with CR-only line endings, or progress bars)
    as the lines they end, each ending in b"\n"; CRLF is one line end."""
    body = line[:-1] if line.endswith(b"\n") else line
    if body.endswith(b"\r"):
        body = body[:-1]
    if b"\r" not in body:
        return [line]
    return [part + b"\n" for part in body.split(b"\r")]


def capped_lines(fh: BinaryIO) -> Iterator[bytes]:
    """Lines of a binary stream, each at most MAX_LINE bytes (a longer one is cut with a marker
    and the rest of it skipped), so one 100 MB line costs 1 MiB, not 600 MB. A lone CR ends a
    line too (CR-only line endings were read as one line)."""
    while True:
        line = fh.readline(MAX_LINE + 1)
        if not line:
            return
        if len(line) > MAX_LINE and not line.endswith(b"\n") and b"\r" in line:
            yield from _any_ends(fh, line)  # CR-only line endings: no newline in sight
            return
        if len(line) <= MAX_LINE or line.endswith(b"\n"):
            if b"\r" in line:
                yield from cr_lines(line)
            else:
                yield line
            continue
        full = len(line)
        while True:  # skip to the end of this line
            rest = fh.readline(MAX_LINE)
            if b"\r" in rest:  # it may end at a lone CR: lines after it are not skipped
                yield from _any_ends(fh, rest, line[:MAX_LINE], full)
                return
            full += len(rest)
            if not rest or rest.endswith(b"\n"):
                break
        yield line[:MAX_LINE] + cut_marker(MAX_LINE, full - (1 if rest.endswith(b"\n") else 0)) \
            + b"\n"


_EOL = re.compile(rb"\r\n|\r|\n")


def _any_ends(fh: BinaryIO, buf: bytes, kept: bytes | None = None,
              skipped: int = 0) -> Iterator[bytes]:
    """`capped_lines` from `buf` (read from `fh`) on, where lines may end at a lone CR far from
    any newline: each line ends at LF, CRLF or CR, is yielded ending in b"\n", cut at MAX_LINE.
    `kept`: the head of a line longer than MAX_LINE whose rest is being skipped (`skipped`: its
    length so far)."""
    eof = False
    while True:
        if not eof:
            more = fh.read(READ)
            eof = not more
            buf += more
        pos = 0
        for m in _EOL.finditer(buf):
            if m.end() == len(buf) and m.group() == b"\r" and not eof:
                break  # (a CR that ends what is read may be a CRLF's first half)
            line = buf[pos:m.start()]
            if kept is not None:
                yield kept + cut_marker(MAX_LINE, skipped + len(line)) + b"\n"
                kept = None
            elif len(line) > MAX_LINE:
                yield line[:MAX_LINE] + cut_marker(MAX_LINE, len(line)) + b"\n"
            else:
                yield line + b"\n"
            pos = m.end()
        buf = buf[pos:]
        hold = b"\r" if buf.endswith(b"\r") and not eof else b""  # (a line end, read later)
        body = len(buf) - len(hold)
        if kept is None and body > MAX_LINE:
            kept, skipped, buf = buf[:MAX_LINE], body, hold
        elif kept is not None:
            skipped += body
            buf = hold
        if eof:
            if kept is not None:
                yield kept + cut_marker(MAX_LINE, skipped) + b"\n"
            elif buf:
                yield buf
            return


class PartialRead(CliError):
    """A read error part-way through a file; carries the summary of what was read."""

    def __init__(self, message: str, summary: LogSummary) -> None:
        super().__init__(message)
        self.summary = summary


# A .gz log may inflate to this many bytes, or to GZIP_RATIO times its own size where that is
# more: real logs compress 10-30x, deflate's ceiling is ~1030x (a gzip bomb).
GZIP_FLOOR = 4 << 30
GZIP_RATIO = 200


class _Inflated(io.RawIOBase):
    """A gzip stream that stops with a read error (OSError) past `limit` inflated bytes."""

    def __init__(self, gz: gzip.GzipFile, limit: int) -> None:
        super().__init__()
        self._gz = gz
        self._limit = limit
        self._n = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        data = self._gz.read1(len(b))  # (one inflate step: damage after it loses no line before)
        n = len(data)
        b[:n] = data
        self._n += n
        if self._n > self._limit:
            raise OSError(f"inflates past {self._limit / (1 << 30):.1f} GiB "
                          f"(over {GZIP_RATIO}x its size: a gzip bomb?); the rest is not read")
        return n

    def close(self) -> None:
        self._gz.close()
        super().close()


_NOT_LOGS = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"))


def open_input(name: str) -> BinaryIO:
    """A binary stream for FILE, '-' (stdin) or a .gz file (detected by its magic bytes). A
    device or socket is refused (/dev/zero never ends); a FIFO is read as stdin is."""
    size = 0
    if name == "":  # (open("") says "no such file", which hides that the name is empty)
        raise CliError("empty file name: expected a log file, or - for stdin")
    if name == "-":
        raw: BinaryIO = sys.stdin.buffer
    else:
        with contextlib.suppress(OSError):  # (open() below says what is wrong)
            st = os.stat(name)
            mode, size = st.st_mode, st.st_size if stat.S_ISREG(st.st_mode) else 0
            for test, what in _NOT_LOGS:
                if test(mode):
                    raise CliError(f"{name}: is {what}, expected a log file")
        try:
            raw = open(name, "rb")  # noqa: SIM115 - returned to the caller
        except FileNotFoundError:
            raise CliError(f"{name}: no such file") from None
        except IsADirectoryError:
            raise CliError(f"{name}: is a directory, expected a log file") from None
        except PermissionError:
            raise CliError(f"{name}: permission denied") from None
        except OSError as exc:
            raise CliError(f"{name}: cannot open ({exc.strerror})") from None
    buffered = raw if isinstance(raw, io.BufferedReader) else io.BufferedReader(cast(Any, raw))
    if buffered.peek(2)[:2] == b"\x1f\x8b":
        gz = gzip.GzipFile(fileobj=buffered)
        limit = max(GZIP_FLOOR, GZIP_RATIO * size)
        return io.BufferedReader(_Inflated(gz, limit), READ)
    return buffered


JSON_PIECE = 4 << 20  # bytes of log per piece that a worker of `parse --json` turns into rows
JSON_ROWS = 512  # rows per chunk handed to the writer
JsonChunk = tuple[bytes, int, int]  # ASCII rows (each ending in "\n"), records, invalid values


class _InOrder(Exception):
    """A piece holds a line whose record depends on the lines before it (vLLM: V0's cumulative
    counts, the engine check): it is read in order, in the parent."""


def json_rows(name: str, kind: str) -> Iterator[JsonChunk]:
    """`parse --json` of FILE, in file order, JSON_ROWS rows at a time: a record per line that
    holds one ("file", "line_no" and its `to_json`), only `kind`'s unless "all"; "found" counts
    every record. A large plain file is cut into line-aligned pieces that forked workers (the
    CPUs this process may use) turn into rows while this process writes them out in order: row
    for row what one process writes. Stdin, gzip, a file with CRs, and from the first piece
    holding a vLLM line on (its records depend on the lines before), line by line here."""
    plan = _json_plan(name) if name != "-" else None
    if plan is not None:
        yield from _json_parallel(name, kind, *plan)
        return
    yield from _json_in_order(name, kind, 0, 1, None)


def _json_in_order(name: str, kind: str, start: int, first_line: int,
                   seen_at: int | None) -> Iterator[JsonChunk]:
    """Rows from byte `start` (line `first_line`) to the end, read in order here. `seen_at`: the
    line of the first SGLang record before `start` (the engine check goes on from it)."""
    from specmon.parse.vllm import EngineGuard  # (vLLM's parser: only when a log needs it)

    fh = open_input(name)
    guard = EngineGuard(name)
    if seen_at is not None:
        guard.engine, guard.first_line = "sglang", seen_at
    try:
        if start:
            fh.seek(start)
        lines = enumerate(read_lines(fh, name, first_line - 1), first_line)
        yield from _json_lines(lines, name, kind, guard, in_order=True)
    finally:
        if fh is not sys.stdin.buffer:
            fh.close()


def _json_lines(lines: Iterator[tuple[int, bytes]], name: str, kind: str, guard: Any,
                in_order: bool) -> Iterator[JsonChunk]:
    from specmon.parse.vllm import V0Differ, VllmEventRecord, engine_of
    from specmon.redact import redact_obj

    v0 = V0Differ()  # vLLM V0 prints cumulative counts: per-interval ones from two lines
    rows: list[str] = []
    found = invalid = 0
    head = '{"file":' + dumps_line(name, ascii_only=True) + ',"line_no":'  # (a row's first keys)
    try:
        for line_no, raw in lines:
            rec, whole = parse_known(raw)
            if rec is None:
                continue
            if not in_order and engine_of(rec) == "vllm":
                raise _InOrder(line_no)  # (a worker's piece holds SGLang's lines only)
            guard.check(rec, line_no)
            if isinstance(rec, VllmEventRecord) and rec.kind == "spec":
                v0.apply(rec)
            found += 1
            if kind != "all" and rec.kind != kind:
                continue
            obj = rec.to_json()
            if not whole:  # free text of the line (server_args, NCCL values) is a way out
                obj = redact_obj(obj)
            if "invalid" in obj:
                invalid += len(obj["invalid"])
            if "file" in obj or "line_no" in obj:  # a log line's own field of that name: the
                obj = {k: v for k, v in obj.items() if k not in ("file", "line_no")}  # row's win
            # {"file": ..., "line_no": N, **record}, without building that dict
            rows.append(f"{head}{line_no},{dumps_line(obj, ascii_only=True)[1:]}")
            if len(rows) >= JSON_ROWS:
                yield _joined(rows), found, invalid
                rows.clear()
                found = invalid = 0
    except _InOrder:
        raise  # (a worker's piece: none of it is written, the parent reads it in order)
    except Exception:  # a read error, mixed engines: what was read before it is written first
        if rows or found:
            yield _joined(rows), found, invalid
        raise
    if rows or found:
        yield _joined(rows), found, invalid


def _joined(rows: list[str]) -> bytes:
    return ("\n".join(rows) + "\n").encode("ascii") if rows else b""


def is_regular(name: str) -> bool:
    """Whether FILE is a regular file, asked without opening it: a probe that opens a FIFO
    waits for a writer, and its close takes that writer's data from the read that follows."""
    try:
        return stat.S_ISREG(os.stat(name).st_mode)
    except (OSError, ValueError):
        return False


def _json_plan(name: str) -> tuple[int, list[tuple[int, int, int]]] | None:
    """(workers, pieces as (start, end, first line number)) for a large plain file without CRs
    (a lone CR ends a line: counted line by line), else None. Each piece ends at a line end and
    holds at most 4 JSON_PIECE bytes (a longer line: read in order, in bounded memory)."""
    workers = min(_usable_cpus(), 8)
    if workers < 2 or not hasattr(os, "fork") or not is_regular(name):
        return None
    try:
        fh = open(name, "rb")  # noqa: SIM115 - closed below
    except OSError:
        return None  # the in-order path says what is wrong in its own words
    with fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size < 2 * JSON_PIECE:
            return None
        if fh.read(2) == b"\x1f\x8b":
            return None
        fh.seek(0)
        pieces: list[tuple[int, int, int]] = []
        start, line, carry = 0, 1, b""
        while True:
            block = fh.read(JSON_PIECE)
            if b"\r" in block:
                return None
            data = carry + block
            if not data:
                break
            cut = data.rfind(b"\n") + 1 if block else len(data)  # (the end: a last line
            if cut == 0:  # without its newline is still a line)
                if len(data) > 4 * JSON_PIECE:
                    return None
                carry = data
                continue
            pieces.append((start, start + cut, line))
            line += data.count(b"\n", 0, cut)
            start += cut
            carry = data[cut:]
            if not block:
                break
    return (workers, pieces) if len(pieces) > 1 else None


def _json_parallel(name: str, kind: str, workers: int,
                   pieces: list[tuple[int, int, int]]) -> Iterator[JsonChunk]:
    """Forked workers take every workers-th piece and write its rows to their pipe as one frame
    (status, records found, invalid values, first record's line, length); this process reads
    the frames in piece order (a worker is at most one frame ahead, blocked on its pipe). A
    piece a worker could not do (a vLLM line, a read error, a dead worker) and all after it
    are read in order here."""
    workers = min(workers, len(pieces))
    children: list[tuple[int, BinaryIO]] = []
    for w in range(workers):
        r, wfd = os.pipe()
        _widen(wfd)
        pid = os.fork()
        if pid == 0:  # the worker: rows of its pieces, then leave without any cleanup
            code = 0
            try:
                os.close(r)
                for _, other in children:
                    other.close()  # (so that a closed read end stops its writer: EPIPE)
                _json_worker(name, kind, pieces[w::workers], wfd)
            except BaseException:  # noqa: BLE001 - the parent reads this piece itself
                code = 1
            finally:
                os._exit(code)
        os.close(wfd)
        children.append((pid, os.fdopen(r, "rb")))
    seen_at: int | None = None
    rest: tuple[int, int] | None = None  # (start, first line) of what is read in order here
    try:
        for i, (start, _, first) in enumerate(pieces):
            pipe = children[i % workers][1]
            head = pipe.read(_FRAME.size)
            status, found, invalid, first_rec, n = (_FRAME.unpack(head) if len(head) == _FRAME.size
                                                    else (1, 0, 0, 0, 0))
            text = pipe.read(n) if status == 0 else b""
            if status != 0 or len(text) != n:
                rest = (start, first)
                break
            if seen_at is None and first_rec:
                seen_at = first_rec
            yield text, found, invalid
    finally:
        for pid, rf in children:
            rf.close()  # a worker still writing gets EPIPE and leaves
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG) == (0, 0):
                    os.kill(pid, signal.SIGKILL)  # our own fork, still running: stopped
                    os.waitpid(pid, 0)
    if rest is not None:
        yield from _json_in_order(name, kind, rest[0], rest[1], seen_at)


def _widen(fd: int) -> None:
    """A pipe of 1 MiB (Linux; the default 64 KiB made a worker and the writer trade turns
    ~550 times for 100k rows)."""
    with contextlib.suppress(AttributeError, OSError):  # (not Linux, or over the user's limit)
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, 1 << 20)


_FRAME = struct.Struct("<BQQQQ")  # status (0: rows follow), found, invalid, first record, length


def _json_worker(name: str, kind: str, mine: list[tuple[int, int, int]], wfd: int) -> None:
    from specmon.parse.vllm import EngineGuard

    with open(name, "rb") as fh, os.fdopen(wfd, "wb") as out:
        for start, end, first in mine:
            fh.seek(start)
            data = fh.read(end - start)
            try:
                if len(data) != end - start:
                    raise _InOrder(first)  # the file changed under us: read in order
                guard = EngineGuard(name)
                parts = list(_json_lines(enumerate(_piece_lines(data), first), name, kind, guard,
                                         in_order=False))
            except _InOrder:
                out.write(_FRAME.pack(1, 0, 0, 0, 0))
                return
            text = b"".join(p[0] for p in parts)
            out.write(_FRAME.pack(0, sum(p[1] for p in parts), sum(p[2] for p in parts),
                                  guard.first_line or 0, len(text)))
            out.write(text)


def _piece_lines(data: bytes) -> Iterator[bytes]:
    """The lines of a piece (no CR in it: `_json_plan`) as `capped_lines` yields them: one split
    in C when no line can be longer than MAX_LINE, else `capped_lines` itself."""
    if _maybe_long_line(data):
        return capped_lines(io.BytesIO(data))
    lines = data.split(b"\n")
    if not lines[-1]:
        lines.pop()  # (the piece ends with its last line's newline)
    return iter(lines)


def read_lines(fh: BinaryIO, name: str, before: int = 0) -> Iterator[bytes]:
    """The capped lines of `fh`; a read error is one line saying after how many lines (`before`:
    lines of the file before where `fh` starts)."""
    n = before
    try:
        for line in capped_lines(fh):
            n += 1
            yield line
    except READ_ERRORS as exc:
        raise CliError(f"{name}: read error after {n:,} lines ({_why(exc)})") from None


class LogLines:
    """The capped lines of a log (FILE, '-' or .gz) for a command that reports what it read
    before damage: iterating stops at a read error, which `error` then holds (one line that says
    after how many lines); the caller prints its result, then the error.

        with LogLines(name) as log:
            state = read_runs(log, name)
        if log.error: ...
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.error: CliError | None = None
        self._fh = open_input(name)

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from read_lines(self._fh, self.name)
        except CliError as exc:
            self.error = exc

    def __enter__(self) -> LogLines:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fh is not sys.stdin.buffer:
            self._fh.close()


def _why(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, EOFError):
        return f"truncated: {text}"
    if isinstance(exc, zlib.error):
        return f"corrupt compressed data: {text}"
    return text


# --- summary ------------------------------------------------------------------------------------

def summarise(name: str) -> LogSummary:
    """FILE's summary with all its runs merged, read as `specmon parse` reads it: a plain file
    cut at its runs as it is summarised (`run_segments`), else in order (stdin, gzip, CRs).
    (The tests and bench/parse_speed.py hold this fast path to the general parser's result.)"""
    segments = run_segments(name) if name != "-" else None
    if segments is not None:
        total = LogSummary()
        for _, part in segments:
            total.merge(part)
        return total
    fh = open_input(name)
    try:
        return _summarise_stream(fh, name)
    finally:
        if fh is not sys.stdin.buffer:
            fh.close()


def _usable_cpus() -> int:
    """CPUs this process may run on (taskset, cgroup cpusets), not all the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def _summarise_file(name: str, start: int, end: int, cutter: _Cutter | None = None
                    ) -> LogSummary:
    """Bytes [start, end) of a regular file, from a line start: one read per chunk, scanned in
    place (no join, no copy); each chunk ends at its last newline and the next read starts
    there. Where a line may be longer than MAX_LINE, `_summarise_stream` takes over (it cuts).
    With a `cutter`, each line that holds RUN_MARK starts a piece of its own (`_Cutter`); the
    summary returned is that of the bytes before the first such line."""
    total = cutter.open if cutter is not None else LogSummary(name=name)

    def take(buf: bytes, cut: int) -> None:  # whole lines buf[:cut]
        if cutter is not None:
            cutter.chunk(buf, cut)
        elif cut:
            total.merge(summarise_buffer(buf, name, cut))

    with open(name, "rb") as fh:
        pos = start
        while pos < end:
            try:
                fh.seek(pos)
                buf = fh.read(min(CHUNK, end - pos))
            except READ_ERRORS as exc:
                raise PartialRead(f"{name}: read error after {total.lines:,} lines "
                                  f"({_why(exc)})", total) from None
            final = pos + len(buf) >= end
            cut = buf.rfind(b"\n") + 1
            if not buf or (cut == 0 and not final) or _maybe_long_line(buf):
                if cutter is not None:
                    raise _Uncut  # (its marks are cut where the in-order read cuts the line)
                return _summarise_stream(_Range(fh, pos, end), name, total)  # type: ignore[arg-type]
            take(buf, cut)
            if final and cut < len(buf):  # the last line, without its newline: still a line
                take(buf[cut:] + b"\n", len(buf) - cut + 1)
                cut = len(buf)
            pos += cut
    return total


Cut = tuple[bytes, LogSummary]  # (a line that holds RUN_MARK, ending in "\n"; its piece)


class _Uncut(Exception):
    """The one-pass cut at RUN_MARK lines gives way to `_searched_segments` (a line longer
    than MAX_LINE, a CR, too many marked lines): it finds them first, then summarises."""


class _Cutter:
    """Cuts a range's chunks before each line that holds RUN_MARK while they are summarised
    (the marks are searched in the chunk already read: ~18 ms a 64 MiB chunk, in the workers,
    where a search of the whole file before them read it twice: 74 ms of a 1M-line parse's
    wall, issue 25).
    The head line is the line as the in-order read yields it: here lines are shorter than
    MAX_LINE, and a CR (a lone one ends a line) makes it give way. A range of one of `shares`
    holds its share of MAX_RUN_HEADS and MAX_HEAD_BYTES (the file's limits hold in memory, not
    only when the shares are joined; past them the searched cut decides)."""

    def __init__(self, name: str, shares: int = 1) -> None:
        self.name = name
        self.open = LogSummary(name=name)  # the piece lines go into now
        self.cuts: list[Cut] = []
        self._held = 0
        self._most_heads = MAX_RUN_HEADS // shares
        self._most_bytes = MAX_HEAD_BYTES // shares

    def chunk(self, buf: bytes, cut: int) -> None:
        """Whole lines buf[:cut] into the open piece and new ones."""
        name = self.name
        if cut == 0:
            return
        if buf.find(b"\r", 0, cut) >= 0:
            raise _Uncut
        m = buf.find(RUN_MARK, 0, cut)
        if m < 0:
            self.open.merge(summarise_buffer(buf, name, cut))
            return
        a = 0
        while m >= 0:
            head = buf.rfind(b"\n", 0, m) + 1
            nl = buf.find(b"\n", m, cut) + 1
            if head > a:
                self.open.merge(summarise_buffer(buf[a:head], name))
            self._held += nl - head
            if len(self.cuts) >= self._most_heads or self._held > self._most_bytes:
                raise _Uncut
            self.open = LogSummary(name=name)
            self.cuts.append((buf[head:nl], self.open))
            a = head
            m = buf.find(RUN_MARK, nl, cut)
        self.open.merge(summarise_buffer(buf[a:cut], name))


def _cut_file(name: str, start: int, end: int, shares: int = 1
              ) -> tuple[LogSummary, list[Cut]]:
    """Bytes [start, end), one of `shares` ranges of the file, summarised and cut before each
    RUN_MARK line (`_Cutter`): (the summary before the first such line, then each line and its
    piece)."""
    cutter = _Cutter(name, shares)
    first = _summarise_file(name, start, end, cutter)
    return first, cutter.cuts


def _maybe_long_line(buf: bytes) -> bool:
    """Whether `buf` may hold a line longer than MAX_LINE: such a line covers a whole aligned
    window of MAX_LINE // 2 bytes with no newline (128 short finds per 64 MiB)."""
    w = MAX_LINE // 2
    return any(buf.find(b"\n", a, a + w) < 0 for a in range(0, len(buf) - w + 1, w))


def _summarise_stream(fh: BinaryIO, name: str, before: LogSummary | None = None) -> LogSummary:
    """Sequential summary in bounded memory; one raw read per block (`read1`), so the data a
    damaged gzip stream yielded before its error (CRC, truncation) is summarised, not lost.
    A line longer than MAX_LINE keeps its first MAX_LINE bytes and a marker. `before`: what
    was read of this file already (its lines count in a read error's message)."""
    total = LogSummary() if before is None else before
    pending: list[bytes] = []
    size = 0
    carry = b""  # the start of the open (unterminated) line after a flush
    open_len = 0  # bytes of the open line read so far
    skipping = 0  # > 0: inside a cut line; its length so far

    def flush(final: bool) -> None:
        nonlocal carry, size
        pending.insert(0, carry)
        buf = b"".join(pending)  # the one copy of a chunk: the scan reads buf[:cut] in place
        pending.clear()
        size = 0
        cut = buf.rfind(b"\n") + 1
        carry = b"" if final else buf[cut:]
        if cut:
            total.merge(summarise_buffer(buf, name, cut))
        if final and cut < len(buf):  # the last line, without its newline: still a line
            total.merge(summarise_buffer(buf[cut:] + b"\n", name))

    read = getattr(fh, "read1", fh.read)
    cr = b""  # a CR that ended the last block: CRLF or a lone CR, the next block says
    while True:
        try:
            block = read(min(READ, MAX_LINE))  # (a line a block holds whole is not too long)
        except READ_ERRORS as exc:
            if skipping:
                carry += cut_marker(MAX_LINE, None)
            flush(final=True)
            raise PartialRead(f"{name}: read error after {total.lines:,} lines ({_why(exc)})",
                              total) from None
        if not block:
            if cr:
                pending.append(b"\n")
            break
        if cr or b"\r" in block:  # a lone CR ends a line: CR-only logs are not one line
            block = cr + block
            cr = b"\r" if block.endswith(b"\r") else b""
            block = block[:len(block) - len(cr)].replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            if not block:
                continue
        if skipping:
            nl = block.find(b"\n")
            if nl < 0:
                skipping += len(block)
                continue
            carry += cut_marker(MAX_LINE, skipping + nl)
            skipping = 0
            block = block[nl:]  # from the newline that ends the cut line
        elif (nl := block.find(b"\n")) >= 0 and open_len + nl > MAX_LINE:
            # the open line ends in this block, longer than MAX_LINE (it never stood open past
            # MAX_LINE at a block's end: a line of up to ~2 blocks): cut as the in-order read cuts
            flush(final=False)  # (carry is now the open line's start: open_len bytes)
            carry = (carry + block[:MAX_LINE - len(carry)]) + cut_marker(MAX_LINE, open_len + nl)
            block = block[nl:]
        pending.append(block)
        size += len(block)
        last_nl = block.rfind(b"\n")
        open_len = len(block) - last_nl - 1 if last_nl >= 0 else open_len + len(block)
        if size >= CHUNK:
            flush(final=False)
        if open_len > MAX_LINE:
            flush(final=False)  # carry is now the open line: keep its start, skip the rest
            skipping = len(carry)
            carry = carry[:MAX_LINE]
            open_len = 0
    if skipping:
        carry += cut_marker(MAX_LINE, skipping)
    flush(final=True)
    return total


# vLLM's stats and start-up lines, as three literal-first patterns: sre skips to a literal, where
# one alternation of the five markers made it try every byte (+27% CPU on an SGLang log).
_VLLM_MARKS = (
    re.compile(rb"Avg prompt throughput"),
    re.compile(rb"Spec(?:Decoding metrics|ulative metrics:)"),
    re.compile(rb"LLM (?:engine \(v[^)]*\) with config:|API server(?<=Starting vLLM API server))"),
)


_VLLM_LINE = re.compile(rb"^[^\n]*(?:Avg prompt throughput|SpecDecoding metrics|"
                        rb"Speculative metrics:)[^\n]*", re.M)


class VllmRun:
    """What a vLLM run's summary carries from one piece of its lines to the next (`parse` hands
    a run over in RUN_CHUNK pieces): the spec joiner, primed with the run's config (an F1 line's
    accept length needs k and the method; the summary reads only stats lines), which also keeps
    an engine line at a piece's end for its spec line at the next one's start and V0's
    cumulative counts; and each engine's last line time (the measured stats interval)."""

    def __init__(self, args: dict[str, Any] | None = None) -> None:
        self.args = args or {}
        self.last_t: dict[tuple[int | None, int | None], float] = {}
        self._joiner: Any = None

    def configure(self, args: dict[str, Any]) -> None:
        """The run's config line came (after some of its lines: vLLM prints `non-default
        args` first)."""
        self.args = args
        if self._joiner is not None:
            self._joiner.use_config(args)

    def joiner(self) -> Any:
        if self._joiner is None:
            from specmon.parse.vllm import SpecJoiner

            self._joiner = SpecJoiner()
            self._joiner.use_config(self.args)
        return self._joiner

    def finish(self, s: LogSummary) -> None:
        """The end of the run: an engine line still waiting for its spec line counts now."""
        if self._joiner is not None:
            for r in self._joiner.flush():
                _add_vllm(s, r, self.last_t)


def _add_vllm(s: LogSummary, rec: Any, last_t: dict[tuple[int | None, int | None], float]
              ) -> None:
    """One record of a vLLM log into its summary, with the gap since its engine's last line."""
    s.add_record(rec)
    if not isinstance(rec, BatchRecord) or rec.kind != "decode" or not rec.timestamp:
        return
    t = _stamp(rec.timestamp)
    if t is None:
        return
    key = (getattr(rec, "pid", None), rec.dp_rank)
    prev = last_t.get(key)
    if len(last_t) >= 256 and prev is None:
        last_t.clear()  # bounded: a hostile log cannot grow it
    last_t[key] = t
    if prev is not None and t >= prev:
        s.interval_gaps[round(t - prev, 3)] += 1


@functools.lru_cache(maxsize=256)
def _stamp(ts: str) -> float | None:
    """(Cached: an interval's engine lines share their stamp.)"""
    try:
        return datetime.fromisoformat(ts).timestamp()
    except (ValueError, OverflowError, OSError):
        return None


def _summarise_vllm(buf: bytes, s: LogSummary, run: VllmRun | None = None) -> LogSummary:
    """A vLLM log: its stats lines through the parser, spec lines joined onto their engine's
    line. Only lines with a vLLM stats marker can make a summary record; a buffer that also holds
    SGLang batch lines goes line by line, so the mixed-engines error names the line. `run`: the
    state of the run this buffer is a piece of (its end then leaves a waiting engine line held:
    `VllmRun.finish`)."""
    # imported here: 13 ms of start-up (its patterns) that an SGLang log never needs
    from specmon.parse.vllm import EngineGuard

    guard = EngineGuard(s.name)
    state = run if run is not None else VllmRun()
    joiner = state.joiner()
    last_t = state.last_t
    if b"Decode batch" in buf or b"Prefill batch" in buf:
        lines: Iterator[tuple[int, bytes]] = enumerate(buf.split(b"\n"), 1)
    else:
        lines = ((0, m.group()) for m in _VLLM_LINE.finditer(buf))
    for line_no, line in lines:
        rec = parse_line(line[:MAX_LINE]) if line else None
        guard.check(rec, line_no or None)
        for r in joiner.push(rec):
            _add_vllm(s, r, last_t)
    if run is None:
        state.finish(s)
    s.engine = "vllm"
    if not s.recognised:  # start-up lines only: still a vLLM log, not garbage
        s.events = _count_events(buf)
    return s


DP_PROBE = 8 << 20  # bytes of each chunk searched for a second DP group's lines


def summarise_buffer(buf: bytes, name: str = "log", end: int | None = None,
                     vllm_run: VllmRun | None = None) -> LogSummary:
    """Summary of `buf[:end]`, whole lines each ending in '\\n' (fast path when it is exact).
    `end` spares the caller a copy of its chunk. `vllm_run`: the run a vLLM log's buffer is a
    piece of (its config, and what one piece leaves to the next); the caller ends it."""
    end = len(buf) if end is None else end
    if buf.find(b"\r", 0, end) >= 0 and not any(p.search(buf, 0, end) for p in _VLLM_MARKS):
        # a lone CR ends a line, as in summarise_general (CR-only logs are not one line)
        buf = buf[:end].replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        end = len(buf)
    s = LogSummary(lines=buf.count(b"\n", 0, end), name=name)
    vllm = any(p.search(buf, 0, end) for p in _VLLM_MARKS)
    # data parallel: every DP group (SGLang) or engine (vLLM: Engine 000, 001, ...) prints its
    # own line; a second one shows early (the chunk's head is searched: ~6 ms, not ~45 ms)
    s.dp_groups = buf.find(b"Engine 001:" if vllm else b" DP1 TP", 0, min(end, DP_PROBE)) >= 0
    if vllm:
        return _summarise_vllm(buf if end == len(buf) else buf[:end], s, vllm_run)
    fast = scan_buffer(buf, end)
    if fast is not None:
        s.add_fast(fast, _edge_time(buf, end, forward=True), _edge_time(buf, end, forward=False))
    else:
        whole = buf if end == len(buf) else buf[:end]
        if b"\x00" in whole:  # parse_line drops NULs: "ba\x00tch" is a batch line too
            whole = whole.replace(b"\x00", b"")
        for line in _batch_lines(whole):
            s.add_record(parse_line(line))
    if not s.recognised:  # only needed to tell an SGLang log without batches from garbage
        s.events = _count_events(buf, end)
    return s


def _batch_lines(buf: bytes) -> Iterator[bytes]:
    """The lines of `buf` that hold "batch", each cut at MAX_LINE, without copying the others
    (a buffer with one 100 MB line must not cost another 100 MB)."""
    pos = 0
    n = len(buf)
    while pos < n:
        hit = buf.find(b"batch", pos)
        if hit < 0:
            return
        start = buf.rfind(b"\n", pos, hit) + 1 if hit > pos else pos
        if start == 0 and pos > 0:
            start = pos
        end = buf.find(b"\n", hit)
        if end < 0:
            end = n
        yield buf[start:min(end, start + MAX_LINE)]
        pos = end + 1


_EVENT_MARKS = re.compile(rb"server_args=|The server is fired up|max_total_num_tokens=|"
                          rb"LLM engine \(v[^)]*\) with config:|Starting vLLM API server")


def _count_events(buf: bytes, end: int | None = None) -> int:
    """Start-up lines of SGLang or vLLM (no stats line yet is still a server log, not garbage)."""
    return len(_EVENT_MARKS.findall(buf, 0, len(buf) if end is None else end))


def summarise_general(buf: bytes) -> LogSummary:
    """The reference path: every line through `parse_line` (used to test the fast path)."""
    lines = buf.splitlines()  # \n, \r\n and a lone \r end a line
    s = LogSummary(lines=len(lines))
    for line in lines:
        s.add_record(parse_line(line))
    return s


def _edge_time(buf: bytes, end: int, forward: bool) -> str | None:
    """Timestamp of the first (or last) batch line of `buf[:end]` that carries one, as the
    general path sees it."""
    positions = _forward_marks(buf, end) if forward else _reverse_marks(buf, end)
    for pos in positions:
        start = buf.rfind(b"\n", 0, pos) + 1
        stop = buf.find(b"\n", pos, end)
        rec = parse_line(buf[start:stop if stop >= 0 else end])
        if isinstance(rec, BatchRecord):
            t = rec.timestamp or rec.time_of_day
            if t is not None:
                return t
    return None


def _forward_marks(buf: bytes, end: int) -> Iterator[int]:
    start = 0
    while True:
        d = buf.find(b"Decode batch", start, end)
        p = buf.find(b"Prefill batch", start, d if d >= 0 else end)
        pos = p if p >= 0 else d
        if pos < 0:
            return
        yield pos
        start = buf.find(b"\n", pos, end) + 1  # go on after this line
        if start == 0:
            return


def _reverse_marks(buf: bytes, end: int) -> Iterator[int]:
    while True:
        d = buf.rfind(b"Decode batch", 0, end)
        p = buf.rfind(b"Prefill batch", 0, end)
        pos = max(d, p)
        if pos < 0:
            return
        yield pos
        end = buf.rfind(b"\n", 0, pos)  # go on before this line (one line, even with 2 markers)
        if end < 0:
            return


class _Range:
    """A file's byte range [start, end) as a stream: `_summarise_stream` reads it in blocks,
    so a piece costs its chunk and MAX_LINE of memory whatever its lines' lengths."""

    def __init__(self, fh: BinaryIO, start: int, end: int) -> None:
        fh.seek(start)
        self._fh = fh
        self._left = end - start

    def read1(self, n: int) -> bytes:
        data = self._fh.read(min(n, self._left)) if self._left > 0 else b""
        self._left -= len(data)
        return data

    read = read1


def _line_aligned_bounds(name: str, size: int, pieces: int) -> list[int]:
    bounds = [0]
    with open(name, "rb") as fh:
        for i in range(1, pieces):
            fh.seek(size * i // pieces)
            while True:  # move to the start of the next line (in blocks: lines can be huge)
                block = fh.read(READ)
                nl = block.find(b"\n")
                if nl >= 0 or not block:
                    break
            pos = fh.tell() - (len(block) - nl - 1 if nl >= 0 else 0)
            if bounds[-1] < pos < size:
                bounds.append(pos)
    bounds.append(size)
    return bounds


def _summarise_ranges(name: str, bounds: list[int], workers: int,
                      work: Callable[[str, int, int], Any] | None = None) -> list[Any]:
    """The summary of each line-aligned range [bounds[i], bounds[i+1]) of a regular file, in
    file order. Forked children take contiguous shares of about equal bytes, this process the
    first: plain fork + pipes rather than a multiprocessing pool (no pool start-up is paid, the
    parent works too); each child sends back its (small) summaries and exits. A child that
    fails: its ranges are done here, nothing is lost. `work(name, start, end)` summarises one
    range (`_summarise_file`; `_cut_file` also cuts it at run marks)."""
    import pickle

    work = work or _summarise_file
    ranges = [(a, b) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
    if not hasattr(os, "fork"):
        workers = 1
    span = max(bounds[-1] - bounds[0], 1)
    share: list[list[int]] = [[] for _ in range(workers)]  # range indices of each worker
    for i, (a, _) in enumerate(ranges):
        share[min(workers - 1, (a - bounds[0]) * workers // span)].append(i)
    out: list[Any] = [None] * len(ranges)
    children: list[tuple[int, BinaryIO, list[int]]] = []
    reaped: set[int] = set()
    try:
        _fork_shares(name, ranges, share, children, work)
        for i in share[0]:
            out[i] = work(name, *ranges[i])
        for pid, inp, mine in children:
            data = inp.read()
            inp.close()
            _, status = os.waitpid(pid, 0)
            reaped.add(pid)
            got = pickle.loads(data) if status == 0 and data else None
            for k, i in enumerate(mine):  # (a child died: its share is done here)
                out[i] = got[k] if got is not None else work(name, *ranges[i])
    finally:  # stopped early (SIGINT, SIGTERM, an error): our own forks do not outlive this
        for pid, inp, _ in children:
            inp.close()
            if pid not in reaped:
                with contextlib.suppress(ChildProcessError, ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
    return out


def _fork_shares(name: str, ranges: list[tuple[int, int]], share: list[list[int]],
                 children: list[tuple[int, BinaryIO, list[int]]],
                 work: Callable[[str, int, int], Any]) -> None:
    """A forked child per share after the first (this process's), each sending its ranges'
    summaries back through a pipe; `children` gets (pid, the pipe's read end, its ranges)."""
    import pickle

    for mine in share[1:]:
        if not mine:
            continue
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: summarise, send, and leave without running any cleanup
            code = 0
            try:
                os.close(r)
                parts = [work(name, *ranges[i]) for i in mine]
                with os.fdopen(w, "wb") as pipe:
                    pickle.dump(parts, pipe, protocol=pickle.HIGHEST_PROTOCOL)
            except BaseException:  # noqa: BLE001 - the parent redoes these ranges itself
                code = 1
            finally:
                os._exit(code)
        os.close(w)
        children.append((pid, os.fdopen(r, "rb"), mine))


# --- server runs of a plain file ------------------------------------------------------------

RUN_MARK = b"server_args="  # (a line with it may start a server run)
# vLLM's launch lines: `non-default args:` (API server), then each engine core's config line
VLLM_RUN_MARKS = (b"non-default args:", b"LLM engine (v")
VLLM_HEAD = 1 << 20  # bytes of a file searched for vLLM's lines to tell its engine


def vllm_log(fh: BinaryIO) -> bool:
    """Whether a plain file is a vLLM server's log, from its first VLLM_HEAD bytes: its launch
    and stats lines come every stats interval (a mixed file is an error the summary names).
    Such logs are small (a line per stats interval) and read in order, by runs; the cut at
    `server_args=` lines is SGLang's."""
    fh.seek(0)
    head = fh.read(VLLM_HEAD)
    return VLLM_RUN_MARKS[0] in head or any(p.search(head) for p in _VLLM_MARKS)
# more lines with the mark, or more of their bytes: read in order, one run in memory at a time
MAX_RUN_HEADS = 10_000
MAX_HEAD_BYTES = 64 << 20


SCAN_READ = 8 << 20  # bytes per read when a file is searched for a marker


def find_all(fh: BinaryIO, needle: bytes, start: int = 0, end: int | None = None,
             most: int | None = None) -> list[int]:
    """Offsets of `needle` within bytes [start, end) of a file (at most `most`), read block by
    block into one reused buffer (a fresh bytes per block cost as much as the search: issue 25).
    Never mapped: touching a mapped page past the end of a file truncated meanwhile (a log
    rotated by copytruncate) kills the process with SIGBUS; a read just ends early."""
    found: list[int] = []
    keep = len(needle) - 1  # a match cut by a block edge: the next block starts with its head
    buf = bytearray(SCAN_READ + keep)
    view = memoryview(buf)
    have = 0  # bytes at the head of buf carried from the block before
    pos = start
    fh.seek(start)
    readinto = cast(io.BufferedIOBase, fh).readinto  # (files opened "rb")
    try:
        while end is None or pos < end:
            n = readinto(view[have:have + (SCAN_READ if end is None else
                                              min(SCAN_READ, end - pos))])
            if not n:
                break
            size = have + n
            base = pos - have  # the file offset of buf[0]
            i = buf.find(needle, 0, size)
            while i >= 0:
                found.append(base + i)
                if most is not None and len(found) >= most:
                    return found
                i = buf.find(needle, i + 1, size)
            pos += n
            have = min(keep, size)
            buf[:have] = buf[size - have:size]
    finally:
        view.release()
    return found


def _line_start(fh: BinaryIO, pos: int, floor: int) -> int | None:
    """Where the line holding a mark at `pos` starts, if the mark ends within the line's first
    MAX_LINE bytes (else the in-order read cuts it away: None). `floor`: a line start at or
    before `pos` (no read goes below it, so all reads back stay within the file's size)."""
    low = max(0, pos + len(RUN_MARK) - MAX_LINE)  # the line must start here or after
    bottom = max(low - 1, floor)  # (a newline just before `low`: the line starts at `low`)
    while pos > bottom:
        back = max(bottom, pos - (4 << 10))
        fh.seek(back)
        nl = fh.read(pos - back).rfind(b"\n")
        if nl >= 0:
            return back + nl + 1
        pos = back
    return floor if floor >= low else None  # (no newline after `bottom`: it starts at `floor`
    # if that is `bottom`, else before `low`)


def _line_at(fh: BinaryIO, start: int) -> tuple[bytes, int]:
    """The line at `start` as the in-order read yields it (`capped_lines`: cut at MAX_LINE with
    the marker; here always ending in "\n"), and where the next line starts."""
    fh.seek(start)
    line = next(capped_lines(fh), b"")
    return (line if line.endswith(b"\n") else line + b"\n"), fh.tell()


Segments = list[tuple[bytes | None, LogSummary]]


def run_segments(name: str) -> Segments | None:
    """A plain file cut before each line that holds `server_args=`, each piece summarised (at
    once over the usable CPUs when the file is large, where reading it line by line in order
    ran on one CPU at 2.7x the time): [(the line that starts the piece, as the in-order read
    yields it, or None for the first piece; the piece's summary)]. The caller parses each such
    line and applies the run rule (a line that is no server_args record starts no run). None
    where the file is to be read in order: not a regular file, gzip, a CR in it (a lone CR ends
    a line), or more than MAX_RUN_HEADS such lines or MAX_HEAD_BYTES of them. The file is read
    once, cut as it is summarised (`_Cutter`); where that gives way, the marks are searched
    first (`_searched_segments`)."""
    if not is_regular(name):
        return None
    try:
        fh = open(name, "rb")  # noqa: SIM115 - closed below
    except OSError:
        return None
    with fh:
        st = os.fstat(fh.fileno())
        size = st.st_size
        if (not stat.S_ISREG(st.st_mode) or size == 0 or fh.read(2) == b"\x1f\x8b"
                or vllm_log(fh)):
            return None
    workers = min(_usable_cpus(), 8) if size >= PARALLEL_MIN else 1
    bounds = _line_aligned_bounds(name, size, workers) if workers > 1 else [0, size]
    try:
        parts: list[tuple[LogSummary, list[Cut]]] = _summarise_ranges(
            name, bounds, workers, functools.partial(_cut_file, shares=len(bounds) - 1))
    except _Uncut:
        parts = []  # (out of the handler: its traceback holds the chunk read, 64 MiB)
    if not parts:
        return _searched_segments(name)
    segments: Segments = [(None, LogSummary(name=name))]
    for first, cuts in parts:
        segments[-1][1].merge(first)
        for head, piece in cuts:
            segments.append((head, LogSummary(name=name)))
            segments[-1][1].merge(piece)
    return segments


def _searched_segments(name: str) -> Segments | None:
    """`run_segments` where the one-pass cut gave way: the marks are searched first (a line
    longer than MAX_LINE is cut as the in-order read cuts it, a mark past its first MAX_LINE
    bytes starts nothing), then the pieces between them summarised."""
    try:
        fh = open(name, "rb")  # noqa: SIM115 - closed below
    except OSError:
        return None
    with fh:
        size = os.fstat(fh.fileno()).st_size
        if find_all(fh, b"\r", end=size, most=1):
            return None
        marks = find_all(fh, RUN_MARK, end=size, most=4 * MAX_RUN_HEADS)
        if len(marks) >= 4 * MAX_RUN_HEADS:
            return None
        heads: list[tuple[int, bytes]] = []  # (start, line) of each line with a mark it shows
        held = next_line = 0  # (next_line: where the line after the last one looked at starts)
        for pos in marks:
            if pos < next_line:
                continue  # a second mark in a line already looked at
            start = _line_start(fh, pos, next_line)
            if start is None:  # the in-order read cuts this mark away, and all after it in
                next_line = _line_at(fh, pos)[1]  # its line: none starts a run
                continue
            line, next_line = _line_at(fh, start)
            heads.append((start, line))
            held += len(line)
            if len(heads) > MAX_RUN_HEADS or held > MAX_HEAD_BYTES:
                return None
    workers = min(_usable_cpus(), 8) if size >= PARALLEL_MIN else 1
    bounds = sorted({0, size, *(s for s, _ in heads),
                     *(_line_aligned_bounds(name, size, workers) if workers > 1 else ())})
    parts: list[LogSummary] = _summarise_ranges(name, bounds, workers)
    segments: Segments = [(None, LogSummary(name=name))]
    starts = dict(heads)
    for (a, _), part in zip(zip(bounds, bounds[1:], strict=False), parts, strict=True):
        if a in starts:
            segments.append((starts[a], LogSummary(name=name)))
        segments[-1][1].merge(part)
    return segments
