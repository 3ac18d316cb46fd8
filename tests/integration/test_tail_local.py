"""The host agent and the resumable tail through LocalHost (same code path as SSH)."""

from __future__ import annotations

import ast
import os
import signal
import sys
from pathlib import Path

import pytest
from kit.tail import Collector
from kit.wait import until

from specmon.hosts.agent_client import AGENT_PATH, AgentClient
from specmon.sources.tail import LogTailer, TailSpec


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def assert_contiguous(lines) -> None:
    """Within one inode, each line starts exactly where the previous one ended."""
    for a, b in zip(lines, lines[1:], strict=False):
        if a.inode == b.inode:
            assert b.offset == a.end, (a, b)


def test_agent_is_stdlib_only_and_never_imports_specmon():
    from specmon.hostside.protocol import MODULES

    files = [AGENT_PATH.parent / f"{m}.py" for m in MODULES] + [AGENT_PATH]
    mods = set()
    for f in files:
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                mods.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level:
                mods.add((node.module or "").split(".")[0])
    assert mods, "agent imports nothing?"
    assert "specmon" not in mods
    # the standard library, plus pynvml when the host has it (imported inside a try)
    assert mods <= set(sys.stdlib_module_names) | {"pynvml"}, mods - set(sys.stdlib_module_names)
    # one folder, and nothing in it imports specmon (its modules import each other relatively)
    for f in AGENT_PATH.parent.glob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                assert all(not a.name.startswith("specmon") for a in node.names), f
            elif isinstance(node, ast.ImportFrom):
                assert not (node.module or "").startswith("specmon"), f


async def test_agent_requests_and_errors(host, tmp_path):
    agent = AgentClient(host)
    await agent.start()
    try:
        assert agent.hello["v"] == 2
        procs = await agent.request("procs")
        assert any(p[0] == os.getpid() for p in procs)
        (tmp_path / "f").write_bytes(b"0123456789")
        res = await agent.request("read", path=str(tmp_path / "f"), offset=-4, size=100)
        assert res["offset"] == 6
        with pytest.raises(Exception, match="unknown op"):
            await agent.request("nope")
        with pytest.raises(Exception, match="FileNotFoundError"):
            await agent.request("read", path=str(tmp_path / "missing"))
        assert await agent.request("ping")  # still alive after errors
    finally:
        await agent.close()
    assert agent.closed.is_set()


async def test_history_partial_line_non_utf8_and_huge_line(host, tmp_path):
    log = tmp_path / "server.log"
    log.write_bytes(b"".join(b"old %d\n" % i for i in range(10)) + b"half")
    col = Collector(LogTailer(host, [TailSpec("s", str(log))], history_lines=3,
                              max_line=4096))
    try:
        lines = await col.wait_lines(3)
        assert col.texts() == ["old 7", "old 8", "old 9"]
        assert all(x.history for x in lines)
        await until(lambda: col.notices("history_end"), what="history_end")
        assert len(col.lines) == 3  # "half" has no newline yet: held back
        append(log, b"-done\n\xff\xfe raw \xc3(\n" + b"x" * 10_000 + b"\nafter\n")
        lines = await col.wait_lines(6)
        half, raw, huge, after = lines[3:7]
        assert half.text == "half-done" and not half.history
        assert raw.data == b"\xff\xfe raw \xc3(" and "\ufffd" in raw.text
        assert huge.cut == 10_000 and len(huge.data) == 4096
        assert "line cut at 4096 of 10000 bytes" in huge.text
        assert huge.end - huge.offset == 10_001
        assert after.text == "after"
        assert_contiguous(lines)
        assert after.end == log.stat().st_size
    finally:
        await col.close()


async def test_whole_file_and_zero_history(host, tmp_path):
    log = tmp_path / "a.log"
    log.write_bytes(b"".join(b"l%d\n" % i for i in range(50)))
    whole = Collector(LogTailer(host, [TailSpec("a", str(log))], history_lines=None))
    none = Collector(LogTailer(host, [TailSpec("a", str(log))], history_lines=0))
    try:
        await whole.wait_lines(50)
        await until(lambda: none.notices("history_end"), what="history_end")
        append(log, b"new\n")
        await none.wait_lines(1)
        await whole.wait_lines(51)
        assert none.texts() == ["new"]
        assert whole.texts() == [f"l{i}" for i in range(50)] + ["new"]
    finally:
        await whole.close()
        await none.close()


