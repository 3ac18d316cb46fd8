"""The GPU agent under a faulty pynvml: NotSupported per field, failures at init, a GPU lost
mid-run. The stream must go on with None fields and a clear status (issue 5)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pynvml  # the real nvidia-ml-py: its exception classes (no driver needed)
import pytest
from kit.paths import TESTS
from nvml_shim.fake_nvml import FakeNvml

from specmon.hosts.local import LocalHost
from specmon.hostside.nvml import NvmlCollector
from specmon.parse.gpu_sample import GpuSample
from specmon.sources.gpu_poll import NVML_UNAVAILABLE, GpuSourceError, RemoteAgentSource

SHIM = TESTS / "nvml_shim"

# Which sample fields each NVML call feeds (None when the call answers NotSupported).
FIELDS_OF_CALL = {
    "nvmlDeviceGetName": {"name"},
    "nvmlDeviceGetUUID": {"uuid"},
    "nvmlDeviceGetMaxClockInfo": {"max_clock_sm", "max_clock_graphics", "max_clock_mem"},
    "nvmlDeviceGetApplicationsClock": {"app_clock_sm", "app_clock_graphics", "app_clock_mem"},
    "nvmlDeviceGetTemperatureThreshold": {"temp_slowdown"},
    "nvmlDeviceGetComputeRunningProcesses": {"processes"},
    "nvmlDeviceGetCurrentClocksEventReasons": set(),  # the older throttle call stands in
    "nvmlDeviceGetCurrentClocksThrottleReasons": set(),  # not needed while the new one works
    "nvmlDeviceGetMemoryInfo": {"mem_used_mib", "mem_total_mib"},
    "nvmlDeviceGetFieldValues": {"temp_mem"},
    "nvmlDeviceGetClockInfo": {"clock_sm", "clock_graphics", "clock_mem"},
    "nvmlDeviceGetPowerUsage": {"power_w"},
    "nvmlDeviceGetEnforcedPowerLimit": {"power_limit_w"},
    "nvmlDeviceGetUtilizationRates": {"util_gpu", "util_mem"},
    "nvmlDeviceGetTemperature": {"temp_gpu"},
    "nvmlDeviceGetPerformanceState": {"pstate"},
}


class RealErrorsNvml(FakeNvml):
    """FakeNvml whose failing calls raise the real pynvml exception classes."""

    def __init__(self, not_supported: set[str], **kw: Any) -> None:
        super().__init__(**kw)
        self.not_supported = not_supported
        self.failed = 0

    def __getattribute__(self, name: str) -> Any:
        val = super().__getattribute__(name)
        if name in object.__getattribute__(self, "not_supported"):
            def fail(*_: Any, **__: Any) -> Any:
                self.failed += 1
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
            return fail
        return val


def _rows(col: NvmlCollector, n: int) -> list[list[dict[str, Any]]]:
    return [col.sample()["gpus"] for _ in range(n)]


@pytest.mark.parametrize("call", sorted(FIELDS_OF_CALL))
def test_not_supported_per_field_hides_only_that_field(call: str):
    assert issubclass(pynvml.NVMLError_NotSupported, pynvml.NVMLError)
    good = _rows(NvmlCollector(FakeNvml(n_gpus=2, state="load")), 1)[0]
    fake = RealErrorsNvml({call}, n_gpus=2, state="load")
    ticks = iter(range(10_000))  # one simulated second per sample: every tier comes round
    col = NvmlCollector(fake, clock=lambda: float(next(ticks)))
    rows = _rows(col, 1)
    failed = fake.failed
    for gpus in rows + _rows(col, 40):
        for g, ref in zip(gpus, good, strict=True):
            differ = {k for k in g if g[k] != ref[k]}
            assert differ == FIELDS_OF_CALL[call], (call, differ)
            assert all(g[k] is None for k in differ)
            assert g["error"] is None  # NotSupported is a missing value, not a fault
    # the unsupported call is not retried every second
    assert fake.failed == failed


def test_both_reason_calls_unsupported_leaves_reasons_none():
    col = NvmlCollector(RealErrorsNvml({"nvmlDeviceGetCurrentClocksEventReasons",
                                        "nvmlDeviceGetCurrentClocksThrottleReasons"}))
    s = GpuSample.from_agent_json(col.sample()["gpus"][0])
    assert s.reasons is None or s.reasons == ()
    assert s.clock_sm == 345 and s.power_w is not None


# -- the agent program itself, with the shim as its pynvml ------------------------------------


@pytest.fixture
def shim_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Pythons started from here import tests/nvml_shim/pynvml.py; PATH has no nvidia-smi."""

    def configure(**cfg: Any) -> None:
        monkeypatch.setenv("PYTHONPATH", str(SHIM))
        monkeypatch.setenv("SPECMON_FAKE_NVML", json.dumps(cfg))

    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    return configure


async def _collect(src: RemoteAgentSource, n: int) -> list[list[GpuSample]]:
    out = []
    it = src.__aiter__()
    try:
        async for batch in it:
            out.append(batch)
            if len(out) == n:
                break
    finally:
        await it.aclose()
    return out


async def test_agent_stream_goes_on_when_a_gpu_is_lost_and_fields_unsupported(shim_env):
    shim_env(gpus=2, lose_gpu=1, lose_after=3,
             not_supported=["nvmlDeviceGetPowerUsage", "nvmlDeviceGetFieldValues"])
    src = RemoteAgentSource(LocalHost(), interval=0.02, python=sys.executable)
    batches = await _collect(src, 10)
    assert src.kind == "nvml-agent"
    assert all([s.index for s in b] == [0, 1] for b in batches)
    for i, (g0, g1) in enumerate(batches):
        for s in (g0, g1):
            assert s.power_w is None and s.temp_mem is None  # NotSupported everywhere
        assert g0.error is None and g0.clock_sm == 1470 and g0.power_limit_w == 700.0
        if i < 3:
            assert g1.error is None and g1.clock_sm == 1470
        else:  # lost: a clear status, no live values, static ones kept
            assert g1.error == "GPU is lost"
            assert (g1.clock_sm, g1.temp_gpu, g1.util_gpu, g1.power_limit_w) == (None,) * 4
            assert g1.name == "NVIDIA H200" and g1.max_clock_sm == 1980
    pid = src.hello.raw["pid"] if src.hello else None
    assert pid is not None


@pytest.mark.parametrize(
    ("cfg", "reason"),
    [
        ({"init_error": 12}, "NVML Shared Library Not Found"),
        ({"init_error": 18}, "NVML error 18"),
        ({"init_raises": "OSError"}, "libnvidia-ml.so.1: cannot open"),
    ],
)
async def test_agent_init_failure_is_one_clear_status(shim_env, cfg, reason):
    shim_env(**cfg)
    src = RemoteAgentSource(LocalHost(), interval=0.02, python=sys.executable)
    with pytest.raises(GpuSourceError) as info:
        await _collect(src, 1)
    # NVML failed, nvidia-smi (the fallback) was tried and is absent: say why, in one line
    assert str(info.value) == f"{NVML_UNAVAILABLE}: {reason}"
    assert src.kind == "nvidia-smi"
    assert src.attempts == [f"{sys.executable}: NVML not available: {reason}"]
