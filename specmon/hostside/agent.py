"""specmon host agent: the one program specmon runs on an observed host.

specmon streams this file's source to the host's Python (over SSH stdin or a local pipe; see
specmon/hosts/agent_client.py) and then talks to it in JSON lines over the same channel. ONE
agent process per host connection serves every user (log tails, discovery, server control,
GPU telemetry, fingerprints). It must never import specmon: it runs on hosts where specmon is
not installed, on any python3 >= 3.6 (no annotations, %-formatting), with the standard
library plus pynvml when the host has it. It exits when its stdin closes or its client stays
silent for `idle_timeout`, so a dropped SSH connection leaves nothing behind.

Protocol (version 2), one JSON object per line in each direction:

* agent -> client, first line: {"t": "hello", "v": 2, "pid", "python", "host", "ops": [...]}
* client -> agent: {"id": N, "op": OP, ...arguments}; a request without "id" gets no reply
  (used for "tail_credit", which is sent once per delivered batch)
* agent -> client: {"t": "reply", "id": N, "ok": true, "result": ...}
                   or {"t": "reply", "id": N, "ok": false, "error": "one line"}
* tail events (after "tail_start"); consecutive lines of one file are batched:
  {"t": "lines", "tail": T, "ino": I, "cost": C, "lines": [[OFF, END, "text"], ...]} where an
   item may carry a 4th element {"b64": raw bytes when not valid UTF-8, "cut": full length
   when the line was capped, "noeol": true when a rotated file ended without a newline}
  {"t": "tail", "tail": T, "ev": "opened" | "truncated" | "rotated" | "missing" | "lost" |
   "history_end" | "error", ...details}
* GPU samples (after "nvml_start"): {"t": "gpu", "stream": S, "rec": {"type": "sample", ...}}
  and {"t": "gpu_end", "stream": S, "reason": "..."} when the stream stops.

Offsets are byte offsets in the file with that inode: "off" is where the line starts, "end"
where the next one starts. A client that remembers (ino, end) of the last line it handled,
and a hash of the bytes just before `end`, can start a new agent with tail_start(resume_ino,
resume_off, resume_check) and lose or repeat nothing; if the bytes differ (copytruncate while
it was away) the agent says so and reads the file from the start.

Flow control: each tail may have at most `window` bytes of line cost (the "cost" of a lines
message) outstanding; the client returns credit with {"op": "tail_credit", "tail", "n"} as
its consumer takes lines, so catching up on a large log never runs ahead of the consumer.
"""

import base64
import errno
import hashlib
import json
import os
import select
import signal
import socket
import stat
import subprocess
import sys
import time

PROTOCOL_VERSION = 2
MAX_LINE = 1 << 20  # longer lines are cut, with a marker, instead of filling memory
READ_CHUNK = 1 << 20
TICK_BUDGET = 8 << 20  # bytes read per tail per tick, so one busy file cannot starve the rest
DEFAULT_WINDOW = 4 << 20  # line bytes a tail may have in flight before the client credits them
CREDIT_SLACK = 1 << 16  # the smallest read while credit is left (lines may overshoot it)
CHECK_BYTES = 64  # bytes before a resume offset that the client hashes (copytruncate check)
GPU_SCHEMA = 1
AGENT_NAME = "specmon-agent"


def _isascii_36(data):
    try:
        data.decode("ascii")
    except UnicodeDecodeError:
        return False
    return True


_isascii = getattr(bytes, "isascii", None) or _isascii_36  # bytes.isascii: Python 3.7+


def _one_line(e):
    return ("%s: %s" % (type(e).__name__, e)).replace("\n", " ")[:500]

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
    """One line as (tail, ino, item, cost); _batch() groups these into "lines" messages.

    cost: the bytes this line counts against the tail's flow-control window (its length,
    capped like the line itself)."""
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
    return (tid, ino, item, len(raw) + 1)


def _batch(out):
    """Group consecutive line tuples of one (tail, inode) into "lines" messages, keeping
    every other event in order."""
    res = []
    cur = None
    size = 0
    for ev in out:
        if type(ev) is tuple:
            tid, ino, item, cost = ev
            if cur is None or cur["tail"] != tid or cur["ino"] != ino or size > BATCH_BYTES:
                cur = {"t": "lines", "tail": tid, "ino": ino, "cost": 0, "lines": []}
                size = 0
                res.append(cur)
            cur["lines"].append(item)
            cur["cost"] += cost
            size += len(item[2]) + 24
        else:
            cur = None
            res.append(ev)
    return res


def _digest(data):
    return hashlib.sha256(data).hexdigest()


def _bytes_before(path, off, n):
    """The n bytes of `path` that end at `off` (fewer when the file is shorter)."""
    with open(path, "rb") as f:
        f.seek(max(0, off - n))
        return f.read(min(n, off))


