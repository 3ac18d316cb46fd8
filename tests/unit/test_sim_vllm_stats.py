"""The simulated vLLM API server's stats logging, driven step by step (no processes): vLLM's
LoggingStatLogger/SpecDecodingLogging rules on counter deltas, with a controlled clock."""

import argparse
import re
from pathlib import Path

import pytest

from specmon.sim import vllm_server
from specmon.sim.cli_args import add_server_arguments
from specmon.sim.vllm_server import VllmSimServer

SPEC = '{"method": "eagle3", "model": "d", "num_speculative_tokens": 2}'


def server(tmp_path, version, *extra):
    p = argparse.ArgumentParser()
    add_server_arguments(p)
    opts = p.parse_args(["--engine", "vllm", "--format-version", version, "--port", "1",
                         "--log-file", str(tmp_path / "log"), "--sim-dir", str(tmp_path / "h"),
                         "--speculative-config", SPEC, *extra])
    return VllmSimServer(opts)


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def step(srv, clock, dt, *, gen=0, prompt=0, drafts=0, accepted=(0, 0)):
    e = srv.engine
    clock.t += dt
    e.generation_tokens_total += gen
    e.prompt_tokens_total += prompt
    e.spec_drafts_total += drafts
    e.spec_draft_tokens_total += 2 * drafts
    e.spec_accepted_total += sum(accepted)
    for i, a in enumerate(accepted):
        e.spec_accepted_per_pos[i] += a
    log = Path(srv.opts.log_file)
    before = log.read_text() if log.exists() else ""
    srv.log_stats()
    return log.read_text()[len(before):].splitlines()


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(vllm_server.time, "monotonic", c)
    return c


def test_idle_quiet_and_the_0102_accepted_throughput_quirk(tmp_path, clock):
    srv = server(tmp_path, "0.10.2")
    srv._last_t = srv._spec_last_t = clock.t
    assert step(srv, clock, 10) == []  # idle from the start: logged at DEBUG (not printed)
    out = step(srv, clock, 10, gen=300, prompt=50, drafts=100, accepted=(80, 60))
    assert len(out) == 2 and "Avg generation throughput: 30.0 tokens/s" in out[0]
    # the spec logger's clock started with the server: the idle first interval had no drafts,
    # so its log() returned before resetting it; 140 accepted over 20 s, not 10
    assert "Accepted throughput: 7.00 tokens/s" in out[1]
    assert "Mean acceptance length: 2.40" in out[1]
    # one idle interval still prints its Engine line (the last one was busy), then silence
    out = step(srv, clock, 10)
    assert len(out) == 1 and "Avg generation throughput: 0.0 tokens/s" in out[0]
    assert step(srv, clock, 10) == [] and step(srv, clock, 10) == []
    # busy again: the spec line's clock was not reset while there were no drafts, so its
    # accepted throughput divides by the whole 40 s since the last spec line
    out = step(srv, clock, 10, gen=300, drafts=100, accepted=(80, 60))
    assert "Avg generation throughput: 30.0 tokens/s" in out[0]
    assert "Accepted throughput: 3.50 tokens/s" in out[1]  # 140 / 40 s, not 14.00


def test_prefill_only_interval(tmp_path, clock):
    """An interval with tokens but no drafts: 0.9+ prints no spec line, 0.8.5 prints nan."""
    for version, want in (("0.9.2", 1), ("0.8.5", 2)):
        (tmp_path / version).mkdir()
        srv = server(tmp_path / version, version)
        srv._last_t = srv._spec_last_t = clock.t
        out = step(srv, clock, 10, prompt=500, gen=1)
        assert len(out) == want, out
        if want == 2:
            assert re.search(r"Mean acceptance length: nan, .* rate: nan, nan$", out[1]), out[1]


def test_084_prints_even_when_idle(tmp_path, clock):
    srv = server(tmp_path, "0.8.4")
    srv._last_t = srv._spec_last_t = clock.t
    out = step(srv, clock, 10)
    assert len(out) == 2 and "Draft acceptance rate: nan%" in out[1]
