"""A stand-in `pynvml` for agent tests: put this directory first on PYTHONPATH and describe
the faults in $SPECMON_FAKE_NVML (JSON):

  {"gpus": 2, "state": "load",
   "init_error": 12,                 # nvmlInit raises NVMLError(12)
   "init_raises": "OSError",         # nvmlInit raises a non-NVML exception
   "not_supported": ["nvmlDeviceGetPowerUsage", ...],   # NVMLError_NotSupported, every GPU
   "lose_gpu": 1, "lose_after": 3}   # GPU 1 answers GPU_IS_LOST after 3 samples

Importing it replaces the module with a FakeNvml (H200-like values, fake_nvml.py beside it).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from fake_nvml import FakeNvml, NVMLError


class NVMLError_NotSupported(NVMLError):  # noqa: N801 - pynvml's own class name
    def __init__(self) -> None:
        super().__init__(3)


class NVMLError_GpuIsLost(NVMLError):  # noqa: N801
    def __init__(self) -> None:
        super().__init__(15)


class FaultyNvml(FakeNvml):
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_GpuIsLost = NVMLError_GpuIsLost

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__(n_gpus=cfg.get("gpus", 2), state=cfg.get("state", "load"),
                         init_error=cfg.get("init_error"))
        self.fault = {
            "not_supported": set(cfg.get("not_supported", [])),
            "lose_gpu": cfg.get("lose_gpu"),
            "lose_after": int(cfg.get("lose_after", 0)),
            "samples": 0,
            "init_raises": cfg.get("init_raises"),
        }

    def nvmlInit(self) -> None:
        exc = self.fault["init_raises"]
        if exc:
            raise {"OSError": OSError, "RuntimeError": RuntimeError}[exc]("libnvidia-ml.so.1: "
                                                                           "cannot open")
        super().nvmlInit()

    def __getattribute__(self, name: str) -> Any:
        val = super().__getattribute__(name)
        if (not name.startswith("nvmlDevice") or not callable(val)
                or name in ("nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex")):
            return val
        fault = object.__getattribute__(self, "fault")

        def faulty(*args: Any, **kw: Any) -> Any:
            handle = args[0] if args else None
            if name == "nvmlDeviceGetTemperature" and handle == 0:
                fault["samples"] += 1  # read once per GPU and sample, GPU 0 first
            if handle == fault["lose_gpu"] and fault["samples"] > fault["lose_after"]:
                raise NVMLError_GpuIsLost()
            if name in fault["not_supported"]:
                raise NVMLError_NotSupported()
            return val(*args, **kw)

        return faulty


sys.modules[__name__] = FaultyNvml(json.loads(os.environ.get("SPECMON_FAKE_NVML") or "{}"))