class Tail:
    """Follow one path by (inode, byte offset), framing lines on b"\\n" only."""

    def __init__(self, tid, path, max_line=MAX_LINE, window=DEFAULT_WINDOW):
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
        # flow control: line cost the client may still receive (None: no limit)
        self.credit = window

    # -- opening -----------------------------------------------------------------------
    def _open(self, path, offset):
        f = open(path, "rb")
        st = os.fstat(f.fileno())
        f.seek(offset)
        self.f, self.ino, self.dev = f, st.st_ino, st.st_dev
        self.pos = self.line_start = offset
        self.buf, self.cut = b"", None
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
        """Read up to `budget` bytes, within the flow-control credit.

        Returns "more" (budget used, more may be waiting), "blocked" (no credit left: wait
        for the client) or None (end of file)."""
        got = 0
        while got < budget:
            if self.credit is not None and self.credit <= 0:
                return "blocked"
            want = min(READ_CHUNK, budget - got)
            if self.credit is not None:  # never read far beyond the credit left
                want = min(want, max(self.credit, CREDIT_SLACK))
            data = self.f.read(want)
            if not data:
                return None
            got += len(data)
            n0 = len(out)
            self._consume(data, out)
            if self.credit is not None:
                for ev in out[n0:]:
                    if type(ev) is tuple:
                        self.credit -= ev[3]
        return "more"

    def _flush_partial(self, out):
        """A rotated file ended without a newline: deliver what it held, marked noeol."""
        if self.buf or self.cut is not None:
            full = None if self.cut is None else self.cut
            out.append(_line_event(self.tid, self.ino, self.line_start, self.pos, self.buf,
                                   full, noeol=True))
            if self.credit is not None:
                self.credit -= out[-1][3]
            self.buf, self.cut = b"", None
            self.line_start = self.pos

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
        state = self._read_available(out, TICK_BUDGET)
        if state is not None:
            return state == "more"
        if self.history_end is not None and self.pos >= self.history_end:
            out.append(self._ev("history_end", ino=self.ino, off=self.line_start))
            self.history_end = None
        try:
            st = os.stat(self.path)
        except OSError:
            st = None
        if st is not None and (st.st_ino != self.ino or st.st_dev != self.dev):
            # Rotated, and the old file is read to its end (above). Open the new one before
            # letting the old go: while the new file cannot be read (permission denied),
            # that is reported and the old inode is still followed.
            try:
                nf = open(self.path, "rb")
            except FileNotFoundError:
                out.extend(self._missing())
                return False
            except OSError as e:
                out.extend(self.error(e))
                return False
            self._flush_partial(out)
            old_ino = self.ino
            self.f.close()
            nst = os.fstat(nf.fileno())
            self.f, self.ino, self.dev = nf, nst.st_ino, nst.st_dev
            self.pos = self.line_start = 0
            self.buf, self.cut = b"", None
            self.missing_reported = False
            self.last_error = None
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

# -- /proc -------------------------------------------------------------------------------
def _read_bytes(path, limit=1 << 16):
    with open(path, "rb") as f:
        return f.read(limit)


def proc_stat(pid):
    """The one parser of /proc/PID/stat: {pid, state, ppid, pgid, sid, starttime} or None.

    The command name (field 2) may hold spaces and parentheses: split after the LAST ")".
    """
    try:
        raw = _read_bytes("/proc/%d/stat" % pid, 4096).decode("ascii", "replace")
    except (OSError, IOError):
        return None
    rest = raw[raw.rfind(")") + 2:].split()
    try:
        return {"pid": pid, "state": rest[0], "ppid": int(rest[1]), "pgid": int(rest[2]),
                "sid": int(rest[3]), "starttime": int(rest[19])}
    except (IndexError, ValueError):
        return None


def proc_cmdline(pid, limit=65536):
    """argv of a process (None when unreadable; [] for a kernel thread or a zombie)."""
    try:
        raw = _read_bytes("/proc/%d/cmdline" % pid, limit)
    except (OSError, IOError):
        return None
    argv = [a.decode("utf-8", "replace") for a in raw.split(b"\0")]
    if argv and argv[-1] == "":
        argv.pop()
    return argv


def _pids():
    return [int(n) for n in os.listdir("/proc") if n.isdigit()]


def op_procs(req):
    """All processes: [pid, ppid, uid, argv] (argv capped at 8 KiB)."""
    res = []
    for pid in _pids():
        st = proc_stat(pid)
        argv = proc_cmdline(pid, 8192)
        try:
            uid = os.stat("/proc/%d" % pid).st_uid
        except OSError:
            continue
        if st is None or argv is None:
            continue
        res.append([pid, st["ppid"], uid, argv])
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
    """fds (targets), cwd, optionally environ (filtered by prefixes), cmdline and stat."""
    pid = int(req["pid"])
    out = {"pid": pid, "fds": {}}
    for fd in req.get("fds", [1, 2]):
        out["fds"][str(fd)] = _fd_info(pid, int(fd))
    try:
        out["cwd"] = os.readlink("/proc/%d/cwd" % pid)
    except OSError:
        out["cwd"] = None
    if req.get("stat"):
        out["stat"] = proc_stat(pid)
    if req.get("cmdline"):
        out["cmdline"] = proc_cmdline(pid)
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
    size = min(int(req.get("size", 1 << 20)), 4 << 20)
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


# -- server control: ONE recorded process group -------------------------------------------
# Checking and signalling happen in this one process, so the gap between "this is the group
# we started" and the signal is as small as it can be. Nothing but the process group recorded
# in the request is ever signalled, and only after checking the leader's start time and
# command line (or, when the leader is gone, that the remaining members belong to the
# recorded session and started after it).
def _members(pgid):
    out = []
    for pid in _pids():
        st = proc_stat(pid)
        if st is None or st["pgid"] != pgid or st["state"] in ("Z", "X"):
            continue
        st["argv"] = proc_cmdline(st["pid"]) or []
        out.append(st)
    out.sort(key=lambda m: m["pid"])
    return out


def _is_suffix(argv, chain):
    return bool(argv) and len(argv) <= len(chain) and chain[len(chain) - len(argv):] == argv


