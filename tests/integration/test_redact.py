"""Redaction: a session whose server env holds HF_TOKEN=hf_... and whose command line holds
--api-key sk-... exports no trace of either, not in raw log lines, alerts or reports either."""

from __future__ import annotations

import gzip
import json

import pytest
from kit.snapshots import T0, decode_line, reference_session, timed, write_record

from specmon.cli import main
from specmon.export.snapshot import (
    export_session,
    read_snapshot,
    snapshot_from_session,
    write_snapshot,
)
from specmon.redact import MASK, is_secret_name, redact_argv, redact_obj, redact_text

HF = "hf_AbCdEfGhIjKlMnOpQrStUvWx12"
SK = "sk-proj-9f8e7d6c5b4a3210zz"
PLAIN_KEY = "letmein-0451"  # no token shape: only its name gives it away
URL_PW = "hunter2pw"
LIST_KEY = "vllmListKey0188"  # vLLM keeps --api-key as a list: `'api_key': ['K']`

SECRETS = (HF, SK, PLAIN_KEY, URL_PW, LIST_KEY)

LOG_LINES = [
    "[2026-02-26 19:16:40] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', tp_size=1, "
    f"api_key='{SK}', speculative_algorithm='EAGLE3', speculative_num_draft_tokens=3, port=30001)",
    f"+ HF_TOKEN={HF} python3 -m sglang.launch_server --model-path Qwen/Qwen3-8B --api-key {PLAIN_KEY}",
    f"[2026-02-26 19:16:41] env: {{'HF_TOKEN': '{HF}', 'NCCL_ALGO': 'Ring'}}",
    f"[2026-02-26 19:16:42] fetching https://bot:{URL_PW}@hf.example/models/qwen",
    "(APIServer pid=7) INFO 02-26 19:16:42 [utils.py:253] non-default args: {'model_tag': "
    f"'Qwen/Qwen3-8B', 'api_key': ['{LIST_KEY}'], 'port': 8000}}",
    decode_line(93.5, accept=2.4),
    decode_line(94.0, accept=2.5),
]


@pytest.mark.parametrize("name, secret", [
    ("HF_TOKEN", True), ("HUGGING_FACE_HUB_TOKEN", True), ("OPENAI_API_KEY", True),
    ("--api-key", True), ("api_key", True), ("DB_PASSWORD", True), ("MYSQLPASSWORD", True),
    ("AWS_SECRET_ACCESS_KEY", True), ("ssh-private-key", True), ("Authorization", True),
    ("max_total_num_tokens", False), ("speculative_num_draft_tokens", False),
    ("token_budget_total", True), ("key", False), ("NCCL_ALGO", False), ("model_path", False),
])
def test_secret_names(name, secret):
    assert is_secret_name(name) is secret


def test_text_redaction_keeps_counts_and_masks_secrets():
    line = decode_line(88.8).replace("#queue-req: 0", "#new-token: 512, #queue-req: 0")
    assert redact_text(line) == line  # `#token: 900` is a count, not a credential
    for raw in LOG_LINES[:4]:
        out = redact_text(raw)
        assert MASK in out and not any(s in out for s in SECRETS), out
    assert redact_text("Authorization: Bearer abcdefghijklmnop123") .count("abcdefghijklmnop") == 0
    assert redact_argv(["sglang", "--api-key", PLAIN_KEY, "--port", "30000"]) == \
        ["sglang", "--api-key", MASK, "--port", "30000"]
    # a discovered process's argv: curl's user:password and sshpass's -p are the next word
    assert redact_argv(["curl", "-u", "admin:pw123x", "https://x"]) == \
        ["curl", "-u", "admin:" + MASK, "https://x"]
    assert redact_argv(["/usr/bin/curl", "-sSu", "admin:pw123x"])[2] == "admin:" + MASK
    assert redact_argv(["sshpass", "-p", "S3cretPWq", "ssh", "h"]) == \
        ["sshpass", "-p", MASK, "ssh", "h"]
    assert redact_argv(["ls", "-p", "dir"]) == ["ls", "-p", "dir"]
    tree = redact_obj({"env": {"HF_TOKEN": HF, "PATH": "/usr/bin"}, "n_tokens": 5,
                       "argv": ["x", "--api-key", PLAIN_KEY]})
    assert tree == {"env": {"HF_TOKEN": MASK, "PATH": "/usr/bin"}, "n_tokens": 5,
                    "argv": ["x", "--api-key", MASK]}


