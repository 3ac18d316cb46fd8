"""The agent's live framing ends lines where the offline reader does: LF, CRLF or a lone CR
(a CR ending what is read so far waits for the next byte), with exact byte offsets."""

from __future__ import annotations

import base64
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from specmon.hostside import tail as agent


def frame(chunks: list[bytes], max_line: int) -> tuple[list, agent.Tail]:
    t = agent.Tail(0, "/nonexistent", max_line)
    t.ino = 7
    out: list = []
    for c in chunks:
        t._consume(c, out)
    return [ev[2] for ev in out], t


def reference(data: bytes) -> list[tuple[int, int, bytes, bool]]:
    """(start, end, line bytes without its end, ended at a lone CR) per complete line, by the
    offline rule; a CR that ends the data is not decided yet."""
    out, pos = [], 0
    for m in re.finditer(rb"\r\n|\r|\n", data):
        if m.group() == b"\r" and m.end() == len(data):
            break
        line = data[pos:m.start()] + (b"\r" if m.group() == b"\r\n" else b"")
        out.append((pos, m.end(), line, m.group() == b"\r"))
        pos = m.end()
    return out


def item_bytes(item: list) -> bytes:
    extra = item[3] if len(item) > 3 else {}
    if "b64" in extra:
        return base64.b64decode(extra["b64"])
    return item[2].split(" \u2026[specmon")[0].encode()


alphabet = st.sampled_from([b"a", b"b", b"\n", b"\r", b"\r\n", b"\xff", b"\xc3\xa9", b"xyz"])
chunk = st.lists(alphabet, max_size=20).map(b"".join)


@settings(max_examples=400, deadline=None)
@given(st.lists(chunk, max_size=8), st.integers(min_value=1, max_value=12))
def test_lone_cr_ends_a_line_with_exact_offsets(chunks, max_line):
    data = b"".join(chunks)
    items, tail = frame(chunks, max_line)
    want = reference(data)
    assert [(i[0], i[1]) for i in items] == [(s, e) for s, e, _, _ in want]
    for item, (s, e, line, lone) in zip(items, want, strict=True):
        extra = item[3] if len(item) > 3 else {}
        if len(line) > max_line:
            assert extra["cut"] == len(line) and item_bytes(item) == line[:max_line]
        elif lone:
            # sent with its CR and noeol: its bytes are exactly its span (what the client's
            # resume check hashes), and the client reads the CR as the line's end
            assert extra.get("noeol") is True and item_bytes(item) == line + b"\r"
            assert len(item_bytes(item)) == e - s
        else:
            assert "cut" not in extra and "noeol" not in extra and item_bytes(item) == line
    done = want[-1][1] if want else 0
    assert tail.line_start == done and tail.pos == len(data)
    assert tail.cr_held == (data.endswith(b"\r") and len(data) > done)


def test_cr_only_log_and_its_history(tmp_path):
    """A log with no b"\\n" at all: every CR-ended line is delivered, the history starts n
    lines from the end, and a CR at the very end waits for the next byte."""
    log = tmp_path / "cr.log"
    lines = [b"line %d" % i for i in range(50)]
    log.write_bytes(b"\r".join(lines) + b"\r")
    t = agent.Tail(0, str(log))
    evs = t.start(history=10)
    assert evs[0]["ev"] == "opened"
    out: list = []
    t.poll(out)
    items = [ev[2] for ev in out if type(ev) is tuple]
    # the last CR ends what is read: it may be a CRLF's first half, so "line 49" waits
    assert [i[2] for i in items] == [f"line {i}\r" for i in range(39, 49)]
    assert items[0][0] == sum(len(x) + 1 for x in lines[:39])
    with open(log, "ab") as f:
        f.write(b"\nnext\r")
    out = []
    t.poll(out)
    items = [ev[2] for ev in out if type(ev) is tuple]
    assert [i[2] for i in items] == ["line 49\r"]  # a CRLF after all: one line end
    assert "noeol" not in (items[0][3] if len(items[0]) > 3 else {})
    assert items[0][1] == log.stat().st_size - len(b"next\r")
    t.close()


def test_cr_only_line_longer_than_max_line_is_cut_and_the_next_lines_kept(tmp_path):
    log = tmp_path / "long.log"
    log.write_bytes(b"x" * 100 + b"\rshort\rnext\r\n")
    t = agent.Tail(0, str(log), max_line=16)
    t.start(history=None)
    out: list = []
    t.poll(out)
    items = [ev[2] for ev in out if type(ev) is tuple]
    assert items[0][:2] == [0, 101] and items[0][3]["cut"] == 100
    assert "line cut at 16 of 100 bytes" in items[0][2]
    assert [i[2] for i in items[1:]] == ["short\r", "next\r"]
    assert items[-1][1] == log.stat().st_size
    t.close()


def test_a_cr_that_ends_a_quiet_file_ends_its_line(tmp_path, monkeypatch):
    """Offline, the end of the file ends a CR-ended last line; live it waited for a byte that
    never came (`record` of a CR-only log had one line fewer than `parse`). After CR_QUIET_S
    with the file unchanged the line is delivered; a LF that comes later is a line of its own."""
    clock = [1000.0]
    monkeypatch.setattr(agent.time, "monotonic", lambda: clock[0])
    log = tmp_path / "cr.log"
    log.write_bytes(b"a\rb\r")
    t = agent.Tail(0, str(log))
    t.start(history=None)
    out: list = []
    t.poll(out)
    assert [ev[2][2] for ev in out if type(ev) is tuple] == ["a\r"]  # b waits: a CRLF?
    out = []
    clock[0] += agent.CR_QUIET_S / 2
    t.poll(out)
    assert not [ev for ev in out if type(ev) is tuple]  # not quiet long enough yet
    clock[0] += agent.CR_QUIET_S
    t.poll(out)
    items = [ev[2] for ev in out if type(ev) is tuple]
    assert [(i[0], i[1], i[2]) for i in items] == [(2, 4, "b\r")]
    assert items[0][3].get("noeol") is True  # (its bytes are its span: the client's rule)
    with open(log, "ab") as f:
        f.write(b"\nc\n")
    out = []
    t.poll(out)
    assert [(ev[2][0], ev[2][1], ev[2][2]) for ev in out if type(ev) is tuple] == [
        (4, 5, ""), (5, 7, "c")]
    t.close()
