"""A graceful stop in the log ends the run; vLLM's relaunch starts at its first line.

uvicorn prints `Finished server process [%d]` (uvicorn/server.py) as its last line when the HTTP
server stops gracefully (SIGTERM, Ctrl-C): under SGLang's uvicorn format `[%(asctime)s]
%(levelprefix)s %(message)s` (levelprefix "INFO:" padded to 10), and in vLLM <= 0.30 behind the
API server's stdout tag `(APIServer pid=N) `, coloured on a tty. Without it a server tailed by
`--log` (in a container, say: no process to watch) stayed "ready" after it stopped, and the
speedup called its last run live. The vLLM lines are the real 0.10.2 ones of
tests/data/vllm-logs/real-lines.jsonl.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from specmon.parse.sglang import EventRecord, parse_line
from specmon.session.runs import run_row
from specmon.session.state import ServerState

DATA = Path(__file__).resolve().parents[1] / "data"


def real_vllm(prefix: str) -> str:
    for row in (DATA / "vllm-logs" / "real-lines.jsonl").read_text().splitlines():
        line = json.loads(row)["line"]
        if prefix in line and ("pid=291)" in line or "pid=357)" in line):
            return str(line)
    raise AssertionError(prefix)


@pytest.mark.parametrize(("line", "pid", "stamp"), [
    ("[2026-12-07 04:54:25] INFO:     Finished server process [28469]", 28469,
     "2026-12-07 04:54:25"),
    ("INFO:     Finished server process [14230]", 14230, None),
    ("\x1b[1;36m(APIServer pid=291)\x1b[0;0m INFO:     Finished server process [291]", 291, None),
    ("\x1b[32mINFO\x1b[0m:     Finished server process [\x1b[36m7\x1b[0m]\r\n", 7, None),
])
def test_uvicorn_exit_line_is_an_exit_event(line: str, pid: int, stamp: str | None) -> None:
    rec = parse_line(line)
    assert isinstance(rec, EventRecord) and rec.kind == "exit"
    assert rec.data == {"pid": pid} and rec.timestamp == stamp


@pytest.mark.parametrize("line", [
    # the words inside a logged request (--log-requests) or any longer line are no exit
    "[2026-12-07 04:54:25] Receive: obj=GenerateReqInput(text='INFO:     Finished server "
    "process [1]')",
    "INFO:     Finished server process [1] (not really)",
    "DEBUG:    Finished server process [1]",
    "INFO:     Finished server process []",
])
def test_other_lines_with_the_words_are_not(line: str) -> None:
    assert parse_line(line) is None


def at(s: ServerState, line: str, t: float) -> None:
    s.apply(line, parse_line(line), t)


def stamp_of(run_t: float | None) -> str:
    assert run_t is not None
    return datetime.fromtimestamp(run_t).strftime("%H:%M:%S")


def test_sglang_stop_line_ends_the_run_and_the_relaunch_starts_another() -> None:
    s = ServerState("base")
    at(s, "[2026-12-07 04:00:00] server_args=ServerArgs(model_path='m', tp_size=2)", 1.0)
    for i in range(3):
        at(s, f"[2026-12-07 04:00:1{i} TP0] Decode batch, #running-req: 1, #token: 90, token "
           "usage: 0.00, cuda graph: True, gen throughput (token/s): 27.50, #queue-req: 0", 2.0)
    assert s.status == "ready"
    at(s, "[2026-12-07 04:00:13] INFO:     Finished server process [28469]", 3.0)
    run = s.runs[-1]
    assert s.status == "stopped" and run.end_reason == "exit" and run.exit_code is None
    assert stamp_of(run.end_t) == "04:00:13"
    s.process_exited(0)  # whoever started it learns the code later: the run keeps both
    assert run.exit_code == 0 and run.end_reason == "exit" and s.status == "stopped"
    at(s, "[2026-12-07 04:05:00] server_args=ServerArgs(model_path='m', tp_size=2)", 4.0)
    assert len(s.runs) == 2 and s.status == "starting" and not s.runs[-1].ended


def test_vllm_relaunch_starts_at_its_non_default_args_line() -> None:
    nd, cfg = real_vllm("non-default args:"), real_vllm("with config:")
    engine = ("(APIServer pid=291) INFO 09-21 23:17:0{} [loggers.py:123] Engine 000: Avg prompt "
              "throughput: 0.0 tokens/s, Avg generation throughput: 28.4 tokens/s, Running: 1 "
              "reqs, Waiting: 0 reqs, GPU KV cache usage: 0.3%, Prefix cache hit rate: 0.0%")
    s = ServerState("base")
    at(s, nd, 1.0)
    at(s, cfg, 2.0)
    for i in range(3):
        at(s, engine.format(i), 3.0 + i)
    at(s, "(APIServer pid=291) INFO:     Finished server process [291]", 7.0)
    assert s.status == "stopped" and s.runs[-1].end_reason == "exit"
    # the relaunch, minutes later: its API server's line comes before its engine's config line
    at(s, nd.replace("23:16:04", "23:30:00"), 8.0)
    at(s, cfg.replace("23:16:19", "23:30:15"), 9.0)
    assert len(s.runs) == 2
    first, second = (run_row(r) for r in s.runs)
    assert first["end"].endswith("23:17:02") and first["end_reason"] == "exit"
    assert second["start"].endswith("23:30:00") and second["start_reason"] == "server_args"
    assert "non_default_args" in s.runs[1].args and s.runs[1].has_server_args
    assert s.runs[1].args.get("model") == s.runs[0].args.get("model")


def test_vllm_relaunch_without_an_exit_line_ends_the_run_at_its_last_line() -> None:
    """SIGKILL (no stop line): the run before still ends at its own last line."""
    nd, cfg = real_vllm("non-default args:"), real_vllm("with config:")
    s = ServerState("base")
    at(s, nd, 1.0)
    at(s, cfg, 2.0)
    at(s, "(APIServer pid=291) INFO 09-21 23:17:05 [loggers.py:123] Engine 000: Avg prompt "
       "throughput: 0.0 tokens/s, Avg generation throughput: 28.4 tokens/s, Running: 1 reqs, "
       "Waiting: 0 reqs, GPU KV cache usage: 0.3%, Prefix cache hit rate: 0.0%", 3.0)
    at(s, nd.replace("23:16:04", "23:30:00"), 8.0)
    first = run_row(s.runs[0])
    assert len(s.runs) == 2 and first["end_reason"] == "next_run"
    assert first["end"].endswith("23:17:05")


def test_too_few_samples_for_b_is_one_line_naming_the_server_once() -> None:
    """Seen live: "vllm-32000: baseline not recorded: vllm-32000: not enough clean ..."."""
    from specmon.session.fleet import FleetSession

    fleet = FleetSession(["h"], clock=lambda: 1e9)
    fleet.declare_server("h", "vllm-32000", "baseline", None)
    said: list[str] = []
    fleet.notice_listeners.append(lambda h, s, text: said.append(f"{s}: {text}"))
    fleet.request_baseline("h", "vllm-32000")
    assert len(said) == 1 and said[0].count("vllm-32000") == 1, said
    assert said[0].startswith("vllm-32000: baseline not recorded: not enough clean decode")