def _secret_session():
    rows = timed({"spec": LOG_LINES}, dt=1.0)
    s = reference_session(rows, host="gpu-1")
    st = s.servers["spec"]
    st.fingerprint = {  # what the process probe will add: worker env, argv, versions
        "env": {"HF_TOKEN": HF, "NCCL_ALGO": "Ring", "CUDA_VISIBLE_DEVICES": "0"},
        "argv": ["python3", "-m", "sglang.launch_server", "--api-key", SK, "--tp", "1"],
        "versions": {"sglang": "0.5.6"},
    }
    s.alerts = [{"t": T0 + 3, "server": "spec", "message": "throughput fell 12%",
                 "cause": f"env changed: HF_TOKEN={HF}"}]
    return s, rows


def _assert_clean(data: bytes, masked: bool = True) -> None:
    text = data.decode()
    for secret in SECRETS:
        assert secret not in text, secret
    assert (MASK in text) is masked


def test_ui_export_of_a_session_with_secrets_has_no_trace_of_them(tmp_path):
    session, _ = _secret_session()
    path = export_session(session, tmp_path)
    _assert_clean(gzip.decompress(path.read_bytes()))
    snap = read_snapshot(path)
    spec = snap.servers[0]
    assert snap.redaction["enabled"] is True
    assert spec.fingerprint["env"] == {"HF_TOKEN": MASK, "NCCL_ALGO": "Ring",
                                       "CUDA_VISIBLE_DEVICES": "0"}
    assert spec.fingerprint["argv"][3:5] == ["--api-key", MASK]
    assert spec.fingerprint["versions"] == {"sglang": "0.5.6"}
    assert spec.args["speculative_num_draft_tokens"] == 3 and spec.args["model_path"] == "Qwen/Qwen3-8B"
    assert [e.record.gen_throughput for e in spec.decode_entries()] == [93.5, 94.0]
    assert snap.alerts[0]["message"] == "throughput fell 12%"


def test_record_export_and_report_have_no_trace_of_secrets(tmp_path, capsys):
    _, rows = _secret_session()
    rec = write_record(tmp_path / "r.jsonl", rows)
    assert HF in rec.read_text()  # the record file itself is raw
    snap_path = tmp_path / "s.json"
    assert main(["export", str(rec), "-o", str(snap_path)]) == 0
    _assert_clean(snap_path.read_bytes())
    for fmt in ("md", "html"):
        assert main(["report", str(snap_path), "--format", fmt]) == 0
        _assert_clean((tmp_path / f"s.report.{fmt}").read_bytes(), masked=False)
    # and redaction is what removed them: with --no-redact they are there
    assert main(["export", str(rec), "-o", str(tmp_path / "raw.json"), "--no-redact"]) == 0
    raw = json.loads((tmp_path / "raw.json").read_text())
    assert raw["redaction"] == {"enabled": False}
    assert HF in json.dumps(raw) and SK in json.dumps(raw)
    capsys.readouterr()


def test_report_of_an_unredacted_snapshot_still_redacts_what_it_prints(tmp_path, capsys):
    session, _ = _secret_session()
    path = write_snapshot(snapshot_from_session(session), tmp_path / "raw.json", redact=False)
    assert HF in path.read_text() and SK in path.read_text()
    assert main(["report", str(path), "-o", str(tmp_path / "raw.md")]) == 0
    text = (tmp_path / "raw.md").read_text()
    _assert_clean(text.encode())
    assert "env.HF_TOKEN: " + MASK in text and "throughput fell 12%" in text
    capsys.readouterr()


