"""The resume check after a delivered message (issue 22's batched hand-over): `_end_check`
folds a message's lines at once into what the line-by-line fold gave (the last CHECK_BYTES
bytes read, none from before a cut line), on random messages of short, long, cut, CR-split
and newline-less lines."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specmon.sources.tail import CHECK_BYTES, LogLine, LogTailer

pytestmark = pytest.mark.unit


def line_by_line(check: bytes, lines: list[LogLine]) -> bytes:
    """The fold the tail did per line before lines were handed over a message at a time."""
    for ln in lines:
        if ln.cut is not None:
            check = b""
        else:
            check = (check + ln.data + (b"" if ln.noeol else ln.eol))[-CHECK_BYTES:]
    return check


lines_st = st.lists(
    st.tuples(st.binary(max_size=3 * CHECK_BYTES), st.booleans(), st.booleans(),
              st.sampled_from([b"\n", b"\r"])),
    min_size=1, max_size=12)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=CHECK_BYTES), lines_st)
def test_end_check_is_the_line_by_line_fold(check: bytes, spec: list) -> None:
    lines, off = [], 0
    for data, cut, noeol, eol in spec:
        end = off + len(data) + 1
        lines.append(LogLine("s", "/l", 1, off, end, data, data.decode("utf-8", "replace"), 0.0,
                             cut=len(data) + 5 if cut else None, noeol=noeol, eol=eol))
        off = end
    assert LogTailer._end_check(check, lines) == line_by_line(check, lines)


def test_a_cut_line_forgets_what_came_before() -> None:
    a = LogLine("s", "/l", 1, 0, 4, b"abc", "abc", 0.0)
    cut = LogLine("s", "/l", 1, 4, 9000, b"x" * 10, "x" * 10, 0.0, cut=8995)
    b = LogLine("s", "/l", 1, 9000, 9003, b"de", "de", 0.0)
    assert LogTailer._end_check(b"old", [a, cut, b]) == b"de\n"
    assert LogTailer._end_check(b"old", [a]) == b"oldabc\n"
    long = LogLine("s", "/l", 1, 0, 201, b"y" * 200, "y" * 200, 0.0)
    assert LogTailer._end_check(b"old", [long]) == (b"y" * 200 + b"\n")[-CHECK_BYTES:]
