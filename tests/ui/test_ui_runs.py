"""After a restart the live rows show only the current run's values (issue 23).

On the demo's deterministic session: a server restarts (its `server_args` line arrives) and no
decode line of the new run has come yet. Its panel must not keep the ended run's last interval,
ms/token, accept length or benchmark; its drift badge must say "checking" (never OK on n 0 or
on the previous run's evidence), and the headline's figure must not be the old run's.
"""

from __future__ import annotations

from types import SimpleNamespace

from kit.ui import DEMO_NOW, _start, demo_decode, demo_fleet

from specmon.parse.sglang import parse_line
from specmon.session.events import LineItem
from specmon.ui.headline import drift_state, headline_model
from specmon.ui.widgets import summary_rows


def _feed(fleet, name: str, text: str, t: float) -> None:  # noqa: ANN001
    fleet.lines("demo", name, [LineItem(text, parse_line(text), t)])


def _restart(fleet, name: str, t: float) -> None:  # noqa: ANN001
    _start(lambda n, x, tt: _feed(fleet, n, x, tt), name, t, spec=name == "speculative", nccl=True)


def _rows(state, now: float) -> dict[str, tuple[str, str]]:  # noqa: ANN001
    return {label: (value, hint) for label, value, hint, _ in summary_rows(state, now, 60.0)}


def test_restart_clears_the_ended_runs_values_from_the_live_rows():
    fleet = demo_fleet(drift=False)
    s = fleet.host("demo").session
    spec = s.server("speculative")
    before = _rows(spec, DEMO_NOW)
    assert before["last interval"][0] != "N/A" and before["accept len"][0] != "N/A"
    spec.last_bench = SimpleNamespace(concurrency=1, output_len=64, completed=4, output_tok_s=90.0,
                                      mean_ttft_ms=20.0, mean_itl_ms=11.0, accept_length=2.4)
    spec.last_bench_run = spec.run.index
    from specmon.ui.widgets import startup_pieces as _startup_pieces
    assert any(t.startswith("bench 90.0 tok/s end-to-end, this run") for t, _ in _startup_pieces(spec))
    watches = {n: w for (h, n), w in fleet.watches.items()}
    assert drift_state("speculative", watches, spec).state == "ok"

    _restart(fleet, "speculative", DEMO_NOW + 5)  # run 2: start-up lines, no decode line yet
    fleet.tick(DEMO_NOW + 6)
    rows = _rows(spec, DEMO_NOW + 6)
    for label in ("last interval", "ms/token", "accept len", "median 60 s"):
        assert rows[label][0] == "N/A", (label, rows[label])
    assert "run 2" in rows["last interval"][1]
    assert not any("bench" in t for t, _ in _startup_pieces(spec))  # run 1's benchmark
    ds = drift_state("speculative", watches, spec)
    assert ds.state == "checking" and ds.n == 0 and ds.text.startswith("checking n 0/")
    m = headline_model(s, s.server("baseline"), spec, watches, DEMO_NOW + 6, 60.0)
    assert m.big.text == "N/A"  # no speedup of the new run yet (not the old run's figure)

    # the new run's first decode lines: values of run 2, still "checking" until n is reached
    for k in range(3):
        t = DEMO_NOW + 8 + 2 * k
        _feed(fleet, "speculative", demo_decode(t, k, 93.0, 2.4), t)
    fleet.tick(DEMO_NOW + 14)
    rows = _rows(spec, DEMO_NOW + 14)
    assert rows["last interval"][0] == "93.00" and rows["accept len"][0] != "N/A"
    ds = drift_state("speculative", watches, spec)
    assert ds.state == "checking" and ds.n < ds.need  # (the first lines are warm-up)


