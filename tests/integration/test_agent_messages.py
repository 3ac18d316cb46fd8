"""Malformed agent output (issue 16): every agent message is checked against the protocol.

A bad message is a protocol error: one line, naming what was wrong; the agent is restarted
with exponential backoff and resumes at the last good offset, so the lines the bad message
stood for (and the next valid line) arrive exactly once. The real agent runs behind a proxy
that corrupts one of its messages (tests/hostile/agent_proxy.py).
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kit.paths import TESTS
from kit.tail import Collector
from kit.wait import until

from specmon.hosts.agent_protocol import ProtocolError, decode
from specmon.hosts.local import LocalHost
from specmon.sources.tail import FilePosition, LogTailer, TailSpec

PROXY = TESTS / "kit" / "agent_proxy.py"

MUTATIONS = ["ino_text", "ino_float", "no_lines", "bad_b64", "lone_surrogate", "non_dict",
             "string", "deep", "huge_line", "nan", "big_int", "not_utf8", "unknown_type",
             "offsets_backwards", "repeat", "wrong_length"]


def proxy_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mutation: str, *, nth: int = 1,
               once: bool = True) -> LocalHost:
    wrapper = tmp_path / "python3"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {PROXY} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("SPECMON_PROXY_MUTATION", mutation)
    monkeypatch.setenv("SPECMON_PROXY_NTH", str(nth))
    monkeypatch.setenv("SPECMON_PROXY_STARTS", str(tmp_path / "starts"))
    if once:
        monkeypatch.setenv("SPECMON_PROXY_ONCE", str(tmp_path / "done"))
    else:
        monkeypatch.delenv("SPECMON_PROXY_ONCE", raising=False)
    return LocalHost(python=str(wrapper))


def starts(tmp_path: Path) -> int:
    p = tmp_path / "starts"
    return len(p.read_text().splitlines()) if p.exists() else 0


@pytest.mark.parametrize("mutation", MUTATIONS)
async def test_bad_message_is_a_protocol_error_and_nothing_is_lost_or_repeated(
        tmp_path, monkeypatch, mutation):
    log = tmp_path / "s.log"
    log.write_bytes(b"".join(b"line %d\n" % i for i in range(5)))
    host = proxy_host(tmp_path, monkeypatch, mutation, nth=2)
    col = Collector(LogTailer(host, [TailSpec("s", str(log))], history_lines=None))
    try:
        await col.wait_lines(5)
        with open(log, "ab") as f:  # the 2nd lines message (these) is the corrupted one
            f.write(b"".join(b"line %d\n" % i for i in range(5, 10)))
        await until(lambda: col.notices("error"), what="the protocol error notice")
        with open(log, "ab") as f:
            f.write(b"line 10\n")
        await col.wait_lines(11)
        assert col.texts() == [f"line {i}" for i in range(11)]  # once each, in order
        err = col.notices("error")[0].detail["error"]
        assert err.startswith("local: agent protocol error: ") and "\n" not in err, err
        assert "Traceback" not in err and len(err) < 400
        assert col.error is None
        assert starts(tmp_path) == 2  # restarted once
    finally:
        await col.close()


async def test_restarts_back_off_exponentially(tmp_path, monkeypatch):
    """An agent that sends garbage on every run is restarted ever more slowly, not in a loop."""
    log = tmp_path / "s.log"
    log.write_text("a\n")
    host = proxy_host(tmp_path, monkeypatch, "non_dict", once=False)
    tailer = LogTailer(host, [TailSpec("s", str(log))], history_lines=None)
    col = Collector(tailer)
    try:
        await until(lambda: starts(tmp_path) >= 5, timeout=30, what="5 starts")
        stamps = [float(x) for x in (tmp_path / "starts").read_text().split()]
        gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
        # 0.2 s, 0.4 s, 0.8 s, ...: each wait at least as long as the one before (less jitter
        # of process start-up), and the 4th at least 4 times the 1st
        assert gaps[3] > 2 * gaps[0] and gaps[3] >= 0.8 * 0.9, gaps
        assert col.lines == [] and tailer.protocol_errors >= 4
        assert col.error is None  # still trying, bounded: never gives up with a traceback
    finally:
        await col.close()


# -- the check itself, on generated messages ------------------------------------------------

json_leaf = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(
    allow_nan=False, allow_infinity=False) | st.text(max_size=8)
json_value = st.recursive(json_leaf, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(
    st.text(max_size=5), kids, max_size=4), max_leaves=20)
good_item = st.tuples(st.integers(0, 100), st.text(max_size=20)).map(
    lambda t: [t[0], t[0] + len(t[1].encode("utf-8", "surrogatepass")) + 1, t[1]])


def lines_msg(items: list) -> dict:
    pos = 0
    out = []
    for _, _, text in items:
        end = pos + len(text.encode("utf-8", "surrogatepass")) + 1
        out.append([pos, end, text])
        pos = end
    return {"t": "lines", "tail": 1, "ino": 7, "cost": pos, "lines": out}


@settings(max_examples=300, deadline=None)
@given(json_value)
def test_any_json_is_a_message_or_a_protocol_error(value):
    try:
        msg = decode(json.dumps(value).encode())
    except ProtocolError as exc:
        assert "\n" not in str(exc)
        return
    assert isinstance(msg, dict)


@settings(max_examples=300, deadline=None)
@given(st.lists(good_item, min_size=1, max_size=5), st.sampled_from(
    ["ino", "cost", "tail", "lines", "off", "end", "text", "extra"]), json_value)
@example([[0, 3, "\r0"]], "extra", {})  # a lone CR: two lines (found by hypothesis in CI)
def test_a_mutated_lines_message_never_crashes_the_tailer(items, field, value):
    """Replace one field of a valid lines message by any JSON value: the message is either
    still valid and delivered whole, or a ProtocolError; no other exception, ever."""
    msg = lines_msg(items)
    if field in ("off", "end", "text", "extra"):
        i = {"off": 0, "end": 1, "text": 2, "extra": 3}[field]
        row = msg["lines"][0]
        if i < 3:
            row[i] = value
        else:
            row.append(value)
    else:
        msg[field] = value
    try:
        raw = json.dumps(msg, ensure_ascii=False).encode("utf-8", "surrogatepass")
        msg = decode(raw)
        tailer = LogTailer(LocalHost(), [TailSpec("s", "/x")])
        tailer.positions["s"] = FilePosition(msg["ino"], msg["lines"][0][0])
        lines = list(tailer._handle(tailer.specs[0], msg))
    except ProtocolError:
        return
    # every byte once, in order; a line holding a lone CR is the lines it ends (CR-only line
    # ends, issue 22), so each message line starts a delivered line
    assert lines[0].offset == msg["lines"][0][0] and lines[-1].end == msg["lines"][-1][1]
    assert all(a.end == b.offset for a, b in zip(lines, lines[1:], strict=False))
    assert {ln.offset for ln in lines} >= {it[0] for it in msg["lines"]}
    assert len(lines) == len(msg["lines"]) or any("\r" in it[2] for it in msg["lines"])
    for ln in lines:
        ln.text.encode("utf-8")  # no lone surrogate reaches a consumer


def test_base64_and_text_checks():
    ok = {"t": "lines", "tail": 1, "ino": 7, "cost": 3,
          "lines": [[0, 3, "\ufffd\ufffd", {"b64": base64.b64encode(b"\xff\xfe").decode()}]]}
    assert decode(json.dumps(ok).encode())["lines"][0][3]["b64"] == "//4="
    for bad, why in [
        (dict(ok, lines=[[0, 3, "x", {"b64": "//4"}]]), "invalid base64"),
        (dict(ok, lines=[[0, 1, "x", {"b64": "AAAA"}]]), "more bytes"),
        (dict(ok, lines=[[0, 3, "x", {"cut": -1}]]), "'cut'"),
        (dict(ok, lines=[[0, 3, "x", {"noeol": 1}]]), "'noeol'"),
        (dict(ok, lines=[[True, 3, "x"]]), "bad offsets"),
        (dict(ok, ino=True), "inode"),
    ]:
        with pytest.raises(ProtocolError, match=why):
            decode(json.dumps(bad).encode())
    with pytest.raises(ProtocolError, match="NaN is not JSON"):
        decode(b'{"t":"lines","tail":1,"ino":NaN}')
    with pytest.raises(ProtocolError, match="limit"):
        decode(b'{"t":"x","y":"' + b"a" * (9 << 20) + b'"}')


def test_what_orjson_refuses_is_read_or_refused_as_the_stdlib_does():
    """Messages are read with orjson (fast), and anything it refuses by the stdlib reader, so the
    result and the error message are json's: an int past 64 bits is still read (and refused by
    the field check that applies), a lone surrogate escape is refused as a lone surrogate."""
    big = b'{"t":"lines","tail":1,"ino":%d,"cost":3,"lines":[[0,3,"ab"]]}'
    assert decode(big % 7)["ino"] == 7
    with pytest.raises(ProtocolError, match="inode"):
        decode(big % 2**70)  # read (orjson refuses it), then refused as no inode
    with pytest.raises(ProtocolError, match="lone surrogate"):
        decode(b'{"t":"lines","tail":1,"ino":7,"cost":3,"lines":[[0,3,"a\\ud800"]]}')
    with pytest.raises(ProtocolError, match="Infinity is not JSON"):
        decode(b'{"t":"lines","tail":1,"ino":Infinity}')
