"""Log tails of the host agent: one file followed by (inode, byte offset), lines framed as the
offline reader frames them (LF, CRLF or a lone CR ends a line), rotation and truncation
detected, flow-controlled by the client's credit; and the inotify watcher that wakes the agent
when a tailed file changes.

A line that ended at a lone CR is sent with its CR and "noeol" (its bytes are exactly its
offsets' span, as a CRLF line's text keeps its CR), so the client's byte accounting (resume
offsets, the resume check's bytes) stays exact."""

import errno
import hashlib
import os
import re
import stat
import time
import typing  # noqa: F401 - named in type comments (no annotations: Python 3.6 hosts)

from .protocol import (
    CREDIT_SLACK,
    DEFAULT_WINDOW,
    MAX_LINE,
    READ_CHUNK,
    TICK_BUDGET,
    _isascii,
    _line_event,
    _one_line,
    open_regular,
)

# After a rotation the writer may go on appending to the old inode (until it reopens its log,
# or for good): the old file is followed until it has not grown for this long, then the tail
# moves to the new file. Moving at once would lose whatever is written to the old file later.
ROTATE_QUIET_S = 1.0
# a CR that ends the file may be half of a CRLF; after this long with no byte after it, it
# ends its line (offline, the end of the file ends it: `record` and `parse` then agree)
CR_QUIET_S = 0.5

# A history that starts after its run's launch line (a server up for hours) would leave the run
# without its server arguments, and the speedup's conditions could not be compared. The run's
# start-up lines go first, as a "head" event: from the last launch line within HEAD_SCAN bytes
# before the history up to the run's first stats line, at most HEAD_MAX bytes.
HEAD_SCAN = 64 << 20
HEAD_MAX = 1 << 20
# SGLang's server_args line; vLLM's engine config line (`Initializing a V1 LLM engine (vX) with
# config:`) and the `non-default args:` line its API server prints a little before it
_LAUNCH_MARKS = (b"server_args=", b"LLM engine (v", b"non-default args:")
_VLLM_ARGS_BACK = 256 << 10  # how far before a vLLM config line its non-default args may be
_STATS = re.compile(b"Decode batch|Prefill batch|Avg prompt throughput|SpecDecoding metrics|"
                    b"Speculative metrics")
# a head cut at HEAD_MAX (a verbose start-up) still says that the run became ready: the first
# of these lines after the cut, when it comes before any stats line, is sent too
_READY_OR_STATS = re.compile(b"(The server is fired up and ready to roll|Starting vLLM API "
                             b"server)|" + _STATS.pattern)
_EOL = re.compile(b"\r\n|\r|\n")
_SKIPPED = ("a file the log was rotated to was gone (rotated away and removed) before it could "
            "be read: its lines were not read")


def _opened_path(f, path):
    """Where the open file really is (/proc/self/fd: links followed as the open did)."""
    try:
        return os.readlink("/proc/self/fd/%d" % f.fileno())
    except OSError:
        return os.path.realpath(path)


def _digest(data):
    return hashlib.sha256(data).hexdigest()


def _bytes_before(path, off, n):
    """The n bytes of `path` that end at `off` (fewer when the file is shorter)."""
    with open_regular(path) as f:
        f.seek(max(0, off - n))
        return f.read(min(n, off))


