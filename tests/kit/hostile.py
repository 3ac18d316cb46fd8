"""Hypothesis strategies for hostile input: log lines, numbers, snapshot fields.

Shared by the tests/hostile suite. Numbers cover what broke specmon before: non-finite and
overflowing floats, ints of thousands of digits, negative and absurd throughputs; text covers
terminal escapes, C0/C1 controls, U+2028/U+2029 and markup.
"""

from __future__ import annotations

from hypothesis import strategies as st

NUMBER_TEXT = st.one_of(
    st.sampled_from(["1e400", "-1e400", "nan", "NaN", "inf", "-inf", "Infinity", "1e308",
                     "-5.0", "-1", "0", "0.00", "1e9", "1000000001.0", "999999999.99",
                     "1" * 19, "9" * 400, "9" * 400 + ".0", "1" * 5000, "00012", "+3", ".5",
                     "1.2.3", "1e", "0x10", "12abc", ""]),
    st.integers(min_value=-10**25, max_value=10**25).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.floats(min_value=0, max_value=1e12).map(lambda f: f"{f:.2f}"),
)

CONTROL_TEXT = st.lists(
    st.sampled_from(["\x1b", "\x07", "\x9b", "\x9d", "\u2028", "\u2029", "\r", "\x00",
                              "\x1b]52;c;aGk=\x07", "\x1b]0;pwned\x07", "\x1b[31m",
                              "\x1b]8;;http://x\x1b\\", "[bold]", "[/]", "<script>", "a", " "]),
    max_size=12,
).map("".join)

PREFIX = st.sampled_from([
    "", "[2025-07-06 09:10:11 TP0] ", "[14:02:11 TP0] ", "[2026-01-01 00:00:00 DP1 TP3] ",
    "[2026-01-01 00:00:00 TP" + "9" * 30 + "] ", "(SGLangEngine pid=" + "7" * 5000 + ") ",
    "2025-10-29 02:27:35 INFO 8900 [ DP15 TP15 scheduler_metrics_mixin.py:222] ",
])


@st.composite
def decode_lines(draw: st.DrawFn) -> str:
    """A decode line in the common layout with any field replaced by a hostile number."""
    n = [draw(NUMBER_TEXT) for _ in range(6)]
    spec = draw(st.booleans())
    acc = f"accept len: {n[3]}, " if spec else ""
    head = draw(st.sampled_from(["Decode batch. ", "Decode batch, ", "Decode batch [12], "]))
    tail = draw(st.sampled_from(["#queue-req: 0", f"#queue-req: {n[5]}, ", "", "cuda graph: True, "
                                 "#queue-req: 0"]))
    return (f"{draw(PREFIX)}{head}#running-req: {n[0]}, #token: {n[1]}, token usage: {n[2]}, "
            f"{acc}gen throughput (token/s): {n[4]}, {tail}{draw(CONTROL_TEXT)}")


@st.composite
def prefill_lines(draw: st.DrawFn) -> str:
    n = [draw(NUMBER_TEXT) for _ in range(4)]
    return (f"{draw(PREFIX)}Prefill batch. #new-seq: {n[0]}, #new-token: {n[1]}, "
            f"#cached-token: {n[2]}, token usage: {n[3]}, #running-req: 0, #queue-req: 0, ")


HOSTILE_LINES = st.one_of(decode_lines(), prefill_lines(), CONTROL_TEXT,
                          st.text(max_size=80))

# fixed lines that broke specmon before (each one a regression)
REGRESSION_LINES = [
    "[2025-07-06 09:10:11 TP0] Decode batch. #running-req: 1, #token: 90, token usage: 0.01, "
    "gen throughput (token/s): 1e400, #queue-req: 0",
    "[2025-07-06 09:10:11 TP0] Decode batch. #running-req: 1, #token: 90, token usage: 0.01, "
    "gen throughput (token/s): nan, #queue-req: 0",
    "[2025-07-06 09:10:11 TP0] Decode batch. #running-req: 1, #token: 90, token usage: 0.01, "
    "gen throughput (token/s): -12.5, #queue-req: 0",
    "[2025-07-06 09:10:11 TP0] Decode batch. #running-req: 1, #token: 90, token usage: 0.01, "
    "gen throughput (token/s): 2000000000.00, #queue-req: 0",
    "[2025-07-06 09:10:11 TP0] Decode batch. #running-req: 1, #token: 90, token usage: 0.01, "
    "gen throughput (token/s): " + "1" * 400 + ", #queue-req: 0",
    "[2025-07-06 09:10:11 TP0] Decode batch. #running-req: " + "5" * 5000 + ", #token: 90, "
    "token usage: 0.01, gen throughput (token/s): 50.00, #queue-req: 0",
    "[2025-07-06 09:10:11 TP0] Decode batch. #running-req: 1, #token: " + "5" * 5000 + ", "
    "token usage: 0.01, accept len: 1e400, gen throughput (token/s): 50.00, #queue-req: 0",
]


# --- snapshots ----------------------------------------------------------------------------------

HOSTILE_VALUES = st.one_of(
    st.sampled_from([None, True, False, 0, -1, 2 ** 63, 10 ** 400, -(10 ** 300), 1e308, -1e308,
                     float("nan"), float("inf"), float("-inf"), "", "\x1b]52;c;eA==\x07",
                     "<script>alert(1)</script>", "\u2028", [], {}, [1, 2], {"a": 1}]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10 ** 30), max_value=10 ** 30),
    CONTROL_TEXT,
    st.lists(st.integers(), max_size=3),
)


def _paths(obj: object, prefix: tuple = ()) -> list[tuple]:
    """Every path (keys and indexes) into a JSON tree, the root excluded."""
    out: list[tuple] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.append(prefix + (k,))
            out += _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:4]):  # a few rows stand for all of them
            out.append(prefix + (i,))
            out += _paths(v, prefix + (i,))
    return out


@st.composite
def mutated_docs(draw: st.DrawFn, doc: dict) -> dict:
    """A copy of a valid snapshot document with 1-4 values replaced by hostile ones."""
    import copy

    d = copy.deepcopy(doc)
    paths = _paths(d)
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        path = draw(st.sampled_from(paths))
        node: object = d
        try:
            for k in path[:-1]:
                node = node[k]  # type: ignore[index]
            node[path[-1]] = draw(HOSTILE_VALUES)  # type: ignore[index]
        except (KeyError, IndexError, TypeError):
            continue
    return d
