"""specmon host agent: one small stdlib-only program that runs on the observed host.

specmon streams this file's source to the host's Python (over SSH stdin or a local pipe) and
then talks to it in JSON lines over the same channel. It must never import specmon: it runs on
hosts where specmon is not installed. It exits when its stdin closes, so a dropped SSH
connection leaves nothing behind.

Protocol (version 1), one JSON object per line in each direction:

* agent -> client, first line: {"t": "hello", "v": 1, "pid": ..., "python": ..., "host": ...}
* client -> agent: {"id": N, "op": OP, ...arguments}
* agent -> client: {"t": "reply", "id": N, "ok": true, "result": ...}
                   or {"t": "reply", "id": N, "ok": false, "error": "..."}
* tail events (asynchronous, after "tail_start"); consecutive lines of one file are batched:
  {"t": "lines", "tail": T, "ino": I, "lines": [[OFF, END, "text"], ...]} where an item may
   carry a 4th element {"b64": raw bytes when not valid UTF-8, "cut": full length when the
   line was capped, "noeol": true when a rotated file ended without a newline}
  {"t": "tail", "tail": T, "ev": "opened" | "truncated" | "rotated" | "missing" | "lost" |
   "history_end" | "error", ...details}

Offsets are byte offsets in the file with that inode: "off" is where the line starts, "end"
where the next one starts. A client that remembers (ino, end) of the last line it handled can
start a new agent with tail_start(resume_ino=ino, resume_off=end) and lose or repeat nothing.
"""

import base64
import errno
import json
import os
import select
import socket
import stat
import sys
import time

PROTOCOL_VERSION = 1
MAX_LINE = 1 << 20  # longer lines are cut, with a marker, instead of filling memory
READ_CHUNK = 1 << 20
TICK_BUDGET = 8 << 20  # bytes read per tail per tick, so one busy file cannot starve the rest


def _emit(out, objs):
    """Write a batch of JSON objects, one per line, in one write."""
    if not objs:
        return
    objs = _batch(objs)
    data = "".join(json.dumps(o, ensure_ascii=False, separators=(",", ":")) + "\n" for o in objs)
    out.write(data.encode("utf-8", "surrogateescape"))
    out.flush()


BATCH_BYTES = 256 << 10  # text per "lines" message


def _line_event(tid, ino, off, end, raw, cut, noeol=False):
    """One line as (tail, ino, item); _batch() groups these into "lines" messages."""
    extra = {}
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("utf-8", "replace")
        extra["b64"] = base64.b64encode(raw).decode("ascii")
    if cut is not None:
        extra["cut"] = cut
        text += " \u2026[specmon: line cut at %d of %d bytes]" % (len(raw), cut)
    if noeol:
        extra["noeol"] = True
    item = [off, end, text, extra] if extra else [off, end, text]
    return (tid, ino, item)


def _batch(out):
    """Group consecutive line tuples of one (tail, inode) into "lines" messages, keeping
    every other event in order."""
    res = []
    cur = None
    size = 0
    for ev in out:
        if type(ev) is tuple:
            tid, ino, item = ev
            if cur is None or cur["tail"] != tid or cur["ino"] != ino or size > BATCH_BYTES:
                cur = {"t": "lines", "tail": tid, "ino": ino, "lines": []}
                size = 0
                res.append(cur)
            cur["lines"].append(item)
            size += len(item[2]) + 24
        else:
            cur = None
            res.append(ev)
    return res


