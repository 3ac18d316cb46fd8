"""Reference for `specmon parse --json`: the least a JSON-lines emitter does per log line.

Reads FILE line by line and writes `json.dumps` of one small dict per line (file, line number,
the line's text): no parsing at all. bench/parse_speed.py times it against `specmon parse
--json FILE` in the same run (issue 25's target: within 1.5x).

    python bench/json_reference.py FILE > /dev/null
"""

from __future__ import annotations

import json
import sys


def main(name: str) -> int:
    out = sys.stdout
    with open(name, "rb") as fh:
        for line_no, raw in enumerate(fh, 1):
            text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            out.write(json.dumps({"file": name, "line_no": line_no, "text": text}))
            out.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