def _verify(req):
    """(ok, reason, leader, members): is the recorded group still ours?"""
    pid = int(req["pid"])
    pgid = int(req["pgid"])
    start = req.get("starttime")
    if pid <= 1 or pgid <= 1:  # killpg(0) is our own group, 1 is init's
        return False, "refusing pid %d / process group %d (<= 1)" % (pid, pgid), None, []
    if start is None:
        return False, "the record has no start time, so its process cannot be proven", None, []
    leader = proc_stat(pid)
    members = _members(pgid)
    if leader is not None and leader["state"] not in ("Z", "X"):
        leader["argv"] = proc_cmdline(pid) or []
        if start is not None and leader["starttime"] != int(start):
            return False, "pid %d was reused by another process (start time differs)" % pid, \
                leader, members
        if leader["pgid"] != pgid:
            return False, "pid %d is no longer in process group %d" % (pid, pgid), leader, members
        if leader.get("sid") != pid:
            return False, "pid %d does not lead its own session: specmon did not start it" % pid, \
                leader, members
        known = [req.get("cmdline") or []]
        chain = req.get("chain") or []
        if leader["argv"] not in known and not _is_suffix(leader["argv"], chain):
            return False, ("pid %d runs %r, not the command specmon started"
                           % (pid, " ".join(leader["argv"])[:200])), leader, members
        return True, "", leader, members
    sid = req.get("sid", pgid)
    ours = [m for m in members if m["sid"] == int(sid)
            and (start is None or m["starttime"] >= int(start))]
    if len(ours) != len(members):
        return False, "process group %d holds processes specmon did not start" % pgid, \
            None, members
    return True, "", None, members


def op_inspect(req):
    ok, reason, leader, members = _verify(req)
    return {"ours": ok, "reason": reason, "leader": leader, "members": members}


def op_signal(req):
    ok, reason, leader, members = _verify(req)
    if not ok:
        return {"signalled": False, "refused": reason, "members": members}
    if not members:
        return {"signalled": False, "refused": None, "members": []}
    sig = getattr(signal, req["signal"])
    try:
        os.killpg(int(req["pgid"]), sig)
    except ProcessLookupError:
        return {"signalled": False, "refused": None, "members": []}
    return {"signalled": True, "refused": None, "members": members}


def _write_private(path, data):
    """Atomically write `data` to `path` with mode 0600 (temp file in the same folder + rename)."""
    # a new file of ours, never an existing one nor a symlink planted under the name we pick
    flags = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
             | getattr(os, "O_CLOEXEC", 0))
    tmp = "%s.tmp.%d" % (path, os.getpid())
    for attempt in range(16):
        try:
            fd = os.open(tmp, flags, 0o600)
            break
        except FileExistsError:
            if attempt == 15:
                raise
            tmp = "%s.tmp.%d.%s" % (path, os.getpid(), os.urandom(4).hex())
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(tmp, 0o600)
    os.rename(tmp, path)


def op_write(req):
    d = os.path.dirname(req["path"])
    if d:
        os.makedirs(d, 0o700, exist_ok=True)
    _write_private(req["path"], req["text"].encode("utf-8"))
    return {"written": req["path"]}


def op_remove(req):
    try:
        os.unlink(req["path"])
    except FileNotFoundError:
        return {"removed": False}
    return {"removed": True}