class Tail:
    """Follow one path by (inode, byte offset), framing lines on b"\\n" only."""

    def __init__(self, tid, path, max_line=MAX_LINE):
        self.tid = tid
        self.path = path
        self.max_line = max_line
        self.f = None
        self.ino = None
        self.dev = None
        self.pos = 0  # bytes consumed from self.f
        self.line_start = 0  # offset of the first byte in self.buf
        self.buf = b""
        self.cut = None  # full length so far of a line being cut (None when not cutting)
        self.missing_reported = False
        self.history_end = None  # size at start: "history_end" is reported once we pass it
        self.pending_start = None  # arguments of a tail_start that failed, retried on poll
        self.last_error = None

    # -- opening -----------------------------------------------------------------------
    def _open(self, path, offset):
        f = open(path, "rb")
        st = os.fstat(f.fileno())
        f.seek(offset)
        self.f, self.ino, self.dev = f, st.st_ino, st.st_dev
        self.pos = self.line_start = offset
        self.buf, self.cut = b"", None
        return st

    def start(self, resume_ino=None, resume_dev=None, resume_off=None, history=2000):
        """Open the file; return the events describing how (resume, history, missing).

        An error other than "missing" is reported once and the start retried on each poll.
        """
        args = (resume_ino, resume_dev, resume_off, history)
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
        msg = "%s: %s" % (type(e).__name__, e)
        if msg == self.last_error:
            return []
        self.last_error = msg
        return [self._ev("error", error=msg)]

    def _start(self, resume_ino, resume_dev, resume_off, history):
        evs = []
        try:
            st = os.stat(self.path)
        except OSError:
            st = None
        if resume_ino is not None:
            off = int(resume_off or 0)
            if st is not None and st.st_ino == resume_ino:
                if st.st_size < off:
                    self._open(self.path, 0)
                    evs.append(self._ev("truncated", at=off, size=st.st_size))
                else:
                    self._open(self.path, off)
                evs.append(self._ev("opened", ino=self.ino, off=self.pos, resumed=True))
                return evs
            old = self._find_inode(resume_ino, resume_dev)
            if old is not None:
                # Rotated while we were away: finish the old file first; the normal
                # rotation check then moves on to the new one.
                ost = self._open(old, 0)
                if ost.st_size < off:
                    evs.append(self._ev("truncated", at=off, size=ost.st_size))
                else:
                    self.f.seek(off)
                    self.pos = self.line_start = off
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
        evs.append(self._ev("opened", ino=self.ino, off=start, resumed=False, size=size))
        self.history_end = size
        return evs

    def _history_start(self, size, n):
        """Offset where the last n complete lines begin (a partial last line is not counted)."""
        need = n + 1  # the (n+1)-th newline from the end precedes the first wanted line
        with open(self.path, "rb") as f:
            pos = size
            while pos > 0:
                step = min(1 << 16, pos)
                pos -= step
                f.seek(pos)
                block = f.read(step)
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
        if not self.buf and self.cut is None and data.isascii():
            # Fast path (the common case: ASCII log text): split once, offsets by length.
            parts = data.decode("ascii").split("\n")
            rest = parts.pop()
            if parts and max(map(len, parts)) <= self.max_line:
                pos, tid, ino = self.pos, self.tid, self.ino
                for p in parts:
                    end = pos + len(p) + 1
                    out.append((tid, ino, [pos, end, p]))
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
                rest = data[start:]
                if self.cut is not None:
                    self.cut += len(rest)
                else:
                    self.buf += rest
                    if len(self.buf) > self.max_line:
                        self.cut = len(self.buf)
                        self.buf = self.buf[: self.max_line]
                self.pos += len(rest)
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

    def _read_available(self, out, budget):
        got = 0
        while got < budget:
            data = self.f.read(READ_CHUNK)
            if not data:
                return False
            got += len(data)
            self._consume(data, out)
        return True  # more may be waiting

    def poll(self, out):
        """Read what is new; detect truncation and rotation. Return True if more is pending."""
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
            out.append(self._ev("opened", ino=self.ino, off=0, resumed=False))
        more = self._read_available(out, TICK_BUDGET)
        if more:
            return True
        if self.history_end is not None and self.pos >= self.history_end:
            out.append(self._ev("history_end", ino=self.ino, off=self.line_start))
            self.history_end = None
        try:
            st = os.stat(self.path)
        except OSError:
            st = None
        if st is not None and (st.st_ino != self.ino or st.st_dev != self.dev):
            # Rotated: drain the old file (the writer may have written more), flush an
            # unterminated last line so nothing is lost, then follow the new file from 0.
            while self._read_available(out, 1 << 62):
                pass
            if self.buf or self.cut is not None:
                full = None if self.cut is None else self.cut
                out.append(_line_event(self.tid, self.ino, self.line_start, self.pos, self.buf,
                                       full, noeol=True))
                self.buf, self.cut = b"", None
            old_ino = self.ino
            self.f.close()
            try:
                self._open(self.path, 0)
            except OSError:
                self.f = None
                out.extend(self._missing())
                return False
            out.append(self._ev("rotated", old_ino=old_ino, ino=self.ino))
            return True
        if st is None:
            out.extend(self._missing())
        else:
            self.missing_reported = False
        fst = os.fstat(self.f.fileno())
        if fst.st_size < self.pos:
            at = self.line_start
            self.f.seek(0)
            self.pos = self.line_start = 0
            self.buf, self.cut = b"", None
            out.append(self._ev("truncated", ino=self.ino, at=at, size=fst.st_size))
            return True
        return False

    def close(self):
        if self.f is not None:
            self.f.close()
            self.f = None


