"""Planted secrets leave by no way out: record JSONL, export, report (md/html/svg), baseline
store and `baseline show`, `server start`'s env audit, the `s` SVG screenshot."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

from kit.snapshots import BASE_ARGS, T0, decode_line

from specmon.commands.record import line_json
from specmon.redact import MASK, redact_text
from specmon.sources.tail import LogLine

HF = "hf_PlantedSecretAbCdEf123456"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJwbGFudGVkIn0.c2lnbmF0dXJlUGxhbnRlZA"
API = "letmein-0451-planted"
URLPW = "hunter2planted"
TOKEN_AUTH = "tok9planted77"
PASSWORD = "Pl4nted!pw"
ACCESS = "qsPlantedAccess99"
PEM_BODY = "MIIEowIBAAKCAQEAplantedPEMbody"
TOLD = "toldPlanted42"
# issue 22's new shapes: a PEM body logged a line at a time, a Slack webhook, a Google key,
# curl -u user:pw, mysql -pPW
PEM_LINE = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7PlantedKeyLine"[:64]
SLACK = "T0PLANTED/B0PLANTED/plantedSlackHook99xyz"
GOOGLE = "AIzaSyPlanted0123456789abcdefghijklmno"
CURLPW = "curlPlanted7"
MYSQLPW = "MyPlanted9"
SECRETS = (HF, JWT, API, URLPW, TOKEN_AUTH, PASSWORD, ACCESS, PEM_BODY, TOLD, PEM_LINE, SLACK,
           GOOGLE, CURLPW, MYSQLPW)

LINES = [
    f"+ HF_TOKEN={HF} python3 -m sglang.launch_server --model-path m --api-key {API}",
    f"[2026-02-26 19:16:41] request headers: Authorization: Bearer {JWT}",
    f"[2026-02-26 19:16:41] proxy said Authorization: Token {TOKEN_AUTH}",
    f"[2026-02-26 19:16:41] decoded {JWT} from the cookie jar",
    f"[2026-02-26 19:16:42] fetching https://bot:{URLPW}@hf.example/models/qwen",
    f"[2026-02-26 19:16:42] GET https://api.example/v1/models?access_token={ACCESS}&x=1",
    f"[2026-02-26 19:16:42] login failed for admin with password {PASSWORD}",
    f"[2026-02-26 19:16:42] -----BEGIN RSA PRIVATE KEY----- {PEM_BODY} -----END RSA PRIVATE KEY-----",
    f"[2026-02-26 19:16:42] the token is {TOLD}",
    PEM_LINE,
    f"[2026-02-26 19:16:43] alerting to https://hooks.slack.com/services/{SLACK} on failure",
    f"[2026-02-26 19:16:43] maps client ready ({GOOGLE})",
    f"+ curl -s -u admin:{CURLPW} https://metrics.example/push",
    f"+ mysql -h db -u root -p{MYSQLPW} specdb < schema.sql",
]


def _assert_clean(where: str, data: bytes | str) -> None:
    text = data if isinstance(data, str) else data.decode("utf-8", "replace")
    for s in SECRETS:
        assert s not in text, f"{where} holds {s}"


def test_every_planted_secret_is_masked_by_the_one_function() -> None:
    for line in LINES:
        red = redact_text(line)
        _assert_clean(line, red)
        assert MASK in red


def _record_file(tmp_path: Path) -> Path:
    rows = [BASE_ARGS] + LINES + [decode_line(80.0 + i) for i in range(30)]
    out = []
    off = 0
    for i, text in enumerate(rows):
        data = text.encode()
        out.append(line_json(LogLine("base", "/var/log/base.log", 7, off, off + len(data) + 1,
                                     data, text, T0 + i)))
        off += len(data) + 1
    path = tmp_path / "rec.jsonl"
    path.write_text("\n".join(out) + "\n")
    return path


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specmon", *args], capture_output=True,
                          timeout=240, env=env)


def test_record_export_report_baseline_paths_hold_no_secret(tmp_path: Path) -> None:
    rec = _record_file(tmp_path)
    _assert_clean("record JSONL", rec.read_bytes())
    snap = tmp_path / "s.json.gz"
    assert cli("export", str(rec), "-o", str(snap)).returncode == 0
    _assert_clean("snapshot", gzip.decompress(snap.read_bytes()))
    for fmt in ("md", "html"):
        res = cli("report", str(snap), "--format", fmt)
        assert res.returncode == 0, res.stderr
    for f in tmp_path.glob("s.report*"):
        _assert_clean(f.name, f.read_bytes())
    # the baseline store and what `baseline show` prints
    log = tmp_path / "base.log"
    log.write_text("\n".join([BASE_ARGS] + LINES + [decode_line(80.0 + (i % 7) * 0.5)
                                                     for i in range(200)]) + "\n")
    env = dict(os.environ, SPECMON_DATA_DIR=str(tmp_path / "data"))
    info = json.dumps({"api_key": API, "version": "0.5.0", "hf_token": HF,
                       "model_path": f"https://u:{URLPW}@hub/m"})
    res = cli("baseline", "record", "b1", "--log", str(log), "--server-info", info,
              "--note", f"password {PASSWORD}", env=env)
    assert res.returncode == 0, res.stderr
    for mode in ([], ["--json"]):
        show = cli("baseline", "show", "b1", *mode, env=env)
        assert show.returncode == 0, show.stderr
        _assert_clean(f"baseline show {mode}", show.stdout)
    for db in (tmp_path / "data").iterdir():
        _assert_clean(f"baseline store {db.name}", db.read_bytes())


def test_server_start_env_audit_prints_no_secret(tmp_path: Path) -> None:
    from kit.control import cleanup_pidfiles, host_profile, sim_profile

    hp = host_profile(tmp_path)
    prof = sim_profile(tmp_path, "base", [0, 1])
    cfg = tmp_path / "specmon.toml"
    cfg.write_text(
        f'[hosts.local]\npython = "{sys.executable}"\nrun_dir = "{hp.run_dir}"\n'
        f'sim_dir = "{hp.sim_dir}"\nn_gpus = 4\n'
        f'[servers.base]\nrole = "baseline"\nlauncher = "sim"\nmodel_path = "m"\ntp = 2\n'
        f'port = {prof.port}\ngpus = [0, 1]\nextra_args = {json.dumps(prof.extra_args)}\n'
        f'env = {{ NCCL_PROTO = "LL", HF_TOKEN = "{HF}", SGLANG_API_KEY = "{API}" }}\n')
    try:
        res = cli("server", "start", "base", "--config", str(cfg))
        assert res.returncode == 0, res.stderr
        assert "NCCL_PROTO=LL" in res.stdout.decode() and "HF_TOKEN=" in res.stdout.decode()
        _assert_clean("server start stdout", res.stdout)
        _assert_clean("server start stderr", res.stderr)
        st = cli("server", "status", "base", "--json", "--config", str(cfg))
        _assert_clean("server status --json", st.stdout)
        assert cli("server", "stop", "base", "--config", str(cfg)).returncode == 0
    finally:
        cleanup_pidfiles(tmp_path / "run")


async def _screenshot(lines: list[str], out: Path, size: tuple[int, int] = (200, 60)) -> Path:
    """The `s` screenshot of a session whose baseline server logged `lines`."""
    from kit.ui import apply, populated_session

    from specmon.ui.app import SpecmonApp

    session = populated_session(5)
    for line in lines:
        apply(session, "baseline", line, T0 + 10)
    app = SpecmonApp(session, export_dir=out, show_clock=False)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        app.refresh_view()
        await pilot.pause()
        await pilot.press("s")
        for _ in range(100):
            files = list(out.glob("*.svg"))
            if files:
                return files[0]
            await asyncio.sleep(0.05)
    raise AssertionError("no screenshot written")


def test_svg_screenshot_holds_no_secret(tmp_path: Path) -> None:
    half = len(LINES) // 2  # the log panel shows the newest lines: two screens show them all
    for part, (lines, last) in enumerate(((LINES[:half], "launch_server"),
                                          (LINES[half:], "schema.sql"))):
        svg = asyncio.run(_screenshot(lines, tmp_path / f"out{part}")).read_text()
        shown = svg.replace("&#160;", " ")
        assert last in shown  # the log lines are on the screen
        _assert_clean("SVG screenshot", shown)


def test_a_secret_cut_at_the_panel_edge_leaves_no_part_in_the_screenshot(tmp_path: Path) -> None:
    """The screenshot masked the screen's text, which a long line reaches cut: a URL without
    its `@` and a Google key under 30 characters no longer had their shapes, so the first
    characters of the password and the key stayed in the SVG. Lines are redacted before they
    are laid out."""
    lines = [f"[2026-05-01 10:00:41 TP0] store postgresql://specmon:ZQcutpw19SecretPart"
             f"{'y' * 200}@db:5432/x",
             f"[2026-05-01 10:00:41 TP0] the maps client has key AIzaZQcutKeyPart{'k' * 200}"]
    svg = asyncio.run(_screenshot(lines, tmp_path / "out", size=(160, 50))).read_text()
    shown = svg.replace("&#160;", " ")
    assert "store postgresql://" in shown and "maps client has key" in shown  # on screen
    assert "ZQcut" not in shown, [ln for ln in shown.splitlines() if "ZQcut" in ln][:3]