def _spawn_detached(chain, logfd, cwd):
    """Start `chain` as a grandchild (through a short-lived intermediate child), so the
    server is not a descendant of this agent or of the SSH session: a dropped connection
    (whose sshd kills its session's processes) never takes the server with it. Returns the
    server's pid, or raises OSError."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the intermediate child: start the server, say its pid, exit at once
        try:
            os.close(r)
            devnull = os.open(os.devnull, os.O_RDONLY)
            proc = subprocess.Popen(chain, stdin=devnull, stdout=logfd, stderr=logfd,
                                    cwd=cwd, close_fds=True)
            os.write(w, ("%d\n" % proc.pid).encode())
        except BaseException as e:
            try:
                os.write(w, ("E%s\n" % (getattr(e, "strerror", None) or e)).encode())
            except BaseException:
                pass
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 4096)
        if not chunk:
            break
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    text = data.decode("utf-8", "replace").strip()
    if not text or text.startswith("E"):
        raise OSError(errno.ENOEXEC, text[1:] or "the launcher exited without a pid")
    return int(text)


def op_launch(req):
    """setsid + env on the command itself, output appended to the log, pidfile 0600."""
    run_dir = req["run_dir"]
    os.makedirs(run_dir, 0o700, exist_ok=True)
    log = req["log"]
    ld = os.path.dirname(log)
    if ld:
        os.makedirs(ld, exist_ok=True)
    chain = ["setsid", "env", "--"] + ["%s=%s" % kv for kv in sorted(req["env"].items())] \
        + list(req["argv"])
    logfd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    offset = os.fstat(logfd).st_size
    os.write(logfd, ("specmon: starting %s at %s\n" % (req["name"], time.strftime(
        "%Y-%m-%d %H:%M:%S"))).encode())
    try:
        # The server's parent is not a process group leader, so setsid(1) calls setsid()
        # and execs without forking: the pid we get is the server's pid, its pgid and sid.
        pid = _spawn_detached(chain, logfd, req.get("workdir") or None)
    except OSError as e:
        return {"error": "cannot run %s: %s" % (chain[0], e.strerror or e)}
    finally:
        os.close(logfd)
    st = None
    for _ in range(200):  # until setsid() has run: the child leads its own session
        st = proc_stat(pid)
        if st is None or st["sid"] == pid or st["state"] in ("Z", "X"):
            break
        time.sleep(0.005)
    if st is None or st["sid"] != pid:
        return {"error": "the server did not start a new session (exit %s)"
                % ("unknown" if st is None else st["state"]), "pid": pid, "offset": offset}
    record = {
        "version": 1, "name": req["name"], "pid": pid, "pgid": pid, "sid": pid,
        "starttime": st["starttime"], "chain": chain, "argv": list(req["argv"]),
        "cmdline": None, "log": log, "log_offset": offset, "port": req.get("port"),
        "gpus": req.get("gpus") or [], "started_at": time.time(),
    }
    _write_private(req["pidfile"], (json.dumps(record) + "\n").encode("utf-8"))
    return {"record": record}


def op_owners(req):
    """Who holds these pids: title, process group leader's command line, and the specmon
    server (a pidfile in run_dir) whose group it is, if any."""
    records = []
    run_dir = req.get("run_dir")
    if run_dir and os.path.isdir(run_dir):
        for name in sorted(os.listdir(run_dir)):
            if not name.endswith(".pid.json"):
                continue
            try:
                with open(os.path.join(run_dir, name)) as f:
                    records.append(json.load(f))
            except (OSError, IOError, ValueError):
                continue
    out = []
    for pid in req["pids"]:
        st = proc_stat(int(pid))
        if st is None:
            out.append({"pid": pid, "alive": False})
            continue
        argv = proc_cmdline(int(pid)) or []
        leader = proc_cmdline(st["pgid"]) or []
        server = None
        for r in records:
            if r.get("pgid") == st["pgid"] and r.get("sid", r.get("pgid")) == st["sid"]:
                server = r.get("name")
        out.append({"pid": pid, "alive": True, "argv": argv, "pgid": st["pgid"],
                    "leader_argv": leader, "server": server})
    return out


# -- the RECORD-hash probe of an installed distribution ------------------------------------
def _python_path(python, why=None):
    """sys.path of another interpreter on this host (the server's), or None; `why` (a list)
    receives the reason when it cannot be had."""
    if not python or python == sys.executable:
        return None  # (a venv's python is a link to the same binary: ask it all the same)
    try:
        out = subprocess.run([python, "-c", "import sys,json;print(json.dumps(sys.path))"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, timeout=20)
        path = json.loads(out.stdout.decode("utf-8", "replace"))
    except OSError as e:
        if why is not None:
            why.append("%s: %s" % (python, e.strerror or e))
        return None
    except (ValueError, subprocess.SubprocessError) as e:
        if why is not None:
            why.append("%s: %s" % (python, _one_line(e)))
        return None
    return [p for p in path if isinstance(p, str) and p] or None


def modified_files(dist_name="sglang", path=None):
    """(version, method, files): files whose sha256 differs from RECORD, or git-dirty files."""
    try:
        from importlib import metadata
    except ImportError:  # Python < 3.8
        return None, "unavailable: no importlib.metadata", None
    try:
        if path is not None:
            dists = [d for d in metadata.distributions(path=list(path))
                     if (d.metadata["Name"] or "").lower().replace("_", "-") == dist_name]
            if not dists:
                raise metadata.PackageNotFoundError(dist_name)
            dist = dists[0]
        else:
            dist = metadata.distribution(dist_name)
    except metadata.PackageNotFoundError:
        return None, "unavailable: %s not installed" % dist_name, None
    version = dist.version
    direct = dist.read_text("direct_url.json")
    if direct:
        try:
            info = json.loads(direct)
        except ValueError:
            info = {}
        if info.get("dir_info", {}).get("editable") and info.get("url", "").startswith("file://"):
            src = info["url"][len("file://"):]
            try:
                out = subprocess.run(["git", "-C", src, "status", "--porcelain",
                                      "--untracked-files=no"], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, universal_newlines=True, timeout=20)
            except (OSError, subprocess.SubprocessError) as exc:
                return version, "unavailable: git (%s)" % exc, None
            if out.returncode != 0:
                return version, "unavailable: git status failed", None
            files = sorted(line[3:] for line in out.stdout.splitlines() if line.strip())
            return version, "git", files
    changed = []
    for f in dist.files or []:
        if f.hash is None or f.hash.mode != "sha256" or not str(f).endswith(".py"):
            continue
        p = f.locate()
        try:
            with open(str(p), "rb") as fh:
                digest = hashlib.sha256(fh.read()).digest()
        except OSError:
            changed.append(str(f) + " (missing)")
            continue
        if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != f.hash.value:
            changed.append(str(f))
    return version, "RECORD", sorted(changed)


def host_info():
    import platform

    gov = None
    try:
        with open("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor") as fh:
            gov = fh.read().strip() or None
    except OSError:
        pass
    return {"hostname": platform.node() or None, "kernel": platform.release() or None,
            "cpu_governor": gov}


def _own_source():
    """This program's source: given by the bootstrap, or read from our file."""
    src = globals().get("AGENT_SOURCE")
    if src is None:
        path = globals().get("__file__")
        if path:
            with open(path, "rb") as f:
                src = f.read()
    return src


def _probe_in(python, name):
    """Run this program's probe mode in `python` (for an agent too old for importlib.metadata
    on a host whose server runs a newer Python)."""
    src = _own_source()
    if not src:
        return None
    code = "import sys\nsys.argv[1:1] = ['probe']\n" + src.decode("utf-8")
    try:
        out = subprocess.run([python, "-c", code, name], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=60)
        res = json.loads(out.stdout.decode("utf-8", "replace"))
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    return res if isinstance(res, dict) else None


def op_probe(req):
    """SGLang's version and modified files as the server's interpreter (`python`) sees them,
    plus host facts."""
    name = req.get("dist") or "sglang"
    python = req.get("python")
    version, method, files = modified_files(name, _python_path(python))
    if method == "unavailable: no importlib.metadata" and python:
        res = _probe_in(python, name)
        if res is not None:
            return res
    return {"version": version, "method": method, "modified_files": files, "host": host_info()}


# -- NVML ------------------------------------------------------------------------------------
# Cost: the 1 Hz loop reads only the cheap NVML set (~25-40 us per GPU on an H200). Max clocks,
# names, UUIDs are read once; application clocks and the slowdown threshold (~1-3 ms each)
# every slow_interval; compute processes every proc_interval. PCIe throughput (a blocking 20 ms
# read) is never read. A call that answers NotSupported/FunctionNotFound is not called again.
SCHEMA = GPU_SCHEMA
_NOT_SUPPORTED = 3
_NOT_FOUND = 6
_FUNCTION_NOT_FOUND = 13
_ARGUMENT_VERSION_MISMATCH = 25
_NEVER_AGAIN = {_NOT_SUPPORTED, _FUNCTION_NOT_FOUND, _ARGUMENT_VERSION_MISMATCH}
#: Errors meaning "this host needs attention", reported per GPU instead of as a missing value.
_ATTENTION = {
    1: "NVML uninitialized",
    15: "GPU is lost",
    16: "GPU requires reset",
    18: "NVML/driver version mismatch (driver updated? reload or reboot)",
}
_MIB = 1024.0 * 1024.0
_FI_DEV_MEMORY_TEMP = 82


def _text(v):
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


class _Device:
    """Per-GPU state: handle, calls known not to work, cached slow/static values."""

    def __init__(self, index, handle):
        self.index = index
        self.handle = handle
        self.dead = set()
        self.static = {}
        self.slow = {}
        self.slow_at = -1e18
        self.processes = None
        self.proc_at = -1e18
        self.attention = None


class NvmlCollector:
    """Reads NVML for every GPU; `nvml` is the pynvml module (or a stand-in with its API)."""

    def __init__(self, nvml, slow_interval=30.0, proc_interval=5.0, clock=time.monotonic):
        self.N = nvml
        self.slow_interval = slow_interval
        self.proc_interval = proc_interval
        self.clock = clock
        nvml.nvmlInit()
        self.driver = self._sys("nvmlSystemGetDriverVersion")
        count = self._sys("nvmlDeviceGetCount")
        self.devices = []
        for i in range(count or 0):
            self.devices.append(_Device(i, nvml.nvmlDeviceGetHandleByIndex(i)))
        for dev in self.devices:
            self._read_static(dev)

    # -- helpers ------------------------------------------------------------------------------

    def _sys(self, fname):
        fn = getattr(self.N, fname, None)
        if fn is None:
            return None
        try:
            return _text(fn())
        except Exception:
            return None

    def _call(self, dev, key, fname, *args):
        """One NVML call for one device; None on any failure, never raises."""
        if key in dev.dead:
            return None
        fn = getattr(self.N, fname, None)
        if fn is None:
            dev.dead.add(key)
            return None
        try:
            return _text(fn(dev.handle, *args))
        except Exception as exc:
            code = getattr(exc, "value", None)
            if code in _NEVER_AGAIN:
                dev.dead.add(key)
            elif code in _ATTENTION:
                dev.attention = _ATTENTION[code]
            return None

    def _const(self, name, default):
        v = getattr(self.N, name, default)
        return v if isinstance(v, int) else default

    def _field_value(self, dev, key, field_id):
        vals = self._call(dev, key, "nvmlDeviceGetFieldValues", [field_id])
        if not vals:
            return None
        v = vals[0]
        ret = getattr(v, "nvmlReturn", 0)
        if ret != 0:
            if ret in _NEVER_AGAIN:
                dev.dead.add(key)
            return None
        member = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal"}.get(
            getattr(v, "valueType", 1), "usVal"
        )
        return getattr(v.value, member, None)

    # -- tiers --------------------------------------------------------------------------------

    def _read_static(self, dev):
        st = dev.static
        st["name"] = self._call(dev, "name", "nvmlDeviceGetName")
        st["uuid"] = self._call(dev, "uuid", "nvmlDeviceGetUUID")
        for key, cname in (("sm", "NVML_CLOCK_SM"), ("graphics", "NVML_CLOCK_GRAPHICS"),
                           ("mem", "NVML_CLOCK_MEM")):
            ctype = self._const(cname, {"sm": 1, "graphics": 0, "mem": 2}[key])
            st["max_clock_" + key] = self._call(
                dev, "max_clock_" + key, "nvmlDeviceGetMaxClockInfo", ctype
            )

    def _read_slow(self, dev):
        sl = dev.slow
        for key, cname in (("sm", "NVML_CLOCK_SM"), ("graphics", "NVML_CLOCK_GRAPHICS"),
                           ("mem", "NVML_CLOCK_MEM")):
            ctype = self._const(cname, {"sm": 1, "graphics": 0, "mem": 2}[key])
            sl["app_clock_" + key] = self._call(
                dev, "app_clock_" + key, "nvmlDeviceGetApplicationsClock", ctype
            )
        sl["temp_slowdown"] = self._call(
            dev, "temp_slowdown", "nvmlDeviceGetTemperatureThreshold",
            self._const("NVML_TEMPERATURE_THRESHOLD_SLOWDOWN", 1),
        )

    def _read_processes(self, dev):
        procs = self._call(dev, "processes", "nvmlDeviceGetComputeRunningProcesses")
        if procs is None:
            return None
        out = []
        for p in procs:
            used = getattr(p, "usedGpuMemory", None)
            out.append({
                "pid": int(getattr(p, "pid", 0)),
                "used_mib": None if used is None else round(used / _MIB, 1),
            })
        return out

    def _reasons(self, dev):
        v = self._call(dev, "reasons_event", "nvmlDeviceGetCurrentClocksEventReasons")
        if v is None and "reasons_event" in dev.dead:
            v = self._call(dev, "reasons_throttle", "nvmlDeviceGetCurrentClocksThrottleReasons")
        return v

    def _memory(self, dev):
        """(used MiB, total MiB); v2 `used` excludes the driver reserve, like nvidia-smi."""
        v2 = getattr(self.N, "nvmlMemory_v2", None)
        info = None
        if v2 is not None and "mem_v2" not in dev.dead:
            info = self._call(dev, "mem_v2", "nvmlDeviceGetMemoryInfo", v2)
        if info is None:
            info = self._call(dev, "mem_v1", "nvmlDeviceGetMemoryInfo")
        if info is None:
            return None, None
        used, total = getattr(info, "used", None), getattr(info, "total", None)
        return (
            None if used is None else round(used / _MIB, 1),
            None if total is None else round(total / _MIB, 1),
        )

    def _gpu(self, dev, now):
        if now - dev.slow_at >= self.slow_interval:
            self._read_slow(dev)
            dev.slow_at = now
        if now - dev.proc_at >= self.proc_interval:
            dev.processes = self._read_processes(dev)
            dev.proc_at = now
        c = self._call
        h_sm = self._const("NVML_CLOCK_SM", 1)
        h_gr = self._const("NVML_CLOCK_GRAPHICS", 0)
        h_mem = self._const("NVML_CLOCK_MEM", 2)
        power = c(dev, "power", "nvmlDeviceGetPowerUsage")
        limit = c(dev, "power_limit", "nvmlDeviceGetEnforcedPowerLimit")
        util = c(dev, "util", "nvmlDeviceGetUtilizationRates")
        used, total = self._memory(dev)
        temp_mem = self._field_value(dev, "temp_mem", _FI_DEV_MEMORY_TEMP)
        d = {
            "index": dev.index,
            "name": dev.static.get("name"),
            "uuid": dev.static.get("uuid"),
            "driver_version": self.driver,
            "clock_sm": c(dev, "clock_sm", "nvmlDeviceGetClockInfo", h_sm),
            "max_clock_sm": dev.static.get("max_clock_sm"),
            "clock_graphics": c(dev, "clock_graphics", "nvmlDeviceGetClockInfo", h_gr),
            "max_clock_graphics": dev.static.get("max_clock_graphics"),
            "clock_mem": c(dev, "clock_mem", "nvmlDeviceGetClockInfo", h_mem),
            "max_clock_mem": dev.static.get("max_clock_mem"),
            "app_clock_sm": dev.slow.get("app_clock_sm"),
            "app_clock_graphics": dev.slow.get("app_clock_graphics"),
            "app_clock_mem": dev.slow.get("app_clock_mem"),
            "clocks_event_reasons": self._reasons(dev),
            "temp_gpu": c(dev, "temp_gpu", "nvmlDeviceGetTemperature",
                          self._const("NVML_TEMPERATURE_GPU", 0)),
            "temp_mem": temp_mem,
            "temp_slowdown": dev.slow.get("temp_slowdown"),
            "power_w": None if power is None else round(power / 1000.0, 3),
            "power_limit_w": None if limit is None else round(limit / 1000.0, 3),
            "util_gpu": getattr(util, "gpu", None),
            "util_mem": getattr(util, "memory", None),
            "mem_used_mib": used,
            "mem_total_mib": total,
            "pstate": c(dev, "pstate", "nvmlDeviceGetPerformanceState"),
            "fan_pct": c(dev, "fan", "nvmlDeviceGetFanSpeed"),
            "processes": dev.processes,
            "source": "nvml",
            "error": dev.attention,
        }
        return d

    # -- public -------------------------------------------------------------------------------

    def hello(self):
        """The first protocol line: versions and GPU count."""
        return {
            "type": "hello",
            "schema": SCHEMA,
            "agent": AGENT_NAME,
            "gpu_count": len(self.devices),
            "driver": self.driver,
            "nvml_version": self._sys("nvmlSystemGetNVMLVersion"),
            "cuda_driver_version": self._sys("nvmlSystemGetCudaDriverVersion"),
            "pynvml_version": _pynvml_version(self.N),
            "python": sys.version.split()[0],
            "pid": os.getpid(),
        }

    def sample(self):
        """One poll of every GPU as a protocol line."""
        ts = time.time()
        now = self.clock()
        return {
            "type": "sample",
            "ts": round(ts, 3),
            "gpus": [self._gpu(dev, now) for dev in self.devices],
        }

    def close(self):
        try:
            self.N.nvmlShutdown()
        except Exception:
            pass


