"""`find_all`, the block-wise search behind `parse`'s run cut: every offset, once, whatever the
block edges (a needle cut by one is carried into the next block), within [start, end)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specmon.analysis import logfile
from specmon.analysis.logfile import find_all

NEEDLE = b"server_args="


@settings(max_examples=200, deadline=None)
@given(pieces=st.lists(st.sampled_from([b"x", b"\n", NEEDLE, b"server_", b"args=", b"ss"]),
                       max_size=60),
       block=st.integers(min_value=1, max_value=40), start=st.integers(min_value=0, max_value=30),
       span=st.one_of(st.none(), st.integers(min_value=0, max_value=200)),
       most=st.one_of(st.none(), st.integers(min_value=1, max_value=4)))
def test_every_offset_once_across_block_edges(tmp_path_factory: pytest.TempPathFactory,
                                              pieces: list[bytes], block: int, start: int,
                                              span: int | None, most: int | None) -> None:
    data = b"".join(pieces)
    path: Path = tmp_path_factory.mktemp("fa") / "log"
    path.write_bytes(data)
    end = None if span is None else start + span
    want = [m.start() for m in re.finditer(re.escape(NEEDLE), data[:end])
            if m.start() >= start][:most]
    old = logfile.SCAN_READ
    logfile.SCAN_READ = block  # small blocks: needles cut by every kind of edge
    try:
        with path.open("rb") as fh:
            assert find_all(fh, NEEDLE, start, end, most) == want
    finally:
        logfile.SCAN_READ = old


def test_a_one_byte_needle_and_a_file_shorter_than_a_block(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"a\rb\r\n")
    with path.open("rb") as fh:
        assert find_all(fh, b"\r") == [1, 3]
        assert find_all(fh, b"\r", start=2) == [3]
        assert find_all(fh, b"\r", end=3) == [1]
        assert find_all(fh, b"\r", most=1) == [1]
