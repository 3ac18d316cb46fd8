"""The session model's feed events (FleetSession): one method per event, each line applied once,
drift fed the records as they are applied, a stored baseline's alert explained, and what a
panel says about a log that is missing or silent (on a controllable clock, no sleeping)."""

from __future__ import annotations

from kit.ui import ARGS_BASE, READY, T0, decode_line

from specmon.hosts.base import ConnectionState
from specmon.parse.sglang import parse_line
from specmon.session.events import LineItem
from specmon.session.fleet import NO_SGLANG_S, FleetSession

NCCL = [f"h:1:1 [{r}] NCCL INFO {k} set by environment to {v}" for r in range(2)
        for k, v in (("NCCL_PROTO", "LL"), ("NCCL_ALGO", "Ring"))]


def items(lines: list[str], t0: float) -> list[LineItem]:
    return [LineItem(x, parse_line(x), t0 + i) for i, x in enumerate(lines)]


def test_each_event_changes_the_model_once_and_listeners_see_each_line():
    now = [T0]
    fleet = FleetSession(["a", "b"], clock=lambda: now[0])
    seen: list[tuple[str, str, str]] = []
    fleet.record_listeners.append(lambda h, s, it: seen.append((h, s, it.text)))
    fleet.host_state("a", ConnectionState("connected"))
    fleet.declare_server("a", "base", "baseline", "/a.log")
    fleet.declare_server("b", "base", None, "/b.log")  # same name, other host: another server
    lines = [ARGS_BASE, READY] + [decode_line(i, 88.0) for i in range(5)]
    fleet.lines("a", "base", items(lines, T0))
    fleet.lines("b", "base", items(lines[:3], T0))
    assert fleet.server("a", "base").decode_total == 5 and fleet.server("b", "base").decode_total == 1
    assert seen == [("a", "base", x) for x in lines] + [("b", "base", x) for x in lines[:3]]
    assert not fleet.server("a", "base").stale and fleet.server("b", "base").stale  # b: connecting
    fleet.server_exited("a", "base", 0)
    fleet.notice("a", "*", "discovery failed, retrying")  # about the host: not a server named *
    assert "*" not in fleet.host("a").session.servers and list(fleet.host("a").notices)
    fleet.server_pids("a", "base", [10, 11])
    assert fleet.server("a", "base").pids == {10, 11}
    assert fleet.server("a", "base").status == "stopped"


def test_stored_baseline_found_by_lookup_is_fed_records_and_its_alert_has_causes():
    now = [T0]
    rec = FleetSession(["box"], clock=lambda: now[0])
    rec.declare_server("box", "base", "baseline", "/x.log")
    tuned = [ARGS_BASE, *NCCL, READY] + [decode_line(i, 88.8 + 0.3 * (i % 3)) for i in range(80)]
    rec.lines("box", "base", items(tuned, T0))
    now[0] = T0 + 100
    stored = rec.record_baseline("box", "base", name="tuned")
    assert stored.fingerprint is not None

    live = FleetSession(["box"], baselines=lambda h, s, r: stored if s == "base" else None,
                        clock=lambda: now[0])
    live.host_state("box", ConnectionState("connected"))
    live.declare_server("box", "base", "baseline", "/x.log")
    assert live.monitor("box", "base") is not None  # looked up when the server appeared
    # restarted without NCCL_PROTO: the workers' NCCL_DEBUG lines show only NCCL_ALGO
    untuned = [ARGS_BASE, *[x for x in NCCL if "NCCL_PROTO" not in x], READY] + [
        decode_line(i, 62.9 + 0.3 * (i % 3)) for i in range(80)]
    changed = []
    live.alert_listeners.append(lambda h, s, a: changed.append((h, s, a)))
    for k in range(0, len(untuned), 10):  # records arrive in batches; drift sees every one
        live.lines("box", "base", items(untuned[k:k + 10], T0 + 200 + k))
        live.tick(T0 + 200 + k)
    [(h, s, alert)] = [c for c in changed if not c[2].cleared][:1]
    assert (h, s) == ("box", "base") and alert.level == "critical"
    assert alert.causes and any("NCCL" in c for c in alert.causes), alert.causes
    assert live.active_alerts()[0][2].causes == alert.causes
    assert live.host("box").session.alerts[0]["cause"]  # what snapshots carry


def test_missing_then_silent_then_sglang_says_so_on_the_model_clock():
    now = [T0]
    fleet = FleetSession(["h"], clock=lambda: now[0])
    fleet.declare_server("h", "base", None, "/nope.log")
    fleet.tail_missing("h", "base", "/nope.log", "no such file")
    assert fleet.server("h", "base").tail_status == "no such file: /nope.log (waiting for it to appear)"
    now[0] += NO_SGLANG_S + 1
    fleet.tick()
    assert fleet.server("h", "base").tail_status.startswith("no such file")  # still the reason
    fleet.lines("h", "base", items(["hello", "not sglang"], now[0]))  # it appeared
    st = fleet.server("h", "base")
    assert st.tail_status is not None and st.tail_status.startswith("no SGLang or vLLM line from /nope.log")

    other = FleetSession(["h"], clock=lambda: now[0])
    other.declare_server("h", "s", None, "/quiet.log")
    other.lines("h", "s", items(["plain text"], now[0]))
    now[0] += NO_SGLANG_S - 1
    other.tick()
    assert other.server("h", "s").tail_status is None  # not yet 30 s
    now[0] += 2
    other.tick()
    assert "in 30 s" in other.server("h", "s").tail_status
    other.lines("h", "s", items([decode_line(0, 80.0)], now[0]))
    assert other.server("h", "s").tail_status is None


async def test_a_host_with_nothing_to_tail_says_so_on_the_connection_line():
    from specmon.ui.app import SpecmonApp

    fleet = FleetSession(["box"])
    fleet.host_state("box", ConnectionState("connected"))
    app = SpecmonApp(fleet, show_clock=False)
    async with app.run_test(size=(120, 40)) as pilot:
        assert app.connection_text() == "connected"
        fleet.notice("box", "*", "no SGLang server with a readable log found; pass --log NAME=PATH")
        await pilot.pause(0.5)
        assert app.query_one("#connection").display
        assert app.connection_text() == ("box: no SGLang server with a readable log found; "
                                         "pass --log NAME=PATH")
