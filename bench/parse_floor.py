"""A floor for `specmon parse`'s summary in Python, timed by bench/parse_speed.py beside grep.

    python bench/parse_floor.py FILE

Reads the file in 64 MiB chunks as `specmon parse` does, counts its lines and finds every batch
line with one literal-first regex, on one CPU: no field read, nothing checked, nothing counted
per value. Any Python scan that reads each batch line costs at least this; the summary also
reads three fields of each line exactly and checks the rest of it (specmon/parse/fastscan.py).
"""

from __future__ import annotations

import re
import sys

BATCH = re.compile(rb"batch[^\n]*")
CHUNK = 64 << 20


def main(path: str) -> None:
    lines = found = 0
    tail = b""
    with open(path, "rb") as fh:
        while block := fh.read(CHUNK):
            buf = tail + block
            cut = buf.rfind(b"\n") + 1
            lines += buf.count(b"\n", 0, cut)
            found += len(BATCH.findall(buf, 0, cut))
            tail = buf[cut:]
    print(lines, found)


if __name__ == "__main__":
    main(sys.argv[1])