def test_a_drift_of_the_previous_run_is_not_shown_on_the_next():
    fleet = demo_fleet(drift=True)
    s = fleet.host("demo").session
    base = s.server("baseline")
    watches = {n: w for (h, n), w in fleet.watches.items()}
    assert drift_state("baseline", watches, base).state == "drift"
    _restart(fleet, "baseline", DEMO_NOW + 5)  # run 3 with the NCCL tuning restored
    fleet.tick(DEMO_NOW + 6)
    ds = drift_state("baseline", watches, base)
    assert ds.state == "checking" and ds.cause is None
    m = headline_model(s, base, s.server("speculative"), watches, DEMO_NOW + 6, 60.0)
    assert m.view is not None and not m.view.drift_active


def test_an_ended_run_is_labelled_with_its_age():
    fleet = demo_fleet(drift=False)
    spec = fleet.host("demo").session.server("speculative")
    fleet.server_exited("demo", "speculative", -15)
    last = spec.run.last_received
    rows = _rows(spec, last + 40)
    assert rows["last interval"][0] != "N/A"
    assert rows["last interval"][1].startswith("tok/s · run 1 ended 40 s ago")


def test_a_small_drift_is_checking_until_confirmed_never_ok_and_metrics_agree():
    """The phantom baseline's 88.8 -> 82.2 (-8 %): once the restarted run has the n a verdict
    needs, the detector's window is already below the threshold but needs a few evaluations
    to raise the alert. Those lines were "OK vs recorded" (a verdict its evidence did not
    support); they are "checking ... confirming" now, on the badge and in /metrics alike."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from specmon.export.prometheus import registry_for

    fleet = demo_fleet(drift=False)
    base = fleet.host("demo").session.server("baseline")
    watches = {n: w for (h, n), w in fleet.watches.items()}
    reg = registry_for(fleet)

    def scraped() -> tuple[str, float]:
        fams = {f.name: f for f in text_string_to_metric_families(generate_latest(reg).decode())}
        states = [s.labels["state"] for s in fams["specmon_server_drift_state"].samples
                  if s.labels["server"] == "baseline" and s.value == 1.0]
        have = [s.value for s in fams["specmon_server_drift_samples"].samples
                if s.labels["server"] == "baseline" and s.labels["of"] == "have"]
        assert len(states) == 1 and len(have) == 1
        return states[0], have[0]

    _restart(fleet, "baseline", DEMO_NOW + 5)  # the restart without the NCCL tuning
    seen = []
    for k in range(30):
        t = DEMO_NOW + 8 + 2 * k
        _feed(fleet, "baseline", demo_decode(t, k, 82.2), t)
        fleet.tick(t)
        ds = drift_state("baseline", watches, base)
        assert scraped() == (ds.state, float(ds.n))  # one verdict, two front ends
        seen.append((ds.state, ds.text))
        if ds.state == "checking" and ds.n >= ds.need:
            assert "confirming" in ds.text
    states = [state for state, _ in seen]
    assert "ok" not in states, seen
    assert states[-1] == "drift" and any("confirming a change" in text for _, text in seen)


def test_a_stopped_baseline_is_not_called_live():
    """A baseline stopped between tuning runs: the speedup still compares against its last
    run, and says how long ago that ended, never "vs live baseline"."""
    fleet = demo_fleet(drift=False)
    s = fleet.host("demo").session
    base = s.server("baseline")
    fleet.server_exited("demo", "baseline", None)
    watches = {n: w for (h, n), w in fleet.watches.items()}
    m = headline_model(s, base, s.server("speculative"), watches,
                       base.run.last_received + 90, 60.0)
    assert m.big.label.startswith("vs baseline ") and "ended 90 s ago" in m.big.label
    assert "live" not in m.big.label and all("live" not in x for x in m.statements)


def test_a_stop_line_in_the_log_ends_the_run_for_the_headline_and_metrics():
    """A server tailed by `--log` (no process to watch) printed uvicorn's stop line: the
    headline said "vs live baseline" and /metrics had no word that the run had ended."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from specmon.export.prometheus import registry_for

    fleet = demo_fleet(drift=False)
    s = fleet.host("demo").session
    base = s.server("baseline")
    reg = registry_for(fleet)

    def ended() -> dict[str, float]:
        fams = {f.name: f for f in text_string_to_metric_families(generate_latest(reg).decode())}
        return {x.labels["server"]: x.value for x in fams["specmon_server_run_ended"].samples}

    assert ended() == {"baseline": 0.0, "speculative": 0.0}
    t = base.run.last_received + 1
    _feed(fleet, "baseline", "[2026-02-26 19:30:00] INFO:     Finished server process [4242]", t)
    assert base.status == "stopped" and base.run.end_reason == "exit"
    assert ended() == {"baseline": 1.0, "speculative": 0.0}
    watches = {n: w for (h, n), w in fleet.watches.items()}
    m = headline_model(s, base, s.server("speculative"), watches, t + 30, 60.0)
    assert m.big.label.startswith("vs baseline ") and "live" not in m.big.label
    _restart(fleet, "baseline", t + 40)  # relaunched: a new run, not ended
    assert ended()["baseline"] == 0.0 and base.status != "stopped" and len(base.runs) == 2


