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
from collections.abc import Iterator
from typing import Any, BinaryIO, cast

from specmon.analysis.logsummary import LogSummary
from specmon.errors import CliError
from specmon.parse.fastscan import scan_buffer
from specmon.parse.sglang import BatchRecord, parse_line

CHUNK = 64 * 1024 * 1024
READ = 1024 * 1024
PARALLEL_MIN = 32 * 1024 * 1024  # below this, starting workers costs more than it saves
_MARK = re.compile(rb"(?:Decode|Prefill) batch")


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
    try:
        yield from fh
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise CliError(f"{name}: read error ({exc})") from None


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
    """Sequential summary in bounded memory; small reads so a damaged stream loses nothing."""
    total = LogSummary()
    pending: list[bytes] = []
    size = 0
    carry = b""

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

    while True:
        try:
            block = fh.read(READ)
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            flush(final=True)
            raise PartialRead(f"{name}: read error after {total.lines:,} lines ({exc})",
                              total) from None
        if not block:
            break
        pending.append(block)
        size += len(block)
        if size >= CHUNK:
            flush(final=False)
    flush(final=True)
    return total


def summarise_buffer(buf: bytes) -> LogSummary:
    """Summary of a buffer of whole lines ending in '\\n' (fast path when it is exact)."""
    s = LogSummary(lines=buf.count(b"\n"))
    fast = scan_buffer(buf)
    if fast is not None:
        s.add_fast(fast, _edge_time(buf, forward=True), _edge_time(buf, forward=False))
        return s
    for line in buf.split(b"\n"):
        if b"batch" in line:
            s.add_record(parse_line(line))
    return s


def summarise_general(buf: bytes) -> LogSummary:
    """The reference path: every line through `parse_line` (used to test the fast path)."""
    s = LogSummary(lines=buf.count(b"\n") + (0 if not buf or buf.endswith(b"\n") else 1))
    for line in buf.splitlines() if b"\r" not in buf else buf.split(b"\n"):
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


def _summarise_piece(args: tuple[str, int, int]) -> LogSummary:
    """One line-aligned byte range, read in one go (no carry, no copies)."""
    name, start, end = args
    with open(name, "rb") as fh:
        fh.seek(start)
        buf = fh.read(end - start)
    if buf and not buf.endswith(b"\n"):
        buf += b"\n"  # the file's last line has no newline: it is still a line
    return summarise_buffer(buf)


def _line_aligned_bounds(name: str, size: int, pieces: int) -> list[int]:
    bounds = [0]
    with open(name, "rb") as fh:
        for i in range(1, pieces):
            fh.seek(size * i // pieces)
            fh.readline()  # move to the start of the next line
            pos = fh.tell()
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
