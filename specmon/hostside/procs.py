"""The host agent's read-only ops on processes and files: the process list (the connecting
user's unless asked), /proc/PID/{stat,cmdline,fd,environ}, file reads and stats, and the
RECORD-hash probe of an installed SGLang (read, never run from another process)."""

import base64
import errno
import hashlib
import json
import os
import stat
import subprocess
import sys

from .protocol import SAFE_PATH, _one_line, bundle, one_shot_code, open_regular

# the largest file the probe hashes (an installed .py file is far smaller; /dev/zero planted
# as one would otherwise be read forever)
MAX_HASHED = 64 << 20


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


def proc_uids(pid):
    """(real, effective, saved, filesystem) uids of a process, or None when it is gone.

    The owner of /proc/PID is only the effective uid: a setuid program another user started
    (`su` waiting at its prompt, its argv the other user's choice, `exec -a`) has root's
    there. A process is the user's own only when all four are the user's."""
    try:
        raw = _read_bytes("/proc/%d/status" % pid, 1 << 16)
    except (OSError, IOError):
        return None
    for line in raw.split(b"\n"):
        if line.startswith(b"Uid:"):
            try:
                ids = tuple(int(x) for x in line[4:].split())
            except ValueError:
                return None
            return ids if len(ids) == 4 else None
    return None


def process_owner(pid, me=None):
    """The uid a process counts as, or None when it is gone: the user's own (`me`) only when
    every one of its uids is; else the first of its real, effective, saved and filesystem
    uids that is another's (another user's setuid-root process counts as theirs, not as
    root's)."""
    me = os.geteuid() if me is None else me
    ids = proc_uids(pid)
    if ids is None:
        return None
    for uid in ids:
        if uid != me:
            return uid
    return me


def _check_own(pid):
    """Raise unless `pid` is the connecting user's own process (its fds, cwd, environment
    and files are read only for the user's own processes: a pid may also have been reused
    by another user's process since discovery listed it)."""
    owner = process_owner(pid)
    if owner is None:
        raise OSError(errno.ESRCH, "no process %d" % pid)
    if owner != os.geteuid():
        raise OSError(errno.EPERM, "process %d is another user's (uid %d): not read" % (pid, owner))


def op_procs(req):
    """The connecting user's processes (every user's with "all_users"): [pid, ppid, uid,
    argv] (argv capped at 8 KiB). Another user's process is shown, never trusted: nothing
    of it (argv[0], exe, environment, log) is executed, and its log is not tailed."""
    me = os.geteuid()
    every = bool(req.get("all_users"))
    res = []
    for pid in _pids():
        uid = process_owner(pid, me)
        if uid is None:
            continue
        if uid != me and not every:
            continue
        st = proc_stat(pid)
        argv = proc_cmdline(pid, 8192)
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
    info = {"target": target}  # type: dict
    try:
        st = os.stat(link)
        info["regular"] = stat.S_ISREG(st.st_mode)
        info["ino"] = st.st_ino
        info["size"] = st.st_size
        # by its path, as the connecting user (not through the /proc link, which would be
        # specmon's help): only such a file may be tailed
        info["readable"] = target.startswith("/") and os.access(target, os.R_OK)
    except OSError as e:
        info["regular"] = False
        info["error"] = e.strerror
    return info


def op_proc_info(req):
    """fds (targets), cwd, optionally environ (filtered by prefixes), cmdline and stat."""
    pid = int(req["pid"])
    _check_own(pid)
    out = {"pid": pid, "fds": {}}  # type: dict
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
    with open_regular(path) as f:
        st = os.fstat(f.fileno())
        if off < 0:
            off = max(0, st.st_size + off)
        f.seek(off)
        data = f.read(size)
    return {"offset": off, "b64": base64.b64encode(data).decode("ascii"), "size": st.st_size,
            "ino": st.st_ino}


def op_stat(req):
    """A file's stat; with "pid" (the user's own process), also whether that process holds
    the file open ("held"): a file named on another process's command line is the server's
    log only when it writes it (holds it) or the user owns it."""
    try:
        st = os.stat(req["path"])
    except OSError:
        return None
    out = {"ino": st.st_ino, "dev": st.st_dev, "size": st.st_size, "mtime": st.st_mtime,
           "regular": stat.S_ISREG(st.st_mode), "readable": os.access(req["path"], os.R_OK),
           "uid": st.st_uid}
    if req.get("pid") is not None:
        out["held"] = _holds(int(req["pid"]), st.st_dev, st.st_ino)
    return out


