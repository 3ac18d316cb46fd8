"""Host-side helper for server control: launch, inspect and signal ONE recorded process group.

Stdlib only, Python 3.6+, no annotations: specmon sends this file to the host's Python as
`python3 -c SOURCE REQUEST_JSON` (nothing installed) and reads one JSON line back. Checking and
signalling happen in this one process, so the gap between "this is the group we started" and
the signal is as small as it can be. It never signals anything but the process group recorded
in the request, and only after checking the leader's start time and command line (or, when the
leader is gone, that the remaining members belong to the recorded session and started after it).
"""

import json
import os
import signal
import subprocess
import sys
import time


def _stat(pid):
    """(state, ppid, pgid, sid, starttime) of a process, None when it does not exist."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except (OSError, IOError):
        return None
    rest = raw[raw.rfind(")") + 2:].split()
    try:
        return {"pid": pid, "state": rest[0], "ppid": int(rest[1]), "pgid": int(rest[2]),
                "sid": int(rest[3]), "starttime": int(rest[19])}
    except (IndexError, ValueError):
        return None


def _cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            raw = f.read(65536)
    except (OSError, IOError):
        return None
    argv = [a.decode("utf-8", "replace") for a in raw.split(b"\0")]
    if argv and argv[-1] == "":
        argv.pop()
    return argv


def _members(pgid):
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        st = _stat(int(name))
        if st is None or st["pgid"] != pgid or st["state"] in ("Z", "X"):
            continue
        st["argv"] = _cmdline(st["pid"]) or []
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
    leader = _stat(pid)
    members = _members(pgid)
    if leader is not None and leader["state"] not in ("Z", "X"):
        leader["argv"] = _cmdline(pid) or []
        if start is not None and leader["starttime"] != int(start):
            return False, "pid %d was reused by another process (start time differs)" % pid, \
                leader, members
        if leader["pgid"] != pgid:
            return False, "pid %d is no longer in process group %d" % (pid, pgid), leader, members
        if leader["sid"] != pid:
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
    tmp = "%s.tmp.%d" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
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
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        # Our child is not a process group leader, so setsid(1) calls setsid() and execs
        # without forking: the pid we get is the server's pid, its pgid and its sid.
        proc = subprocess.Popen(chain, stdin=devnull, stdout=logfd, stderr=logfd,
                                cwd=req.get("workdir") or None, close_fds=True)
    except OSError as e:
        return {"error": "cannot run %s: %s" % (chain[0], e.strerror or e)}
    finally:
        os.close(devnull)
        os.close(logfd)
    st = None
    for _ in range(200):  # until setsid() has run: the child leads its own session
        st = _stat(proc.pid)
        if st is None or st["sid"] == proc.pid or proc.poll() is not None:
            break
        time.sleep(0.005)
    if st is None or st["sid"] != proc.pid:
        code = proc.poll()
        return {"error": "the server did not start a new session (exit %s)" % code,
                "pid": proc.pid, "offset": offset}
    record = {
        "version": 1, "name": req["name"], "pid": proc.pid, "pgid": proc.pid, "sid": proc.pid,
        "starttime": st["starttime"], "chain": chain, "argv": list(req["argv"]),
        "cmdline": None, "log": log, "log_offset": offset, "port": req.get("port"),
        "gpus": req.get("gpus") or [], "started_at": time.time(),
    }
    _write_private(req["pidfile"], (json.dumps(record) + "\n").encode("utf-8"))
    proc.returncode = 0  # detached on purpose: do not reap or warn about it at exit
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
        st = _stat(int(pid))
        if st is None:
            out.append({"pid": pid, "alive": False})
            continue
        argv = _cmdline(int(pid)) or []
        leader = _cmdline(st["pgid"]) or []
        server = None
        for r in records:
            if r.get("pgid") == st["pgid"] and r.get("sid", r.get("pgid")) == st["sid"]:
                server = r.get("name")
        out.append({"pid": pid, "alive": True, "argv": argv, "pgid": st["pgid"],
                    "leader_argv": leader, "server": server})
    return out


OPS = {"owners": op_owners, "inspect": op_inspect, "signal": op_signal, "write": op_write,
       "remove": op_remove, "launch": op_launch}


def main():
    try:
        req = json.loads(sys.argv[1])
        res = OPS[req["op"]](req)
    except Exception as e:  # one JSON line back, whatever happens
        res = {"error": "%s: %s" % (type(e).__name__, e)}
    sys.stdout.write(json.dumps(res) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
