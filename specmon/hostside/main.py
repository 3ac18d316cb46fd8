"""The host agent's request loop: one process per host connection serves every op (tails,
processes, control, probe, GPU streams) over one JSON-lines channel, and exits when its
stdin closes or its client stays silent for `idle_timeout`."""

import json
import os
import select
import socket
import sys
import time

from .control import op_inspect, op_launch, op_owners, op_remove, op_signal, op_write
from .nvml import GpuStream, NvmlCollector, gpu_run, import_pynvml
from .procs import op_probe, op_proc_info, op_procs, op_read, op_stat
from .protocol import DEFAULT_WINDOW, MAX_LINE, PROTOCOL_VERSION, _batch, _emit, _one_line
from .tail import CR_QUIET_S, Tail, Watcher


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
            "tail_flush": self.op_tail_flush,
            "nvml_start": self.op_nvml_start, "nvml_stop": self.op_nvml_stop,
        }  # type: dict

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

    def op_tail_flush(self, req):
        """The client stops: the tail's quiet unterminated last line (Tail.flush_quiet) as a
        "lines" message, or None."""
        t = self.tails.get(req["tail"])
        if t is None:
            return None
        out = []  # type: list
        t.flush_quiet(float(req.get("quiet", CR_QUIET_S)), out)
        msgs = [m for m in _batch(out) if m.get("t") == "lines"]
        return msgs[0] if msgs else None

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
        evs = []  # type: list
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
                          "uid": os.geteuid(),
                          "python": sys.version.split()[0], "host": socket.gethostname(),
                          "ops": sorted(self.ops) + ["exit"]}])
        busy = False
        last_input = time.monotonic()
        try:
            while True:
                out = []  # type: list
                timeout = 0 if busy else self.poll_interval
                dues = [g.next_t for g in self.gpus.values()]
                dues.extend(d for d in (t.due() for t in self.tails.values()) if d is not None)
                if dues:
                    timeout = max(0.0, min(timeout, min(dues) - time.monotonic()))
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