_COST_CHILD = r"""
import json, resource, sys, time
resource.setrlimit(resource.RLIMIT_CPU, (60, 60))  # quadratic would take hours: die instead
from specmon.redact import redact_text
out = {}
for unit in json.loads(sys.argv[1]):
    costs = {}
    for n, times in ((1 << 16, 16), (1 << 20, 1)):  # the same number of bytes in all
        text = (unit * (n // len(unit) + 1))[:n]
        best = float("inf")
        for _ in range(3):
            t = time.process_time()
            for _ in range(times):
                red = redact_text(text)
            best = min(best, time.process_time() - t)
        costs[n] = best
    out[unit] = [costs[1 << 16], costs[1 << 20], red == text]
print(json.dumps(out))
"""


def test_redaction_is_linear_in_the_line_length():
    """Issue 22: `'a'*20000` took 25 s (backtracking). One 1 MiB line of name characters (and
    of other hostile runs) costs about what 16 lines of 64 KiB cost, as a linear pass does
    (quadratic: 16x more); CPU time in one child process, compared only with itself."""
    import subprocess
    import sys

    units = ["a", "a.", "-a", "eyJ-", "x_key", "token ", "a='\\'", "-u a:", "Aa0", "a=[key ",
             "x_key=[",
             # a flag start at every few bytes and no colon: each scan ran to the line's end
             # (a 1 MiB line took minutes and wedged `record`)
             "-u}", "--user=?", "-u/", "curl -sSu}", " -u'-u'", "sshpass -p"]
    res = subprocess.run([sys.executable, "-c", _COST_CHILD, json.dumps(units)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    costs = json.loads(res.stdout)
    for unit, (small, big, _same) in costs.items():
        assert big < 4 * small, (unit, small, big)
    assert costs["a"][2] and costs["a."][2]  # names alone are no secret: kept whole
    assert costs["Aa0"][2] is False  # a MiB of base64 is masked (a key body)


# issue 22's follow-up: shapes that were left whole, and near misses that must stay whole
PEM_TAIL = "4pZRtbJmy7l2Ylgg3eJ7Bw=="
PEM_LONG = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7PlantedKeyLine"


@pytest.mark.parametrize(("text", "secret", "kept"), [
    ("mysql -h db -u root -p'S3cretPWq' mydb", "S3cretPWq", "-p'" + MASK + "' mydb"),
    ('mysql -h db -u root -p"S3cretPWq" mydb', "S3cretPWq", '-p"' + MASK + '" mydb'),
    ("mysql -h db -u root -pS3cretPWq mydb", "S3cretPWq", "-p" + MASK + " mydb"),
    ("curl -u 'admin:pw 12345' https://x", "12345", "-u 'admin:" + MASK + "' https://x"),
    ('curl -u "admin:pw 12345" https://x', "12345", '-u "admin:' + MASK + '" https://x'),
    ("curl -u admin:'pw 12345' https://x", "12345", "-u admin:'" + MASK + "' https://x"),
    ("curl --user 'admin:pw 12345' -H 'X: y'", "12345", "'admin:" + MASK + "' -H 'X: y'"),
    ("curl -u 'admin:pw 12345", "12345", "-u 'admin:" + MASK),  # a cut line: the rest
    # curl's switches grouped before -u (issue 22's probe: -sSu left the password whole)
    ("cmd: curl -sSu admin:curlPw_77x https://x", "curlPw_77x", "-sSu admin:" + MASK + " https"),
    ("curl -Lu admin:pw123x", "pw123x", "-Lu admin:" + MASK),
    ("curl -fsSLu admin:pw123x https://x", "pw123x", "-fsSLu admin:" + MASK),
    ("curl -u deploy-user:pw123x x", "pw123x", "-u deploy-user:" + MASK + " x"),
    ("sshpass -p S3cretPWq ssh host", "S3cretPWq", "sshpass -p " + MASK + " ssh host"),
    ("sshpass -pS3cretPWq ssh host", "S3cretPWq", "sshpass -p" + MASK + " ssh host"),
    (PEM_TAIL, PEM_TAIL, MASK),  # a key body's short last line, logged on its own
    (f"  {PEM_TAIL}\r", PEM_TAIL, f"  {MASK}\r"),
    (f"[2026-02-26 19:16:42] {PEM_TAIL}", PEM_TAIL, f"[2026-02-26 19:16:42] {MASK}"),
    (f"{PEM_LONG}\n{PEM_TAIL}\n", PEM_TAIL, f"{MASK}\n{MASK}\n"),  # after a long body line
    # after vLLM's log prefixes (process tag, level, time, source)
    (f"(EngineCore_DP0 pid=201) INFO 11-20 10:00:00 [core.py:93] {PEM_TAIL}", PEM_TAIL,
     f"[core.py:93] {MASK}"),
    (f"WARNING 11-20 10:00:00.123 [api_server.py:1] {PEM_TAIL}", PEM_TAIL, f".py:1] {MASK}"),
    ("a+/9Zq==", "a+/9Zq", MASK),
    # prose runs on the lower-cased text, or case-blind where lower() moves positions (İ)
    ("login PASSWORD Pl4nted!pw", "Pl4nted!pw", "PASSWORD " + MASK),
    ("İ login: the Token is abc123x", "abc123x", "Token is " + MASK),
])
def test_quoted_passwords_and_short_key_lines_are_masked(text, secret, kept):
    out = redact_text(text)
    assert secret not in out and kept in out, out


# a secret name's value that is a list, tuple or dict is masked whole (the rule took its '['
# for the value and left the key: `'api_key': ***REDACTED***'K']`)
@pytest.mark.parametrize(("text", "kept"), [
    ("non-default args: {'model': 'm', 'api_key': ['Kq1secret'], 'port': 8000}",
     f"non-default args: {{'model': 'm', 'api_key': {MASK}, 'port': 8000}}"),
    ('{"api_key": ["Kq1secret", "Kq1secret"], "n": 1}', f'{{"api_key": {MASK}, "n": 1}}'),
    ("hf_token=('Kq1secret',) next=1", f"hf_token={MASK} next=1"),
    ("{'password': {'value': 'Kq1secret'}, 'x': 2}", f"{{'password': {MASK}, 'x': 2}}"),
    ("Namespace(api_key=['Kq1secret'], port=8000)", f"Namespace(api_key={MASK}, port=8000)"),
    ("{'api_key': [[], 'Kq1secret']}", f"{{'api_key': {MASK}}}"),  # two levels deep
    ("{'api_key': ['a]b', 'Kq1secret']}", f"{{'api_key': {MASK}}}"),  # a ']' in a string
    ("args: {'x': [{'api_key': 'Kq1secret'}]}", f"args: {{'x': [{{'api_key': '{MASK}'}}]}}"),
    ("{'api_key': ['Kq1secret", f"{{'api_key': {MASK}"),  # a cut line: the rest
])
def test_a_secret_names_list_tuple_or_dict_is_masked_whole(text, kept):
    assert redact_text(text) == kept


def test_output_file_names_hold_no_secret_of_the_host_name(tmp_path):
    """Snapshots and screenshots are named after the host (`specmon-HOST-STAMP`): the name
    is a way out too (an api_key in a host name reached the file name)."""
    from specmon.export.snapshot import file_label, snapshot_path

    path = snapshot_path(f"gpu1 api_key=ZQapikey01 {HF}\x1b[2J", tmp_path)
    assert "ZQapikey01" not in path.name and HF not in path.name
    assert path.name.startswith("specmon-gpu1_api_key_REDACTED_")
    assert len(file_label("h" * 5000)) == 64


def test_a_one_byte_csi_before_a_secret_hides_nothing():
    """"\x9b31m" (C1 CSI, a colour code as ESC [ is) glued to a token hid its start."""
    assert redact_text(f"rec \x9b31m{HF} x") == f"rec \x9b31m{MASK} x"
    assert redact_text(f"\x1b[1m{HF}\x1b[0m") == f"\x1b[1m{MASK}\x1b[0m"


@pytest.mark.parametrize("text", [
    "max_tokens=[3] args: {'port': 8000} x = [1, 2]", "{'api_keys_count': 3}",
])
def test_containers_of_other_names_are_kept(text):
    assert redact_text(text) == text


@pytest.mark.parametrize("text", [
    "mysql -h db -u root -p mydb",  # -p alone: mysql prompts for it
    "mysql -h db -u root -p'' mydb",  # an empty password is no secret
    "pip install -p'x' mypkg",  # -p'...' off a MySQL line
    "curl -u 'admin:' https://x",
    "curl -u admin https://x",
    "ls -lu /srv/a:b",  # no curl on the line: -lu is no curl flag
    "sshpass -p -f file ssh host",  # a flag is no password
    "status==", "count=", "QUJDRA==", "1234====", "ab1=", "abc12=",  # one plain word, no key line
    f"x = {PEM_TAIL} y",  # inside a sentence: not a whole line
    "retries: 3 ok==", "[2026-02-26 19:16:42] done==",
    "(APIServer pid=200) INFO 11-20 10:00:00 [api_server.py:9] ready==",
])
def test_near_misses_of_the_new_shapes_are_kept(text):
    assert redact_text(text) == text


def test_decode_and_stats_lines_are_untouched_and_cheap():
    from specmon.redact import redaction_passes

    for line in (decode_line(88.8), decode_line(93.5, accept=2.4)):
        assert redact_text(line) == line
        assert len(redaction_passes(line)) <= 1, redaction_passes(line)  # the key-body scan


# A MiB of each hostile shape and the regex passes it may cost: a pass is one scan of the text
# (~10-20 ms a MiB), so these bound the cost without timing anything. Before, each of the
# name-character shapes ran ~9 passes (the name rules, case-blind prose, the key-body scan).
_PASSES = {
    "-key": [], "token-": [], "--token": [], "a-token": [], "auth.": [], "x_key": [],
    "a": [], "a.": [], "-a": [], "?a=": [], "a://": [], "a='\\'": [],
    "eyJ-": ["jwt"], "token ": ["prose"], "-u a:": ["curl_user"], "mysql -p": ["mysql_p"],
    "-u 'a:": ["curl_user", "curl_user'"], "mysql -p'": ["mysql_p", "mysql_p'"],
    "Aa0": ["b64_word"], "Aa0==\n": ["b64_word", "b64_tail"],
}


@pytest.mark.parametrize("unit", list(_PASSES))
def test_hostile_mib_runs_only_the_passes_that_can_match(unit):
    from specmon.redact import redaction_passes

    text = (unit * ((1 << 20) // len(unit) + 1))[:1 << 20]
    assert redaction_passes(text) == _PASSES[unit]


def test_every_rule_still_runs_where_its_shape_is():
    """The pre-checks skip a pass only where it cannot match: a line holding every shape runs
    every rule (and masks each secret)."""
    from specmon.redact import redaction_passes

    line = (f"+ HF_TOKEN={HF} curl -u 'bot:pw 1' -H 'Authorization: Token zzqq1234' "
            f"https://u:{URL_PW}@h/x?access_token=qq9 Bearer abcdefgh12 password {PLAIN_KEY} "
            f"--api-key {PLAIN_KEY} NCCL_IB_PASSWORD set by environment to x9 eyJabcdef.eyJabcdef.s")
    passes = redaction_passes(line)
    for name in ("url_cred", "curl_user'", "jwt", "token_shapes", "auth_header", "bearer",
                 "query", "set_by_env", "prose", "pair", "flag"):
        assert name in passes, name
    out = redact_text(line)
    assert not any(s in out for s in (HF, URL_PW, PLAIN_KEY, "zzqq1234", "qq9", "x9", "pw 1"))
