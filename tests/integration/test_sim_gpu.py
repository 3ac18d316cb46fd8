"""The file-based simulated H200s follow the real captures and couple to the power limit."""

import json
import os
import subprocess
import sys

from kit.paths import TESTS

from specmon.sim.gpu_model import (
    REASON_GPU_IDLE,
    REASON_SW_POWER_CAP,
    SimGpuHost,
    register_server,
    unregister_server,
)

DATA = TESTS / "data"
KEYS = {
    "index", "name", "uuid", "driver_version", "clock_sm", "max_clock_sm", "clock_graphics",
    "max_clock_graphics", "clock_mem", "max_clock_mem", "app_clock_sm", "app_clock_mem",
    "clocks_event_reasons", "temp_gpu", "temp_mem", "temp_slowdown", "power_w", "power_limit_w",
    "util_gpu", "util_mem", "mem_used_mib", "mem_total_mib", "pstate", "processes", "fan_pct",
}  # fmt: skip


def constants():
    return json.loads((DATA / "nvml-h200" / "nvml_constants.json").read_text())


def server(tmp_path, intensity, since, busy=True, gpus=(0, 1), pid=None):
    register_server(tmp_path, "s", {
        "pid": pid or os.getpid(), "port": 1, "gpus": list(gpus),
        "worker_pids": {str(g): 1000 + g for g in gpus}, "mem_used_mib": 126000,
        "load": {"busy": busy, "since": since, "intensity": intensity,
                 "last_intensity": intensity},
    })  # fmt: skip


def test_idle_host_looks_like_the_capture(tmp_path):
    snap = SimGpuHost(tmp_path, n_gpus=8).snapshot(now=1000.0)
    assert len(snap) == 8
    g = snap[0]
    assert set(g) == KEYS
    assert g["name"] == "NVIDIA H200" and g["fan_pct"] is None
    assert g["clock_sm"] == 345 and g["max_clock_sm"] == 1980
    idle_bit = constants()["nvmlClocksEventReasonGpuIdle"]
    assert g["clocks_event_reasons"] == idle_bit == REASON_GPU_IDLE
    assert 70 < g["power_w"] < 85 and g["power_limit_w"] == 700.0
    assert g["processes"] == [] and g["pstate"] == 0
    assert len({x["uuid"] for x in snap}) == 8


def test_heavy_load_hits_the_sw_power_cap(tmp_path):
    server(tmp_path, intensity=1.0, since=990.0)
    host = SimGpuHost(tmp_path)
    g = host.snapshot(now=1000.0)[0]
    assert g["clocks_event_reasons"] == constants()["nvmlClocksEventReasonSwPowerCap"]
    assert 1440 <= g["clock_sm"] <= 1515
    assert 680 <= g["power_w"] <= 700 and 58 <= g["temp_gpu"] <= 63 and g["temp_mem"] <= 51
    assert g["util_gpu"] >= 99
    assert g["processes"] == [{"pid": 1000, "used_mib": 126000}]
    assert host.snapshot(now=1000.0)[2]["clock_sm"] == 345  # not used by the server


def test_power_ramps_and_cools(tmp_path):
    server(tmp_path, intensity=1.0, since=1000.0)
    host = SimGpuHost(tmp_path)
    early, late = host.snapshot(now=1000.2)[0], host.snapshot(now=1010.0)[0]
    assert early["power_w"] < late["power_w"] and early["temp_gpu"] < late["temp_gpu"]
    server(tmp_path, intensity=1.0, since=1010.0, busy=False)
    idle = host.snapshot(now=1030.0)[0]
    assert idle["clock_sm"] == 1980 and idle["clocks_event_reasons"] == 0  # context held
    assert idle["power_w"] < 130 and idle["temp_gpu"] <= 40


def test_bs1_decode_is_not_capped_but_a_lower_limit_is(tmp_path):
    server(tmp_path, intensity=0.23, since=900.0)
    host = SimGpuHost(tmp_path)
    g = host.snapshot(now=1000.0)[0]
    assert g["clock_sm"] == 1980 and not g["clocks_event_reasons"] & REASON_SW_POWER_CAP
    host.set_power_limit(0, 300)
    g0, g1 = host.snapshot(now=1000.0)[:2]
    assert g0["power_limit_w"] == 300.0 and g1["power_limit_w"] == 700.0
    assert g0["clocks_event_reasons"] & REASON_SW_POWER_CAP and g0["clock_sm"] < 1900
    assert g0["power_w"] <= 300
    host.set_power_limit(None, 250)
    assert {g["power_limit_w"] for g in host.snapshot(now=1000.0)} == {250.0}
    assert host.snapshot(now=1000.0)[1]["clock_sm"] < g0["clock_sm"]
    host.set_power_limit(None, 50)  # clamped to the H200's minimum
    assert host.snapshot(now=1000.0)[0]["power_limit_w"] == 200.0


def test_dead_servers_are_ignored_and_unregister_removes(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    server(tmp_path, intensity=1.0, since=0.0, pid=p.pid)
    assert SimGpuHost(tmp_path).snapshot(now=10.0)[0]["clock_sm"] == 345
    unregister_server(tmp_path, "s")
    assert not (tmp_path / "servers" / "s.json").exists()


def test_power_limit_command(tmp_path):
    res = subprocess.run(
        [sys.executable, "-m", "specmon", "sim", "power-limit", "400", "--gpu", "3",
         "--sim-dir", str(tmp_path)], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert SimGpuHost(tmp_path).snapshot()[3]["power_limit_w"] == 400.0
    res = subprocess.run(
        [sys.executable, "-m", "specmon", "sim", "power-limit", "400", "--gpu", "9",
         "--sim-dir", str(tmp_path)], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1


def test_workers_clock_ratio_follows_the_power_limit(tmp_path):
    server(tmp_path, intensity=0.23, since=900.0)
    host = SimGpuHost(tmp_path)
    assert host.sm_clock_ratio(0, now=1000.0) == 1.0
    host.set_power_limit(None, 330)
    ratio = host.sm_clock_ratio(0, now=1000.0)
    assert 0.88 < ratio < 0.94
    reported = host.snapshot(now=1000.0)[0]["clock_sm"] / 1980
    assert abs(reported - ratio) < 0.02
    assert host.sm_clock_ratio(5, now=1000.0) == 1.0  # an unused GPU does not slow anyone
