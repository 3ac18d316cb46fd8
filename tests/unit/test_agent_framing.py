"""Property test of the agent's line framing (fast ASCII path and byte-wise path agree)."""

from __future__ import annotations

import base64

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


alphabet = st.sampled_from([b"a", b"b", b"\n", b"\xff", b"\xc3\xa9", b"xyzxyz"])
chunk = st.lists(alphabet, max_size=20).map(b"".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(chunk, max_size=8), st.integers(min_value=1, max_value=12))
def test_framing_matches_a_plain_split(chunks, max_line):
    data = b"".join(chunks)
    items, tail = frame(chunks, max_line)
    *complete, partial = data.split(b"\n")
    assert len(items) == len(complete)
    pos = 0
    for item, raw in zip(items, complete, strict=True):
        off, end, text = item[:3]
        extra = item[3] if len(item) > 3 else {}
        assert (off, end) == (pos, pos + len(raw) + 1)
        pos = end
        kept = raw[:max_line]
        if len(raw) > max_line:
            assert extra["cut"] == len(raw)
        else:
            assert "cut" not in extra
        got = base64.b64decode(extra["b64"]) if "b64" in extra else text.split(
            " \u2026[specmon")[0].encode()
        assert got == kept
    # the partial last line is held back, its start remembered for resume
    assert tail.line_start == pos and tail.pos == len(data)
    assert tail.buf == partial[:max_line]
