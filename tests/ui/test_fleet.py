"""Several hosts at once: three real sshd instances on loopback, one killed and restarted while
the others keep updating, read through the Prometheus exporter (parsed with prometheus-client's
own parser). Also the pure parts: multi-node grouping, summary rows, drift metrics, --prometheus
addresses, [[hosts]] config and the CLI's one-line errors."""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from kit.paths import ROOT
from kit.sshd import Sshd
from kit.wait import until
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from specmon.analysis.drift import BaselineStats
from specmon.export.prometheus import METRIC_NAMES, parse_listen, registry_for, serve
from specmon.feeds.host import HostFeed, HostFeeds
from specmon.hosts.base import ConnectionState
from specmon.hosts.ssh import SshHost
from specmon.parse.gpu_sample import GpuProcess, GpuSample, encode_reasons
from specmon.parse.sglang import parse_line
from specmon.session.events import LineItem
from specmon.session.fleet import FleetSession, ServerInfo
from specmon.sources.discovery import Proc, find_servers
from specmon.sources.tail import TailSpec

REPO = ROOT


def decode(tok_s: float, rr: int = 1, accept: float | None = None) -> str:
    acc = f"accept len: {accept:.2f}, " if accept is not None else ""
    return (f"[2025-06-01 12:00:00 TP0] Decode batch, #running-req: {rr}, #token: {100 * rr}, "
            f"token usage: 0.01, {acc}gen throughput (token/s): {tok_s:.2f}, #queue-req: 0, ")


def append(path: Path, lines: list[str]) -> None:
    with open(path, "a") as f:
        f.write("".join(line + "\n" for line in lines))


def families(text: str) -> dict[str, list]:
    """name -> samples, through prometheus-client's own text parser."""
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(text):
        out.setdefault(fam.name, []).extend(fam.samples)
    return out