@pytest.mark.parametrize("watch", [True, False], ids=["inotify", "poll-only"])
async def test_truncation_and_rotation_are_followed(host, tmp_path, watch):
    log = tmp_path / "r.log"
    log.write_bytes(b"a1\na2\n")
    tailer = LogTailer(host, [TailSpec("r", str(log))], watch=watch)
    col = Collector(tailer)
    try:
        await col.wait_lines(2)
        with open(log, "r+b") as f:  # copytruncate-style
            f.truncate(0)
        await until(lambda: col.notices("truncated"), what="truncated notice")
        append(log, b"b1\n")
        await col.wait_lines(3)
        assert col.lines[-1].offset == 0
        # rename rotation: lines written to the old file after the rename are not lost
        os.rename(log, tmp_path / "r.log.1")
        append(tmp_path / "r.log.1", b"b2\nb3-unterminated")
        log.write_bytes(b"c1\n")
        await col.wait_lines(6)
        assert col.texts() == ["a1", "a2", "b1", "b2", "b3-unterminated", "c1"]
        assert col.lines[4].noeol
        rot = col.notices("rotated")
        assert len(rot) == 1 and rot[0].detail["ino"] == log.stat().st_ino
        append(log, b"c2\n")
        await col.wait_lines(7)
        assert col.lines[-1].offset == 3 and col.lines[-1].inode == log.stat().st_ino
        assert tailer.watch_modes == {"r": "inotify" if watch else "poll"}
    finally:
        await col.close()


async def test_inotify_delivers_without_waiting_for_a_poll(host, tmp_path):
    """With a poll period far beyond the test's deadline, only the agent's inotify watches
    can deliver these: appends, a truncation, a rename rotation and a file created late."""
    log, late = tmp_path / "w.log", tmp_path / "sub" / "late.log"
    log.write_bytes(b"w0\n")
    late.parent.mkdir()
    tailer = LogTailer(host, [TailSpec("w", str(log)), TailSpec("l", str(late))],
                       poll_interval=600.0)
    col = Collector(tailer)
    try:
        await col.wait_lines(1)
        assert tailer.watch_modes == {"w": "inotify", "l": "inotify"}
        await until(lambda: len(col.notices("history_end")) == 1, what="history_end")
        for i in range(1, 4):
            append(log, b"w%d\n" % i)
            await col.wait_lines(i + 1, timeout=30)
        with open(log, "r+b") as f:
            f.truncate(0)
        await until(lambda: col.notices("truncated"), 30, "truncated notice")
        append(log, b"t1\n")
        await col.wait_lines(5, timeout=30)
        os.rename(log, tmp_path / "w.log.1")
        log.write_bytes(b"r1\n")
        await col.wait_lines(6, timeout=30)
        append(log, b"r2\n")  # the new inode is watched too
        await col.wait_lines(7, timeout=30)
        late.write_bytes(b"late1\n")
        await col.wait_lines(8, timeout=30)
        assert col.texts("w") == ["w0", "w1", "w2", "w3", "t1", "r1", "r2"]
        assert col.texts("l") == ["late1"]
    finally:
        await col.close()


async def test_missing_file_is_waited_for(host, tmp_path):
    log = tmp_path / "later.log"
    col = Collector(LogTailer(host, [TailSpec("x", str(log))]))
    try:
        await until(lambda: col.notices("missing"), what="missing notice")
        log.write_bytes(b"hello\n")
        await col.wait_lines(1)
        assert col.texts() == ["hello"]
    finally:
        await col.close()


async def test_agent_death_resumes_at_exact_byte_even_across_rotation(host, tmp_path):
    """Kill the agent (like a dropped SSH channel): the new one resumes where the old
    stopped, finishing the rotated file before the new one, with nothing lost or repeated."""
    log = tmp_path / "k.log"
    log.write_bytes(b"".join(b"n%d\n" % i for i in range(100)))
    tailer = LogTailer(host, [TailSpec("k", str(log))], history_lines=None)
    col = Collector(tailer)
    try:
        await col.wait_lines(100)
        append(log, b"n100\nn10")  # a partial line when the agent dies
        await until(lambda: tailer._client is not None, what="agent")
        os.kill(tailer._client.hello["pid"], signal.SIGKILL)  # the agent we started
        await until(lambda: col.notices("disconnected"), what="disconnect")
        append(log, b"1\nn102\n")
        os.rename(log, tmp_path / "k.log.1")
        append(tmp_path / "k.log.1", b"n103\n")
        log.write_bytes(b"n104\n")
        await col.wait_lines(105)
        await until(lambda: col.notices("resumed"), what="resumed")
        assert col.texts() == [f"n{i}" for i in range(105)]
        assert tailer.sessions == 2
        assert_contiguous(col.lines)
    finally:
        await col.close()