# -- processes -------------------------------------------------------------------------
def _read_bytes(path, limit=1 << 16):
    with open(path, "rb") as f:
        return f.read(limit)


def op_procs(req):
    """All processes: [pid, ppid, uid, argv] (argv capped at 8 KiB)."""
    res = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            raw = _read_bytes("/proc/%d/cmdline" % pid, 8192)
            statline = _read_bytes("/proc/%d/stat" % pid, 4096).decode("ascii", "replace")
            uid = os.stat("/proc/%d" % pid).st_uid
        except OSError:
            continue
        ppid = int(statline.rsplit(")", 1)[1].split()[1])
        argv = [a.decode("utf-8", "replace") for a in raw.split(b"\0")]
        if argv and argv[-1] == "":
            argv.pop()
        res.append([pid, ppid, uid, argv])
    return res


def _fd_info(pid, fd):
    link = "/proc/%d/fd/%d" % (pid, fd)
    try:
        target = os.readlink(link)
    except OSError as e:
        return {"target": None, "error": e.strerror}
    info = {"target": target}
    try:
        st = os.stat(link)
        info["regular"] = stat.S_ISREG(st.st_mode)
        info["ino"] = st.st_ino
        info["size"] = st.st_size
    except OSError as e:
        info["regular"] = False
        info["error"] = e.strerror
    return info


def op_proc_info(req):
    pid = int(req["pid"])
    out = {"pid": pid, "fds": {}}
    for fd in req.get("fds", [1, 2]):
        out["fds"][str(fd)] = _fd_info(pid, int(fd))
    try:
        out["cwd"] = os.readlink("/proc/%d/cwd" % pid)
    except OSError:
        out["cwd"] = None
    prefixes = req.get("environ_prefixes")
    if prefixes is not None:
        try:
            raw = _read_bytes("/proc/%d/environ" % pid, 1 << 20)
        except OSError as e:
            out["environ"] = None
            out["environ_status"] = "unreadable: " + (e.strerror or str(e))
        else:
            if not raw.strip(b"\0"):
                out["environ"] = None
                out["environ_status"] = "empty"
            else:
                env = {}
                for item in raw.split(b"\0"):
                    k, sep, v = item.decode("utf-8", "replace").partition("=")
                    if sep and any(k.startswith(p) for p in prefixes):
                        env[k] = v
                out["environ"] = env
                out["environ_status"] = "ok"
    return out


def op_read(req):
    path = req["path"]
    off = int(req.get("offset", 0))
    size = min(int(req.get("size", 1 << 20)), 16 << 20)
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        if off < 0:
            off = max(0, st.st_size + off)
        f.seek(off)
        data = f.read(size)
    return {"offset": off, "b64": base64.b64encode(data).decode("ascii"), "size": st.st_size,
            "ino": st.st_ino}


def op_stat(req):
    try:
        st = os.stat(req["path"])
    except OSError:
        return None
    return {"ino": st.st_ino, "dev": st.st_dev, "size": st.st_size, "mtime": st.st_mtime,
            "regular": stat.S_ISREG(st.st_mode)}


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
        self.fd = None
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