def value(fams: dict[str, list], name: str, **labels: str) -> float | None:
    hits = [s.value for s in fams.get(name, []) if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(hits) <= 1, (name, labels, hits)
    return hits[0] if hits else None


def fake_python(tmp: Path) -> Path:
    """A python for the GPU agent whose `import pynvml` gets the fake H200 NVML (2 GPUs, load)."""
    mod = tmp / "fakenvml"
    mod.mkdir()
    (mod / "pynvml.py").write_text(
        f"import sys\nsys.path.insert(0, {str(REPO / 'tests' / 'nvml_shim')!r})\n"
        "from fake_nvml import FakeNvml\n"
        "sys.modules[__name__] = FakeNvml(n_gpus=2, state='load')\n")
    py = tmp / "fakepy"
    py.write_text(f'#!/bin/sh\nPYTHONPATH={mod} exec {sys.executable} "$@"\n')
    py.chmod(0o755)
    return py


@pytest.fixture
def three_sshd(tmp_path):
    servers = [Sshd(tmp_path / f"sshd{i}") for i in range(3)]
    try:
        for s in servers:
            s.root.mkdir()
            s.start()
        yield servers
    finally:
        for s in servers:
            s.stop()


async def test_three_hosts_one_restarts_others_keep_updating(three_sshd, tmp_path):
    names = ["alpha", "beta", "gamma"]
    kh = tmp_path / "known_hosts"
    kh.write_text("".join(s.known_hosts_line() for s in three_sshd))
    cfg_text = ""
    for s, n in zip(three_sshd, names, strict=True):
        cfg_text += s.write_client_config(tmp_path / f"cfg-{n}", kh, alias=n).read_text()
    cfg = tmp_path / "ssh_config"
    cfg.write_text(cfg_text)
    py = fake_python(tmp_path)
    logs = {n: tmp_path / f"{n}.log" for n in names}
    spec_log = tmp_path / "alpha-spec.log"
    written: dict[str, list[float]] = {n: [] for n in names}
    written["spec"] = []

    def write(n: str, vals: list[float]) -> None:
        written[n].extend(vals)
        append(logs[n], [decode(v) for v in vals])

    write("alpha", [50.0, 52.0, 51.0, 53.0])
    write("beta", [60.0, 61.0, 62.0])
    write("gamma", [70.0, 71.0, 72.0])
    written["spec"] += [100.0, 104.0, 102.0, 103.0]
    append(spec_log, [decode(v, accept=2.5) for v in written["spec"]])

    hosts = {n: SshHost(n, ssh_config=cfg, reconnect_base=0.1, reconnect_max=0.5, name=n)
             for n in names}
    feeds = [HostFeed(hosts["alpha"], [TailSpec("base", str(logs["alpha"])),
                                       TailSpec("spec", str(spec_log))],
                      python=str(py), gpu_interval=0.2, gpu_retry_s=0.3),
             *(HostFeed(hosts[n], [TailSpec("base", str(logs[n]))], python=str(py),
                        gpu_interval=0.2, gpu_retry_s=0.3) for n in names[1:])]
    fleet = FleetSession(names)
    server = await serve(registry_for(fleet), "127.0.0.1", 0)
    assert server.host == "127.0.0.1"
    task = asyncio.create_task(HostFeeds(feeds).run(fleet))
    client = httpx.AsyncClient(timeout=10)

    async def scrape() -> dict[str, list]:
        r = await client.get(f"http://127.0.0.1:{server.port}/metrics")
        assert r.status_code == 200
        return families(r.text)

    def decoded(n: str, srv: str = "base") -> int:
        st = fleet.hosts[n].session.servers.get(srv)
        return st.decode_total if st else 0

    try:
        await until(lambda: all(decoded(n) == len(written[n]) for n in names)
                    and decoded("alpha", "spec") == 4
                    and all(len(fleet.hosts[n].session.gpus) == 2 for n in names),
                    30, "every host's lines and GPUs")
        m = await scrape()
        for n in names:
            assert value(m, "specmon_host_up", host=n) == 1.0
            assert value(m, "specmon_host_connection_state", host=n, state="connected") == 1.0
            assert value(m, "specmon_host_stale", host=n) == 0.0
            assert value(m, "specmon_server_decode_tokens_per_second", host=n, server="base",
                         role="baseline", running_req="1") == statistics.median(written[n])
            g0 = fleet.hosts[n].session.gpus[0]
            assert value(m, "specmon_gpu_sm_clock_hertz", host=n, gpu="0") == g0.clock_sm * 1e6
            assert value(m, "specmon_gpu_power_watts", host=n, gpu="1") == \
                fleet.hosts[n].session.gpus[1].power_w
            for r in g0.reasons:  # under load the fake H200 is at its power cap
                assert value(m, "specmon_gpu_clock_event_reason", host=n, gpu="0", reason=r) == 1.0
            assert value(m, "specmon_gpu_clock_event_reason", host=n, gpu="0",
                         reason="HwThermalSlowdown") == 0.0
        assert "SwPowerCap" in fleet.hosts["alpha"].session.gpus[0].reasons
        assert value(m, "specmon_server_accept_length", host="alpha", server="spec",
                     role="speculative", running_req="1") == 2.5
        sp = value(m, "specmon_speedup_ratio", host="alpha", server="spec", baseline="base",
                   running_req="1")
        assert sp == pytest.approx(statistics.median(written["spec"]) /
                                   statistics.median(written["alpha"]))

        # beta's sshd dies: beta goes stale with its last values; alpha and gamma keep updating
        beta_last = value(m, "specmon_server_decode_tokens_per_second", host="beta", server="base",
                          role="baseline", running_req="1")
        three_sshd[1].stop()
        await until(lambda: fleet.hosts["beta"].state.state == "reconnecting", 20, "beta down")
        write("alpha", [80.0, 81.0, 82.0, 83.0, 84.0])
        write("gamma", [90.0, 91.0, 92.0, 93.0])
        write("beta", [10.0, 11.0, 12.0, 13.0, 14.0, 15.0])  # not readable while beta is down
        await until(lambda: decoded("alpha") == 9 and decoded("gamma") == 7, 30,
                    "alpha and gamma updating while beta is down")
        m = await scrape()
        assert value(m, "specmon_host_up", host="beta") == 0.0
        assert value(m, "specmon_host_stale", host="beta") == 1.0
        assert value(m, "specmon_host_connection_state", host="beta", state="reconnecting") == 1.0
        assert value(m, "specmon_server_decode_tokens_per_second", host="beta", server="base",
                     role="baseline", running_req="1") == beta_last
        assert fleet.hosts["beta"].session.servers["base"].stale
        for n in ("alpha", "gamma"):
            assert value(m, "specmon_host_up", host=n) == 1.0
            assert value(m, "specmon_server_decode_tokens_per_second", host=n, server="base",
                         role="baseline", running_req="1") == statistics.median(written[n])
        summary = {s.host: s for s in fleet.summary()}
        assert summary["beta"].stale and summary["beta"].state == "reconnecting"
        assert not summary["gamma"].stale
        assert summary["gamma"].tok_s == statistics.median(written["gamma"])

        # beta comes back on the same port: it resumes where it stopped, nothing lost or doubled
        three_sshd[1].start()
        await until(lambda: decoded("beta") == 9, 40, "beta resumed")
        m = await scrape()
        assert value(m, "specmon_host_up", host="beta") == 1.0
        assert value(m, "specmon_host_stale", host="beta") == 0.0
        assert value(m, "specmon_server_decode_samples", host="beta", server="base",
                     role="baseline", running_req="1") == 9.0
        assert value(m, "specmon_server_decode_tokens_per_second", host="beta", server="base",
                     role="baseline", running_req="1") == statistics.median(written["beta"])
        assert set(m) <= set(METRIC_NAMES)
    finally:
        await client.aclose()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await server.close()


# -- pure parts -----------------------------------------------------------------------------------


def gpu(i: int, clock: int, temp: float, reasons: tuple[str, ...] = ("SwPowerCap",),
        pids: tuple[int, ...] = ()) -> GpuSample:
    return GpuSample(index=i, clock_sm=clock, max_clock_sm=1980, temp_gpu=temp,
                     clocks_event_reasons=encode_reasons(reasons), power_w=600.0,
                     util_gpu=97.0, processes=tuple(GpuProcess(p, 1000.0) for p in pids))


def test_multi_node_server_is_one_server_with_the_gpus_of_both_nodes():
    def procs(rank: int, base_pid: int) -> list[Proc]:
        argv = ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--tp", "16",
                "--nnodes", "2", "--node-rank", str(rank), "--dist-init-addr", "10.0.0.1:5000",
                "--port", "30000"]
        return [Proc(base_pid, 1, 0, argv),
                *(Proc(base_pid + 1 + k, base_pid, 0, [f"sglang::scheduler_TP{8 * rank + k}"])
                  for k in range(8))]

    fleet = FleetSession(["n0", "n1", "solo"])
    for h, rank in (("n1", 1), ("n0", 0)):  # order of arrival does not matter
        [d] = find_servers(procs(rank, 100 * (rank + 1)))
        fleet.host_servers(h, [ServerInfo.from_discovered(d)])
        fleet.host(h).session.set_gpus([gpu(i, 1400 + i, 60.0) for i in range(8)])
    fleet.host_servers("solo", [ServerInfo("sglang-30001", "baseline", tp_size=2, base_gpu_id=4)])
    fleet.host("solo").session.set_gpus([gpu(i, 1500, 50.0) for i in range(8)])
    servers = fleet.logical_servers()
    multi = [s for s in servers if s.multi_node]
    assert len(multi) == 1 and len(servers) == 2
    ls = multi[0]
    assert (ls.host, ls.server, ls.key) == ("n0", "sglang-30000", "n0/sglang-30000")
    assert [(h, i.node_rank) for h, i in ls.members] == [("n0", 0), ("n1", 1)]
    assert sorted((h, g.index) for h, g in fleet.server_gpus(ls)) == \
        [(h, i) for h in ("n0", "n1") for i in range(8)]
    solo = next(s for s in servers if not s.multi_node)
    assert [g.index for _, g in fleet.server_gpus(solo)] == [4, 5]  # --base-gpu-id 4, tp 2
    # NVML process lists win over the arguments when they name the server's workers
    info = ServerInfo("x", tp_size=2, worker_pids=(7,))
    assert info.gpu_indices([gpu(0, 1, 1.0), gpu(3, 1, 1.0, pids=(7,))]) == [3]


