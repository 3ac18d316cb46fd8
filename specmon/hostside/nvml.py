"""NVML telemetry of the host agent: the collector (cheap 1 Hz set, slow values cached), the
agent's sample streams (op nvml_start), and the standalone sampler (`python agent.py gpu`)."""

import json
import os
import signal
import stat
import sys
import time

from .procs import _python_path
from .protocol import AGENT_NAME, GPU_SCHEMA, _one_line

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




_PYNVML = {}  # type: dict  # interpreter -> (module, error): each is looked up once


def _load_pynvml_from(d):
    """Load pynvml from folder `d` (another interpreter's site-packages) without putting
    that folder on our path: nothing of ours is shadowed."""
    import importlib.util

    path = os.path.join(d, "pynvml.py")
    if not os.path.exists(path):
        path = os.path.join(d, "pynvml", "__init__.py")
    spec = importlib.util.spec_from_file_location("pynvml", path)
    if spec is None or spec.loader is None:
        raise ImportError("no loader for %s" % path)
    loader = spec.loader
    mod = importlib.util.module_from_spec(spec)
    saved = sys.modules.get("pynvml")
    sys.modules["pynvml"] = mod
    try:
        loader.exec_module(mod)
        return sys.modules.get("pynvml", mod)  # a module may replace itself (test shims do)
    finally:
        if saved is not None:
            sys.modules["pynvml"] = saved


def import_pynvml(python=None):
    """(module, None) or (None, error text).

    With `python` (an interpreter the user configured, never one taken from a process), its
    pynvml is preferred. nvidia-ml-py is pure Python (ctypes), so it loads into this
    interpreter too. Otherwise, or when that one has none, our own `import pynvml`."""
    if python in _PYNVML:
        return _PYNVML[python]
    why = []  # type: list
    for d in _python_path(python, why) or []:
        if os.path.exists(os.path.join(d, "pynvml.py")) or os.path.isdir(
                os.path.join(d, "pynvml")):
            try:
                res = (_load_pynvml_from(d), None)  # type: tuple
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
