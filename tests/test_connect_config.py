"""`specmon connect TARGET --config FILE`: profiles on the target are tailed and controlled."""

from __future__ import annotations

import asyncio
import sys

from controlkit import cleanup_pidfiles, free_port

from specmon.cli import build_parser
from specmon.commands.connect_cmd import open_app


async def wait_for(pilot, cond, timeout: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        assert loop.time() < end, "condition not reached"
        await pilot.pause(0.1)


async def test_connect_with_config_starts_and_stops_a_profile(tmp_path):
    cfg = tmp_path / "specmon.toml"
    cfg.write_text(f"""
[hosts.box]
target = "local"
python = "{sys.executable}"
run_dir = "{tmp_path / 'run'}"
sim_dir = "{tmp_path / 'sim'}"
n_gpus = 4

[servers.base]
host = "box"
role = "baseline"
launcher = "sim"
model_path = "org/model"
tp = 2
port = {free_port()}
gpus = [0, 1]
extra_args = ["--startup-s", "0.3", "--sim-dir", "{tmp_path / 'sim'}", "--n-gpus", "4",
              "--decode-log-interval", "4", "--load-concurrency", "1"]

[servers.base.env]
NCCL_PROTO = "LL"

[keys]
"server.start" = "ctrl+u"
""")
    args = build_parser().parse_args(["connect", "box", "--config", str(cfg)])
    app, actions = await open_app(args)
    assert set(actions) == {"base"}
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
            await pilot.press("x")
            await pilot.pause(0.3)
            await pilot.press("y")
            await wait_for(pilot, lambda: (st.control_text or "").startswith("stop: done"), 60)
    finally:
        for ctl in actions.values():
            await ctl.close()
        cleanup_pidfiles(tmp_path / "run")


async def test_busy_gpus_offer_a_swap_that_stops_the_owner_and_starts_the_other(tmp_path):
    from specmon.ui.control_keys import ConfirmScreen

    def server(name: str, role: str) -> str:
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

    cfg = tmp_path / "specmon.toml"
    cfg.write_text(f"""
[hosts.box]
target = "local"
python = "{sys.executable}"
run_dir = "{tmp_path / 'run'}"
sim_dir = "{tmp_path / 'sim'}"
n_gpus = 4
""" + server("base", "baseline") + server("spec", "speculative") + """
[servers.spec.speculative]
algorithm = "EAGLE3"
draft_model_path = "org/draft"
num_steps = 2
eagle_topk = 1
num_draft_tokens = 3
""")
    args = build_parser().parse_args(["connect", "box", "--config", str(cfg)])
    app, actions = await open_app(args)
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            base, spec = app.session.server("base"), app.session.server("spec")
            app.query_one("#panel-base").focus()
            await pilot.press("u")
            await wait_for(pilot, lambda: base.decode_total >= 2, 90)
            app.query_one("#panel-spec").focus()
            await pilot.press("u")  # same GPUs: refused, naming the owner, swap offered
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), 60)
            assert "used by base" in str(app.screen.question)
            assert spec.decode_total == 0
            await pilot.press("y")
            await wait_for(pilot, lambda: spec.decode_total >= 2, 90)
            status = await actions["base"].status(check_health=False)
            assert status.state in ("stopped", "exited")
    finally:
        for ctl in actions.values():
            await ctl.close()
        cleanup_pidfiles(tmp_path / "run")
