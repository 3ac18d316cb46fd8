"""`specmon connect TARGET --config FILE`: profiles on the target are tailed and controlled."""

from __future__ import annotations

import sys

from kit.control import cleanup_pidfiles, free_port
from kit.wait import wait_control_idle, wait_for

from specmon.cli import build_parser
from specmon.commands.connect_cmd import open_app


def host_box(tmp_path) -> str:
    """A local [hosts.box] with a simulated 4-GPU host."""
    return f"""
[hosts.box]
target = "local"
python = "{sys.executable}"
run_dir = "{tmp_path / 'run'}"
sim_dir = "{tmp_path / 'sim'}"
n_gpus = 4
"""


def sim_server(tmp_path, name: str, role: str) -> str:
    """A profile on box launching `specmon sim server` on GPUs 0-1."""
    return f"""
[servers.{name}]
host = "box"
role = "{role}"
launcher = "sim"
model_path = "org/model"
tp = 2
port = {free_port()}
gpus = [0, 1]
extra_args = ["--startup-s", "0.3", "--sim-dir", "{tmp_path / 'sim'}", "--n-gpus", "4",
              "--decode-log-interval", "4", "--load-concurrency", "1"]
"""



# the speculative settings a speculative profile needs (the config refuses one without them)
SPEC_SETTINGS = """
[servers.spec.speculative]
algorithm = "EAGLE3"
draft_model_path = "org/draft"
num_steps = 2
eagle_topk = 1
num_draft_tokens = 3
"""


async def start_base(pilot, app) -> None:  # noqa: ANN001 - a Pilot and a SpecmonApp
    """`u` on base's panel; back once base logs decode lines and the start action has ended
    (a next action on base is refused while it runs)."""
    base = app.session.server("base")
    app.query_one("#panel-base").focus()
    await pilot.press("u")
    await wait_for(pilot, lambda: base.decode_total >= 2, 90)
    await wait_control_idle(pilot, app)


def capture_toasts(app) -> list[str]:  # noqa: ANN001 - a SpecmonApp
    """Every toast's text from now on (the app still shows them)."""
    toasts: list[str] = []
    notify = app.notify
    app.notify = lambda message, **kw: (toasts.append(str(message)), notify(message, **kw))[1]
    return toasts

async def test_connect_with_config_starts_and_stops_a_profile(tmp_path):
    cfg = tmp_path / "specmon.toml"
    cfg.write_text(host_box(tmp_path) + sim_server(tmp_path, "base", "baseline") + """
[servers.base.env]
NCCL_PROTO = "LL"

[keys]
"server.start" = "ctrl+u"
""")
    args = build_parser().parse_args(["connect", "box", "--config", str(cfg)])
    app, actions = await open_app(args)
    assert set(actions) == {("box", "base")}
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            st = app.session.server("base")
            assert st.role == "baseline"
            app.query_one("#panel-base").focus()
            await pilot.press("ctrl+u")  # remapped from the config's [keys]
            await wait_for(pilot, lambda: st.decode_total >= 3, 90)
            await wait_for(pilot, lambda: st.env_audit is not None, 30)
            assert not st.env_audit.problems()
            workers = st.env_audit.workers
            assert len(workers) == 2 and all(w.status == "ok" for w in workers)
            assert all(w.env.get("NCCL_PROTO") == "LL" for w in workers)
            await wait_control_idle(pilot, app)
            await pilot.press("x")
            await pilot.pause(0.3)
            toasts = capture_toasts(app)
            await pilot.press("y")
            await wait_for(pilot, lambda: "base: stop done" in toasts, 60)
            assert ("box", "base") not in app.control_status  # the status line cleared once the stop was done
    finally:
        for ctl in actions.values():
            await ctl.close()
        cleanup_pidfiles(tmp_path / "run")


async def test_busy_gpus_offer_a_swap_that_stops_the_owner_and_starts_the_other(tmp_path):
    from specmon.ui.control_keys import ConfirmScreen

    cfg = tmp_path / "specmon.toml"
    cfg.write_text(host_box(tmp_path) + sim_server(tmp_path, "base", "baseline")
                   + sim_server(tmp_path, "spec", "speculative") + SPEC_SETTINGS)
    args = build_parser().parse_args(["connect", "box", "--config", str(cfg)])
    app, actions = await open_app(args)
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            spec = app.session.server("spec")
            await start_base(pilot, app)  # the swap offered below stops base
            app.query_one("#panel-spec").focus()
            await pilot.press("u")  # same GPUs: refused, naming the owner, swap offered
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), 60)
            assert "used by base" in str(app.screen.question)
            assert spec.decode_total == 0
            await pilot.press("y")
            await wait_for(pilot, lambda: spec.decode_total >= 2, 90)
            status = await actions[("box", "base")].status(check_health=False)
            assert status.state in ("stopped", "exited")
    finally:
        for ctl in actions.values():
            await ctl.close()
        cleanup_pidfiles(tmp_path / "run")


