"""A stand-in for the `pynvml` module with H200-like values, for tests and the poll-cost bench.

It implements only the calls the GPU agent makes, with the numbers measured on a real H200
(fixtures/nvml-h200): idle = SM 345 MHz, reason GpuIdle; load = SM 1470 MHz, reason SwPowerCap,
692 W of 700 W. Fan speed answers NotSupported, like the real board. `calls` counts invocations
so tests can check that an unsupported call is not repeated.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15

_MESSAGES = {
    1: "Uninitialized",
    3: "Not Supported",
    6: "Not Found",
    12: "NVML Shared Library Not Found",
    13: "Function Not Found",
    15: "GPU is lost",
}


class NVMLError(Exception):
    """Same shape as pynvml's: the NVML return code is in `.value`."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _MESSAGES.get(self.value, f"NVML error {self.value}")


_STATES: dict[str, dict[str, Any]] = {
    "idle": {
        "clock_sm": 345, "clock_graphics": 345, "clock_mem": 3201, "reasons": 0x1,
        "temp_gpu": 36, "temp_mem": 34, "power_mw": 77309, "util": (0, 0),
        "mem_used": 0, "processes": [],
    },
    "load": {
        "clock_sm": 1470, "clock_graphics": 1470, "clock_mem": 3201, "reasons": 0x4,
        "temp_gpu": 61, "temp_mem": 48, "power_mw": 692040, "util": (100, 24),
        "mem_used": 1139 * 1024 * 1024, "processes": [(4242, 1139 * 1024 * 1024)],
    },
}

# Calls that read a device (handle first), used to fail them on demand.
DEVICE_CALLS = (
    "nvmlDeviceGetName nvmlDeviceGetUUID nvmlDeviceGetMaxClockInfo nvmlDeviceGetApplicationsClock "
    "nvmlDeviceGetTemperatureThreshold nvmlDeviceGetComputeRunningProcesses "
    "nvmlDeviceGetCurrentClocksEventReasons nvmlDeviceGetCurrentClocksThrottleReasons "
    "nvmlDeviceGetMemoryInfo nvmlDeviceGetFieldValues nvmlDeviceGetClockInfo "
    "nvmlDeviceGetPowerUsage nvmlDeviceGetEnforcedPowerLimit nvmlDeviceGetUtilizationRates "
    "nvmlDeviceGetTemperature nvmlDeviceGetPerformanceState nvmlDeviceGetFanSpeed"
).split()


class FakeNvml:
    """Module-like object: `FakeNvml(n_gpus=2, state="load")` then pass it where pynvml goes.

    unsupported: call names answering NotSupported (fan speed always does);
    missing: call names absent from the module (an older binding);
    errors: call name -> NVML error code raised on every call (e.g. GPU lost).
    """

    NVMLError = NVMLError
    NVML_CLOCK_GRAPHICS = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0
    NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
    NVML_FI_DEV_MEMORY_TEMP = 82
    nvmlMemory_v2 = 0x02000028
    __version__ = "fake"

    def __init__(
        self,
        n_gpus: int = 1,
        state: str = "idle",
        unsupported: Iterable[str] = (),
        missing: Iterable[str] = (),
        errors: dict[str, int] | None = None,
        init_error: int | None = None,
    ) -> None:
        self.n_gpus = n_gpus
        self.state = state
        self.unsupported = {"nvmlDeviceGetFanSpeed", *unsupported}
        self.errors = dict(errors or {})
        self.init_error = init_error
        self.calls: Counter[str] = Counter()
        self.initialized = False
        for name in missing:
            setattr(self, name, None)  # getattr(mod, name, None) -> None, like a missing symbol

    def __getattribute__(self, name: str) -> Any:
        val = object.__getattribute__(self, name)
        if name.startswith("nvmlDevice") and name != "nvmlDeviceGetCount" and callable(val):
            calls: Counter[str] = object.__getattribute__(self, "calls")
            unsupported = object.__getattribute__(self, "unsupported")
            errors = object.__getattribute__(self, "errors")

            def wrapped(*args: Any, **kw: Any) -> Any:
                calls[name] += 1
                if name in errors:
                    raise NVMLError(errors[name])
                if name in unsupported:
                    raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
                return val(*args, **kw)

            return wrapped
        return val

    @property
    def _s(self) -> dict[str, Any]:
        return _STATES[self.state]

    # system
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self.initialized = False

    def nvmlSystemGetDriverVersion(self) -> str:
        return "580.159.04"

    def nvmlSystemGetNVMLVersion(self) -> str:
        return "13.580.159.04"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 13000

    def nvmlDeviceGetCount(self) -> int:
        return self.n_gpus

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    # static
    def nvmlDeviceGetName(self, h: int) -> str:
        return "NVIDIA H200"

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-fake0000-0000-0000-0000-{h:012d}"

    def nvmlDeviceGetMaxClockInfo(self, h: int, t: int) -> int:
        return {0: 1980, 1: 1980, 2: 3201}[t]

    def nvmlDeviceGetApplicationsClock(self, h: int, t: int) -> int:
        return {0: 1980, 1: 1980, 2: 3201}[t]

    def nvmlDeviceGetTemperatureThreshold(self, h: int, t: int) -> int:
        return {0: 95, 1: 89, 2: 95, 3: 87}[t]

    # hot
    def nvmlDeviceGetClockInfo(self, h: int, t: int) -> int:
        return {0: self._s["clock_graphics"], 1: self._s["clock_sm"], 2: self._s["clock_mem"]}[t]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return int(self._s["reasons"])

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: int) -> int:
        return int(self._s["reasons"])

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return int(self._s["temp_gpu"])

    def nvmlDeviceGetFieldValues(self, h: int, ids: list[int]) -> list[Any]:
        out = []
        for fid in ids:
            if fid == 82:
                val = SimpleNamespace(uiVal=self._s["temp_mem"])
                out.append(SimpleNamespace(fieldId=fid, valueType=1, nvmlReturn=0, value=val))
            else:
                out.append(SimpleNamespace(fieldId=fid, valueType=1, nvmlReturn=3, value=None))
        return out

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return int(self._s["power_mw"])

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return 700000

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        g, m = self._s["util"]
        return SimpleNamespace(gpu=g, memory=m)

    def nvmlDeviceGetMemoryInfo(self, h: int, version: int | None = None) -> Any:
        total = 143771 * 1024 * 1024
        used = self._s["mem_used"] + (0 if version else 615 * 1024 * 1024)
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetPerformanceState(self, h: int) -> int:
        return 0

    def nvmlDeviceGetFanSpeed(self, h: int) -> int:
        return 30

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in self._s["processes"]]