class Agent:
    def __init__(self, inp_fd, out):
        self.inp_fd = inp_fd
        self.out = out
        self.tails = {}
        self.poll_interval = 0.1
        self.use_watch = True
        self.watch = None  # Watcher, created by the first tail_start
        self.watched = {}  # tail id -> inode being watched
        # Exit when the client has been silent this long (it pings): a vanished client whose
        # sshd has not noticed yet must not leave the agent running for hours.
        self.idle_timeout = 120.0
        self.inbuf = b""

    def handle(self, req, out):
        rid = req.get("id")
        op = req.get("op")
        try:
            if op == "ping":
                result = {"time": time.time()}
            elif op == "procs":
                result = op_procs(req)
            elif op == "proc_info":
                result = op_proc_info(req)
            elif op == "read":
                result = op_read(req)
            elif op == "stat":
                result = op_stat(req)
            elif op == "config":
                self.poll_interval = float(req.get("poll_interval", self.poll_interval))
                self.idle_timeout = float(req.get("idle_timeout", self.idle_timeout))
                self.use_watch = bool(req.get("watch", self.use_watch))
                result = {"poll_interval": self.poll_interval, "idle_timeout": self.idle_timeout,
                          "watch": self.use_watch}
            elif op == "tail_start":
                tid = req["tail"]
                if tid in self.tails:
                    self.tails.pop(tid).close()
                t = Tail(tid, req["path"], int(req.get("max_line", MAX_LINE)))
                evs = t.start(req.get("resume_ino"), req.get("resume_dev"),
                              req.get("resume_off"), req.get("history", 2000))
                self.tails[tid] = t
                watched = False
                if self.use_watch:
                    if self.watch is None:
                        self.watch = Watcher()
                    watched = self.watch.watch(t.path)
                    self.watched[tid] = t.ino
                result = {"ino": t.ino, "watch": "inotify" if watched else "poll"}
                if not watched and self.watch is not None and self.watch.error:
                    result["watch_error"] = self.watch.error
                out.append({"t": "reply", "id": rid, "ok": True, "result": result})
                out.extend(evs)
                return
            elif op == "tail_stop":
                t = self.tails.pop(req["tail"], None)
                self.watched.pop(req["tail"], None)
                if t is not None:
                    t.close()
                result = None
            elif op == "exit":
                out.append({"t": "reply", "id": rid, "ok": True, "result": None})
                raise SystemExit(0)
            else:
                raise ValueError("unknown op %r" % (op,))
        except SystemExit:
            raise
        except Exception as e:  # report, never die on one bad request
            out.append({"t": "reply", "id": rid, "ok": False,
                        "error": "%s: %s" % (type(e).__name__, e)})
            return
        out.append({"t": "reply", "id": rid, "ok": True, "result": result})

    def read_requests(self, out):
        data = os.read(self.inp_fd, 1 << 16)
        if not data:
            return False
        self.inbuf += data
        while b"\n" in self.inbuf:
            line, self.inbuf = self.inbuf.split(b"\n", 1)
            if not line.strip():
                continue
            try:
                req = json.loads(line)
            except ValueError as e:
                out.append({"t": "reply", "id": None, "ok": False, "error": "bad json: %s" % e})
                continue
            self.handle(req, out)
        return True

    def run(self):
        _emit(self.out, [{"t": "hello", "v": PROTOCOL_VERSION, "pid": os.getpid(),
                          "python": sys.version.split()[0], "host": socket.gethostname()}])
        busy = False
        last_input = time.monotonic()
        while True:
            out = []
            timeout = 0 if busy else self.poll_interval
            fds = [self.inp_fd]
            if self.watch is not None and self.watch.fd is not None:
                fds.append(self.watch.fd)
            r, _, _ = select.select(fds, [], [], timeout)
            now = time.monotonic()
            if self.watch is not None and self.watch.fd in r:
                self.watch.drain()  # a watched directory changed: poll the tails now
            if self.inp_fd in r:
                last_input = now
                if not self.read_requests(out):
                    _emit(self.out, out)
                    return
            elif self.idle_timeout > 0 and now - last_input > self.idle_timeout:
                return
            busy = False
            for t in list(self.tails.values()):
                try:
                    busy = t.poll(out) or busy
                except OSError as e:
                    out.extend(t.error(e))
                if self.watch is not None and self.watched.get(t.tid) != t.ino:
                    # rotated, or the file appeared: watch the inode now behind the path
                    self.watch.watch(t.path)
                    self.watched[t.tid] = t.ino
            _emit(self.out, out)


def main():
    out = sys.stdout.buffer
    try:
        Agent(0, out).run()
    except (BrokenPipeError, KeyboardInterrupt, SystemExit):
        pass
    finally:
        try:
            sys.stdout.close()
        except Exception:
            pass


if __name__ == "__main__":
    main()