async def test_a_swap_that_leaves_a_server_down_says_so_on_its_panel(tmp_path):
    """Swap base -> spec: spec crashes at start and base cannot be started again: base's panel
    reads DOWN and a lasting error toast says it (before: nothing said it)."""
    from specmon.ui.control_keys import ConfirmScreen

    crash = [sys.executable, "-c", "import sys; sys.exit(3)"]
    cfg = tmp_path / "specmon.toml"
    cfg.write_text(host_box(tmp_path) + sim_server(tmp_path, "base", "baseline") + f"""
[servers.spec]
host = "box"
role = "speculative"
port = {free_port()}
gpus = [0, 1]
command = {crash!r}
""".replace("'", '"'))
    args = build_parser().parse_args(["connect", "box", "--config", str(cfg)])
    app, actions = await open_app(args)
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            await start_base(pilot, app)
            actions[("box", "base")].profile.command = crash  # its restart will fail too
            toasts = capture_toasts(app)
            await pilot.press("o")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), 30)
            await pilot.press("y")
            await wait_for(pilot, lambda: any("IS DOWN" in t for t in toasts), 90)
            assert app.control_status.get(("box", "base"), "").startswith(
                "DOWN: swap failed: spec did not start")
            assert (await actions[("box", "base")].status(check_health=False)).state in (
                "stopped", "exited")
    finally:
        for ctl in actions.values():
            await ctl.close()
        cleanup_pidfiles(tmp_path / "run")


async def test_connect_with_config_and_prometheus_has_the_control_keys_and_remaps(tmp_path):
    """The --prometheus form is the same path: control keys, [keys] remaps, and /metrics read
    the very session the panels show (each line applied once)."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    from specmon.commands.connect_cmd import close_app

    cfg = tmp_path / "specmon.toml"
    cfg.write_text(host_box(tmp_path) + sim_server(tmp_path, "base", "baseline") + """
