"""Config profiles: location order, every error with file/key/fix, the sample config, the CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from kit.paths import ROOT

from specmon.config import ConfigError, check_path, find_config, load_path, parse_config

GOOD = """
[hosts.box]
target = "me@box:2222"
python = "/opt/venv/bin/python"

[servers.base]
host = "box"
role = "baseline"
model_path = "org/model"
tp = 2
port = 30000
gpus = [0, 1]
extra_args = ["--enable-metrics"]
env = { NCCL_PROTO = "LL", NCCL_ALGO = "Ring" }

[servers.spec]
host = "box"
role = "speculative"
model_path = "org/model"
tp = 2
port = 30001
gpus = [0, 1]
[servers.spec.speculative]
algorithm = "EAGLE3"
draft_model_path = "org/draft"
num_steps = 2
eagle_topk = 1
num_draft_tokens = 3
"""


def _issues(text: str, tmp_path: Path):
    p = tmp_path / "specmon.toml"
    p.write_text(text)
    return check_path(p)


def test_good_config_builds_the_launch_command(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text(GOOD)
    cfg = load_path(p)
    spec = cfg.server("spec")
    argv = spec.launch_argv(cfg.host_for(spec).python)
    assert argv[:3] == ["/opt/venv/bin/python", "-m", "sglang.launch_server"]
    assert argv[argv.index("--speculative-algorithm") + 1] == "EAGLE3"
    assert argv[argv.index("--speculative-num-draft-tokens") + 1] == "3"
    assert argv[argv.index("--port") + 1] == "30001"
    base = cfg.server("base")
    assert base.launch_env() == {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "SPT_NOENV": "1"}
    assert base.launch_argv()[-1] == "--enable-metrics"
    with pytest.raises(KeyError, match="did you mean 'spec'"):
        cfg.server("specc")


def test_sample_config_is_valid():
    assert check_path(ROOT / "examples" / "specmon.toml") == []


def test_unknown_key_gets_a_close_match(tmp_path):
    issues = _issues(GOOD.replace("model_path = \"org/model\"\ntp = 2\nport = 30000",
                                  "model_path = \"org/model\"\ntp = 2\nprot = 30000"), tmp_path)
    (i,) = [i for i in issues if i.key == "servers.base.prot"]
    assert i.file.endswith("specmon.toml") and i.message == "unknown key"
    assert "'port'" in i.fix
    # the default port then collides with nobody, so exactly this one issue
    assert len(issues) == 1


def test_wrong_type_duplicate_port_missing_model_all_reported(tmp_path):
    text = GOOD.replace("tp = 2\nport = 30001", 'tp = "two"\nport = 30000')
    text = text.replace('role = "baseline"\nmodel_path = "org/model"\n', 'role = "baseline"\n')
    issues = {i.key: i for i in _issues(text, tmp_path)}
    assert "must be an integer" in issues["servers.spec.tp"].message
    assert "port 30000 is also used by server 'base'" in issues["servers.spec.port"].message
    assert issues["servers.base.model_path"].message == "missing"
    assert "model_path =" in issues["servers.base.model_path"].fix
    for i in issues.values():
        assert i.format().startswith(str(tmp_path / "specmon.toml") + ": ")


def test_semantic_errors(tmp_path):
    text = GOOD.replace('role = "speculative"', 'role = "spec"').replace('host = "box"\nrole = "baseline"',
                                                                        'host = "bx"\nrole = "baseline"')
    text = text.replace("gpus = [0, 1]\nextra_args", "gpus = [0]\nextra_args")
    issues = {i.key: i for i in _issues(text, tmp_path)}
    assert issues["servers.spec.role"].fix == 'role = "speculative"'
    assert "did you mean 'box'" in issues["servers.base.host"].message
    assert "lists 1 GPUs but tp = 2" in issues["servers.base.gpus"].message
    bad_env = GOOD.replace('NCCL_ALGO = "Ring"', 'NCCL_ALGO = true')
    (i,) = _issues(bad_env, tmp_path)
    assert i.key == "servers.base.env.NCCL_ALGO" and "must be a string" in i.message
    no_spec = GOOD.split("[servers.spec.speculative]")[0]
    assert [i.key for i in _issues(no_spec, tmp_path)] == ["servers.spec.speculative"]


def test_syntax_error_names_the_line(tmp_path):
    (i,) = _issues("[servers.a]\nrole = \n", tmp_path)
    assert i.key == "(syntax)" and "line 2" in i.message


def test_location_order(tmp_path, monkeypatch):
    import platformdirs

    user = tmp_path / "user"
    (user).mkdir()
    monkeypatch.setattr(platformdirs, "user_config_dir", lambda app: str(user))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.delenv("SPECMON_CONFIG", raising=False)
    with pytest.raises(ConfigError, match="no specmon.toml found"):
        find_config()
    (user / "specmon.toml").write_text(GOOD)
    assert find_config() == user / "specmon.toml"
    (cwd / "specmon.toml").write_text(GOOD)
    assert find_config() == cwd / "specmon.toml"
    env = tmp_path / "env.toml"
    env.write_text(GOOD)
    monkeypatch.setenv("SPECMON_CONFIG", str(env))
    assert find_config() == env
    explicit = tmp_path / "x.toml"
    explicit.write_text(GOOD)
    assert find_config(explicit) == explicit
    with pytest.raises(ConfigError, match="not found"):  # an explicit path never falls through
        find_config(tmp_path / "missing.toml")
    monkeypatch.setenv("SPECMON_CONFIG", str(tmp_path / "gone.toml"))
    with pytest.raises(ConfigError, match=r"given by \$SPECMON_CONFIG"):
        find_config()


def test_parse_is_pure_and_partial():
    cfg, issues = parse_config(GOOD + "\n[servers.x]\nrole = 1\n", Path("mem.toml"))
    assert "base" in cfg.servers and "spec" in cfg.servers
    assert {i.key for i in issues} >= {"servers.x.role", "servers.x.model_path"}


def test_config_check_cli(tmp_path):
    good = tmp_path / "good.toml"
    good.write_text(GOOD)
    r = subprocess.run([sys.executable, "-m", "specmon", "config", "check", "--config", str(good)],
                       capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == f"{good}: ok"
    bad = tmp_path / "bad.toml"
    bad.write_text(GOOD.replace("tp = 2\nport = 30001", "tp = 2\nport = 30000\nmodle_path = 'x'"))
    r = subprocess.run([sys.executable, "-m", "specmon", "config", "check", "--config", str(bad)],
                       capture_output=True, text=True)
    assert r.returncode == 1
    lines = r.stdout.strip().splitlines()
    assert any("servers.spec.modle_path: unknown key (fix: did you mean 'model_path'?)" in ln
               for ln in lines)
    assert any("servers.spec.port: port 30000" in ln for ln in lines)
    assert "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "specmon", "server", "start", "nope", "--config",
                        str(good)], capture_output=True, text=True)
    assert r.returncode == 2 and "no server 'nope'" in r.stderr and "Traceback" not in r.stderr


def test_wrong_typed_tp_is_one_error_not_a_follow_on(tmp_path):
    issues = _issues(GOOD.replace("tp = 2\nport = 30000", 'tp = "2"\nport = 30000'), tmp_path)
    assert [i.key for i in issues] == ["servers.base.tp"]  # no "lists 2 GPUs but tp = 1"
    assert "must be an integer, got str '2'" in issues[0].message


def test_hostile_values_are_one_line_issues(tmp_path):
    cases = (
        (GOOD.replace("port = 30000", "port = 30000\nready_timeout = nan"),
         "servers.base.ready_timeout", "finite"),
        (GOOD.replace("port = 30000", "port = 30000\nready_timeout = inf"),
         "servers.base.ready_timeout", "finite"),
        (GOOD.replace("port = 30000", "port = 30000\nlog = 5"), "servers.base.log",
         "must be a string"),
        (GOOD.replace('extra_args = ["--enable-metrics"]', "extra_args = \"--flag 'unclosed\""),
         "servers.base.extra_args", "No closing quotation"),
        (GOOD.replace("[servers.base]", '[servers."../base"]'), 'servers.../base', "bad name"),
        (GOOD.replace("[hosts.box]", '[hosts."a/b"]'), "hosts.a/b", "bad name"),
        ("x = " + "[" * 5000 + "]" * 5000 + "\n", "(syntax)", "nested too deeply"),
    )
    for text, key, needle in cases:
        issues = _issues(text, tmp_path)
        hit = [i for i in issues if i.key == key]
        assert hit and needle in hit[0].message, (key, issues)
        assert all("\n" not in i.format() for i in issues)


def test_missing_local_model_path_is_reported(tmp_path):
    text = GOOD.replace('[hosts.box]\ntarget = "me@box:2222"', '[hosts.box]\ntarget = "local"')
    text = text.replace('role = "baseline"\nmodel_path = "org/model"',
                        f'role = "baseline"\nmodel_path = "{tmp_path}/no-such-model"')
    issues = _issues(text, tmp_path)
    assert [i.key for i in issues] == ["servers.base.model_path"]
    assert issues[0].message.startswith("missing model path: ") and "does not exist" in issues[0].message
    (tmp_path / "no-such-model").mkdir()
    assert _issues(text, tmp_path) == []


def test_keys_are_checked_against_the_real_binding_ids(tmp_path):
    from specmon.keymap import BINDING_IDS

    issues = _issues(GOOD + '[keys]\n"server.strat" = "ctrl+u"\n"log.follow" = "ctrl u"\n'
                     '"quit" = 5\n"server.stop" = "ctrl+x,f9"\n', tmp_path)
    by = {i.key: i for i in issues}
    assert set(by) == {"keys.server.strat", "keys.log.follow", "keys.quit"}
    assert "did you mean 'server.start'" in by["keys.server.strat"].message
    assert all(b in by["keys.server.strat"].fix for b in BINDING_IDS)  # the valid ids are listed
    assert "not a key" in by["keys.log.follow"].message
    assert "must be a string" in by["keys.quit"].message


def test_binding_table_matches_the_ui_bindings():
    """Every Binding id the UI declares is in specmon.keymap (and nothing else is)."""
    from textual.binding import Binding

    from specmon.keymap import BINDING_IDS
    from specmon.ui.advisor_screen import AdvisorScreen
    from specmon.ui.app import HelpScreen, SpecmonApp
    from specmon.ui.control_keys import ConfirmScreen
    from specmon.ui.replay_app import ReplayApp
    from specmon.ui.widgets import LogView, ServerPanel

    ids = {b.id for cls in (SpecmonApp, ReplayApp, HelpScreen, ConfirmScreen, AdvisorScreen,
                            ServerPanel, LogView)
           for b in cls.BINDINGS if isinstance(b, Binding)}
    assert ids == set(BINDING_IDS)


def test_sample_keys_table_is_valid_when_uncommented(tmp_path):
    text = (ROOT / "examples" / "specmon.toml").read_text()
    i = text.index("# [keys]")
    keys = "\n".join(line[2:] for line in text[i:].splitlines() if line.startswith("# "))
    p = tmp_path / "c.toml"
    p.write_text(text[:i] + keys + "\n")
    cfg = load_path(p)
    assert cfg.keys == {"server.start": "ctrl+u", "server.stop": "ctrl+x"}
