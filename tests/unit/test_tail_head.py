"""A history that starts after its run's launch line: the agent sends the run's start-up lines
first (a "head" event), so a server up for hours still has its server arguments and the
speedup's conditions can be compared (the real agent's Tail on real files; the client's check
of the event)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from kit.ui import ARGS_BASE, ARGS_SPEC, READY, decode_line

from specmon.hosts.agent_protocol import ProtocolError, decode
from specmon.hostside import tail as agent_tail
from specmon.hostside.tail import Tail

KV = "[2026-11-29 10:00:02] KV Cache is allocated. #tokens: 1048576, K size: 8.00 GB"


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(x + "\n" for x in lines))
    return path


def head_and_open(path: Path, history: int = 100) -> tuple[list[list], dict]:
    """The head's line items (all its events' in order) and the "opened" event."""
    evs = Tail(1, str(path)).start(history=history)
    heads = [e for e in evs if e["ev"] == "head"]
    opened = next(e for e in evs if e["ev"] == "opened")
    assert [e["ev"] for e in evs] == ["head"] * len(heads) + ["opened"]  # the head goes first
    return [x for e in heads for x in e["lines"]], opened


def test_the_last_runs_start_up_lines_come_before_the_history(tmp_path: Path) -> None:
    first_run = [ARGS_SPEC, READY] + [decode_line(i, 94.0, 2.5) for i in range(50)]
    second = [ARGS_BASE, KV, READY]
    log = write(tmp_path / "s.log", first_run + second + [decode_line(i, 88.0) for i in range(300)])
    data = log.read_bytes()
    head, opened = head_and_open(log)
    # the restarted run's launch line and start-up lines, up to its first stats line
    assert [x[2] for x in head] == second
    for off, end, text in head:  # at their own offsets in the file, all before the history
        assert data[off:end] == text.encode() + b"\n"
    assert head[-1][1] <= opened["off"] == len(data) - sum(
        len(decode_line(i, 88.0)) + 1 for i in range(200, 300))


def test_no_head_where_the_history_holds_the_launch_line_or_none_is_near(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    short = write(tmp_path / "short.log", [ARGS_BASE, READY] + [decode_line(i, 88.0)
                                                                for i in range(50)])
    assert head_and_open(short)[0] == []  # the history starts at byte 0
    none = write(tmp_path / "none.log", [decode_line(i, 88.0) for i in range(300)])
    assert head_and_open(none) == ([], head_and_open(none)[1])  # no launch line at all
    far = write(tmp_path / "far.log", [ARGS_BASE] + [decode_line(i, 88.0) for i in range(300)])
    assert head_and_open(far)[0][0][2] == ARGS_BASE
    monkeypatch.setattr(agent_tail, "HEAD_SCAN", 4096)  # searched no further back than this
    assert head_and_open(far)[0] == []


def test_no_head_where_the_history_starts_with_a_launch_line(tmp_path: Path) -> None:
    """A restart right where the history starts: that run's own launch line is in the history,
    and the previous run's start-up lines would only make an empty run before it."""
    tail = [decode_line(i, 88.0) for i in range(99)]
    log = write(tmp_path / "s.log", [ARGS_SPEC, READY] + [decode_line(i, 94.0, 2.5)
                                                          for i in range(50)] + [ARGS_BASE] + tail)
    head, opened = head_and_open(log)
    assert head == [] and log.read_bytes()[opened["off"]:].startswith(ARGS_BASE.encode())


