"""A floor for `specmon record` in Python, timed by bench/record_rate.py over `ssh cat FILE`.

    ssh HOST cat FILE | python bench/record_floor.py [--parse] > /dev/null

Writes one orjson row a line (offset, text and, with --parse, the record specmon's line
parser makes of it) and nothing else: no session model, no redaction, no agent protocol. Any
Python recorder costs at least this. Prints the number of lines read on stderr.
"""

from __future__ import annotations

import sys

import orjson

from specmon.parse.sglang import parse_line


def main(parse: bool) -> None:
    w = sys.stdout.buffer.write
    n = 0
    for off, line in enumerate(sys.stdin.buffer):
        text = line.decode("utf-8", "replace").rstrip("\n")
        rec = parse_line(text) if parse else None
        w(orjson.dumps({"offset": off, "line": text,
                        "record": rec.to_json() if rec is not None else None}) + b"\n")
        n += 1
    sys.stderr.write(str(n))


if __name__ == "__main__":
    main("--parse" in sys.argv[1:])
