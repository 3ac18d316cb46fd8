"""The one N/A / number formatter and the one speculative-config text, for every front end.

A value specmon did not measure is shown as "N/A", never as 0, "nan", "inf" or a guess.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

NA = "N/A"
MAX_TIME = 1e11  # Unix seconds (year 5138): a larger time read from a file is damage, not a date
MAX_INT = 2 ** 63  # a count, clock, id or size read from a file past this is damage


def finite(v: Any) -> float | None:
    """`v` as a float when it is a finite number (not a bool), else None: the one check of a
    number read from a file or a server's response. An int too large for a float (JSON has
    no size limit: 10**400) is None too, never an OverflowError."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    try:
        f = float(v)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


# ASCII digits and few: str.isdigit() holds for "²" (int() refuses it: ValueError) and int()
# reads "١" as 1 and takes " 1", "+1" and "1_0"; 18 digits stay far below Python's 4300 limit
_RE_DIGITS = re.compile(r"[0-9]{1,18}")


def ascii_int(text: Any, lo: int = 0, hi: int = MAX_INT) -> int | None:
    """The whole number `text` is when it is written in ASCII digits only (1 to 18 of them)
    and lies in lo..hi, else None: the one reading of a count, port or index that a user
    typed or a file or a host's command line holds."""
    if not isinstance(text, str) or _RE_DIGITS.fullmatch(text) is None:
        return None
    v = int(text)
    return v if lo <= v <= hi else None


MAX_PORT = 65535


def ascii_port(text: Any, lo: int = 1) -> int | None:
    """A TCP port (`ascii_int` in lo..65535; `lo=0` where 0 means "any free port")."""
    return ascii_int(text, lo, MAX_PORT)


def unix_time(v: Any) -> float | None:
    """`v` as Unix seconds when it is a finite number within MAX_TIME of 1970, else None (a
    time that no clock formats is not one to show or to sort on)."""
    f = finite(v)
    return f if f is not None and abs(f) <= MAX_TIME else None


def num(v: float | int | None, fmt: str = "{:.2f}") -> str:
    """`fmt.format(v)`, or "N/A" for None, NaN and infinities (and a bool, which is no number)."""
    if v is None or isinstance(v, bool) or (isinstance(v, float) and not math.isfinite(v)):
        return NA
    return fmt.format(v)


def spread_text(p10: float | None, p90: float | None, fmt: str = "{:.2f}") -> str:
    """`85.18-92.33`, or "N/A" when either end is missing (too few samples for a spread)."""
    if num(p10) == NA or num(p90) == NA:
        return NA
    return f"{fmt.format(p10)}-{fmt.format(p90)}"


SPEC_KEYS = (("speculative_num_steps", "steps"), ("speculative_eagle_topk", "topk"),
             ("speculative_num_draft_tokens", "draft"))


def spec_config_text(args: Mapping[str, Any], sep: str = " ") -> str | None:
    """`EAGLE3 steps 2 topk 1 draft 3` from SGLang's server args (vLLM's: `eagle3 k 3 draft
    org/draft`); None without speculation
    (a setting the args do not carry is left out, not guessed). `sep` joins the settings (the
    panel header uses " · ")."""
    algo = args.get("speculative_algorithm")
    if not algo:
        return None
    parts = [str(algo)]
    if args.get("engine_version"):  # vLLM's config line: its own words for k and the draft model
        if args.get("speculative_num_tokens") is not None:
            parts.append(f"k {args['speculative_num_tokens']}")
        if args.get("speculative_draft_model_path"):
            parts.append(f"draft {args['speculative_draft_model_path']}")
        return sep.join(parts)
    parts += [f"{word} {args[key]}" for key, word in SPEC_KEYS if args.get(key) is not None]
    return sep.join(parts)
