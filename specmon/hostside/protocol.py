"""The host agent's protocol: constants, message shapes and framing, shared by both sides
(specmon/hosts/ imports them from here), and how the agent's modules are shipped.

specmon sends the agent's modules (MODULES, this folder) to the host's Python (over SSH stdin
or a local pipe; see specmon/hosts/agent_client.py), which loads them with LOADER as the
package PACKAGE and runs main.main(); then both talk JSON lines over the same channel. ONE
agent process per host connection serves every user (log tails, discovery, server control,
GPU telemetry, fingerprints). The modules never import specmon: they run on hosts where
specmon is not installed, on any python3 >= 3.6 (no annotations, %-formatting), with the
standard library plus pynvml when the host has it. The agent exits when its stdin closes or
its client stays silent for `idle_timeout`, so a dropped SSH connection leaves nothing behind.

Protocol (version 2), one JSON object per line in each direction:

* agent -> client, first line: {"t": "hello", "v": 2, "pid", "uid", "python", "host",
  "ops": [...]} ("uid": the connecting user's, whose processes discovery lists)
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
  {"t": "tail", "tail": T, "ev": "head", "ino": I, "lines": [items as above]} before the
   "opened" of a history that starts after its run's launch line: that run's start-up lines
   (its server arguments), at their own offsets, outside the tail's position
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

Stopping, the client asks {"op": "tail_flush", "tail", "quiet"} for each tail: the reply is a
"lines" message with the file's unterminated last line when it ends the file and has not grown
for `quiet` s (offline reading ends a file's last line there too), else null.
"""

import base64
import errno
import json
import os
import stat
import zlib

PROTOCOL_VERSION = 2
#: message types the agent sends ("t"), and the events of a "tail" message ("ev")
MESSAGE_TYPES = ("hello", "reply", "lines", "tail", "gpu", "gpu_end")
TAIL_EVENTS = ("head", "opened", "truncated", "rotated", "missing", "lost", "history_end",
               "error")
MAX_LINE = 1 << 20  # longer lines are cut, with a marker, instead of filling memory
READ_CHUNK = 1 << 20
TICK_BUDGET = 8 << 20  # bytes read per tail per tick, so one busy file cannot starve the rest
# line bytes a tail may have in flight before the client credits them. What is in flight when
# `record` is told to stop is written before it exits: 4 MiB was ~25k lines, over a second of
# work on a slow machine (past the 0.7 s drain); 1 MiB kept up with a log written at 20k lines/s
# less often than 2 or 4 MiB there (after the last write: all in 1.2-2.4 s against 0.6-1.2 s)
DEFAULT_WINDOW = 2 << 20
CREDIT_SLACK = 1 << 16  # the smallest read while credit is left (lines may overshoot it)
CHECK_BYTES = 64  # bytes before a resume offset that the client hashes (copytruncate check)
GPU_SCHEMA = 1
AGENT_NAME = "specmon-agent"

# -- shipping: the modules, in load order (each imports only those before it) -----------------
PACKAGE = "specmon_hostside"
MODULES = ("protocol", "tail", "procs", "control", "nvml", "main")
#: Python code that loads a bundle (bytes `B`: JSON [[name, source], ...]) as PACKAGE.
# The first statement of every `python -c` the agent side runs: `-c` puts the folder the
# process started in first on sys.path (''), and a relative PYTHONPATH entry resolves there
# too, so another user's json.py in a shared folder specmon was started in ran as root at the
# next import. Only absolute entries are kept (-I would drop the user's own site-packages and
# PYTHONPATH, where pynvml may live; -P is 3.11+).
SAFE_PATH = "import sys\nsys.path[:]=[p for p in sys.path if str(p).startswith('/')]\n"
LOADER = (
    "import sys,types,json\n"
    "P=types.ModuleType('%s');P.__path__=[];P.BUNDLE=B;sys.modules[P.__name__]=P\n"
    "for n,s in json.loads(B.decode('utf-8')):\n"
    " m=types.ModuleType(P.__name__+'.'+n);m.__package__=P.__name__\n"
    " m.__file__='<specmon-agent>/'+n+'.py';sys.modules[m.__name__]=m;setattr(P,n,m)\n"
    " exec(compile(s,m.__file__,'exec'),m.__dict__)\n" % PACKAGE
)


def bundle(folder=None):
    """The agent's modules as one bundle: UTF-8 JSON [[name, source], ...] in MODULES order."""
    folder = folder or os.path.dirname(os.path.abspath(__file__))
    mods = []
    for name in MODULES:
        with open(os.path.join(folder, name + ".py"), "rb") as f:
            mods.append([name, f.read().decode("utf-8")])
    return json.dumps(mods).encode("utf-8")


def one_shot_code(data, argv):
    """`python -c` code that loads bundle `data` (embedded, compressed: an argument stays far
    below the kernel's 128 KiB limit) and runs main.main() with `argv` as sys.argv[1:]."""
    packed = base64.b64encode(zlib.compress(data, 9)).decode("ascii")
    return (SAFE_PATH + "import zlib,base64\nB=zlib.decompress(base64.b64decode('%s'))\n%s"
            "sys.argv[1:1]=%r\nsys.modules['%s.main'].main()\n"
            % (packed, LOADER, list(argv), PACKAGE))


def _isascii_36(data):
    try:
        data.decode("ascii")
    except UnicodeDecodeError:
        return False
    return True


_isascii = getattr(bytes, "isascii", None) or _isascii_36  # bytes.isascii: Python 3.7+


def open_regular(path, owners=None):
    """`path` opened for reading as a binary file, only when it is a regular file (and, given
    `owners`, owned by one of those uids). Another user may put a FIFO or a device where a
    log or a file to hash was: a plain open() of a FIFO blocks the agent's one loop until
    someone writes to it, and a read of /dev/zero never ends. O_NONBLOCK makes the open
    itself return at once; fstat then decides on what was really opened (a stat first spares
    opening a device at all, where an open alone can act)."""
    _check_regular(os.stat(path).st_mode, path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        _check_regular(st.st_mode, path)
        if owners is not None and st.st_uid not in owners:
            raise OSError(errno.EPERM, "owned by uid %d, not the log's owner: not followed"
                          % st.st_uid, path)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _check_regular(mode, path):
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise OSError(errno.EISDIR, "Is a directory", path)
    kind = "not a plain file"
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            kind = name
    raise OSError(errno.EINVAL, "not a regular file (%s)" % kind, path)


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
    extra = {}  # type: dict
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
