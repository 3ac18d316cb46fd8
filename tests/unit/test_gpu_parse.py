"""GPU telemetry parsing: reason masks, nvidia-smi CSV, NVML probe/agent records."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kit.paths import TESTS

from specmon.parse.gpu_sample import (
    SMI_DEFAULT_FIELDS,
    AgentError,
    AgentHello,
    GpuProcess,
    GpuSample,
    SmiBatcher,
    choose_smi_fields,
    classify_smi_failure,
    decode_reasons,
    encode_reasons,
    is_clock_limited,
    parse_agent_line,
    parse_smi_csv,
    parse_smi_line,
    reasons_explanation,
    sample_from_probe,
    split_smi_line,
)

DATA = TESTS / "data"
NVML = DATA / "nvml-h200"


def _read(p: Path) -> str:
    assert p.exists(), f"fixture missing: {p}"
    return p.read_text()


# -- reasons ---------------------------------------------------------------------------------


def test_decode_reasons_matches_nvml_constants():
    consts = json.loads(_read(NVML / "nvml_constants.json"))
    checked = 0
    for key, value in consts.items():
        suffix = key.removeprefix("nvmlClocksEventReason").removeprefix(
            "nvmlClocksThrottleReason"
        )
        if suffix in ("All", "None"):
            continue
        expected = "ApplicationsClocksSetting" if suffix == "UserDefinedClocks" else suffix
        assert decode_reasons(value) == (expected,), key
        checked += 1
    assert checked == 20
    assert decode_reasons(consts["nvmlClocksEventReasonNone"]) == ()
    all_names = decode_reasons(consts["nvmlClocksEventReasonAll"])
    assert all_names[0] == "GpuIdle" and all_names[-1] == "DisplayClockSetting"
    assert len(all_names) == 9


def test_decode_reasons_edge_cases():
    assert decode_reasons(None) == ()
    assert decode_reasons(0x4 | 0x40) == ("SwPowerCap", "HwThermalSlowdown")
    assert decode_reasons(0x800) == ("0x800",)  # unknown bits are kept, not dropped


@given(st.integers(min_value=0, max_value=0xFFFF))
def test_encode_decode_roundtrip(mask: int):
    assert encode_reasons(decode_reasons(mask)) == mask


def test_reasons_explanation():
    assert "no clock limit" in reasons_explanation(())
    assert "power limit" in reasons_explanation(("SwPowerCap",))
    text = reasons_explanation(("SwPowerCap", "HwThermalSlowdown"))
    assert "power limit" in text and "thermal" in text


# -- nvidia-smi CSV ---------------------------------------------------------------------------


def test_smi_capture_idle_load_idle():
    samples = parse_smi_csv(_read(NVML / "nvidia-smi-query.csv"))
    assert len(samples) == 74
    first = samples[0]
    assert (first.index, first.name, first.pstate) == (0, "NVIDIA H200", 0)
    assert first.uuid == "GPU-be713b61-0fcf-3410-16b2-350786a51388"
    assert (first.clock_sm, first.max_clock_sm, first.clock_mem) == (375, 1980, 3201)
    assert first.reasons == ("GpuIdle",)
    assert first.power_w == pytest.approx(114.29) and first.power_limit_w == 700.0
    assert (first.temp_gpu, first.temp_mem, first.mem_total_mib) == (36, 34, 143771)
    assert first.source == "nvidia-smi" and first.processes is None
    ts = [s.ts for s in samples]
    assert all(b - a == pytest.approx(1.0, abs=0.1) for a, b in zip(ts, ts[1:], strict=False))

    # phases: idle (GpuIdle) -> load (SwPowerCap) -> idle at full clock (no reason)
    phases = [s.reasons for s in samples]
    order = [p for i, p in enumerate(phases) if i == 0 or p != phases[i - 1]]
    assert order == [("GpuIdle",), (), ("SwPowerCap",), ()]
    capped = [s for s in samples if s.reasons == ("SwPowerCap",)]
    assert len(capped) == 40
    steady = [s.clock_sm for s in capped[:-1]]  # the last one is the ramp back up (1965)
    assert min(steady) == 1455 and max(steady) == 1500
    assert statistics.median(steady) == 1470
    assert all(s.power_w > 680 for s in capped[:-1])
    assert all(is_clock_limited(s) for s in capped[:-1])
    assert not is_clock_limited(capped[-1])  # 1965 of 1980
    assert not any(is_clock_limited(s) for s in samples if s.reasons != ("SwPowerCap",))


def test_smi_boolean_columns_and_throttle_spelling_agree():
    text = _read(NVML / "nvidia-smi-query.csv")
    ref = parse_smi_csv(text)
    # old drivers spell the fields clocks_throttle_reasons.*
    old = parse_smi_csv(text.replace("clocks_event_reasons.", "clocks_throttle_reasons."))
    assert old == ref
    # without the hex column the mask is rebuilt from the Active/Not Active columns
    lines = text.splitlines()
    drop = [c.strip() for c in lines[0].split(",")].index("clocks_event_reasons.active")

    def without(line: str) -> str:
        cells = line.split(", ")
        return ", ".join(cells[:drop] + cells[drop + 1 :])

    rebuilt = parse_smi_csv("\n".join(without(ln) for ln in lines))
    assert [s.clocks_event_reasons for s in rebuilt] == [s.clocks_event_reasons for s in ref]


def test_smi_placeholders_become_none():
    cols = ["index", "clocks.sm", "fan.speed", "temperature.memory", "power.draw", "name"]
    placeholders = ("[N/A]", "[Not Supported]", "N/A", "[Unknown Error]", "[GPU requires reset]")
    for placeholder in placeholders:
        s = parse_smi_line(f"3, 1410, {placeholder}, {placeholder}, 690.5, NVIDIA H200", cols)
        assert (s.index, s.clock_sm, s.power_w, s.name) == (3, 1410, 690.5, "NVIDIA H200")
        assert s.fan_pct is None and s.temp_mem is None


def test_smi_stream_capture_from_h200():
    fields = _read(DATA / "nvidia_smi_stream_h200.fields").strip().split(",")
    lines = _read(DATA / "nvidia_smi_stream_h200.csv").splitlines()
    samples = [parse_smi_line(ln, fields, ts=float(i)) for i, ln in enumerate(lines)]
    assert len(samples) == 5
    for i, s in enumerate(samples):
        assert s.ts == float(i)  # the given receive time wins over the remote timestamp
        assert s.reasons == ("GpuIdle",) and s.clock_sm == 345 and s.max_clock_sm == 1980
        assert s.app_clock_graphics == 1980 and s.app_clock_mem == 3201
        assert s.driver_version == "580.159.04" and s.name == "NVIDIA H200"
        assert s.fan_pct is None  # "[N/A]" on an H200
        assert s.temp_mem == 33 and s.mem_used_mib == 0


def test_choose_smi_fields_from_real_help():
    help_text = _read(DATA / "nvidia_smi_help_query_gpu_580.txt")
    chosen = choose_smi_fields(help_text)
    assert ",".join(chosen) == _read(DATA / "nvidia_smi_stream_h200.fields").strip()
    assert "clocks_event_reasons.active" in chosen and chosen[-1] == "name"
    # an older driver that only knows the throttle spelling and no memory temperature
    old = help_text.replace('"clocks_event_reasons.', '"x.').replace('"temperature.memory"', "")
    chosen_old = choose_smi_fields(old)
    assert "clocks_throttle_reasons.active" in chosen_old
    assert "temperature.memory" not in chosen_old
    assert choose_smi_fields("NVIDIA-SMI has failed") == SMI_DEFAULT_FIELDS


def test_split_keeps_commas_in_last_column_and_rejects_short_rows():
    assert split_smi_line("0, GPU-x, Board, Rev. B", 3) == ["0", "GPU-x", "Board, Rev. B"]
    with pytest.raises(ValueError, match="expected 3 columns"):
        parse_smi_line("NVIDIA-SMI has failed because it couldn't communicate", ["a", "b", "c"])


def test_smi_batcher_groups_polls():
    b = SmiBatcher()
    rows = [GpuSample(index=i % 2, clock_sm=i) for i in range(5)]
    out = [b.feed(r) for r in rows]
    assert out[0] is None and out[1] is None
    assert [s.clock_sm for s in out[2]] == [0, 1]  # poll ends when index 0 repeats
    assert [s.clock_sm for s in out[3]] == [2, 3]  # count known: emitted without delay
    assert out[4] is None
    assert [s.clock_sm for s in b.flush()] == [4]
    assert b.flush() is None


def test_classify_smi_failure():
    assert classify_smi_failure([]).startswith("nvidia-smi not found")
    msg = classify_smi_failure(
        ["NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."]
    )
    assert msg.startswith("NVML not available (driver not loaded?)")
    assert classify_smi_failure(["No devices were found"]) == "no GPUs"


# -- NVML records -----------------------------------------------------------------------------


def test_probe_samples_map_to_gpusamples():
    lines = _read(NVML / "nvml_samples.jsonl").splitlines()
    samples = [sample_from_probe(json.loads(ln)) for ln in lines]
    assert len(samples) == 105
    first = samples[0]
    assert first.clock_sm == 345 and first.reasons == ("GpuIdle",)
    assert first.power_w == pytest.approx(99.162) and first.power_limit_w == 700.0
    assert first.mem_used_mib == pytest.approx(615.06, abs=0.01)
    assert (first.app_clock_sm, first.temp_slowdown, first.processes) == (1980, 89, ())
    assert first.fan_pct is None  # NotSupported: the probe recorded nothing
    capped = [s for s in samples if "SwPowerCap" in s.reasons]
    assert len(capped) > 50
    assert 1400 <= statistics.median(s.clock_sm for s in capped) <= 1550
    assert any(is_clock_limited(s) for s in capped)
    for s in samples:
        assert GpuSample.from_agent_json(s.to_json()) == s


def test_from_agent_json_is_lenient():
    s = GpuSample.from_agent_json(
        {
            "index": 1,
            "clock_sm": "abc",
            "max_clock_sm": True,
            "power_w": float("nan"),
            "temp_gpu": 61,
            "pstate": "P2",
            "processes": [{"pid": 7, "used_mib": 10}, {"pid": "x"}, 5],
            "future_field": 1,
        },
        ts=12.5,
    )
    assert (s.index, s.clock_sm, s.max_clock_sm, s.power_w) == (1, None, None, None)
    assert (s.temp_gpu, s.pstate, s.ts) == (61.0, 2, 12.5)
    assert s.processes == (GpuProcess(7, 10.0),)
    with pytest.raises(ValueError):
        GpuSample.from_agent_json([1, 2])  # type: ignore[arg-type]


def test_a_value_out_of_range_is_none_like_an_ill_typed_one():
    """The snapshot reader's bounds (numfmt.MAX_INT, MAX_TIME for ts), applied where a sample
    is read: float(10**400) raised OverflowError, int() of a 5000-digit pstate or clock text
    raised ValueError with Python's set_int_max_str_digits advice, and 1e300 W was kept."""
    from specmon.numfmt import MAX_INT

    s = GpuSample.from_agent_json({"index": 10 ** 30, "clock_sm": 10 ** 400, "power_w": 1e300,
                                   "temp_gpu": 10 ** 400, "util_gpu": -1e19,
                                   "pstate": "P" + "9" * 5000, "clock_mem": "9" * 5000,
                                   "max_clock_sm": 1e300, "app_clock_sm": float("inf"),
                                   "ts": 1e18, "processes": [{"pid": 10 ** 30}]}, ts=1e300)
    assert all(getattr(s, f) is None for f in ("index", "clock_sm", "power_w", "temp_gpu",
                                               "util_gpu", "pstate", "clock_mem",
                                               "max_clock_sm", "app_clock_sm", "ts"))
    assert s.processes == ()
    s = GpuSample.from_agent_json({"clock_sm": MAX_INT, "power_w": 1e18, "pstate": "P\u0663",
                                   "clock_mem": "0x10", "ts": 1e18}, ts=12.5)
    assert (s.clock_sm, s.power_w, s.pstate, s.clock_mem, s.ts) == (MAX_INT, 1e18, None, 16, 12.5)
    assert GpuSample.from_agent_json({"pstate": " P8 "}).pstate == 8
    row = parse_smi_line(", ".join(["0", "9" * 400, "9" * 400]),
                         ["index", "clocks.current.sm", "power.draw"])
    assert (row.index, row.clock_sm, row.power_w) == (0, None, None)  # ("9"*400 reads as inf)