def test_an_unknown_exit_code_does_not_overwrite_a_known_one():
    """A server specmon started crashed (code 1, from its control); the feed's liveness check
    then sees the launcher gone and reports an exit with no code: the panel must still say
    crashed, with code 1 (it said stopped)."""
    fleet = demo_fleet(drift=False)
    spec = fleet.host("demo").session.server("speculative")
    fleet.server_exited("demo", "speculative", 1)
    fleet.server_exited("demo", "speculative", None)
    assert (spec.status, spec.exit_code, spec.run.exit_code) == ("crashed", 1, 1)


def test_record_says_an_alert_once_raised_and_never_a_clear_it_never_said_raised():
    """`record` printed every alert change the tick saw: an alert raised and cleared while
    the history was read came out as "cleared: ... - cleared" alone (seen live: its raise
    was never printed). It follows the screen's rule now, and a clear says "cleared" once."""
    from dataclasses import replace

    from specmon.analysis.drift import Alert
    from specmon.commands.record import alert_line

    fleet = demo_fleet(drift=True)
    raised = fleet.watches[("demo", "baseline")].last
    assert raised is not None and not raised.cleared
    line = alert_line(fleet, "demo", "baseline", raised, multi=False)
    assert line is not None and line.startswith(f"baseline: {raised.level}: ")
    assert alert_line(fleet, "demo", "baseline", raised, multi=False) is None  # said once
    cleared = replace(raised, cleared=True)
    assert alert_line(fleet, "demo", "baseline", cleared, multi=True) == \
        f"demo/baseline: cleared: {raised.text}" + "".join(f"; cause: {c}" for c in raised.causes)
    never = Alert("warning", "speculative: drift", (), None, True)
    assert alert_line(fleet, "demo", "speculative", never, multi=False) is None


def test_a_step_back_of_log_time_starts_the_verdict_again_as_a_restart_does():
    """Issue 22: a clock stepped back blended the two sides. The drift watch kept feeding one
    detector across it (and kept the alert raised on the lines before it); now a step back
    starts its own verdict, on the badge, the headline and /metrics alike, as `check` does."""
    fleet = demo_fleet(drift=True)
    s = fleet.host("demo").session
    base = s.server("baseline")
    watches = {n: w for (h, n), w in fleet.watches.items()}
    assert drift_state("baseline", watches, base).state == "drift"
    run = base.runs[-1].index
    t = DEMO_NOW + 5
    _feed(fleet, "baseline", demo_decode(t - 3600, 0, 88.8), t)  # the clock went back 1 h
    fleet.tick(t + 1)
    assert base.runs[-1].index == run and base.runs[-1].epoch == 1  # the same run
    ds = drift_state("baseline", watches, base)
    assert ds.state == "checking" and ds.n == 0, ds
    m = headline_model(s, base, s.server("speculative"), watches, t + 1, 60.0)
    assert m.view is not None and not m.view.drift_active