def _holds(pid, dev, ino):
    """Does the user's own process `pid` have the file (dev, ino) open?"""
    try:
        _check_own(pid)
        fds = os.listdir("/proc/%d/fd" % pid)
    except OSError:
        return False
    for fd in fds:
        try:
            st = os.stat("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if st.st_ino == ino and st.st_dev == dev:
            return True
    return False


# -- the RECORD-hash probe of an installed distribution ------------------------------------
def _python_path(python, why=None):
    """sys.path of the interpreter the user configured, or None; `why` (a list) receives the
    reason when it cannot be had. Never called with a path taken from another process."""
    if not python or python == sys.executable:
        return None  # (a venv's python is a link to the same binary: ask it all the same)
    try:
        out = subprocess.run([python, "-c", SAFE_PATH + "import json;print(json.dumps(sys.path))"],
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
    return [p for p in path if isinstance(p, str) and os.path.isabs(p)] or None


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
            digest = _sha256_of(str(p))
        except OSError as e:
            changed.append(str(f) + (" (missing)" if e.errno == errno.ENOENT
                                     else " (unreadable: %s)" % (e.strerror or e)))
            continue
        if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != f.hash.value:
            changed.append(str(f))
    return version, "RECORD", sorted(changed)


def _sha256_of(path):
    """sha256 of a regular file of at most MAX_HASHED bytes (never blocks on a FIFO)."""
    h = hashlib.sha256()
    n = 0
    with open_regular(path) as fh:
        while True:
            block = fh.read(1 << 20)
            if not block:
                return h.digest()
            n += len(block)
            if n > MAX_HASHED:
                raise OSError(errno.EFBIG, "over %d MiB" % (MAX_HASHED >> 20), path)
            h.update(block)


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


def _own_bundle():
    """The agent's modules as shipped (the loader keeps them on the package), else read from
    this module's folder (imported locally as specmon.hostside)."""
    pkg = sys.modules.get(__package__ or "")
    data = getattr(pkg, "BUNDLE", None)
    return data if data is not None else bundle()


def _probe_in(python, name):
    """Run the agent's probe mode in `python`, the interpreter the user configured (for an
    agent too old for importlib.metadata)."""
    code = one_shot_code(_own_bundle(), ["probe", name])
    try:
        out = subprocess.run([python, "-c", code], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=60)
        res = json.loads(out.stdout.decode("utf-8", "replace"))
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    return res if isinstance(res, dict) else None


def _site_dirs(pid):
    """Where the connecting user's own process `pid` imports from, found by READING (never
    running anything): its PYTHONPATH and its interpreter prefix's lib/python*/site-packages.
    None for another user's process (nothing of it is trusted) or when nothing is found."""
    if process_owner(pid) != os.geteuid():
        return None
    dirs = []  # type: list
    try:
        raw = _read_bytes("/proc/%d/environ" % pid, 1 << 20)
    except OSError:
        raw = b""
    try:  # a relative entry is relative to the server's folder, not to ours
        cwd = os.readlink("/proc/%d/cwd" % pid)
    except OSError:
        cwd = None
    for item in raw.split(b"\0"):
        if item.startswith(b"PYTHONPATH="):
            for d in item[11:].decode("utf-8", "replace").split(":"):
                if d and (os.path.isabs(d) or cwd is not None):
                    dirs.append(os.path.join(cwd or "/", d))
    argv = proc_cmdline(pid) or []
    if argv and os.path.isabs(argv[0]) and os.path.basename(argv[0]).startswith("python"):
        prefix = os.path.dirname(os.path.dirname(argv[0]))
        lib = os.path.join(prefix, "lib")
        try:
            names = sorted(os.listdir(lib))
        except OSError:
            names = []
        for n in names:
            if n.startswith("python"):
                dirs.append(os.path.join(lib, n, "site-packages"))
    dirs = [d for d in dirs if os.path.isdir(d)]
    return dirs or None


def op_probe(req):
    """The engine distribution's (`dist`: "sglang" by default, "vllm" for a vLLM server)
    version and modified files, plus host facts. Looked up in `path` (folders
    the client names), else the interpreter the user configured (`python`), else where the
    user's own server process `pid` imports from, else this agent's own interpreter."""
    name = req.get("dist") or "sglang"
    python = req.get("python")
    path = req.get("path")
    if path is not None:
        path = [str(d) for d in path if d]
    elif python:
        path = _python_path(python)
    elif req.get("pid") is not None:
        path = _site_dirs(int(req["pid"]))
    version, method, files = modified_files(name, path)
    if method == "unavailable: no importlib.metadata" and python:
        res = _probe_in(python, name)
        if res is not None:
            res.setdefault("dist", name)
            return res
    return {"version": version, "method": method, "modified_files": files, "host": host_info(),
            "dist": name}