def test_parse_agent_line_kinds():
    hello = parse_agent_line('{"type":"hello","schema":1,"gpu_count":8,"driver":"580.1"}')
    assert isinstance(hello, AgentHello) and hello.gpu_count == 8 and hello.driver == "580.1"
    err = parse_agent_line('{"error": "NVML not available: Driver Not Loaded"}')
    assert isinstance(err, AgentError) and "Driver Not Loaded" in err.message
    rec = parse_agent_line('{"type":"sample","ts":5.0,"gpus":[{"index":0},{"index":1}]}')
    assert isinstance(rec, tuple) and [s.index for s in rec] == [0, 1]
    assert all(s.ts == 5.0 for s in rec)
    for bad in ("Traceback (most recent call last):", "[1]", '{"type":"weird"}'):
        with pytest.raises(ValueError) as ei:
            parse_agent_line(bad)
        assert "\n" not in str(ei.value)


def test_agent_capture_from_real_h200():
    lines = _read(DATA / "gpu_agent_h200.jsonl").splitlines()
    hello = parse_agent_line(lines[0])
    assert isinstance(hello, AgentHello)
    assert hello.schema == 1 and hello.gpu_count == 1 and hello.driver == "580.159.04"
    polls = [parse_agent_line(ln) for ln in lines[1:]]
    assert len(polls) == 24
    samples = []
    for poll in polls:
        assert isinstance(poll, tuple) and len(poll) == 1
        samples.append(poll[0])
    always = (
        "ts index name uuid driver_version clock_sm max_clock_sm clock_graphics "
        "max_clock_graphics clock_mem max_clock_mem app_clock_sm app_clock_graphics "
        "app_clock_mem clocks_event_reasons temp_gpu temp_mem temp_slowdown power_w "
        "power_limit_w util_gpu util_mem mem_used_mib mem_total_mib pstate processes"
    ).split()
    for s in samples:
        missing = [f for f in always if getattr(s, f) is None]
        assert not missing, missing
        assert s.fan_pct is None and s.error is None and s.source == "nvml"
        assert s.max_clock_sm == 1980 and s.temp_slowdown == 89 and s.power_limit_w == 700
    assert [s.ts for s in samples] == sorted(s.ts for s in samples)
    capped = [s for s in samples if s.reasons == ("SwPowerCap",)]
    assert len(capped) >= 5
    assert all(1400 <= s.clock_sm <= 1550 for s in capped[1:-1])
    assert all(s.processes for s in capped)  # the load's process is listed
    assert samples[-1].reasons == ("GpuIdle",) and samples[-1].clock_sm == 345
    assert samples[-1].processes == ()
    assert sum(is_clock_limited(s) for s in samples) == len(capped) - 1  # minus the 1935 ramp


def test_is_clock_limited_needs_data():
    assert not is_clock_limited(GpuSample(clock_sm=None, max_clock_sm=1980))
    assert not is_clock_limited(GpuSample(clock_sm=1000, max_clock_sm=None))
    assert not is_clock_limited(GpuSample(clock_sm=345, max_clock_sm=1980))  # idle unknown
    assert is_clock_limited(GpuSample(clock_sm=1000, max_clock_sm=1980, util_gpu=100))
    assert not is_clock_limited(
        GpuSample(clock_sm=345, max_clock_sm=1980, clocks_event_reasons=1, util_gpu=3)
    )
    assert is_clock_limited(GpuSample(clock_sm=1781, max_clock_sm=1980, clocks_event_reasons=0))
    assert not is_clock_limited(
        GpuSample(clock_sm=1782, max_clock_sm=1980, clocks_event_reasons=0)
    )
