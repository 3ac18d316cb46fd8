"""Benchmark: redaction cost per line, and on 1 MiB hostile lines, against a linear reference.

    python bench/redact_cost.py [--repeat 5]

Issue 22: `_RE_PAIR` backtracked quadratically (`'a'*20000` took 25 s), so one long line wedged
`record` and `export`. Prints, for each hostile 1 MiB line, the time `redact_text` takes and
its ratio to `str.lower()` of the same line (one linear pass, measured in the same run), and
the cost of a typical SGLang decode line (the per-line price `record` pays at 20k lines/s).
Times are wall clock, best of --repeat: on a shared machine compare the ratio column, or
rerun; `specmon.redact.redaction_passes(text)` names the regex passes a text costs.
"""

from __future__ import annotations

import argparse
import time

from specmon.redact import redact_text

DECODE = ("[2025-06-01 12:00:00 TP0] Decode batch, #running-req: 8, #token: 12345, token usage: "
          "0.05, accept len: 2.71, accept rate: 0.68, cuda graph: True, gen throughput "
          "(token/s): 612.34, #queue-req: 0, ")
UNITS = ["a", "a.", "-a", "eyJ-", "x_key", "token ", "a='\\'", "-u a:", "Aa0", "mysql -p",
         "?a=", "a://",
         # issue 22's follow-up: name characters around a hint word (each ran ~9 regex passes,
         # 96-124 ms a MiB), the quoted curl/mysql forms and padded base64 lines
         "-key", "token-", "--token", "a-token", "auth.", "-u 'a:", "mysql -p'", "Aa0==\n"]
MIB = 1 << 20


def best(fn: object, arg: str, repeat: int, times: int = 1) -> float:
    out = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(times):
            fn(arg)  # type: ignore[operator]
        out = min(out, time.perf_counter() - t)
    return out / times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(f"{'1 MiB line of':<14} {'redact ms':>10} {'lower() ms':>11} {'ratio':>7}")
    for unit in UNITS:
        text = (unit * (MIB // len(unit) + 1))[:MIB]
        t = best(redact_text, text, args.repeat)
        ref = best(str.lower, text, args.repeat)
        print(f"{unit!r:<14} {t * 1e3:>10.1f} {ref * 1e3:>11.2f} {t / ref:>7.0f}")
    per = best(redact_text, DECODE, args.repeat, times=20000)
    ref = best(str.lower, DECODE, args.repeat, times=20000)
    print(f"decode line ({len(DECODE)} chars): redact {per * 1e6:.1f} us, lower() "
          f"{ref * 1e6:.2f} us, ratio {per / ref:.0f} (best of {args.repeat} x 20000 lines)")


if __name__ == "__main__":
    main()
