"""A line of CR-ended pieces is split into the lines they end (`sources.tail.split_cr`): the
marks of the line as read (bytes skipped before it, bytes lost while away) stay with its first
piece, where the gap is, and only there (they were dropped: the gap vanished from the record)."""

from __future__ import annotations

from specmon.sources.tail import LogLine, split_cr


def test_the_gap_marks_stay_on_the_first_piece() -> None:
    data = b"10%\r50%\r100%"
    ln = LogLine("s", "/l", 1, 100, 100 + len(data) + 1, data, data.decode(), 1.0,
                 skipped=4096, lost=512)
    pieces = split_cr(ln)
    assert [p.text for p in pieces] == ["10%", "50%", "100%"]
    assert (pieces[0].skipped, pieces[0].lost) == (4096, 512)
    assert all((p.skipped, p.lost) == (0, 0) for p in pieces[1:])
    assert [p.offset for p in pieces] == [100, 104, 108]
