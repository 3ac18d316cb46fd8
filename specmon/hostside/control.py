"""Server control on the host: ONE recorded process group.

Checking and signalling happen in this one process, so the gap between "this is the group
we started" and the signal is as small as it can be. Nothing but the process group recorded
in the request is ever signalled, and only after checking the leader's start time and
command line (or, when the leader is gone, that the remaining members belong to the
recorded session and started after it)."""

import errno
import json
import os
import signal
import subprocess
import time

from .procs import _pids, proc_cmdline, proc_stat


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
