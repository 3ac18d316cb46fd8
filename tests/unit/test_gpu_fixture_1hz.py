"""The agent's own output on a real H200 at 1 Hz: idle, a bf16 matmul load, idle again
(captured with bench/gpu_minute.py through the device tool; see the file's hello line)."""

from __future__ import annotations

from kit.paths import TESTS

from specmon.parse.gpu_sample import AgentHello, GpuSample, decode_reasons, parse_agent_line

FIXTURE = TESTS / "fixtures" / "gpu_agent_h200_1hz_idle_load.jsonl"


def load() -> tuple[AgentHello, list[GpuSample]]:
    hello = None
    samples: list[GpuSample] = []
    for line in FIXTURE.read_text().splitlines():
        parsed = parse_agent_line(line)
        if isinstance(parsed, AgentHello):
            hello = parsed
        elif isinstance(parsed, tuple):
            samples.extend(parsed)
    assert hello is not None
    return hello, samples


def test_fixture_is_a_real_h200_at_one_hertz():
    hello, samples = load()
    assert hello.gpu_count == 1 and hello.driver.startswith("580.")
    assert len(samples) >= 120
    assert all(s.name == "NVIDIA H200" for s in samples)
    ts = [s.ts for s in samples]
    gaps = [b - a for a, b in zip(ts, ts[1:], strict=False)]
    assert 0.9 < sorted(gaps)[len(gaps) // 2] < 1.1
    assert all(s.fan_pct is None for s in samples)  # NotSupported on an H200, never invented


def test_fixture_shows_the_load_clock_and_power_changes():
    _, samples = load()
    idle = [s for s in samples if s.clocks_event_reasons is not None and s.clocks_event_reasons & 0x1]
    busy = [s for s in samples if s.util_gpu and s.util_gpu >= 95]
    assert len(idle) >= 50 and len(busy) >= 40
    # idle: 345 MHz, ~80 W; under the matmul load: the 700 W cap holds SM clock near 1455-1500
    idle_clocks = sorted(s.clock_sm for s in idle)
    assert idle_clocks[len(idle_clocks) // 2] == 345
    assert sorted(s.power_w for s in idle)[len(idle) // 2] < 100
    assert all(1300 <= s.clock_sm <= 1980 for s in busy)
    assert sum(s.power_w for s in busy) / len(busy) > 600
    assert any("SwPowerCap" in decode_reasons(s.clocks_event_reasons) for s in busy)
    # idle again after the load: the capture goes idle -> load -> idle
    last_busy = max(i for i, s in enumerate(samples) if s in busy)
    assert any(s in idle for s in samples[last_busy + 1:])
