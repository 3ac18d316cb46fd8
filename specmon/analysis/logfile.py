"""SGLang log files read offline: FILE, '-' or .gz into records (`iter_json`) or a per-batch-size
`LogSummary` (`summarise`, in parallel workers for large files).

The one module of analysis/ that reads files: the offline commands (`parse`, `check`,
`baseline record`) all read logs through it, so a gzip, stdin or damaged file behaves the same
in each; everything it computes is the pure `parse/` and `LogSummary` code.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import sys
import zlib
from collections.abc import Iterator
from typing import Any, BinaryIO, cast

from specmon.analysis.logsummary import LogSummary
from specmon.errors import CliError
from specmon.parse.fastscan import scan_buffer
from specmon.parse.sglang import BatchRecord, parse_line

CHUNK = 64 * 1024 * 1024
READ = 1024 * 1024
PARALLEL_MIN = 32 * 1024 * 1024  # below this, starting workers costs more than it saves
MAX_LINE = 1 << 20  # longer lines are cut with a marker, as the live path (hosts/agent.py) does
NO_LINES = 3  # exit status when no input held a single SGLang line
_MARK = re.compile(rb"(?:Decode|Prefill) batch")
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
        if len(line) <= MAX_LINE or line.endswith(b"\n"):
            if b"\r" in line:
                yield from cr_lines(line)
            else:
                yield line
            continue
        full = len(line)
        while True:  # skip to the end of this line
            rest = fh.readline(MAX_LINE)
            full += len(rest)
            if not rest or rest.endswith(b"\n"):
                break
        yield line[:MAX_LINE] + cut_marker(MAX_LINE, full - (1 if rest.endswith(b"\n") else 0)) \
            + b"\n"


class PartialRead(CliError):
    """A read error part-way through a file; carries the summary of what was read."""

    def __init__(self, message: str, summary: LogSummary) -> None:
        super().__init__(message)
        self.summary = summary


def open_input(name: str) -> BinaryIO:
    """A binary stream for FILE, '-' (stdin) or a .gz file (detected by its magic bytes)."""
    if name == "-":
        raw: BinaryIO = sys.stdin.buffer
    else:
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
        return gzip.GzipFile(fileobj=buffered)  # type: ignore[return-value]
    return buffered


def iter_json(name: str, kind: str) -> Iterator[dict[str, Any]]:
    fh = open_input(name)
    try:
        for line_no, raw in enumerate(read_lines(fh, name), 1):
            rec = parse_line(raw)
            if rec is None:
                continue
            if kind != "all" and rec.kind != kind:
                continue
            yield {"file": name, "line_no": line_no, **rec.to_json()}
    finally:
        if fh is not sys.stdin.buffer:
            fh.close()


def read_lines(fh: BinaryIO, name: str) -> Iterator[bytes]:
    n = 0
    try:
        for line in capped_lines(fh):
            n += 1
            yield line
    except READ_ERRORS as exc:
        raise CliError(f"{name}: read error after {n:,} lines ({_why(exc)})") from None


def _why(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, EOFError):
        return f"truncated: {text}"
    if isinstance(exc, zlib.error):
        return f"corrupt compressed data: {text}"
    return text


# --- summary ------------------------------------------------------------------------------------

def summarise(name: str) -> LogSummary:
    fh = open_input(name)
    try:
        if name != "-" and not isinstance(fh, gzip.GzipFile):
            size = os.fstat(fh.fileno()).st_size
            workers = min(os.cpu_count() or 1, 8)
            if size >= PARALLEL_MIN and workers > 1:
                result = _summarise_parallel(name, size, workers)
                if result is not None:
                    return result
        return _summarise_stream(fh, name)
    finally:
        if fh is not sys.stdin.buffer:
            fh.close()


def _summarise_stream(fh: BinaryIO, name: str) -> LogSummary:
    """Sequential summary in bounded memory; one raw read per block (`read1`), so the data a
    damaged gzip stream yielded before its error (CRC, truncation) is summarised, not lost.
    A line longer than MAX_LINE keeps its first MAX_LINE bytes and a marker."""
    total = LogSummary()
    pending: list[bytes] = []
    size = 0
    carry = b""  # the start of the open (unterminated) line after a flush
    open_len = 0  # bytes of the open line read so far
    skipping = 0  # > 0: inside a cut line; its length so far

    def flush(final: bool) -> None:
        nonlocal carry, size
        buf = carry + b"".join(pending)
        pending.clear()
        size = 0
        cut = len(buf) if final else buf.rfind(b"\n") + 1
        carry = b"" if final else buf[cut:]
        if cut:
            whole = buf[:cut]
            total.merge(summarise_buffer(whole if whole.endswith(b"\n") else whole + b"\n"))

    read = getattr(fh, "read1", fh.read)
    cr = b""  # a CR that ended the last block: CRLF or a lone CR, the next block says
    while True:
        try:
            block = read(READ)
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


def summarise_buffer(buf: bytes) -> LogSummary:
    """Summary of a buffer of whole lines ending in '\\n' (fast path when it is exact)."""
    if b"\r" in buf:  # a lone CR ends a line, as in summarise_general
        buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    s = LogSummary(lines=buf.count(b"\n"))
    fast = scan_buffer(buf)
    if fast is not None:
        s.add_fast(fast, _edge_time(buf, forward=True), _edge_time(buf, forward=False))
    else:
        for line in _batch_lines(buf):
            s.add_record(parse_line(line))
    if not s.recognised:  # only needed to tell an SGLang log without batches from garbage
        s.events = _count_events(buf)
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


_EVENT_MARKS = re.compile(rb"server_args=|The server is fired up|max_total_num_tokens=")


def _count_events(buf: bytes) -> int:
    """SGLang start-up lines (no batch line yet is still an SGLang log, not garbage)."""
    return len(_EVENT_MARKS.findall(buf))


def summarise_general(buf: bytes) -> LogSummary:
    """The reference path: every line through `parse_line` (used to test the fast path)."""
    lines = buf.splitlines()  # \n, \r\n and a lone \r end a line
    s = LogSummary(lines=len(lines))
    for line in lines:
        s.add_record(parse_line(line))
    return s


def _edge_time(buf: bytes, forward: bool) -> str | None:
    """Timestamp of the first (or last) batch line that carries one, as the general path sees it."""
    positions = (m.start() for m in _MARK.finditer(buf)) if forward else _reverse_marks(buf)
    for pos in positions:
        start = buf.rfind(b"\n", 0, pos) + 1
        end = buf.find(b"\n", pos)
        rec = parse_line(buf[start:end if end >= 0 else len(buf)])
        if isinstance(rec, BatchRecord):
            t = rec.timestamp or rec.time_of_day
            if t is not None:
                return t
    return None


def _reverse_marks(buf: bytes) -> Iterator[int]:
    end = len(buf)
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


def _summarise_piece(args: tuple[str, int, int]) -> LogSummary:
    """One line-aligned byte range (the file's last line may lack its newline: still a line)."""
    name, start, end = args
    with open(name, "rb") as fh:
        return _summarise_stream(_Range(fh, start, end), name)  # type: ignore[arg-type]


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


def _summarise_parallel(name: str, size: int, workers: int) -> LogSummary | None:
    """Split the file into line-aligned ranges; forked children take all but the first range.

    Plain fork + pipes rather than a multiprocessing pool: the parent works too, and no pool
    start-up is paid. Each child sends back its (small) LogSummary and exits.
    """
    if not hasattr(os, "fork"):
        return None
    import pickle

    pieces = max(workers, -(-size // (4 * CHUNK)))
    pieces = -(-pieces // workers) * workers  # a multiple of the workers keeps them all busy
    bounds = _line_aligned_bounds(name, size, pieces)
    ranges = [(name, a, b) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
    per_worker = [ranges[i::workers] for i in range(workers)]
    children: list[tuple[int, int]] = []
    for mine in per_worker[1:]:
        if not mine:
            continue
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: summarise, send, and leave without running any cleanup
            code = 0
            try:
                os.close(r)
                part = LogSummary()
                for rng in mine:
                    part.merge(_summarise_piece(rng))
                with os.fdopen(w, "wb") as out:
                    pickle.dump(part, out, protocol=pickle.HIGHEST_PROTOCOL)
            except BaseException:  # noqa: BLE001 - the parent redoes this range itself
                code = 1
            finally:
                os._exit(code)
        os.close(w)
        children.append((pid, r))
    total = LogSummary()
    for rng in per_worker[0]:
        total.merge(_summarise_piece(rng))
    for (pid, r), mine in zip(children, [m for m in per_worker[1:] if m], strict=False):
        with os.fdopen(r, "rb") as inp:
            data = inp.read()
        _, status = os.waitpid(pid, 0)
        if status == 0 and data:
            total.merge(pickle.loads(data))
        else:
            for rng in mine:  # a child died: do its share here, nothing is lost
                total.merge(_summarise_piece(rng))
    return total