def test_a_vllm_head_starts_at_its_non_default_args_line(tmp_path: Path) -> None:
    """vLLM's launch: the API server's `non-default args:` line, then the engine's config line
    (formats from tests/data/vllm-logs); a `non-default args:` line of an earlier launch (stats
    lines after it) is not taken."""
    args = ("(APIServer pid=291) INFO 09-21 23:16:04 [utils.py:328] non-default args: "
            "{'model': 'Qwen/Qwen3-8B', 'speculative_config': {'method': 'eagle3'}}")
    config = ("(EngineCore_DP0 pid=301) INFO 09-21 23:16:10 [core.py:93] Initializing a V1 LLM "
              "engine (v0.11.0) with config: model='Qwen/Qwen3-8B', tensor_parallel_size=1")
    other = "(APIServer pid=291) INFO 09-21 23:16:05 [api_server.py:1] vLLM API server version 0.11.0"
    stats = ("(APIServer pid=291) INFO 09-21 23:17:{s:02d} [loggers.py:127] Engine 000: Avg prompt "
             "throughput: 0.0 tokens/s, Avg generation throughput: 406.0 tokens/s")
    run = [args, other, config] + [stats.format(s=i % 60) for i in range(300)]
    log = write(tmp_path / "v.log", run)
    assert [x[2] for x in head_and_open(log)[0]] == [args, other, config]
    # a config line alone (its launch printed no non-default args): from the config line;
    # the earlier launch's args line has stats after it, so it is not this launch's
    log = write(tmp_path / "v2.log", run + [config] + [stats.format(s=i % 60) for i in range(300)])
    assert [x[2] for x in head_and_open(log)[0]] == [config]


def test_the_real_vllm_log_gets_its_config_line(data_dir: Path) -> None:
    log = data_dir / "vllm-logs" / "gen-baseline-0.11.log"
    head, opened = head_and_open(log, history=20)
    first = log.read_text().split("\n")[0]
    assert "Initializing a V1 LLM engine (v0.11.0) with config:" in first
    assert [x[2] for x in head] == [first] and opened["off"] > 0


def test_a_start_up_longer_than_the_head_still_says_the_server_became_ready(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A verbose start-up (NCCL INFO lines) cut at HEAD_MAX: the ready line after the cut is
    sent too (a second head event), unless stats lines come first."""
    nccl = [f"[2026-11-29 10:00:01 TP{i % 8}] NCCL INFO Channel {i:02d}/32 : 0[0] -> 1[1] via P2P"
            for i in range(60)]
    run = [ARGS_BASE] + nccl + [READY] + [decode_line(i, 88.0) for i in range(300)]
    log = write(tmp_path / "s.log", run)
    monkeypatch.setattr(agent_tail, "HEAD_MAX", 1024)
    evs = Tail(1, str(log)).start(history=100)
    assert [e["ev"] for e in evs] == ["head", "head", "opened"]
    first, ready = evs[0]["lines"], evs[1]["lines"]
    assert first[0][2] == ARGS_BASE and first[-1][1] <= 1024 and [x[2] for x in ready] == [READY]
    data = log.read_bytes()
    assert data[ready[0][0]:ready[0][1]] == READY.encode() + b"\n"
    stats_first = write(tmp_path / "t.log", [ARGS_BASE] + nccl + [decode_line(0, 88.0), READY]
                        + [decode_line(i, 88.0) for i in range(300)])
    assert [e["ev"] for e in Tail(1, str(stats_first)).start(history=100)] == ["head", "opened"]


def test_a_head_line_with_non_utf8_bytes_keeps_them(tmp_path: Path) -> None:
    raw = ARGS_BASE.replace("model_path='", "model_path='caf\xe9-").encode("latin-1")
    log = tmp_path / "b.log"
    log.write_bytes(raw + b"\n" + "".join(decode_line(i, 88.0) + "\n"
                                          for i in range(200)).encode())
    (item,), _ = head_and_open(log)
    assert item[:2] == [0, len(raw) + 1] and "b64" in item[3]


def _event(lines: object, ino: object = 7) -> bytes:
    return json.dumps({"t": "tail", "tail": 1, "ev": "head", "path": "/l", "ino": ino,
                       "lines": lines}).encode()


def test_the_client_checks_a_head_event_as_it_checks_lines() -> None:
    assert decode(_event([[0, 5, "abcd"], [5, 9, "efg"]]))["ev"] == "head"
    for bad, why in (([], "'lines' is not a non-empty list"),
                     ([[0, 5, "abcd"], [6, 9, "efg"]], "offset 6 does not follow 5"),
                     ([[5, 0, "x"]], "bad offsets"), ([[0, 5]], "is not [off, end, text")):
        with pytest.raises(ProtocolError, match=re.escape(why)):
            decode(_event(bad))
    with pytest.raises(ProtocolError, match="'head' without an inode"):
        decode(_event([[0, 5, "abcd"]], ino=None))