async def test_metrics_server_only_serves_metrics_and_defaults_to_loopback():
    assert parse_listen(":9464") == ("127.0.0.1", 9464)
    assert parse_listen("9464") == ("127.0.0.1", 9464)
    assert parse_listen("0.0.0.0:9464") == ("0.0.0.0", 9464)
    assert parse_listen("[::1]:9") == ("::1", 9)
    for bad in ("host:", ":99999", "::1:9", "[::1]9", "x"):
        with pytest.raises(ValueError):
            parse_listen(bad)
    fleet = FleetSession(["h"])
    server = await serve(registry_for(fleet), port=0)
    try:
        async with httpx.AsyncClient() as c:
            base = f"http://127.0.0.1:{server.port}"
            assert (await c.get(base + "/nope")).status_code == 404
            assert (await c.post(base + "/metrics")).status_code == 405
            r = await c.get(base + "/metrics")
            fams = families(r.text)
            assert value(fams, "specmon_host_connection_state", host="h", state="connecting") == 1.0
            assert value(fams, "specmon_host_up", host="h") == 0.0
            assert "specmon_server_decode_tokens_per_second" not in fams or not \
                fams["specmon_server_decode_tokens_per_second"]  # no data: no invented value
    finally:
        await server.close()


def feed_lines(fleet: FleetSession, host: str, server: str, vals: list[float], t0: float,
               rr: int = 1) -> float:
    items = []
    for i, v in enumerate(vals):
        text = decode(v, rr)
        items.append(LineItem(text, parse_line(text), t0 + i))
    fleet.lines(host, server, items)
    return t0 + len(vals)


