"""Prometheus `/metrics` for a fleet session: a custom Collector read at scrape time.

Nothing is done per log line: each scrape walks the FleetSession once (windowed medians over
the last `window_s` of decode points, the latest GPU samples, each host's connection state).
The HTTP server is a small asyncio one on the session's own event loop, so a scrape never reads
the session from another thread while the feeds write it.

Naming follows the Prometheus conventions: `specmon_` prefix, base units in the name (hertz,
celsius, watts, bytes, ratio), labels `host`, `server`, `role`, `gpu`. A host that is not
connected keeps exporting its last values, with `specmon_host_stale` 1 and its state in
`specmon_host_connection_state`, so drift alerts do not resolve just because a host went away.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from specmon.numfmt import ascii_port
from specmon.parse.gpu_sample import REASON_BITS, decode_reasons
from specmon.parse.vllm import throughput_label
from specmon.redact import redact_text
from specmon.session.drift_watch import session_speedup_view
from specmon.session.fleet import ALERT_LEVELS, VERDICTS, FleetSession
from specmon.session.window import MIN_N, stats_for, window_points
from specmon.textsafe import visible

STATES = ("connecting", "connected", "reconnecting", "failed", "closed")
DEFAULT_PORT = 9464

#: Every metric family the exporter can emit (the examples are checked against this list).
METRIC_NAMES = (
    "specmon_host_connection_state", "specmon_host_up", "specmon_host_stale",
    "specmon_host_last_update_timestamp_seconds",
    "specmon_server_ready", "specmon_server_run_ended", "specmon_server_run_skipped_bytes",
    "specmon_server_running_requests",
    "specmon_server_engine_info",
    "specmon_server_decode_tokens_per_second", "specmon_server_decode_samples",
    "specmon_server_accept_length", "specmon_server_baseline_decode_tokens_per_second",
    "specmon_server_drift_ratio", "specmon_server_drift_alert_level",
    "specmon_server_drift_state", "specmon_server_drift_samples", "specmon_server_alert_level",
    "specmon_speedup_ratio", "specmon_speedup_ratio_ci95_low", "specmon_speedup_ratio_ci95_high",
    "specmon_speedup_samples", "specmon_window_seconds", "specmon_speedup_vs_recorded_ratio",
    "specmon_speedup_conditions_differ", "specmon_speedup_conditions_unknown",
    "specmon_gpu_sm_clock_hertz", "specmon_gpu_sm_clock_max_hertz",
    "specmon_gpu_clock_event_reason", "specmon_gpu_temperature_celsius",
    "specmon_gpu_slowdown_temperature_celsius", "specmon_gpu_power_watts",
    "specmon_gpu_power_limit_watts", "specmon_gpu_utilization_ratio",
    "specmon_gpu_memory_utilization_ratio", "specmon_gpu_memory_used_bytes",
    "specmon_gpu_server_info",
)

SERVER = ["host", "server", "role"]
GPU = ["host", "gpu"]


class FleetCollector(Collector):
    """Reads a FleetSession at scrape time; `clock` gives "now" for the decode windows."""

    def __init__(self, fleet: FleetSession, clock: Callable[[], float] | None = None) -> None:
        self.fleet = fleet
        self.clock = clock or fleet.clock

    def collect(self) -> Iterator[Metric]:
        f = self.fleet
        now = self.clock()  # reads the model only: alerts are raised by its owner's tick
        g: dict[str, GaugeMetricFamily] = {}

        def fam(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
            m = g[name] = GaugeMetricFamily(name, doc, labels=labels)
            return m

        conn = fam("specmon_host_connection_state",
                   "1 for the host's current connection state, 0 for the others", ["host", "state"])
        up = fam("specmon_host_up", "1 while the host's SSH connection is up", ["host"])
        stale = fam("specmon_host_stale", "1 when the host's values are the last ones received "
                    "before it went away", ["host"])
        last = fam("specmon_host_last_update_timestamp_seconds",
                   "Unix time of the last log line or GPU sample from the host", ["host"])
        ready = fam("specmon_server_ready", "1 when the server is ready (decoding or idle)", SERVER)
        ended = fam("specmon_server_run_ended", "1 when the server's newest run has ended (it "
                    "stopped or exited and is not relaunched yet): its figures, and a speedup "
                    "against it, are that run's last, not live", SERVER)
        skipped = fam("specmon_server_run_skipped_bytes", "Bytes of the newest run's log not "
                      "read (the history after its start-up lines); above 0 its whole-run "
                      "figures cover the lines read only", SERVER)
        running = fam("specmon_server_running_requests", "#running-req of the last decode line",
                      SERVER)
        engine = fam("specmon_server_engine_info", "1 per server: its engine and what its "
                     "logged throughput counts (SGLang: decode-only; vLLM: every emitted token "
                     "per stats interval, 10 s by default; prefill steps included)", [*SERVER, "engine",
                                                                      "throughput"])
        toks = fam("specmon_server_decode_tokens_per_second",
                   "Median server-logged gen throughput over the window, per #running-req "
                   "(SGLang: decode-only; vLLM: see specmon_server_engine_info)",
                   [*SERVER, "running_req"])
        nsamp = fam("specmon_server_decode_samples",
                    "Decode log lines behind specmon_server_decode_tokens_per_second",
                    [*SERVER, "running_req"])
        accept = fam("specmon_server_accept_length",
                     "Median speculative accept length over the window, per #running-req",
                     [*SERVER, "running_req"])
        base = fam("specmon_server_baseline_decode_tokens_per_second",
                   "Recorded-baseline decode throughput the server is compared with",
                   [*SERVER, "baseline"])
        ratio = fam("specmon_server_drift_ratio",
                    "Live / recorded performance for the current stratum (1 = as recorded)",
                    [*SERVER, "metric"])
        level = fam("specmon_server_drift_alert_level",
                    "Drift alert: 0 none, 1 info (improved), 2 warning, 3 critical", SERVER)
        vstate = fam("specmon_server_drift_state", "1 for the drift verdict against the recorded "
                     "baseline now (the headline's badge): checking (too few samples of this run, "
                     "or a change being confirmed), ok, drift, improved", [*SERVER, "state"])
        vn = fam("specmon_server_drift_samples", "Clean decode samples of the current run the "
                 "drift verdict rests on (need: the n a verdict needs)", [*SERVER, "of"])
        anyal = fam("specmon_server_alert_level", "Active alert by kind (throughput, cycle, "
                    "acceptance, speculation_pays): 1 info, 2 warning, 3 critical",
                    [*SERVER, "kind"])
        sp = fam("specmon_speedup_ratio", "Speculative / baseline decode throughput at the same "
                 "#running-req on one host", ["host", "server", "baseline", "running_req"])
        sp_lo = fam("specmon_speedup_ratio_ci95_low", "Lower end of the speedup's 95% interval",
                    ["host", "server", "baseline", "running_req"])
        sp_hi = fam("specmon_speedup_ratio_ci95_high", "Upper end of the speedup's 95% interval",
                    ["host", "server", "baseline", "running_req"])
        sp_n = fam("specmon_speedup_samples", "Decode log lines behind each side's median in "
                   "specmon_speedup_ratio (side: baseline | speculative)",
                   ["host", "server", "baseline", "running_req", "side"])
        sp_rec = fam("specmon_speedup_vs_recorded_ratio", "While the baseline's drift alert is "
                     "active: speculative / the recorded baseline at the speedup's #running-req "
                     "(the headline's big figure then; bound: low | value | high, the 95% "
                     "interval)", ["host", "server", "baseline", "running_req", "bound"])
        win = fam("specmon_window_seconds", "Log time the medians and the speedup cover (the "
                  "newest of it; a window never reaches behind a restart or a time step)", [])
        win.add_metric([], f.window_s)
        sp_diff = fam("specmon_speedup_conditions_differ", "Conditions that differ between the "
                      "two servers besides speculation (the headline's 'conditions differ'; 0: "
                      "none known)", ["host", "server", "baseline"])
        sp_unk = fam("specmon_speedup_conditions_unknown", "Servers of the pair whose conditions "
                     "cannot be compared (no launch line in the run: 'conditions unknown')",
                     ["host", "server", "baseline"])
        clk = fam("specmon_gpu_sm_clock_hertz", "Current SM clock", GPU)
        clk_max = fam("specmon_gpu_sm_clock_max_hertz", "Maximum SM clock", GPU)
        reason = fam("specmon_gpu_clock_event_reason",
                     "1 when the clock-event (throttle) reason is active", [*GPU, "reason"])
        temp = fam("specmon_gpu_temperature_celsius", "GPU temperature by sensor",
                   [*GPU, "sensor"])
        slow = fam("specmon_gpu_slowdown_temperature_celsius",
                   "Temperature at which the GPU starts slowing down", GPU)
        power = fam("specmon_gpu_power_watts", "Power draw", GPU)
        plimit = fam("specmon_gpu_power_limit_watts", "Enforced power limit", GPU)
        util = fam("specmon_gpu_utilization_ratio", "GPU (SM) utilisation, 0..1", GPU)
        mutil = fam("specmon_gpu_memory_utilization_ratio", "Memory-controller utilisation, 0..1",
                    GPU)
        mem = fam("specmon_gpu_memory_used_bytes", "GPU memory in use", GPU)
        ginfo = fam("specmon_gpu_server_info", "1 for each GPU a server uses; server_host is "
                    "where the server's log comes from (node 0 of a multi-node server)",
                    [*GPU, "server", "server_host", "role"])

        for h, hv in f.hosts.items():
            st = hv.state.state
            for s in STATES:
                conn.add_metric([h, s], 1.0 if st == s else 0.0)
            up.add_metric([h], 1.0 if st == "connected" else 0.0)
            stale.add_metric([h], 1.0 if hv.stale else 0.0)
            if hv.last_update is not None:
                last.add_metric([h], hv.last_update)
            for name, srv in hv.session.servers.items():
                lab = [h, name, srv.role or ""]
                ready.add_metric(lab, 1.0 if srv.status == "ready" else 0.0)
                ended.add_metric(lab, 1.0 if srv.runs and srv.runs[-1].ended else 0.0)
                skipped.add_metric(lab, float(srv.runs[-1].skipped_bytes) if srv.runs else 0.0)
                eng = srv.engine or "sglang"
                engine.add_metric([*lab, eng, throughput_label(eng)], 1.0)
                if srv.last_decode is not None and srv.last_decode.running_req is not None:
                    running.add_metric(lab, float(srv.last_decode.running_req))
                pts = window_points(srv, now, f.window_s)
                for rr in sorted({p.rec.running_req for p in pts if p.rec.running_req is not None}):
                    ws = stats_for(pts, rr, f.window_s)
                    if ws is None:
                        continue
                    nsamp.add_metric([*lab, str(rr)], float(ws.n))
                    if ws.n < MIN_N:  # the panel's rule: no window median from fewer lines
                        continue
                    toks.add_metric([*lab, str(rr)], ws.median)
                    if ws.accept_len is not None:
                        accept.add_metric([*lab, str(rr)], ws.accept_len)
                if f.monitor(h, name) is not None:
                    bv = f.baseline_value(h, name)
                    if bv is not None:
                        base.add_metric([*lab, f.baseline_names.get((h, name), "")], bv)
                    est = f.drift_estimate(h, name)
                    if est is not None:
                        ratio.add_metric([*lab, est.metric], 1.0 + est.delta_pct / 100.0)
                    a = f.alerts.get((h, name))
                    level.add_metric(lab, float(ALERT_LEVELS.get(a.level, 0)) if a else 0.0)
                    w = f.watches.get((h, name))
                    if w is not None:
                        v = w.verdict(srv)
                        for state in VERDICTS:
                            vstate.add_metric([*lab, state], 1.0 if v.state == state else 0.0)
                        vn.add_metric([*lab, "have"], float(v.n))
                        vn.add_metric([*lab, "need"], float(v.need))
            b = hv.session.by_role("baseline")
            s_ = hv.session.by_role("speculative")
            if b is not None and s_ is not None:
                # the headline's view (the same speedup, and what it says beside it)
                view = session_speedup_view(hv.session, b, s_, f.watches.get((h, b.name)),
                                            f.window_s, now)
                if b.runs and s_.runs:
                    sp_diff.add_metric([h, s_.name, b.name], float(len(view.fingerprint_diffs)))
                    sp_unk.add_metric([h, s_.name, b.name], float(len(view.conditions_unknown)))
                res = view.detail if view.value is not None else None
                if res is not None:
                    lab = [h, s_.name, b.name, str(res.running_req)]
                    sp.add_metric(lab, res.ratio)
                    sp_n.add_metric([*lab, "baseline"], float(res.base.n))
                    sp_n.add_metric([*lab, "speculative"], float(res.spec.n))
                    if res.ci95 is not None:  # no interval from < 2 samples a side
                        sp_lo.add_metric(lab, res.ci95[0])
                        sp_hi.add_metric(lab, res.ci95[1])
                    if view.drift_active and view.vs_recorded is not None \
                            and view.vs_recorded_ci95 is not None:
                        lo, hi = view.vs_recorded_ci95
                        for bound, x in (("low", lo), ("value", view.vs_recorded), ("high", hi)):
                            sp_rec.add_metric([*lab, bound], x)
            for gs in hv.session.gpus:
                if gs.index is None:
                    continue
                gl = [h, str(gs.index)]
                _opt(clk, gl, gs.clock_sm, 1e6)
                _opt(clk_max, gl, gs.max_clock_sm, 1e6)
                if gs.clocks_event_reasons is not None:
                    active = set(decode_reasons(gs.clocks_event_reasons))
                    for rname in REASON_BITS.values():
                        reason.add_metric([*gl, rname], 1.0 if rname in active else 0.0)
                _opt(temp, [*gl, "gpu"], gs.temp_gpu)
                _opt(temp, [*gl, "memory"], gs.temp_mem)
                _opt(slow, gl, gs.temp_slowdown)
                _opt(power, gl, gs.power_w)
                _opt(plimit, gl, gs.power_limit_w)
                _opt(util, gl, gs.util_gpu, 0.01)
                _opt(mutil, gl, gs.util_mem, 0.01)
                _opt(mem, gl, gs.mem_used_mib, 1024.0 * 1024.0)

        for h, name, a in f.active_alerts():
            who = f.host(h).session.servers.get(name)
            anyal.add_metric([h, name, (who.role if who else None) or "", a.kind],
                             float(ALERT_LEVELS.get(a.level, 0)))
        for ls in f.logical_servers():
            for gh, gs in f.server_gpus(ls):
                ginfo.add_metric([gh, str(gs.index), ls.server, ls.host, ls.role or ""], 1.0)
        for m in g.values():
            # label values come from hosts, logs and the baseline store: a scrape is a way out
            # (redacted) and is read in terminals (`curl :9464/metrics`: no escape sequences)
            m.samples = [smp._replace(labels={k: _label(v) for k, v in smp.labels.items()})
                         for smp in m.samples]
        yield from g.values()


@lru_cache(maxsize=4096)
def _label(value: str) -> str:
    return visible(redact_text(value))


def _opt(m: GaugeMetricFamily, labels: list[str], v: float | None, scale: float = 1.0) -> None:
    if v is not None:
        m.add_metric(labels, float(v) * scale)


def registry_for(fleet: FleetSession, clock: Callable[[], float] | None = None) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(FleetCollector(fleet, clock))
    return reg


# -- address and HTTP ----------------------------------------------------------------------------


def parse_listen(text: str) -> tuple[str, int]:
    """`:9464`, `9464` -> loopback; `ADDR:PORT`, `[V6]:PORT` as given. ValueError if malformed."""
    t = text.strip()
    host = "127.0.0.1"
    if t.startswith("["):
        addr, sep, rest = t[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise ValueError(f"expected [ADDR]:PORT, got {text!r}")
        host, port_s = addr, rest[1:]
    elif ":" in t:
        addr, _, port_s = t.rpartition(":")
        if ":" in addr:
            raise ValueError(f"IPv6 addresses need brackets: [ADDR]:PORT, got {text!r}")
        host = addr or host
    else:
        port_s = t
    port = ascii_port(port_s, lo=0)  # (isdigit() and int() took '²' and raised)
    if port is None:
        raise ValueError(f"bad port in {text!r}: PORT must be ASCII digits, 0-65535 (0: any "
                         "free port)")
    return host, port


@dataclass
class MetricsServer:
    server: asyncio.AbstractServer
    host: str
    port: int

    async def close(self) -> None:
        self.server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.server.wait_closed(), 5)


async def serve(registry: CollectorRegistry, host: str = "127.0.0.1",
                port: int = DEFAULT_PORT) -> MetricsServer:
    """Serve GET /metrics on the running loop (HTTP/1.0 style: one request per connection)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            parts = head.split(b"\r\n", 1)[0].split()
            method, target = (parts[0], parts[1]) if len(parts) >= 2 else (b"", b"")
            path = target.split(b"?", 1)[0]
            if method not in (b"GET", b"HEAD"):
                status, ctype, body = "405 Method Not Allowed", "text/plain", b"GET only\n"
            elif path in (b"/metrics", b"/"):
                status, ctype, body = "200 OK", CONTENT_TYPE_LATEST, generate_latest(registry)
            else:
                status, ctype, body = "404 Not Found", "text/plain", b"see /metrics\n"
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: "
                         f"{len(body)}\r\nConnection: close\r\n\r\n".encode())
            if method != b"HEAD":
                writer.write(body)
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError,
                ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    server = await asyncio.start_server(handle, host, port, limit=64 << 10)
    sock = server.sockets[0].getsockname()
    return MetricsServer(server, host, int(sock[1]))
