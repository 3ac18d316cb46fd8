"""`parse` of one log prints the same summary plain or gzipped; several logs get one section
each (two logs were merged into one table when both were plain, and not when one was .gz)."""

from __future__ import annotations

import gzip
from pathlib import Path

from kit.paths import TESTS

from specmon.cli import main

DATA = TESTS / "data" / "sglang-longlogs"


def test_one_log_reads_the_same_plain_or_gzipped(tmp_path: Path, capsys) -> None:
    src = DATA / "r9700-qwen3coder-reap25b-bs1.log.gz"
    plain = tmp_path / "a.log"
    plain.write_bytes(gzip.decompress(src.read_bytes()))
    assert main(["parse", str(plain)]) == 0
    a = capsys.readouterr().out
    assert main(["parse", str(src)]) == 0
    assert capsys.readouterr().out == a and "1 run" not in a


def test_several_logs_are_never_merged(tmp_path: Path, capsys) -> None:
    names = ["r9700-qwen3coder-reap25b-bs1.log.gz", "r9700-qwen3coder30b-ream-bs1.log.gz"]
    plains = []
    for i, name in enumerate(names):
        p = tmp_path / f"{i}.log"
        p.write_bytes(gzip.decompress((DATA / name).read_bytes()))
        plains.append(str(p))
    singles = []
    for p in plains:
        assert main(["parse", p]) == 0
        singles.append(capsys.readouterr().out)
    assert main(["parse", *plains]) == 0
    both = capsys.readouterr().out
    assert both == "".join(f"{p}: 1 run\n{s}" for p, s in zip(plains, singles, strict=True))


def test_a_pooled_accept_len_says_it_spans_batch_sizes():
    """Every other number of the summary is per #running-req: the accept len line over
    several says so (over one it is that one's)."""
    from specmon.analysis.logfile import summarise_buffer

    def line(rr: int, i: int) -> str:
        return (f"[2026-05-01 10:00:{i:02d}] Decode batch, #running-req: {rr}, #token: 9, token "
                f"usage: 0.01, accept len: 2.50, gen throughput (token/s): {90 + i}.00, "
                "#queue-req: 0\n")
    one = summarise_buffer("".join(line(8, i) for i in range(6)).encode()).render()
    two = summarise_buffer("".join(line(8 if i % 2 else 4, i) for i in range(6)).encode()).render()
    assert "accept len (tokens per verify round" in one and "over every" not in one
    assert "accept len over every #running-req (tokens per verify round" in two