def test_drift_alert_baseline_value_and_ratio_are_exported():
    from specmon.session.baselines import Baseline

    def B() -> Baseline:  # what the baseline store returns
        return Baseline("rec-88", BaselineStats.fixed_value(88.8, 1.0, 1), host="h",
                        server="base", role="baseline")

    now = [1000.0]
    fleet = FleetSession(["h"], baselines=lambda h, s, r: B() if s == "base" else None,
                         clock=lambda: now[0])
    fleet.host_state("h", ConnectionState("connected"))
    fleet.declare_server("h", "base", "baseline", "/x.log")
    fleet.declare_server("h", "other", "baseline", "/y.log")
    t = feed_lines(fleet, "h", "base", [88.8] * 20, 900.0)
    fleet.tick(t)
    t = feed_lines(fleet, "h", "base", [62.9] * 40, t)  # the seed incident: NCCL tuning lost
    feed_lines(fleet, "h", "other", [40.0, 41.0, 42.0], 950.0)
    now[0] = t
    reg = registry_for(fleet)
    before = len(fleet.host("h").session.alerts)
    assert value(families(generate_latest(reg).decode()), "specmon_server_drift_alert_level",
                 host="h", server="base", role="baseline") == 0.0  # the scrape raises nothing
    assert len(fleet.host("h").session.alerts) == before and not fleet.alerts
    fleet.tick(t)  # the owner's clock raises the alert; the next scrape reads it
    text = generate_latest(reg).decode()
    m = families(text)
    lab = dict(host="h", server="base", role="baseline")
    assert value(m, "specmon_server_baseline_decode_tokens_per_second", baseline="rec-88",
                 **lab) == pytest.approx(88.8)
    ratio = value(m, "specmon_server_drift_ratio", metric="tok/s", **lab)
    assert ratio == pytest.approx(62.9 / 88.8, rel=0.02)
    assert value(m, "specmon_server_drift_alert_level", **lab) == 3.0  # critical: -29 %
    assert value(m, "specmon_server_alert_level", kind="throughput", **lab) == 3.0
    # a server without a recorded baseline has no drift series at all (not a made-up 0)
    assert value(m, "specmon_server_drift_alert_level", host="h", server="other",
                 role="baseline") is None
    assert value(m, "specmon_server_decode_tokens_per_second", host="h", server="other",
                 role="baseline", running_req="1") == 41.0
    row = fleet.summary(t)[0]
    assert row.alerts == 1 and {r.name: r.alert_level for r in row.servers}["base"] == "critical"
    # `b` again: a new baseline is watched; the old one's critical alert ends with it at once
    # (it stayed on /metrics, its estimate under the new name, until the new watch alerted)

    fleet.watch("h", "base", Baseline("rec-63", BaselineStats.fixed_value(62.9, 1.0, 1),
                                      host="h", server="base", role="baseline"))
    m = families(generate_latest(reg).decode())
    assert not fleet.alerts and fleet.summary(t)[0].alerts == 0
    assert value(m, "specmon_server_drift_alert_level", **lab) == 0.0
    assert value(m, "specmon_server_alert_level", kind="throughput", **lab) is None
    assert value(m, "specmon_server_baseline_decode_tokens_per_second", baseline="rec-88",
                 **lab) is None


def test_the_speedup_metrics_say_what_the_headline_says_beside_it():
    """/metrics carries the headline's speedup and what it says beside it: how many
    conditions differ besides speculation, and how many sides have no launch line."""
    from kit.ui import ARGS_BASE, ARGS_SPEC

    def scrape(base_args: str | None) -> dict[str, list]:
        fleet = FleetSession(["h"])
        fleet.host_state("h", ConnectionState("connected"))
        fleet.declare_server("h", "base", "baseline", "/b.log")
        fleet.declare_server("h", "spec", "speculative", "/s.log")
        for server, args in (("base", base_args), ("spec", ARGS_SPEC)):
            if args is not None:
                fleet.lines("h", server, [LineItem(args, parse_line(args), 899.0)])
        feed_lines(fleet, "h", "base", [88.0, 88.4, 88.2] * 10, 900.0)
        t = 900.0
        items = []
        for i in range(30):
            text = decode(94.0 + (i % 3) * 0.2, accept=2.5)
            items.append(LineItem(text, parse_line(text), t + i))
        fleet.lines("h", "spec", items)
        return families(generate_latest(registry_for(fleet)).decode())

    lab = dict(host="h", server="spec", baseline="base")
    same = scrape(ARGS_BASE)
    assert value(same, "specmon_speedup_ratio", running_req="1", **lab) == pytest.approx(94.2 / 88.2)
    assert value(same, "specmon_speedup_conditions_differ", **lab) == 0.0
    assert value(same, "specmon_speedup_conditions_unknown", **lab) == 0.0
    tp4 = scrape(ARGS_BASE.replace("tp_size=8", "tp_size=4"))
    assert value(tp4, "specmon_speedup_conditions_differ", **lab) == 1.0  # tp_size: 4 vs 8
    late = scrape(None)  # the baseline's launch line was never read
    assert value(late, "specmon_speedup_conditions_unknown", **lab) == 1.0
    assert value(late, "specmon_speedup_ratio", running_req="1", **lab) == pytest.approx(94.2 / 88.2)
    # what the medians cover, as the headline says it: the window and n a side
    assert value(same, "specmon_window_seconds") == FleetSession(["h"]).window_s
    assert value(same, "specmon_speedup_samples", running_req="1", side="baseline", **lab) == 30
    assert value(same, "specmon_speedup_samples", running_req="1", side="speculative",
                 **lab) == 30


