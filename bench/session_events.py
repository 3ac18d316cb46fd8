"""Cost of the one way state changes: lines through the session model's event method
(FleetSession.lines: apply, record listeners, drift monitor fed each record) against applying
the same parsed lines straight to a ServerState, in the same run. Prints the ratio."""

from __future__ import annotations

import argparse
import time

from specmon.analysis.drift import BaselineStats
from specmon.parse.sglang import parse_line
from specmon.session.baselines import Baseline
from specmon.session.events import LineItem
from specmon.session.fleet import FleetSession
from specmon.session.state import ServerState

LINE = ("[2026-11-29 10:00:{s:02d} TP0] Decode batch, #running-req: 1, #token: {tok}, token usage: "
        "0.01, cuda graph: True, gen throughput (token/s): {gt:.2f}, #queue-req: 0")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--lines", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=500)
    args = ap.parse_args()
    texts = [LINE.format(s=i % 60, tok=1000 + i, gt=88.0 + (i % 7) * 0.1) for i in range(args.lines)]
    items = [LineItem(x, parse_line(x), 1.7e9 + i) for i, x in enumerate(texts)]

    def apply_direct() -> float:
        t0 = time.perf_counter()
        st = ServerState("base")
        for it in items:
            st.apply(it.text, it.record, it.t)
        return time.perf_counter() - t0

    direct = min(apply_direct() for _ in range(3))  # best of 3: the machine is shared

    def through_model(drift: bool) -> float:
        fleet = FleetSession(["h"], clock=lambda: 1.7e9)
        if drift:
            fleet.watch("h", "base", Baseline("b", BaselineStats.fixed_value(88.3, 1.0, 1)))
        t0 = time.perf_counter()
        for k in range(0, len(items), args.batch):
            fleet.lines("h", "base", items[k:k + args.batch])
        assert fleet.server("h", "base").decode_total == len(items)
        return time.perf_counter() - t0

    plain = min(through_model(False) for _ in range(3))
    with_drift = through_model(True)
    fleet = FleetSession(["h"], clock=lambda: 1.7e9)
    seen = 0

    def count(_h: str, _s: str, _it: LineItem) -> None:
        nonlocal seen
        seen += 1

    fleet.record_listeners.append(count)
    t0 = time.perf_counter()
    for k in range(0, len(items), args.batch):
        fleet.lines("h", "base", items[k:k + args.batch])
    model = time.perf_counter() - t0
    assert seen == len(items) and fleet.server("h", "base").decode_total == len(items)
    n = len(items)
    print(f"{n} lines: ServerState.apply {direct * 1e6 / n:.2f} us/line; FleetSession.lines "
          f"{plain * 1e6 / n:.2f} us/line (ratio {plain / direct:.2f}x), with a listener "
          f"{model * 1e6 / n:.2f} us/line ({model / direct:.2f}x), with a watched baseline "
          f"(the drift monitor fed each record) {with_drift * 1e6 / n:.2f} us/line "
          f"({with_drift / direct:.2f}x)")


if __name__ == "__main__":
    main()