[keys]
"server.start" = "ctrl+u"
"window.cycle" = "ctrl+w"
""")
    args = build_parser().parse_args(["connect", "box", "--config", str(cfg),
                                      "--prometheus", "127.0.0.1:0"])
    app, actions = await open_app(args)
    assert set(actions) == {("box", "base")}
    assert app.metrics_server is not None
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            st = app.session.server("base")
            app.query_one("#panel-base").focus()
            await pilot.press("u")  # remapped away: the default key does nothing now
            await pilot.pause(0.5)
            assert ("box", "base") not in app.control_status
            await pilot.press("ctrl+w")
            assert app.window_s == 300.0
            await pilot.press("ctrl+u")
            await wait_for(pilot, lambda: st.decode_total >= 3, 90)
            url = f"http://127.0.0.1:{app.metrics_server.port}/metrics"
            async with httpx.AsyncClient(timeout=10) as c:
                text = (await c.get(url)).text
            n = st.decode_total
            samples = [s for f in text_string_to_metric_families(text) for s in f.samples
                       if s.name == "specmon_server_decode_samples"]
            assert [s.labels["host"] for s in samples] == ["box"]
            assert 1 <= samples[0].value <= n  # this window of the same points, not doubled
            await wait_control_idle(pilot, app)
            await pilot.press("x")
            await pilot.pause(0.3)
            toasts = capture_toasts(app)
            await pilot.press("y")
            await wait_for(pilot, lambda: "base: stop done" in toasts, 60)
            assert ("box", "base") not in app.control_status  # the status line cleared once the stop was done
    finally:
        await close_app(app, actions)
        cleanup_pidfiles(tmp_path / "run")


async def test_connect_log_that_does_not_exist_says_so_and_waits_for_it(tmp_path):
    from specmon.commands.connect_cmd import close_app

    log = tmp_path / "nope.log"
    args = build_parser().parse_args(["connect", "local", "--log", f"base={log}",
                                      "--config", str(tmp_path / "none.toml")])
    args.config = None  # no config at all
    app, actions = await open_app(args)
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            st = app.session.server("base")
            panel = app.query_one("#panel-base")
            await wait_for(pilot, lambda: st.tail_status is not None, 30)
            assert st.tail_status.startswith(f"no such file: {log}")
            await wait_for(pilot, lambda: "no such file" in str(
                panel.query_one(".startup").render()), 10)
            log.write_text("[2025-06-01 12:00:00 TP0] Decode batch, #running-req: 1, #token: 9, "
                           "token usage: 0.01, gen throughput (token/s): 88.80, #queue-req: 0\n")
            await wait_for(pilot, lambda: st.decode_total == 1, 30)  # it kept waiting
            assert st.tail_status is None
    finally:
        await close_app(app, actions)


async def test_all_users_is_said_for_as_long_as_the_app_runs_and_on_each_foreign_panel(tmp_path):
    """`--all-users` was said in a toast and in the connection line until discovery ended;
    another user's server then looked like one of the user's own panels waiting for data."""
    from specmon.commands.connect_cmd import close_app
    from specmon.session.events import ServerInfo

    log = tmp_path / "own.log"
    log.write_text("")
    args = build_parser().parse_args(["connect", "local", "--all-users", "--log", f"own={log}",
                                      "--config", str(tmp_path / "none.toml")])
    args.config = None
    app, actions = await open_app(args)
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            assert "every user's servers (--all-users)" in app.sub_title
            app.fleet.host_servers("local", [ServerInfo("theirs", foreign_uid=1234)])
            st = app.session.server("theirs")
            await wait_for(pilot, lambda: app.query("#panel-theirs"), 10)
            panel = app.query_one("#panel-theirs")
            await wait_for(pilot, lambda: "another user's process (uid 1234)" in str(
                panel.query_one(".startup").render()), 10)
            assert "not tailed" in (st.tail_status or "")
            assert "every user's servers (--all-users)" in app.sub_title  # still
    finally:
        await close_app(app, actions)


async def test_a_second_action_or_quit_during_a_swap_never_cuts_it_short(tmp_path):
    """A key on the panel of the server a swap is starting cancelled the swap half-way
    (Textual's exclusive worker): the server it had stopped stayed down, nothing said. Now a
    second action is refused with a line, the swap ends, and `q` asks first."""
    from specmon.ui.control_keys import ConfirmScreen

    spec_profile = sim_server(tmp_path, "spec", "speculative").replace(
        '"--startup-s", "0.3"', '"--startup-s", "6"')
    cfg = tmp_path / "specmon.toml"
    cfg.write_text(host_box(tmp_path) + sim_server(tmp_path, "base", "baseline") + spec_profile
                   + SPEC_SETTINGS)
    args = build_parser().parse_args(["connect", "box", "--config", str(cfg)])
    app, actions = await open_app(args)
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            spec = app.session.server("spec")
            await start_base(pilot, app)
            toasts = capture_toasts(app)
            await pilot.press("o")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), 30)
            await pilot.press("y")
            await wait_for(pilot, lambda: ("box", "spec") in app.control.busy, 10)
            for panel in ("#panel-spec", "#panel-base"):  # either server of the swap
                app.query_one(panel).focus()
                await pilot.press("m")
            assert sum("is in progress; wait for it to end" in t for t in toasts) == 2, toasts
            await pilot.press("q")  # asks: quitting would leave base down
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), 10)
            assert "swap (base -> spec) is in progress" in str(app.screen.question)
            await pilot.press("n")
            await wait_for(pilot, lambda: spec.decode_total >= 2, 120)  # the swap went through
            # (its start is still finishing when spec's first lines come)
            await wait_for(pilot, lambda: any("swap (base -> spec) done" in t for t in toasts), 60)
            assert not app.control.busy
    finally:
        for ctl in actions.values():
            await ctl.close()
        cleanup_pidfiles(tmp_path / "run")


async def test_a_note_before_the_app_starts_echoes_no_escape_sequence(tmp_path, monkeypatch,
                                                                      capsys):
    """connect runs on the raw streams (its app owns the terminal): the note it prints before
    the app starts (a damaged baseline store, its path from $SPECMON_DATA_DIR) is made visible
    where it is printed."""
    from specmon.commands.connect_cmd import close_app

    data = tmp_path / "d\x1b]0;pwned\x07"
    data.mkdir()
    (data / "baselines.sqlite3").write_text("not a database\n")
    monkeypatch.setenv("SPECMON_DATA_DIR", str(data))
    log = tmp_path / "base.log"
    log.write_text("")
    args = build_parser().parse_args(["connect", "local", "--log", f"base={log}"])
    app, actions = await open_app(args)
    await close_app(app, actions)
    err = capsys.readouterr().err
    assert "drift watching is off" in err and "d\\x1b]0;pwned\\x07" in err, err
    assert "\x1b" not in err and "\x07" not in err