def test_metric_labels_are_redacted_and_hold_no_escape_sequence():
    """Label values come from host names, --log names and the baseline store: a scrape is a
    way out (`curl :9464/metrics` in a terminal ran OSC 52 and printed an hf_ token)."""
    from specmon.session.baselines import Baseline

    hf = "hf_AbCdEfGhIjKlMnOpQr"
    host, server = "gpu\x1b]52;c;cHduZWQ=\x07box", f"b\x1b[2J\u202e{hf}"
    fleet = FleetSession([host], baselines=lambda h, s, r: Baseline(
        f"rec \x9b31m{hf}", BaselineStats.fixed_value(88.8, 1.0, 1), host=h, server=s,
        role="baseline"))
    fleet.host_state(host, ConnectionState("connected"))
    fleet.declare_server(host, server, "baseline", "/x.log")
    feed_lines(fleet, host, server, [88.8] * 5, 900.0)
    text = generate_latest(registry_for(fleet)).decode()
    assert hf not in text
    assert not any(c in text for c in "\x1b\x07\x9b\u202e"), text
    m = families(text)
    assert value(m, "specmon_server_ready", host="gpu\\x1b]52;c;cHduZWQ=\\x07box",
                 server="b\\x1b[2J\\u202e***REDACTED***", role="baseline") == 1.0
    assert value(m, "specmon_server_baseline_decode_tokens_per_second",
                 host="gpu\\x1b]52;c;cHduZWQ=\\x07box", server="b\\x1b[2J\\u202e***REDACTED***",
                 role="baseline", baseline="rec \\x9b31m***REDACTED***") == pytest.approx(88.8)


def test_summary_row_hottest_gpu_slowest_non_idle_clock_and_na():
    fleet = FleetSession(["h", "empty"])
    fleet.host_state("h", ConnectionState("connected"))
    fleet.host("h").session.set_gpus([
        gpu(0, 1455, 61.0), gpu(1, 1300, 58.0, ("SwPowerCap", "HwSlowdown")),
        gpu(2, 345, 70.0, ("GpuIdle",)),  # idle: hottest here, but its low clock is not throttling
    ])
    feed_lines(fleet, "h", "base", [50.0, 54.0, 52.0], fleet.clock() - 3)
    [row, empty] = fleet.summary()
    assert (row.hottest_gpu.index, row.hottest_gpu.temp_gpu) == (2, 70.0)
    assert (row.slowest_clock.index, row.slowest_clock.clock_sm) == (1, 1300)
    assert row.slowest_clock.reasons == ("SwPowerCap", "HwSlowdown")
    assert row.tok_s == 52.0 and row.servers[0].running_req == 1 and not row.stale
    assert row.age_s is not None and row.age_s < 60
    assert (empty.tok_s, empty.hottest_gpu, empty.slowest_clock, empty.age_s) == (None,) * 4
    assert empty.stale and empty.state == "connecting" and empty.alerts == 0


def test_hosts_config_errors_name_the_file_key_and_fix(tmp_path):
    """The [hosts.NAME] tables connect/record watch, read by the one config reader."""
    from specmon.config import parse_config

    def hosts(text: str):
        cfg, issues = parse_config(text, tmp_path / "f.toml", require_servers=False)
        return cfg, issues

    cfg, issues = hosts('[hosts.n1]\ntarget = "gpu1"\n[hosts.b]\ntarget = "gpu2"\n'
                        'python = "/v/bin/python"\nlogs = { base = "/l.log" }\n[hosts.loc]\n')
    assert issues == []
    assert [(h.target, h.name, h.python, h.logs) for h in cfg.hosts.values()] == [
        ("gpu1", "n1", None, {}), ("gpu2", "b", "/v/bin/python", {"base": "/l.log"}),
        ("local", "loc", None, {})]  # no target: local, as for server profiles
    cfg, issues = hosts('[[hosts]]\ntarget = "gpu1"\n')  # [[hosts]] is read too
    assert issues == [] and [(h.target, h.name) for h in cfg.hosts.values()] == [("gpu1", "gpu1")]
    for text, key, needle in (
        ('hosts = "x"', "(top).hosts", "must be a table"),
        ("[hosts]\na = 3", "hosts.a", "must be a table"),
        ('[[hosts]]\nname = "x"', "hosts[0].target", "missing"),
        ("[hosts.a]\ntarget = 3", "hosts.a.target", "must be a string"),
        ('[hosts.a]\nlogs = ["x"]', "hosts.a.logs", "must be a table"),
        ("[hosts.a]\nlogs = { base = 5 }", "hosts.a.logs.base", "must be a non-empty string"),
        ('[hosts.a]\nlogs = { "../x" = "/l.log" }', "hosts.a.logs.../x", "bad name"),
        ('[[hosts]]\ntarget = "a"\n[[hosts]]\ntarget = "a"', "hosts[1]", "repeated host 'a'"),
    ):
        _, issues = hosts(text)
        assert [i.key for i in issues] == [key], (text, issues)
        assert needle in issues[0].message and issues[0].file.endswith("f.toml")