class Tail:
    """Follow one path by (inode, byte offset); lines end at LF, CRLF or a lone CR."""

    def __init__(self, tid, path, max_line=MAX_LINE, window=DEFAULT_WINDOW):
        self.tid = tid
        self.path = path
        self.max_line = max_line
        self.f = None  # type: typing.Any  # the open file (None until opened)
        self.ino = None
        self.dev = None
        self.pos = 0  # bytes consumed from self.f
        self.line_start = 0  # offset of the first byte in self.buf
        self.buf = b""
        self.cut = None  # full length so far of a line being cut (None when not cutting)
        # the last byte read was a CR ending what was read: a line end, or CRLF's first half
        # (counted in pos, not in buf or cut)
        self.cr_held = False
        self.cr_since = None  # when the file was last seen ending at a held CR
        # files the path named after the one followed, in the order seen: [ino, dev, open
        # file or None while it cannot be opened]; each is read in turn (none is skipped
        # when rotations come faster than ROTATE_QUIET_S)
        self.pending = []  # type: typing.List[typing.Any]
        self.missing_reported = False
        self.history_end = None  # size at start: "history_end" is reported once we pass it
        self.pending_start = None  # arguments of a tail_start that failed, retried on poll
        self.last_error = None
        self.quiet_since = None  # (monotonic time, pos): when the rotated-away file last grew
        # flow control: line cost the client may still receive (None: no limit)
        self.credit = window
        # the owner of the first file followed: after a rotation, a file at the path is
        # followed only when it has this owner or ours (in a shared folder another user may
        # put their own file, or a FIFO, where the log was)
        self.owner = None
        # ... and its folder, as opened: a file after a rotation is followed only in it (a
        # link another user made at the path led into the user's own private file)
        self.real_dir = None
        self.read_at = time.monotonic()  # when bytes last came from the file

    def _owners(self):
        return None if self.owner is None else (self.owner, os.geteuid())

    # -- opening -----------------------------------------------------------------------
    def _open(self, path, offset):
        f = self._open_checked(path)
        st = os.fstat(f.fileno())
        if self.owner is None:
            self.owner = st.st_uid
            self.real_dir = os.path.dirname(_opened_path(f, path))
        f.seek(offset)
        self.f, self.ino, self.dev = f, st.st_ino, st.st_dev
        self.pos = self.line_start = offset
        self._clear_line()
        self.quiet_since = None
        return st

    def start(self, resume_ino=None, resume_dev=None, resume_off=None, history=2000,
              check=None):
        """Open the file; return the events describing how (resume, history, missing).

        An error other than "missing" is reported once and the start retried on each poll.
        """
        args = (resume_ino, resume_dev, resume_off, history, check)
        try:
            evs = self._start(*args)
        except OSError as e:
            self.close()
            self.pending_start = args
            return self.error(e)
        self.pending_start = None
        self.last_error = None
        return evs

    def error(self, e):
        """An "error" event, once per distinct message (polls must not flood the channel)."""
        msg = _one_line(e)
        if msg == self.last_error:
            return []
        self.last_error = msg
        ev = self._ev("error", error=msg)
        if isinstance(e, OSError) and e.errno in (errno.EACCES, errno.EPERM):
            ev["denied"] = True
        return [ev]

    def _same_content(self, path, off, check):
        """Do the bytes before `off` still hash as the client saw them?"""
        if not check:
            return True
        n = int(check.get("n", 0))
        if n <= 0 or n > off:
            return True
        return _digest(_bytes_before(path, off, n)) == check.get("sha256")

    def _find_copy(self, off, check, skip):
        """A sibling file (logrotate's copytruncate copy, e.g. name.1) holding the bytes we
        saw before `off`: (path, its size) or (None, None)."""
        if not check or int(check.get("n", 0)) <= 0:
            return None, None
        d = os.path.dirname(self.path) or "."
        base = os.path.basename(self.path)
        try:
            names = sorted(os.listdir(d))
        except OSError:
            return None, None
        for name in names:
            p = os.path.join(d, name)
            if not name.startswith(base) or p in skip:
                continue
            try:
                st = os.stat(p)
                if not stat.S_ISREG(st.st_mode) or st.st_size < off:
                    continue
                owners = self._owners()
                if owners is not None and st.st_uid not in owners:
                    continue  # another user's file is no copy of the log
                if self._same_content(p, off, check):
                    return p, st.st_size
            except OSError:
                continue
        return None, None

    def _restart_from_zero(self, path, off, check, size):
        """The content at our offset is not what we read before the disconnect: say so and
        read the file from its first byte."""
        copy, copy_size = self._find_copy(off, check, (path, self.path))
        self._open(path, 0)
        ev = self._ev("truncated", ino=self.ino, at=off, size=size, while_disconnected=True,
                      not_seen=None if copy is None else copy_size - off, copy=copy)
        return [ev, self._ev("opened", ino=self.ino, off=0, resumed=False)]

    def _start(self, resume_ino, resume_dev, resume_off, history, check):
        evs = []
        try:
            st = os.stat(self.path)
        except OSError as e:
            if e.errno != errno.ENOENT:
                raise
            st = None
        if resume_ino is not None:
            off = int(resume_off or 0)
            if st is not None and st.st_ino == resume_ino:
                if st.st_size < off or not self._same_content(self.path, off, check):
                    return self._restart_from_zero(self.path, off, check, st.st_size)
                self._open(self.path, off)
                evs.append(self._ev("opened", ino=self.ino, off=self.pos, resumed=True))
                return evs
            old = self._find_inode(resume_ino, resume_dev)
            if old is not None:
                # Rotated while we were away: finish the old file first; the normal
                # rotation check then moves on to the new one.
                ost = os.stat(old)
                if ost.st_size < off or not self._same_content(old, off, check):
                    return self._restart_from_zero(old, off, check, ost.st_size)
                self._open(old, off)
                evs.append(self._ev("opened", ino=self.ino, off=self.pos, resumed=True, path=old))
                return evs
            evs.append(self._ev("lost", ino=resume_ino, off=off,
                                reason="the file at that inode is gone; bytes after the offset "
                                       "were not read"))
            if st is None:
                return evs + self._missing()
            self._open(self.path, 0)
            evs.append(self._ev("opened", ino=self.ino, off=0, resumed=False))
            return evs
        if st is None:
            return self._missing()
        size = st.st_size
        start = 0 if history is None or history < 0 else self._history_start(size, history)
        self._open(self.path, start)
        for head in self._launch_head(start) if start > 0 else []:
            evs.append(self._ev("head", ino=self.ino, lines=head))
        evs.append(self._ev("opened", ino=self.ino, off=start, resumed=False, size=size))
        self.history_end = size
        return evs

    def _launch_head(self, start):
        """The start-up lines of the run the history (from `start`) falls in, when its launch
        line lies before, as lists of consecutive line items (a second list: the ready line
        after a start-up cut at HEAD_MAX): [] when none is within HEAD_SCAN bytes (or on a read
        error: the head is a help, the tail goes on without it)."""
        try:
            fd = self.f.fileno()
            first = os.pread(fd, self.max_line, start)
            first = first[:first.find(b"\n") + 1 or len(first)]
            if any(m in first for m in _LAUNCH_MARKS):
                return []  # the history starts with a launch line: its run's own
            keep = max(map(len, _LAUNCH_MARKS)) - 1  # a mark cut by a block edge
            floor = max(0, start - HEAD_SCAN)
            hi, at, edge = start, -1, b""
            while hi > floor and at < 0:
                lo = max(floor, hi - (1 << 20))
                block = os.pread(fd, hi - lo, lo) + edge
                at = max(block.rfind(m) for m in _LAUNCH_MARKS)
                at = lo + at if at >= 0 else -1
                edge, hi = block[:keep], lo
            if at < 0:
                return []
            back = max(0, at - self.max_line)
            ls = os.pread(fd, at - back, back).rfind(b"\n") + 1 + back
            if ls == back and back > 0:
                return []  # the launch line is longer than a line may be
            lo = max(0, ls - _VLLM_ARGS_BACK)
            before = os.pread(fd, ls - lo, lo)
            nd = before.rfind(b"non-default args:")
            nl = before.rfind(b"\n", 0, nd) if nd >= 0 else -1
            if (nl >= 0 or lo == 0) and nd >= 0 and not _STATS.search(before, nd):
                ls = lo + nl + 1  # vLLM: its launch's own args line, a little before
            data = os.pread(fd, min(start - ls, HEAD_MAX), ls)
        except OSError:
            return []
        items, stats = self._head_items(ls, data)
        if not items:
            return []
        if stats or ls + len(data) >= start:
            return [items]
        try:
            ready = self._ready_after(items[-1][1], start)  # a start-up longer than HEAD_MAX
        except OSError:
            ready = []
        return [items, ready] if ready else [items]

    def _head_items(self, off, data):
        """Line items of `data` (read at `off`) up to its first stats line, whole lines only,
        and whether a stats line ended them."""
        items = []  # type: list
        for raw in data.split(b"\n")[:-1]:  # complete lines only (the last piece has no end)
            if _STATS.search(raw):
                return items, True  # the run's stats begin: the history has its own
            end = off + len(raw) + 1
            cut = len(raw) if len(raw) > self.max_line else None
            items.append(_line_event(self.tid, self.ino, off, end, raw[:self.max_line], cut)[2])
            off = end
        return items, False

    def _ready_after(self, pos, start):
        """The run's ready line between `pos` and `start` (a head cut at HEAD_MAX), as one item,
        when it comes before any stats line; [] else (read in blocks, at most HEAD_SCAN)."""
        fd = self.f.fileno()
        keep = 64  # a mark cut by a block edge
        at = pos
        while at < min(start, pos + HEAD_SCAN):
            block = os.pread(fd, min(start, at + (1 << 20) + keep) - at, at)
            m = _READY_OR_STATS.search(block)
            if m is not None:
                if m.group(1) is None:
                    return []  # stats first: the history tells the rest
                ls = block.rfind(b"\n", 0, m.start()) + 1
                le = block.find(b"\n", m.end())
                if le < 0:
                    return []  # (a ready line across a block edge: not worth a second read)
                return self._head_items(at + ls, block[ls:le + 1])[0]
            at += 1 << 20
        return []

    def _history_start(self, size, n):
        """Offset where the last n complete lines begin (a partial last line is not counted)."""
        need = n + 1  # the (n+1)-th line end from the end precedes the first wanted line
        with open_regular(self.path) as f:
            pos = size
            nxt = b""  # the byte after this block (none at the end of what is read)
            while pos > 0:
                step = min(1 << 16, pos)
                pos -= step
                f.seek(pos)
                block = f.read(step)
                if b"\r" in block and (block.endswith(b"\r") or
                                       block.count(b"\r") != block.count(b"\r\n")):
                    # lone CRs end lines; a CR ending the file may be a CRLF's first half
                    nb = len(block)
                    ends = [m.end() for m in _EOL.finditer(block + nxt)
                            if m.end() < nb or (m.end() == nb and (nxt or m.group() != b"\r"))]
                    for e in reversed(ends):
                        need -= 1
                        if need == 0:
                            return pos + e
                    nxt = block[:1]
                    continue
                nxt = block[:1]
                i = len(block)
                while True:
                    i = block.rfind(b"\n", 0, i)
                    if i < 0:
                        break
                    need -= 1
                    if need == 0:
                        return pos + i + 1
        return 0

    def _find_inode(self, ino, dev):
        d = os.path.dirname(self.path) or "."
        try:
            entries = list(os.scandir(d))
        except OSError:
            return None
        for e in entries:
            try:
                if e.inode() == ino and e.is_file(follow_symlinks=False):
                    if dev is None or e.stat(follow_symlinks=False).st_dev == dev:
                        return e.path
            except OSError:
                continue
        return None

    def _missing(self):
        if self.missing_reported:
            return []
        self.missing_reported = True
        return [self._ev("missing")]

    def _ev(self, kind, **kw):
        ev = {"t": "tail", "tail": self.tid, "ev": kind, "path": self.path}
        ev.update(kw)
        return ev

    # -- reading -----------------------------------------------------------------------
    def _consume(self, data, out):
        """Frame new bytes into complete lines (appending events to out)."""
        if (self.cr_held and data) or (b"\r" in data and (data.endswith(b"\r") or
                                               data.count(b"\r") != data.count(b"\r\n"))):
            self._consume_any(data, out)  # lone CRs (CRLF alone frames on b"\n" below)
            return
        if not self.buf and self.cut is None and _isascii(data):
            # Fast path (the common case: ASCII log text): split once, offsets by length.
            parts = data.decode("ascii").split("\n")
            rest = parts.pop()
            if parts and max(map(len, parts)) <= self.max_line:
                pos, tid, ino = self.pos, self.tid, self.ino
                for p in parts:
                    end = pos + len(p) + 1
                    out.append((tid, ino, [pos, end, p], end - pos))
                    pos = end
                self.pos = self.line_start = pos
                if rest:
                    self._consume(data[len(data) - len(rest):], out)
                return
        start = 0
        n = len(data)
        while start < n:
            j = data.find(b"\n", start)
            if j < 0:
                self._keep(data[start:])
                return
            piece = data[start:j]
            self.pos += len(piece) + 1
            if self.cut is not None:
                full = self.cut + len(piece)
                out.append(_line_event(self.tid, self.ino, self.line_start, self.pos, self.buf,
                                       full))
            else:
                raw = self.buf + piece if self.buf else piece
                if len(raw) > self.max_line:
                    out.append(_line_event(self.tid, self.ino, self.line_start, self.pos,
                                           raw[: self.max_line], len(raw)))
                else:
                    out.append(_line_event(self.tid, self.ino, self.line_start, self.pos, raw,
                                           None))
            self.buf, self.cut = b"", None
            self.line_start = self.pos
            start = j + 1

    def _clear_line(self):
        """Forget the line being read (a new file, a truncation): no bytes, no cut, no CR."""
        self.buf, self.cut, self.cr_held, self.cr_since = b"", None, False, None

    def _keep(self, rest):
        """Bytes of a line whose end is not read yet."""
        if self.cut is not None:
            self.cut += len(rest)
        else:
            self.buf += rest
            if len(self.buf) > self.max_line:
                self.cut = len(self.buf)
                self.buf = self.buf[: self.max_line]
        self.pos += len(rest)

    def _end_line(self, piece, lone_cr, out):
        """End the line being read: `piece` is its last bytes before its end (self.pos is
        already past the end). lone_cr: it ended at a lone CR, sent with the line and marked
        noeol (the line's bytes are then exactly its span)."""
        if self.cut is not None:
            ev = _line_event(self.tid, self.ino, self.line_start, self.pos, self.buf,
                             self.cut + len(piece))
        else:
            raw = self.buf + piece if self.buf else piece
            if len(raw) > self.max_line:
                ev = _line_event(self.tid, self.ino, self.line_start, self.pos,
                                 raw[: self.max_line], len(raw))
            elif lone_cr:
                ev = _line_event(self.tid, self.ino, self.line_start, self.pos, raw + b"\r",
                                 None, noeol=True)
            else:
                ev = _line_event(self.tid, self.ino, self.line_start, self.pos, raw, None)
        out.append(ev)
        self.buf, self.cut = b"", None
        self.line_start = self.pos

    def _consume_any(self, data, out):
        """Frame bytes where a lone CR ends a line too, as the offline reader does (LF, CRLF
        or CR; a CR that ends what is read waits for the next byte: it may be a CRLF)."""
        start = 0
        if self.cr_held:
            self.cr_held = False
            if data[:1] == b"\n":  # CRLF: the CR stays with the line, as on the LF path
                self.pos += 1
                self._end_line(b"\r", False, out)
                start = 1
            else:
                self._end_line(b"", True, out)
        n = len(data)
        for m in _EOL.finditer(data, start):
            s, e = m.span()
            lone = e - s == 1 and data[s] == 13
            if lone and e == n:
                break
            self.pos += e - start
            self._end_line(data[start:s] if lone else data[start:e - 1], lone, out)
            start = e
        if data.endswith(b"\r") and start < n:
            self._keep(data[start:n - 1])
            self.pos += 1
            self.cr_held = True
        elif start < n:
            self._keep(data[start:])

    def _read_available(self, out, budget):
        """Read up to `budget` bytes, within the flow-control credit.

        Returns "more" (budget used, more may be waiting), "blocked" (no credit left: wait
        for the client) or None (end of file)."""
        got = 0
        while got < budget:
            self._sight(out)  # (one stat per chunk: a short-lived rotated file is seen too)
            if self.credit is not None and self.credit <= 0:
                return "blocked"
            want = min(READ_CHUNK, budget - got)
            if self.credit is not None:  # never read far beyond the credit left
                want = min(want, max(self.credit, CREDIT_SLACK))
            data = self.f.read(want)
            if not data:
                return None
            self.read_at = time.monotonic()
            got += len(data)
            n0 = len(out)
            self._consume(data, out)
            if self.credit is not None:
                for ev in out[n0:]:
                    if type(ev) is tuple:
                        self.credit -= ev[3]
        return "more"

    def _flush_partial(self, out):
        """A rotated file ended without a newline: deliver what it held, marked noeol (a CR
        that ended it ended its last line)."""
        if self.cr_held:
            self.cr_held = False
            self._end_line(b"", True, out)
        elif self.buf or self.cut is not None:
            full = None if self.cut is None else self.cut
            out.append(_line_event(self.tid, self.ino, self.line_start, self.pos, self.buf,
                                   full, noeol=True))
            self.buf, self.cut = b"", None
            self.line_start = self.pos
        else:
            return
        if self.credit is not None:
            self.credit -= out[-1][3]

    def _release_cr(self, out, moved):
        """At the end of the file: a held CR with no byte after it for CR_QUIET_S ends its
        line (a CRLF writer that paused between the two then gives one empty line more)."""
        if not self.cr_held:
            self.cr_since = None
            return
        now = time.monotonic()
        if moved or self.cr_since is None:
            self.cr_since = now
        elif now - self.cr_since >= CR_QUIET_S:
            self.cr_since = None
            self._flush_partial(out)

    def flush_quiet(self, quiet, out):
        """The client stops: a last line without its newline that ends the file and has not
        grown for `quiet` s is delivered, marked noeol, as the end of the file ends it offline
        (`parse` reads a file's unterminated last line; `record` dropped it). One that grew
        more recently may be a writer's line cut mid-write: it is left, as before."""
        if self.f is None or not (self.buf or self.cut is not None or self.cr_held):
            return
        if time.monotonic() - self.read_at < quiet:
            return
        try:
            if os.fstat(self.f.fileno()).st_size != self.pos:
                return  # bytes after it not read yet (the client stopped crediting): not the end
        except OSError:
            return
        self._flush_partial(out)

    def _open_checked(self, path):
        """open_regular, and once a first file was followed: never through a link another
        user made at the path (checked after the open, so no swap between check and open
        gets one through), nor into another folder through a folder on the way."""
        owners = self._owners()
        f = open_regular(path, owners)
        if owners is None:
            return f
        try:
            lst = os.lstat(path)
            fst = os.fstat(f.fileno())
            if stat.S_ISLNK(lst.st_mode):
                if lst.st_uid not in owners:
                    raise OSError(errno.EPERM, "a link made by uid %d, not the log's owner: "
                                  "not followed" % lst.st_uid, path)
                return f  # the user's own link (a `current.log`): followed where it leads
            if (lst.st_ino, lst.st_dev) != (fst.st_ino, fst.st_dev):
                raise FileNotFoundError(errno.ENOENT, "replaced while opened", path)
            where = os.path.dirname(_opened_path(f, path))
            if self.real_dir is not None and where != self.real_dir:
                raise OSError(errno.EPERM, "leads out of the log's folder (to %s): not followed"
                              % where, path)
        except BaseException:
            f.close()
            raise
        return f

    # -- rotation ----------------------------------------------------------------------
    def _sight(self, out):
        """stat the path; a file there that is neither the one followed nor one already
        queued is queued, opened at once (so it is read even if it is rotated away and
        removed before its turn). Returns the stat (None when the path is missing)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        if self.f is None or (st.st_ino == self.ino and st.st_dev == self.dev):
            return st
        for p in self.pending:
            if p[0] == st.st_ino and p[1] == st.st_dev:
                return st
        entry = [st.st_ino, st.st_dev, None]
        self.pending.append(entry)
        self._open_pending(entry, out)
        return st

    def _open_pending(self, entry, out):
        """Open a queued file where it is now (the path, or another name in its folder).
        None when open, else why not: "gone", or the error (reported once)."""
        if entry[2] is not None:
            return None
        path = None
        try:
            st = os.stat(self.path)
            if st.st_ino == entry[0] and st.st_dev == entry[1]:
                path = self.path
        except OSError:
            pass
        if path is None:
            path = self._find_inode(entry[0], entry[1])
            if path is None:
                return "gone"
        try:
            f = self._open_checked(path)
        except FileNotFoundError:
            return "gone"
        except OSError as e:
            out.extend(self.error(e))
            return self.last_error or _one_line(e)
        fst = os.fstat(f.fileno())
        if fst.st_ino != entry[0] or fst.st_dev != entry[1]:  # replaced between stat and open
            f.close()
            return "gone"
        entry[2] = f
        return None

    def _rotate(self, out):
        """The followed file was rotated away and is read to its end: once it has been quiet
        for ROTATE_QUIET_S, move to the next file the path named. A queued file that cannot
        be read is waited for while it is the newest (the old file is followed meanwhile);
        one that is gone, or unreadable with newer files queued, is said to be skipped.
        True when the tail moved."""
        now = time.monotonic()
        if self.quiet_since is None or self.quiet_since[1] != self.pos:
            self.quiet_since = (now, self.pos)
        if now - self.quiet_since[0] < ROTATE_QUIET_S:
            return False
        skipped = []
        while self.pending:
            head = self.pending[0]
            why = self._open_pending(head, out)
            if why is None:
                break
            if why != "gone" and len(self.pending) == 1:
                break  # the newest: wait until it can be read
            self.pending.pop(0)
            skipped.append(self._ev(
                "lost", ino=head[0], off=0,
                reason=_SKIPPED if why == "gone" else
                "a file the log was rotated to could not be read (%s) and was rotated away: "
                "its lines were not read" % why))
        if not self.pending or self.pending[0][2] is None:  # nothing to move to yet
            out.extend(skipped)
            return False
        _ino, _dev, nf = self.pending.pop(0)
        self.quiet_since = None
        self._flush_partial(out)
        old_ino = self.ino
        self.f.close()
        nst = os.fstat(nf.fileno())
        self.f, self.ino, self.dev = nf, nst.st_ino, nst.st_dev
        self.pos = self.line_start = 0
        self._clear_line()
        self.missing_reported = False
        self.last_error = None
        out.extend(skipped)
        out.append(self._ev("rotated", old_ino=old_ino, ino=self.ino))
        return True

    def poll(self, out):
        """Read what is new; detect truncation and rotation. Return True if more is pending
        and can be read now (False also while waiting for flow-control credit)."""
        if self.pending_start is not None:
            # tail_start failed (e.g. permission denied): retry it as asked, so a resume
            # still resumes at its offset instead of re-reading from 0.
            out.extend(self.start(*self.pending_start))
            if self.pending_start is not None or self.f is None:
                return False
        if self.f is None:
            try:
                self._open(self.path, 0)
            except FileNotFoundError:
                out.extend(self._missing())
                return False
            self.missing_reported = False
            self.last_error = None
            out.append(self._ev("opened", ino=self.ino, off=0, resumed=False))
        pos0 = self.pos
        state = self._read_available(out, TICK_BUDGET)
        if state is not None:
            return state == "more"
        self._release_cr(out, self.pos != pos0)
        if self.history_end is not None and self.pos >= self.history_end:
            out.append(self._ev("history_end", ino=self.ino, off=self.line_start))
            self.history_end = None
        st = self._sight(out)
        if self.pending:
            # Rotated, and the old file is read to its end (above). The next file was opened
            # when first seen; while it cannot be read (permission denied) that is reported
            # and the old inode is still followed; and the old one is followed until it has
            # been quiet for ROTATE_QUIET_S (its writer may still be appending).
            return self._rotate(out)
        if st is None:
            out.extend(self._missing())
        else:
            self.missing_reported = False
        fst = os.fstat(self.f.fileno())
        if fst.st_size < self.pos:
            at = self.line_start
            self.f.seek(0)
            self.pos = self.line_start = 0
            self._clear_line()
            out.append(self._ev("truncated", ino=self.ino, at=at, size=fst.st_size))
            return True
        return False

    def due(self):
        """When this tail must be polled though nothing woke the agent (a quiet period it
        waits out: a rotated-away file, a held CR), as time.monotonic(); None if never. An
        agent asked to poll seldom (inotify does the waking) must not sleep past it."""
        times = []
        if self.pending and self.quiet_since is not None:
            times.append(self.quiet_since[0] + ROTATE_QUIET_S)
        if self.cr_since is not None:
            times.append(self.cr_since + CR_QUIET_S)
        return min(times) if times else None

    def close(self):
        if self.f is not None:
            self.f.close()
            self.f = None
        for p in self.pending:
            if p[2] is not None:
                p[2].close()
        self.pending = []


class Watcher:
    """inotify (Linux, through ctypes) on the tailed files and their directories, so an
    appended line is read at once instead of at the next poll. Files are watched for writes,
    directories only for entries appearing or going (rotation, a late-created log), so a busy
    neighbour file does not wake the agent. Best effort: where inotify is unavailable (no
    ctypes, not Linux, watch limit reached) the agent just polls, as it always also does."""

    FILE_MASK = 0x2 | 0x4 | 0x8  # IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE
    # IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF
    DIR_MASK = 0x40 | 0x80 | 0x100 | 0x200 | 0x400 | 0x800

    def __init__(self):
        self.fd = None  # type: typing.Any  # the inotify fd (None: poll only)
        self.dirs = set()
        self.error = None
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            self._add = libc.inotify_add_watch
            self._add.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
            self._add.restype = ctypes.c_int
            self._errno = ctypes.get_errno
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            if fd < 0:
                raise OSError(ctypes.get_errno(), "inotify_init1 failed")
            self.fd = fd
        except Exception as e:  # AttributeError off Linux, ImportError without _ctypes
            self.error = "%s: %s" % (type(e).__name__, e)

    def _watch(self, path, mask):
        """0 when watched, else the errno."""
        if self.fd is None:
            return -1
        if self._add(self.fd, os.fsencode(path), mask) < 0:
            e = self._errno()
            self.error = "inotify_add_watch %s: %s" % (path, os.strerror(e))
            return e
        return 0

    def watch(self, path):
        """Watch path (the inode it names now) and its directory; False: poll only.

        A missing file is covered by its directory's watch until it appears; watching an
        inode again is harmless (inotify returns the same watch)."""
        d = os.path.dirname(os.path.abspath(path))
        if d not in self.dirs and self._watch(d, self.DIR_MASK) == 0:
            self.dirs.add(d)
        return self._watch(path, self.FILE_MASK) in (0, errno.ENOENT) and d in self.dirs

    def drain(self):
        """Consume pending events (we only need to know that something changed)."""
        try:
            while os.read(self.fd, 1 << 16):
                pass
        except (BlockingIOError, InterruptedError):
            pass