async def test_unopenable_path_reports_one_error_then_recovers(host, tmp_path):
    path = tmp_path / "odd.log"
    path.mkdir()  # opening a directory fails with an OSError other than "missing"
    ok = tmp_path / "ok.log"
    ok.write_bytes(b"")
    col = Collector(LogTailer(host, [TailSpec("o", str(path)), TailSpec("k", str(ok))]))
    try:
        await until(lambda: col.notices("error"), what="error notice")
        assert "IsADirectoryError" in col.notices("error")[0].detail["error"]
        # each line of the other file needs another agent poll, which retries the bad path
        for i in range(3):
            append(ok, b"tick\n")
            await col.wait_lines(i + 1)
        assert len(col.notices("error")) == 1  # reported once, not once per poll
        path.rmdir()
        path.write_bytes(b"fine\n")
        await until(lambda: "fine" in col.texts("o"), what="recovered tail")
    finally:
        await col.close()


async def test_agent_exits_when_the_client_goes_silent(host):
    agent = AgentClient(host)
    await agent.start()
    try:
        await agent.request("config", idle_timeout=0.3)
        await until(agent.closed.is_set, 10, "agent idle exit")
    finally:
        await agent.close()


def test_headless_modules_do_not_import_textual():
    code = ("import sys, specmon.commands.record, specmon.hosts.ssh, specmon.sources.discovery; "
            "assert 'textual' not in sys.modules")
    import subprocess

    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_agent_is_python36_syntax_and_avoids_37_only_calls():
    """The agent runs on the host's python3 (3.6+): no newer syntax, and 3.7+ methods only
    behind a fallback (bytes.isascii crashed the 3.6 agent on the first line read)."""
    from specmon.hostside import protocol

    for f in AGENT_PATH.parent.glob("*.py"):
        src = f.read_text()
        ast.parse(src, feature_version=(3, 6))
        assert ".isascii()" not in src and "capture_output" not in src and "text=True" not in src
    for data in (b"", b"abc\n", b"\xc3\xa9", b"\x7f", b"\x80"):
        assert protocol._isascii_36(data) == data.isascii()


def test_agent_polled_seldom_still_ends_a_rotation_alone(tmp_path):
    """The agent sleeps until input, inotify or its poll period (here 600 s). A rotation ends
    only after the old file has been quiet for ROTATE_QUIET_S, a moment no event marks: the
    agent must wake for it on its own. Talking to the agent directly (no client heartbeat to
    wake it), the new file's line comes; before, it waited for the next input (20 s live).
    The same for a held CR at the end of the file."""
    import json
    import select
    import subprocess

    log = tmp_path / "w.log"
    log.write_bytes(b"w0\n")
    proc = subprocess.Popen([sys.executable, str(AGENT_PATH)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    got: list[dict] = []
    fd, buf = proc.stdout.fileno(), [b""]  # raw reads: select() cannot see a file's buffer

    def send(obj: dict) -> None:
        proc.stdin.write(json.dumps(obj).encode() + b"\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]

    def wait(cond, what: str, timeout: float = 15.0) -> None:  # noqa: ANN001
        import time

        end = time.monotonic() + timeout
        while not cond():
            left = end - time.monotonic()
            assert left > 0, f"no {what} from the agent: {got}"
            if select.select([fd], [], [], left)[0]:
                data = os.read(fd, 1 << 16)
                assert data, f"the agent ended: {proc.stderr.read()!r}"  # type: ignore[union-attr]
                buf[0] += data
                *lines, buf[0] = buf[0].split(b"\n")
                got.extend(json.loads(x) for x in lines)

    try:
        send({"id": 1, "op": "config", "poll_interval": 600, "watch": True})
        send({"id": 2, "op": "tail_start", "tail": "w", "path": str(log), "window": None})
        wait(lambda: any(m.get("ev") == "history_end" for m in got), "history_end")
        os.rename(log, tmp_path / "w.log.1")
        log.write_bytes(b"r1\n")
        wait(lambda: any(m.get("ev") == "rotated" for m in got), "rotation")
        wait(lambda: "r1" in str(got), "line of the new file")
        with open(log, "ab") as f:  # a lone CR ends its line once nothing follows for a while
            f.write(b"c1\r")
        wait(lambda: "c1" in str(got), "line ended by a lone CR")
    finally:
        proc.stdin.close()
        proc.wait(timeout=20)