def run_cli(*args: str, cwd: Path, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, "SPECMON_CONFIG": "", **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "specmon", *args], capture_output=True,
                          text=True, timeout=60, cwd=cwd, env=env)


def test_cli_targets_config_and_prometheus_errors_are_one_line(tmp_path):
    bad = tmp_path / "specmon.toml"
    bad.write_text('[hosts.x]\ntarget = 5\n')
    keys = tmp_path / "keys.toml"
    keys.write_text('[keys]\n"server.strat" = "ctrl+u"\n')
    for args, needle in (
        (("record", "--out", "o.jsonl"), "hosts.x.target: must be a string"),  # ./specmon.toml
        (("record", "a", "b", "--log", "x=/y", "--out", "o.jsonl"), "exactly one TARGET"),
        (("record", "local", "local", "--out", "o.jsonl"), "TARGET given twice: local"),
        (("record", "local", "--prometheus", "nope", "--out", "o.jsonl"), "--prometheus"),
        (("connect", "--config", str(tmp_path / "missing.toml")), "not found (given by --config)"),
        (("record", "local", "--log", "nopath", "--out", "o.jsonl"), "expected NAME=PATH"),
        (("demo", "--config", str(keys)), "keys.server.strat: unknown binding id"),  # before the UI
    ):
        res = run_cli(*args, cwd=tmp_path)
        assert res.returncode == 2, (args, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1 and needle in res.stderr, res.stderr
    assert not (tmp_path / "o.jsonl").exists()


def test_record_two_local_hosts_from_config_with_metrics(tmp_path):
    """`specmon record` over the [[hosts]] of a config: lines named host/server with a host key,
    and --prometheus on an OS-chosen loopback port while it runs."""
    for n in ("a", "b"):
        append(tmp_path / f"{n}.log", [decode(10.0 if n == "a" else 20.0)])
    (tmp_path / "fleet.toml").write_text(
        "".join(f'[hosts.{n}]\ntarget = "local"\n'
                f'logs = {{ base = "{tmp_path / (n + ".log")}" }}\n' for n in ("a", "b")))
    out = tmp_path / "rec.jsonl"
    res = run_cli("record", "--config", str(tmp_path / "fleet.toml"), "--out", str(out),
                  "--duration", "2", "--prometheus", "127.0.0.1:0", cwd=tmp_path,
                  env_extra={"SPECMON_DATA_DIR": str(tmp_path / "data")})
    assert res.returncode == 0, res.stderr
    assert "Prometheus metrics on http://127.0.0.1:" in res.stderr
    import json

    rows = sorted((json.loads(x) for x in out.read_text().splitlines()), key=lambda r: r["host"])
    assert [(r["host"], r["server"], r["record"]["gen_throughput"]) for r in rows] == [
        ("a", "a/base", 10.0), ("b", "b/base", 20.0)]


async def test_two_hosts_one_session_model_servers_keyed_by_host_and_lines_applied_once(tmp_path):
    """HostFeeds straight into the one session model: the same server name on two hosts is
    two servers, each line is applied exactly once, GPUs stay with their host."""
    from specmon.hosts.local import LocalHost

    for n in ("a", "b"):
        append(tmp_path / f"{n}.log", [decode(10.0), decode(12.0)])
    hosts = [LocalHost(n) for n in ("a", "b")]
    fleet = FleetSession(["a", "b"])
    applied: list[tuple[str, str, str]] = []
    fleet.record_listeners.append(lambda h, s, it: applied.append((h, s, it.text)))
    feed = HostFeeds([HostFeed(h, [TailSpec("base", str(tmp_path / f"{h.name}.log"))],
                               python=str(fake_python(tmp_path)) if h.name == "a" else "/nonexistent/python",
                               gpu_interval=0.2, gpu_retry_s=0.3) for h in hosts])
    task = asyncio.create_task(feed.run(fleet))
    try:
        await until(lambda: all(fleet.server(h, "base").lines_total == 2 for h in ("a", "b"))
                    and len(fleet.host("a").session.gpus) == 2, 30, "both hosts' lines, a's GPUs")
        await asyncio.sleep(0.5)  # nothing more arrives: no line is applied twice
        assert sorted(applied) == sorted((h, "base", decode(v)) for h in ("a", "b")
                                         for v in (10.0, 12.0))
        assert [fleet.server(h, "base").decode_total for h in ("a", "b")] == [2, 2]
        assert fleet.server("a", "base") is not fleet.server("b", "base")
        assert fleet.host("b").session.gpus == [] and fleet.host("b").session.gpu_error
        assert {h: hv.state.state for h, hv in fleet.hosts.items()} == {"a": "connected",
                                                                        "b": "connected"}
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_multi_node_server_tab_lists_the_gpus_of_all_its_nodes():
    from specmon.ui.app import SpecmonApp

    def procs(rank: int, base_pid: int) -> list[Proc]:
        argv = ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--tp", "16",
                "--nnodes", "2", "--node-rank", str(rank), "--dist-init-addr", "10.0.0.1:5000",
                "--port", "30000"]
        return [Proc(base_pid, 1, 0, argv),
                *(Proc(base_pid + 1 + k, base_pid, 0, [f"sglang::scheduler_TP{8 * rank + k}"])
                  for k in range(8))]

    fleet = FleetSession(["n0", "n1"])
    for h, rank in (("n0", 0), ("n1", 1)):
        [d] = find_servers(procs(rank, 100 * (rank + 1)))
        fleet.host_servers(h, [ServerInfo.from_discovered(d)])
        fleet.host(h).session.set_gpus([gpu(i, 1400 + 10 * rank, 60.0) for i in range(8)])
    app = SpecmonApp(fleet, show_clock=False)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause(0.5)
        assert app.active_host() == "n0"
        await pilot.press("d")  # every GPU's row (the panel shows one row per group first)
        await pilot.pause(0.3)
        text = str(app.query_one("#gpus").content)
        rows = [(t[1] if t[0] == "GPU" else t[0]) for t in
                (r.split() for r in text.splitlines()[2:] if r.strip())]
        assert rows == [str(i) for i in range(8)] + [f"n1:{i}" for i in range(8)]
        assert "1410" in text and "1400" in text  # both nodes' own clocks