def _pynvml_version(mod):
    try:
        from importlib.metadata import version

        return version("nvidia-ml-py")
    except Exception:
        return getattr(mod, "__version__", None)


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




_PYNVML = {}  # interpreter -> (module, error): each is looked up once


def _load_pynvml_from(d):
    """Load pynvml from folder `d` (another interpreter's site-packages) without putting
    that folder on our path: nothing of ours is shadowed."""
    import importlib.util

    path = os.path.join(d, "pynvml.py")
    if not os.path.exists(path):
        path = os.path.join(d, "pynvml", "__init__.py")
    spec = importlib.util.spec_from_file_location("pynvml", path)
    mod = importlib.util.module_from_spec(spec)
    saved = sys.modules.get("pynvml")
    sys.modules["pynvml"] = mod
    try:
        spec.loader.exec_module(mod)
        return sys.modules.get("pynvml", mod)  # a module may replace itself (test shims do)
    finally:
        if saved is not None:
            sys.modules["pynvml"] = saved


def import_pynvml(python=None):
    """(module, None) or (None, error text).

    With `python` (the server's interpreter), its pynvml is preferred: it is what the server
    itself uses with this driver. nvidia-ml-py is pure Python (ctypes), so it loads into this
    interpreter too. Otherwise, or when that one has none, our own `import pynvml`."""
    if python in _PYNVML:
        return _PYNVML[python]
    why = []
    for d in _python_path(python, why) or []:
        if os.path.exists(os.path.join(d, "pynvml.py")) or os.path.isdir(
                os.path.join(d, "pynvml")):
            try:
                res = (_load_pynvml_from(d), None)
            except Exception as e:
                res = (None, "pynvml from %s not importable (%s)" % (python, _one_line(e)))
            _PYNVML[python] = res
            return res
    try:
        import pynvml

        res = (pynvml, None)
    except Exception as e:
        res = (None, "; ".join(["pynvml not importable (%s); install nvidia-ml-py"
                                % _one_line(e)] + why))
    _PYNVML[python] = res
    return res


