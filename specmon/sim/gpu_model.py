"""Simulated H200 GPUs, shared through files so many processes agree without a daemon.

The numbers follow the real captures in shared/fixtures/nvml-h200: idle (no context) SM 345 MHz,
reason GpuIdle (0x1), ~77 W, 36/34 C; a process holding a context but idle: 1980 MHz, reason 0,
~121 W; a compute-heavy load: power pinned near the 700 W limit, reason SwPowerCap (0x4), SM
clock 1440-1500 MHz, GPU 61 C / HBM <=50 C. Power follows P = P_static + P_dyn * (f/fmax)^k,
so lowering the limit lowers the clock, and the clock feeds the sim's throughput model.

Layout of a sim host directory:
  gpu_settings.json   {"gpus": [{"index": 0, "power_limit_w": 700.0, "app_clock_sm": 1980,
                                  "app_clock_mem": 3201}, ...]}   (editable by tests/scenarios)
  servers/<name>.json one file per running sim server (see `register_server`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any

# NVML clock-event reason bits (fixtures/nvml-h200/nvml_constants.json).
REASON_NONE = 0x0
REASON_GPU_IDLE = 0x1
REASON_APP_CLOCKS = 0x2
REASON_SW_POWER_CAP = 0x4
REASON_HW_SLOWDOWN = 0x8
REASON_SW_THERMAL = 0x20

NAME = "NVIDIA H200"
DRIVER_VERSION = "580.159.04"
MAX_CLOCK_SM = 1980
MAX_CLOCK_MEM = 3201
IDLE_CLOCK_SM = 345
MEM_TOTAL_MIB = 143771
DEFAULT_POWER_LIMIT_W = 700.0
MIN_POWER_LIMIT_W = 200.0
TEMP_SLOWDOWN = 89
CLOCK_STEP = 15

P_IDLE_NOCTX = 77.0  # W, no process on the GPU
P_IDLE_CTX = 121.0  # W, a context is open but no kernels run
P_STATIC = 100.0  # W, the part of busy power that does not scale with the clock
P_DYN_GEMM = 1244.0  # W at fmax for a bf16 GEMM loop: 691 W at ~1470 MHz as captured
CLOCK_EXP = 2.5  # dynamic power ~ f^2.5 (voltage scales with f)
TAU_POWER = 0.4  # s, power ramp
TAU_HEAT = 1.5  # s
TAU_COOL = 1.0  # s


def default_sim_dir() -> Path:
    """$SPECMON_SIM_DIR, else a per-user cache folder."""
    env = os.environ.get("SPECMON_SIM_DIR")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("specmon")) / "sim"


def decode_intensity(batch: float) -> float:
    """Dynamic-power share (GEMM = 1.0) of decoding `batch` requests: bs1 is memory-bound
    (~400 W total, no cap at 700 W); large batches approach the GEMM case and hit the cap."""
    if batch <= 0:
        return 0.0
    return 0.22 + 0.55 * (1.0 - math.exp(-batch / 48.0))


def steady_clock(power_limit_w: float, intensity: float, app_clock_sm: int = MAX_CLOCK_SM) -> float:
    """Highest SM clock (MHz, unquantised) at which a load of `intensity` fits the limit."""
    fmax = float(min(app_clock_sm, MAX_CLOCK_SM))
    if intensity <= 0:
        return fmax
    p_dyn = P_DYN_GEMM * intensity
    room = max(1.0, power_limit_w - P_STATIC)
    ratio = (room / p_dyn) ** (1.0 / CLOCK_EXP)
    return max(IDLE_CLOCK_SM * 2.0, min(fmax, fmax * ratio))


def busy_power(clock: float, intensity: float) -> float:
    return P_STATIC + P_DYN_GEMM * intensity * (clock / MAX_CLOCK_SM) ** CLOCK_EXP


def _jitter(key: str, span: int) -> int:
    """Deterministic small integer in [-span, span] so every reader sees the same sample."""
    h = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=4).digest(), "big")
    return h % (2 * span + 1) - span


def _uuid(index: int) -> str:
    h = hashlib.sha1(f"specmon-sim-gpu-{index}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def atomic_write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class SimGpuHost:
    """The GPUs of one simulated host, computed from the files in `sim_dir` at each call."""

    def __init__(self, sim_dir: Path, n_gpus: int = 8) -> None:
        self.sim_dir = Path(sim_dir)
        self.n_gpus = n_gpus
        self._smooth_clock: dict[int, float] = {}

    def sm_clock_ratio(self, index: int, now: float | None = None) -> float:
        """f/fmax that a busy GPU settles at, without sensor jitter: what sim workers use for
        their step time (the reported clock_sm jitters by one 15 MHz step around it)."""
        self._smooth_clock.pop(index, None)
        snap = self.snapshot(now)[index]
        clock = self._smooth_clock.get(index, float(snap["clock_sm"]))
        if clock <= IDLE_CLOCK_SM:
            return 1.0
        return max(0.05, min(1.0, clock / snap["max_clock_sm"]))

    # ------------------------------------------------------------------ settings
    @property
    def settings_path(self) -> Path:
        return self.sim_dir / "gpu_settings.json"

    @property
    def servers_dir(self) -> Path:
        return self.sim_dir / "servers"

    def settings(self) -> list[dict[str, Any]]:
        """Per-GPU settings, defaults filled in for anything missing or malformed."""
        raw = _read_json(self.settings_path)
        by_index: dict[int, dict[str, Any]] = {}
        if isinstance(raw, dict) and isinstance(raw.get("gpus"), list):
            for g in raw["gpus"]:
                if isinstance(g, dict) and isinstance(g.get("index"), int):
                    by_index[g["index"]] = g
        out = []
        for i in range(self.n_gpus):
            g = by_index.get(i, {})
            out.append(
                {
                    "index": i,
                    "power_limit_w": float(g.get("power_limit_w", DEFAULT_POWER_LIMIT_W)),
                    "app_clock_sm": int(g.get("app_clock_sm", MAX_CLOCK_SM)),
                    "app_clock_mem": int(g.get("app_clock_mem", MAX_CLOCK_MEM)),
                }
            )
        return out

    def _write_settings(self, settings: list[dict[str, Any]]) -> None:
        atomic_write_json(self.settings_path, {"gpus": settings})

    def set_power_limit(self, gpu: int | None, watts: float) -> None:
        """Like `nvidia-smi -pl`: clamp to the H200's 200-700 W range. None = all GPUs."""
        watts = max(MIN_POWER_LIMIT_W, min(DEFAULT_POWER_LIMIT_W, float(watts)))
        settings = self.settings()
        for g in settings:
            if gpu is None or g["index"] == gpu:
                g["power_limit_w"] = watts
        self._write_settings(settings)

    # ------------------------------------------------------------------ servers
    def servers(self) -> list[dict[str, Any]]:
        """Registered servers whose main process is still alive."""
        out: list[dict[str, Any]] = []
        if not self.servers_dir.is_dir():
            return out
        for p in sorted(self.servers_dir.glob("*.json")):
            data = _read_json(p)
            if isinstance(data, dict) and isinstance(data.get("pid"), int):
                if _pid_alive(data["pid"]):
                    out.append(data)
        return out

    # ------------------------------------------------------------------ the model
    def snapshot(self, now: float | None = None) -> list[dict[str, Any]]:
        now = time.time() if now is None else now
        settings = self.settings()
        servers = self.servers()
        tick = int(now * 2)  # a new jitter sample every 0.5 s, like a 2 Hz sensor
        out = []
        for s in settings:
            i = s["index"]
            users = [srv for srv in servers if i in srv.get("gpus", [])]
            procs = []
            for srv in users:
                pid = srv.get("worker_pids", {}).get(str(i), srv["pid"])
                procs.append({"pid": int(pid), "used_mib": int(srv.get("mem_used_mib", 0))})
            out.append(self._one_gpu(s, users, procs, now, tick))
        return out

    def _one_gpu(
        self,
        s: dict[str, Any],
        users: list[dict[str, Any]],
        procs: list[dict[str, Any]],
        now: float,
        tick: int,
    ) -> dict[str, Any]:
        i = s["index"]
        limit = s["power_limit_w"]
        app_sm = s["app_clock_sm"]
        fmax = float(min(app_sm, MAX_CLOCK_SM))
        intensity = 0.0
        busy_since: float | None = None
        idle_since: float | None = None
        last_intensity = 0.0
        for srv in users:
            load = srv.get("load") or {}
            if load.get("busy"):
                intensity = max(intensity, float(load.get("intensity", 0.0)))
                bs = float(load.get("since", now))
                busy_since = bs if busy_since is None else min(busy_since, bs)
            else:
                ids = float(load.get("since", now))
                idle_since = ids if idle_since is None else max(idle_since, ids)
                last_intensity = max(last_intensity, float(load.get("last_intensity", 0.0)))
        j = _jitter(f"{i}:{tick}", 1)
        jp = _jitter(f"p{i}:{tick}", 3) * 0.7
        reasons = REASON_NONE
        clock: float  # MHz, unquantised until clock_q
        if not users:
            clock = IDLE_CLOCK_SM
            power = P_IDLE_NOCTX + jp * 0.1
            temp = 36.0
            temp_mem = 34.0
            util = 0
            util_mem = 0
            reasons = REASON_GPU_IDLE
        elif intensity <= 0:
            clock = fmax
            dt = now - (idle_since if idle_since is not None else now)
            prev_p = busy_power(steady_clock(limit, last_intensity, app_sm), last_intensity)
            cool = math.exp(-max(0.0, dt) / TAU_COOL)
            power = P_IDLE_CTX + (max(prev_p, P_IDLE_CTX) - P_IDLE_CTX) * math.exp(
                -max(0.0, dt) / TAU_POWER
            )
            temp = 39.0 + (_temp_gpu(prev_p) - 39.0) * cool if last_intensity > 0 else 39.0
            temp_mem = 36.0 + (_temp_mem(prev_p) - 36.0) * cool if last_intensity > 0 else 36.0
            util = 0
            util_mem = 0
            if app_sm < MAX_CLOCK_SM:
                reasons |= REASON_APP_CLOCKS
        else:
            dt = max(0.0, now - (busy_since if busy_since is not None else now))
            f_ss = steady_clock(limit, intensity, app_sm)
            p_ss = busy_power(f_ss, intensity)
            ramp = 1.0 - math.exp(-dt / TAU_POWER)
            power = P_IDLE_CTX + (p_ss - P_IDLE_CTX) * ramp + jp
            self._smooth_clock[i] = f_ss
            if f_ss < fmax - 1:
                clock = f_ss + j * CLOCK_STEP
                reasons |= REASON_SW_POWER_CAP
                power = min(power, limit - 3.0 + jp)
            else:
                clock = fmax
                if app_sm < MAX_CLOCK_SM:
                    reasons |= REASON_APP_CLOCKS
            heat = 1.0 - math.exp(-dt / TAU_HEAT)
            temp = 39.0 + (_temp_gpu(p_ss) - 39.0) * heat
            temp_mem = 36.0 + (_temp_mem(p_ss) - 36.0) * heat
            util = 100 if intensity > 0.5 else int(min(100, 88 + 20 * intensity))
            util_mem = int(min(99, 20 + 60 * (1 - intensity)))
        clock_q = int(round(clock / CLOCK_STEP) * CLOCK_STEP) if users else IDLE_CLOCK_SM
        clock_q = int(min(clock_q, fmax))
        used = sum(p["used_mib"] for p in procs) + (615 if users else 0)
        return {
            "index": i,
            "name": NAME,
            "uuid": _uuid(i),
            "driver_version": DRIVER_VERSION,
            "clock_sm": clock_q,
            "max_clock_sm": MAX_CLOCK_SM,
            "clock_graphics": clock_q,
            "max_clock_graphics": MAX_CLOCK_SM,
            "clock_mem": MAX_CLOCK_MEM,
            "max_clock_mem": MAX_CLOCK_MEM,
            "app_clock_sm": app_sm,
            "app_clock_mem": s["app_clock_mem"],
            "clocks_event_reasons": reasons,
            "temp_gpu": int(round(temp)),
            "temp_mem": int(round(temp_mem)),
            "temp_slowdown": TEMP_SLOWDOWN,
            "power_w": round(max(0.0, power), 2),
            "power_limit_w": round(limit, 2),
            "util_gpu": util,
            "util_mem": util_mem,
            "mem_used_mib": min(used, MEM_TOTAL_MIB),
            "mem_total_mib": MEM_TOTAL_MIB,
            "pstate": 0,
            "processes": procs,
            "fan_pct": None,
        }


def _temp_gpu(power: float) -> float:
    """Steady GPU temperature: 37 C at 77 W, 61 C at 691 W (captured)."""
    return 34.0 + 0.0386 * power


def _temp_mem(power: float) -> float:
    return 32.0 + 0.026 * power


def register_server(sim_dir: Path, name: str, data: dict[str, Any]) -> Path:
    """Write servers/<name>.json (atomically): pid, port, gpus, worker_pids, load ..."""
    path = Path(sim_dir) / "servers" / f"{name}.json"
    atomic_write_json(path, data)
    return path


def unregister_server(sim_dir: Path, name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        (Path(sim_dir) / "servers" / f"{name}.json").unlink()
