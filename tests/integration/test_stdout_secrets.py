"""Secrets are redacted on every way out, stdout included: each offline command that prints what
a log holds (`parse` in all its modes, `check`, `compare`, `advise`, `baseline list`) is run on
a log whose server_args, NCCL lines and run args carry secrets of each shape; no secret may
reach stdout or stderr, and what the commands print still says what differs (the mask, not
nothing). Colour codes glued to a secret, camelCase secret names and AWS temporary keys are
masked in record rows and snapshots as well (`redact_text`, `redact_obj`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specmon.cli import main
from specmon.redact import MASK, is_secret_name, redact_obj, redact_text

SECRETS = {
    "url": "ZQXurlpw",  # https://alice:ZQXurlpw@...
    "sk": "sk-ZQXskAAAABBBBCCCC",
    "hf": "hf_ZQXhfAAAABBBBCCCC",
    "api_key": "ZQXapikey",
    "hf_token": "ZQXhftok",
    "nccl_pw": "ZQXncclpw",
    "nccl_sk": "sk-ZQXncclAAAABBBB",
}
ARGS_CLEAN = ("[2026-05-01 10:00:00] server_args=ServerArgs(model_path='m', tp_size=1, "
              "speculative_algorithm='EAGLE3', speculative_num_steps=3, speculative_eagle_topk=1, "
              "speculative_num_draft_tokens=4, port=30000)")
ARGS_SECRET = (f"[2026-05-01 10:00:00] server_args=ServerArgs(model_path='https://alice:"
               f"{SECRETS['url']}@example.com/models/llama-3-70b-instruct', tp_size=1, "
               f"tokenizer_path='{SECRETS['hf']}', api_key='{SECRETS['sk']}', "
               f"hf_token='{SECRETS['hf_token']}', admin_api_key='{SECRETS['api_key']}', "
               "speculative_algorithm='EAGLE3', speculative_num_steps=3, speculative_eagle_topk=1, "
               "speculative_num_draft_tokens=4, port=30000)")
NCCL_CLEAN = ["h:1:1 [0] NCCL INFO NCCL version 2.27.3+cuda12.9",
              "h:1:1 [0] NCCL INFO NCCL_ALGO set by environment to Ring"]
NCCL_SECRET = ["h:1:1 [0] NCCL INFO NCCL version 2.27.3+cuda12.9",
               f"h:1:1 [0] NCCL INFO NCCL_IB_PASSWORD set by environment to {SECRETS['nccl_pw']}",
               f"h:1:1 [0] NCCL INFO NCCL_ALGO set by environment to {SECRETS['nccl_sk']}"]


ARGS_PLAIN = "[2026-05-01 10:00:00] server_args=ServerArgs(model_path='m', tp_size=1, port=30001)"


def decode(i: int, thr: float, t0: int = 0, spec: bool = True) -> str:
    s = t0 + 2 * i
    return (f"[2026-05-01 {10 + s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}] Decode batch, "
            "#running-req: 1, #token: 1500, token usage: 0.01, "
            f"{'accept len: 3.00, ' if spec else ''}cuda graph: True, "
            f"gen throughput (token/s): {thr + i % 3:.2f}, #queue-req: 0")


@pytest.fixture()
def logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("SPECMON_DATA_DIR", str(tmp_path / "data"))
    base = [ARGS_CLEAN, *NCCL_CLEAN] + [decode(i, 100) for i in range(80)]
    live = [ARGS_SECRET, *NCCL_SECRET] + [decode(i, 60) for i in range(80)]
    # two runs: the run headers of a multi-run summary print the args too
    runs = live + [ARGS_SECRET.replace("10:00:00", "11:00:00")] + [decode(i, 60, 3600)
                                                                  for i in range(80)]
    plain = [ARGS_PLAIN, *NCCL_CLEAN] + [decode(i, 40, spec=False) for i in range(80)]
    out = {}
    for name, lines in (("base", base), ("live", live), ("runs", runs), ("plain", plain)):
        path = tmp_path / f"{name}.log"
        path.write_text("\n".join(lines) + "\n")
        out[name] = str(path)
    return out


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = main(list(argv))
    got = capsys.readouterr()
    assert code in (0, 1, 3), (argv, code, got.err)  # ran (1: drift found, 3: too little data)
    return got.out + got.err


def test_no_command_prints_a_secret(logs: dict[str, str],
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["baseline", "record", "clean", "--log", logs["base"]]) == 0
    assert main(["baseline", "record", "hostile", "--log", logs["live"],
                 "--server", f"password={SECRETS['api_key']}"]) == 0
    capsys.readouterr()
    outputs = {
        " ".join(argv): run(capsys, *argv) for argv in (
            ("parse", "--json", logs["live"]),
            ("parse", logs["runs"]),
            ("parse", "--runs", logs["live"]),
            ("parse", "--runs", "--json", logs["live"]),
            ("check", logs["live"], "--baseline", "clean"),
            ("check", logs["live"], "--baseline", "clean", "--json"),
            ("compare", logs["base"], logs["live"]),
            ("compare", logs["base"], logs["live"], "--json"),
            ("advise", logs["live"], "--baseline-log", logs["plain"]),
            ("baseline", "list"),
            ("baseline", "list", "--json"),
        )
    }
    for argv, text in outputs.items():
        leaked = [k for k, v in SECRETS.items() if v in text]
        assert not leaked, f"`{argv}` printed {leaked}:\n{text[:2000]}"
    # the commands still say what they saw: the masked values, not silence
    assert MASK in outputs[f"parse --json {logs['live']}"]
    assert f"https://{MASK}@example.com" in outputs[f"parse --runs {logs['live']}"]
    assert f"NCCL_IB_PASSWORD={MASK}" in outputs[f"check {logs['live']} --baseline clean"]
    assert "conditions differ" in outputs[f"compare {logs['base']} {logs['live']}"]
    assert f"https://{MASK}@" in outputs[f"compare {logs['base']} {logs['live']}"]


@pytest.mark.parametrize(("text", "secret"), [
    ("\x1b[32mhf_ZQXcolorAAAABBBB\x1b[0m loaded", "hf_ZQXcolor"),  # a colour code glued on
    ("\x1b[31mpassword=ZQXcolorpw\x1b[0m", "ZQXcolorpw"),
    ("\x1b]0;title\x07api_key=ZQXosc", "ZQXosc"),
    ("Bearer ZQXbearertoken1", "ZQXbearertoken1"),  # a bare bearer token, no other hint word
    ("accessToken=ZQXcamel openaiApiKey=ZQXcamel2", "ZQXcamel"),
    ('{"refreshToken": "ZQXjson"}', "ZQXjson"),
    ("key ASIAZQXBAAAABBBBCCCC in use", "ASIAZQXB"),  # an AWS temporary key
    ("NCCL INFO NCCL_IB_PASSWORD set by environment to ZQXnccl", "ZQXnccl"),
])
def test_new_secret_shapes_are_masked(text: str, secret: str) -> None:
    out = redact_text(text)
    assert secret not in out and MASK in out, out
    if "\x1b" in text:  # the escape sequences themselves are kept, the text around them redacted
        assert out.count("\x1b") == text.count("\x1b")


def test_names_and_values_that_are_no_secret_are_kept() -> None:
    for name in ("max_total_num_tokens", "maxTokens", "tokenizer_path", "max_prefill_tokens",
                 "cuda_graph_max_bs", "skip_tokenizer_init", "numTokens"):
        assert not is_secret_name(name), name
    for name in ("accessToken", "privateKey", "HFTOKEN", "awsSessionToken", "openaiApiKey"):
        assert is_secret_name(name), name
    assert redact_text("NCCL INFO NCCL_ALGO set by environment to Ring") == \
        "NCCL INFO NCCL_ALGO set by environment to Ring"
    assert redact_text("NCCL_IB_PASSWORD set by environment to 0.").endswith("to 0.")
    assert redact_obj({"var": "NCCL_IB_PASSWORD", "value": "ZQX"})["value"] == MASK
    assert redact_obj({"var": "NCCL_ALGO", "value": "Ring"})["value"] == "Ring"