class GpuStream:
    """One NVML sample stream (op nvml_start): a collector and its schedule."""

    def __init__(self, sid, col, interval, count):
        self.sid = sid
        self.col = col
        self.interval = interval
        self.count = count
        self.n = 0
        self.next_t = time.monotonic()

    def tick(self, now, out):
        """Sample if due; False once the requested count is reached."""
        if now < self.next_t:
            return True
        out.append({"t": "gpu", "stream": self.sid, "rec": self.col.sample()})
        self.n += 1
        if self.count and self.n >= self.count:
            out.append({"t": "gpu_end", "stream": self.sid, "reason": "count"})
            return False
        self.next_t += self.interval
        if self.next_t < now:  # fell behind (suspended?): do not burst to catch up
            self.next_t = now
        return True

    def close(self):
        self.col.close()


class Agent:
    def __init__(self, inp_fd, out):
        self.inp_fd = inp_fd
        self.out = out
        self.tails = {}
        self.gpus = {}
        self.poll_interval = 0.1
        self.use_watch = True
        self.watch = None  # Watcher, created by the first tail_start
        self.watched = {}  # tail id -> inode being watched
        # Exit when the client has been silent this long (it pings): a vanished client whose
        # sshd has not noticed yet must not leave the agent running for hours.
        self.idle_timeout = 120.0
        self.inbuf = b""
        self.ops = {
            "ping": lambda req: {"time": time.time()},
            "procs": op_procs, "proc_info": op_proc_info, "read": op_read, "stat": op_stat,
            "inspect": op_inspect, "signal": op_signal, "write": op_write,
            "remove": op_remove, "launch": op_launch, "owners": op_owners, "probe": op_probe,
            "config": self.op_config, "tail_start": self.op_tail_start,
            "tail_stop": self.op_tail_stop, "tail_credit": self.op_tail_credit,
            "nvml_start": self.op_nvml_start, "nvml_stop": self.op_nvml_stop,
        }

    # -- ops with state ---------------------------------------------------------------------
    def op_config(self, req):
        self.poll_interval = float(req.get("poll_interval", self.poll_interval))
        self.idle_timeout = float(req.get("idle_timeout", self.idle_timeout))
        self.use_watch = bool(req.get("watch", self.use_watch))
        return {"poll_interval": self.poll_interval, "idle_timeout": self.idle_timeout,
                "watch": self.use_watch}

    def op_tail_start(self, req, evs):
        tid = req["tail"]
        if tid in self.tails:
            self.tails.pop(tid).close()
        window = req.get("window", DEFAULT_WINDOW)
        t = Tail(tid, req["path"], int(req.get("max_line", MAX_LINE)),
                 None if window is None else int(window))
        evs.extend(t.start(req.get("resume_ino"), req.get("resume_dev"), req.get("resume_off"),
                           req.get("history", 2000), req.get("resume_check")))
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
        return result

    def op_tail_stop(self, req):
        t = self.tails.pop(req["tail"], None)
        self.watched.pop(req["tail"], None)
        if t is not None:
            t.close()
        return None

    def op_tail_credit(self, req):
        t = self.tails.get(req["tail"])
        if t is not None and t.credit is not None:
            t.credit += int(req["n"])
        return None

    def op_nvml_start(self, req):
        sid = req["stream"]
        self.op_nvml_stop(req)
        interval = float(req.get("interval", 1.0))
        if not interval > 0:
            raise ValueError("interval must be > 0")
        nvml, err = import_pynvml(req.get("python"))
        if nvml is None:
            return {"code": "no-pynvml", "error": err}
        try:
            col = NvmlCollector(nvml, float(req.get("slow_interval", 30.0)),
                                float(req.get("proc_interval", 5.0)))
        except Exception as e:
            return {"code": "nvml-init", "error": "NVML not available: %s" % e}
        hello = col.hello()
        if not col.devices:
            col.close()
            return {"code": "no-gpus", "error": "no GPUs", "hello": hello}
        self.gpus[sid] = GpuStream(sid, col, interval, int(req.get("count") or 0))
        return {"hello": hello}

    def op_nvml_stop(self, req):
        g = self.gpus.pop(req["stream"], None)
        if g is not None:
            g.close()
        return None

    # -- the loop ---------------------------------------------------------------------------
    def handle(self, req, out):
        if not isinstance(req, dict):
            out.append({"t": "reply", "id": None, "ok": False, "error": "request is not an object"})
            return
        rid = req.get("id")
        op = req.get("op")
        if op == "exit":
            out.append({"t": "reply", "id": rid, "ok": True, "result": None})
            raise SystemExit(0)
        evs = []
        try:
            fn = self.ops.get(op)
            if fn is None:
                raise ValueError("unknown op %r" % (op,))
            result = fn(req, evs) if op == "tail_start" else fn(req)
        except Exception as e:  # report, never die on one bad request
            if rid is not None:
                out.append({"t": "reply", "id": rid, "ok": False, "error": _one_line(e)})
            return
        if rid is not None:
            out.append({"t": "reply", "id": rid, "ok": True, "result": result})
        out.extend(evs)

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
                req = json.loads(line.decode("utf-8"))
            except ValueError as e:
                out.append({"t": "reply", "id": None, "ok": False, "error": "bad json: %s" % e})
                continue
            self.handle(req, out)
        return True

    def run(self):
        _emit(self.out, [{"t": "hello", "v": PROTOCOL_VERSION, "pid": os.getpid(),
                          "python": sys.version.split()[0], "host": socket.gethostname(),
                          "ops": sorted(self.ops) + ["exit"]}])
        busy = False
        last_input = time.monotonic()
        try:
            while True:
                out = []
                timeout = 0 if busy else self.poll_interval
                if self.gpus:
                    due = min(g.next_t for g in self.gpus.values()) - time.monotonic()
                    timeout = max(0.0, min(timeout, due))
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
                for g in list(self.gpus.values()):
                    try:
                        going = g.tick(now, out)
                    except Exception as e:  # one line, never a traceback
                        out.append({"t": "gpu_end", "stream": g.sid, "reason": _one_line(e)})
                        going = False
                    if not going:
                        self.gpus.pop(g.sid, None)
                        g.close()
                _emit(self.out, out)
        finally:
            for g in self.gpus.values():
                g.close()