def test_record_writes_gpu_samples_and_export_keeps_them(tmp_path):
    """`record` writes each GPU poll as a {"gpus": [...]} row, so a snapshot exported from it has
    GPU data (downsampled by export past --gpu-max-samples)."""
    import json

    from specmon.export.snapshot import read_snapshot

    append(tmp_path / "a.log", [decode(10.0)])
    py = fake_python(tmp_path)
    (tmp_path / "c.toml").write_text(
        f'[hosts.box]\ntarget = "local"\npython = "{py}"\n'
        f'logs = {{ base = "{tmp_path / "a.log"}" }}\n')
    out = tmp_path / "rec.jsonl"
    res = run_cli("record", "box", "--config", str(tmp_path / "c.toml"), "--out", str(out),
                  "--duration", "4", cwd=tmp_path, env_extra={"SPECMON_DATA_DIR": str(tmp_path)})
    assert res.returncode == 0, res.stderr
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    lines = [r for r in rows if "line" in r]
    polls = [r for r in rows if "gpus" in r]
    assert [(r["server"], r["record"]["gen_throughput"]) for r in lines] == [("base", 10.0)]
    assert polls and all(len(r["gpus"]) == 2 for r in polls)
    # one host: servers by their own names; each line row names its host, for export
    assert all(r["host"] == "box" for r in lines) and all("host" not in r for r in polls)
    snap_path = tmp_path / "s.json"
    res = run_cli("export", str(out), "-o", str(snap_path), "--gpu-max-samples", "1", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    snap = read_snapshot(snap_path)
    assert snap.host == "box"  # (was "unknown" unless --host named it)
    assert {g.index for g in snap.gpu_samples} == {0, 1}
    if len(polls) > 1:  # more polls than --gpu-max-samples: export downsampled them
        assert snap.gpu_downsampling.get("input_samples") == 2 * len(polls)


async def test_the_window_key_sets_the_one_window_metrics_report():
    """`w` sets the session's window: /metrics (served beside the UI by `connect
    --prometheus`) reports the window the headline uses, not a second one of its own."""
    from specmon.ui.app import SpecmonApp

    fleet = FleetSession(["h"])
    app = SpecmonApp(fleet, show_clock=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.2)
        assert app.window_s == fleet.window_s == 60.0
        await pilot.press("w")
        await pilot.pause(0.1)
        assert app.window_s == fleet.window_s == 300.0
    m = families(generate_latest(registry_for(fleet)).decode())
    assert value(m, "specmon_window_seconds") == 300.0


def test_the_drift_badge_says_how_many_more_causes_the_alert_has():
    """The badge names an alert's first cause; with more, it says how many more and where they
    are (a first cause alone read as the whole story: NCCL variables named for a gain that a
    tp 2 -> 8 relaunch, the second cause, made)."""
    from specmon.analysis.fingerprint import fingerprint_from
    from specmon.session.baselines import Baseline
    from specmon.ui.headline import drift_state

    rec_fp = fingerprint_from(server_args={"model_path": "m", "tp_size": 2, "version": "0.5.1"})
    fleet = FleetSession(["h"], clock=lambda: 2000.0)
    fleet.declare_server("h", "base", "baseline", "/x.log")
    fleet.watch("h", "base", Baseline("rec", BaselineStats.fixed_value(88.8, 1.0, 1),
                                      fingerprint=rec_fp, host="h", server="base",
                                      role="baseline"))
    args = ("[2025-06-01 12:00:00] server_args=ServerArgs(model_path='m', tp_size=8, "
            "version='0.5.2')")
    fleet.lines("h", "base", [LineItem(args, parse_line(args), 899.0)])
    t = feed_lines(fleet, "h", "base", [62.9] * 60, 900.0)
    fleet.tick(t)
    (_, _, alert), = fleet.active_alerts()
    assert len(alert.causes) >= 2, alert.causes
    st = fleet.host("h").session.server("base")
    d = drift_state("base", {"base": fleet.watches[("h", "base")]}, st)
    assert d.cause.startswith(alert.causes[0])
    assert d.cause.endswith(f" (+{len(alert.causes) - 1} more: the alert notice and the "
                            "report list every cause)")


def test_the_vs_recorded_speedup_the_headline_shows_is_exported():
    """While the baseline drifts, the headline's big figure is speculative / recorded (the
    live one would flatter speculation): /metrics carries that number too, the same value."""
    from specmon.session.baselines import Baseline
    from specmon.session.drift_watch import session_speedup_view

    fleet = FleetSession(["h"], clock=lambda: 2000.0)
    fleet.declare_server("h", "base", "baseline", "/x.log")
    fleet.declare_server("h", "spec", "speculative", "/y.log")
    fleet.watch("h", "base", Baseline("rec", BaselineStats.fixed_value(88.8, 1.0, 1), host="h",
                                      server="base", role="baseline"))
    t = feed_lines(fleet, "h", "base", [62.9, 63.1] * 30, 900.0)
    items = []
    for i in range(60):
        text = decode(94.0 + i % 3 * 0.2, 1, accept=2.5)
        items.append(LineItem(text, parse_line(text), 900.0 + i))
    fleet.lines("h", "spec", items)
    fleet.tick(t)
    hs = fleet.host("h").session
    view = session_speedup_view(hs, hs.server("base"), hs.server("spec"),
                                fleet.watches[("h", "base")], fleet.window_s, 2000.0)
    assert view.drift_active and view.vs_recorded is not None
    m = families(generate_latest(registry_for(fleet)).decode())
    lab = dict(host="h", server="spec", baseline="base", running_req="1")
    got = value(m, "specmon_speedup_vs_recorded_ratio", bound="value", **lab)
    assert got == pytest.approx(view.vs_recorded) and got == pytest.approx(94.2 / 88.8, rel=0.01)
    assert value(m, "specmon_speedup_vs_recorded_ratio", bound="low", **lab) < got < value(
        m, "specmon_speedup_vs_recorded_ratio", bound="high", **lab)


def test_a_window_of_two_lines_has_no_median_on_metrics_as_on_the_panel():
    """The panel says 'median N/A … too few decode lines' under MIN_N lines; /metrics gave a
    median of 2 then. It gives the count, and the median (and accept len) from MIN_N."""
    from specmon.session.window import MIN_N

    fleet = FleetSession(["h"], clock=lambda: 1000.0)
    fleet.declare_server("h", "spec", "speculative", "/y.log")
    items = [LineItem(decode(100.0 + i, 3, accept=2.4), parse_line(decode(100.0 + i, 3,
                                                                          accept=2.4)), 990.0 + i)
             for i in range(MIN_N - 1)]
    fleet.lines("h", "spec", items)
    lab = dict(host="h", server="spec", role="speculative", running_req="3")
    m = families(generate_latest(registry_for(fleet)).decode())
    assert value(m, "specmon_server_decode_samples", **lab) == MIN_N - 1
    assert value(m, "specmon_server_decode_tokens_per_second", **lab) is None
    assert value(m, "specmon_server_accept_length", **lab) is None
    text = decode(110.0, 3, accept=2.4)
    fleet.lines("h", "spec", [LineItem(text, parse_line(text), 999.0)])
    m = families(generate_latest(registry_for(fleet)).decode())
    assert value(m, "specmon_server_decode_tokens_per_second", **lab) == 101.0
