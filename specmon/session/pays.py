"""The "speculation no longer pays" rule, raised by the session model for every front end.

The rule itself is `analysis.advisor.speculation_no_longer_pays`; this module evaluates it per
host on the current runs' speedup (`session.window.speedup`, the one speedup every front end
shows) and remembers, per (host, server), when speculation last paid (the reference that names
which side moved) and whether the alert is active. `FleetSession.tick` calls it, so the UI,
`record` (its stderr) and snapshots see the same alerts; a /metrics scrape only reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from specmon.analysis.advisor import PaysState, pays_state, speculation_no_longer_pays
from specmon.session.state import HostState
from specmon.session.window import speedup

KIND = "speculation_pays"


@dataclass
class PaysWatcher:
    """Evaluates the rule each tick for a host's speculative server against its baseline."""

    ref: dict[str, PaysState] = field(default_factory=dict)  # when speculation last paid
    active: dict[str, str] = field(default_factory=dict)  # server -> the active alert's text

    def tick(self, session: HostState, now: float, window_s: float) -> list[dict[str, Any]]:
        """The alerts raised or cleared by this tick, as session alert dicts (none if no change)."""
        spec, base = session.by_role("speculative"), session.by_role("baseline")
        if spec is None or base is None:
            return []
        sp = speedup(base, spec, now, window_s)
        if sp is None or sp.ci95 is None:  # no interval, no verdict
            return []
        st = pays_state(sp)
        if st is None:
            return []
        if st.low > 1.0:
            self.ref[spec.name] = st  # speculation paid here: the reference for "what moved"
        verdict = speculation_no_longer_pays(st, self.ref.get(spec.name))
        out: list[dict[str, Any]] = []
        if verdict is not None and spec.name not in self.active:
            self.active[spec.name] = verdict.text
            out.append({"t": now, "server": spec.name, "level": "warning", "kind": KIND,
                        "text": verdict.text, "causes": [verdict.moved] if verdict.moved else [],
                        "cause": verdict.moved, "cleared": False})
        elif verdict is None and spec.name in self.active and st.low > 1.0:
            text = self.active.pop(spec.name)
            out.append({"t": now, "server": spec.name, "level": "info", "kind": KIND,
                        "text": text, "causes": [], "cause": None, "cleared": True})
        return out