# -- standalone GPU sampler (`python agent.py gpu ...`): benchmarks, manual checks ---------
def _gpu_emit(rec):
    sys.stdout.write(json.dumps(rec, separators=(",", ":"), default=str) + "\n")
    sys.stdout.flush()


def _gpu_error(code, message):
    _gpu_emit({"type": "error", "code": code, "error": message.replace("\n", " ")})
    return 1


def _should_watch_stdin(mode):
    if mode == "yes":
        return True
    if mode == "no" or sys.argv[0] == "-":
        return False
    try:
        st = os.fstat(0)
    except OSError:
        return False
    return stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode)


def _watch_stdin(stop):
    """Set `stop` when stdin reaches EOF (the SSH channel or parent pipe closed)."""
    try:
        while os.read(0, 65536):
            pass
    except OSError:
        pass
    stop.set()


def _gpu_args(argv):
    import argparse

    p = argparse.ArgumentParser(prog="agent.py gpu", description="specmon GPU agent (JSON lines)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    p.add_argument("--count", type=int, default=0, help="stop after N samples (0: run until EOF)")
    p.add_argument("--slow-interval", type=float, default=30.0,
                   help="seconds between reads of application clocks and thresholds")
    p.add_argument("--proc-interval", type=float, default=5.0,
                   help="seconds between reads of compute processes")
    p.add_argument("--watch-stdin", choices=["auto", "yes", "no"], default="auto",
                   help="exit at stdin EOF (auto: when stdin is a pipe or socket)")
    return p.parse_args(argv)


def gpu_main(argv=None):
    args = _gpu_args(argv)
    if not args.interval > 0:
        return _gpu_error("usage", "--interval must be > 0")
    pynvml, err = import_pynvml()
    if pynvml is None:
        return _gpu_error("no-pynvml", err)
    try:
        col = NvmlCollector(pynvml, args.slow_interval, args.proc_interval)
    except Exception as exc:
        return _gpu_error("nvml-init", "NVML not available: %s" % exc)
    try:
        _gpu_emit(col.hello())
        if not col.devices:
            return _gpu_error("no-gpus", "no GPUs")
        import threading

        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:
                signal.signal(sig, lambda *_: stop.set())
            except (ValueError, OSError, AttributeError):
                pass
        if _should_watch_stdin(args.watch_stdin):
            threading.Thread(target=_watch_stdin, args=(stop,), daemon=True).start()
        n = 0
        next_t = time.monotonic()
        while not stop.is_set():
            _gpu_emit(col.sample())
            n += 1
            if args.count and n >= args.count:
                break
            next_t += args.interval
            delay = next_t - time.monotonic()
            if delay < 0:  # fell behind (suspended?): do not burst to catch up
                next_t, delay = time.monotonic(), 0.0
            stop.wait(delay)
        return 0
    finally:
        col.close()


def gpu_run(argv=None):
    """`main` with every failure turned into one error line or a quiet exit."""
    try:
        return gpu_main(argv)
    except BrokenPipeError:
        # Reader went away: silence the interpreter's own flush-at-exit error too.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except OSError:
            pass
        return 0
    except KeyboardInterrupt:
        return 130
    except SystemExit as exc:  # argparse usage errors
        code = exc.code
        return code if isinstance(code, int) else 2
    except Exception as exc:
        try:
            return _gpu_error("internal", _one_line(exc))
        except Exception:
            return 1



def main():
    if len(sys.argv) > 1 and sys.argv[1] == "gpu":  # `python agent.py gpu --interval 1 ...`
        sys.exit(gpu_run(sys.argv[2:]))
    out = sys.stdout.buffer
    if len(sys.argv) > 1 and sys.argv[1] == "probe":  # one-shot: `python agent.py probe [DIST]`
        res = op_probe({"dist": sys.argv[2] if len(sys.argv) > 2 else "sglang"})
        out.write((json.dumps(res) + "\n").encode("utf-8"))
        out.flush()
        return
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
