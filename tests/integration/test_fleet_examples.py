"""The shipped Prometheus rules and Grafana dashboard only use metrics the exporter emits.

How they are checked: `promtool check rules` and `promtool test rules` (unit tests that make the
alerts fire on synthetic series) when promtool is installed (`make sysdeps` installs Debian's
`prometheus` package for it); without promtool the rules are still parsed with a YAML loader and
checked for structure here, which catches YAML errors and unknown metric names but not PromQL
syntax errors.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import yaml
from kit.paths import ROOT

from specmon.export.prometheus import METRIC_NAMES

EXAMPLES = ROOT / "examples"
RULES = EXAMPLES / "specmon-alerts.yml"
RULE_TESTS = EXAMPLES / "specmon-alerts.test.yml"
DASHBOARD = EXAMPLES / "grafana-dashboard.json"
METRIC = re.compile(r"\bspecmon_[a-z0-9_]+\b")


def metric_names(expr: str) -> set[str]:
    return set(METRIC.findall(expr))


def test_alert_rules_parse_use_exported_metrics_and_pass_promtool():
    doc = yaml.safe_load(RULES.read_text())
    rules = [r for g in doc["groups"] for r in g["rules"]]
    assert len(rules) >= 5
    used: set[str] = set()
    for r in rules:
        assert set(r) <= {"alert", "expr", "for", "labels", "annotations"}, r
        assert r["alert"].startswith("Specmon") and r["labels"]["severity"] in ("warning", "critical")
        assert r["annotations"]["summary"]
        names = metric_names(r["expr"])
        assert names, r["alert"]
        used |= names
        for text in r["annotations"].values():
            used |= metric_names(text)
    assert used <= set(METRIC_NAMES), used - set(METRIC_NAMES)
    for name in ("specmon_host_up", "specmon_server_drift_alert_level",
                 "specmon_gpu_clock_event_reason", "specmon_speedup_ratio_ci95_high"):
        assert name in used
    tests = yaml.safe_load(RULE_TESTS.read_text())
    for t in tests["tests"]:
        for s in t["input_series"]:
            assert metric_names(s["series"]) <= set(METRIC_NAMES)
    promtool = shutil.which("promtool")
    if promtool is not None:
        for args in (["check", "rules", str(RULES)], ["test", "rules", str(RULE_TESTS)]):
            res = subprocess.run([promtool, *args], capture_output=True, text=True, timeout=60,
                                 cwd=EXAMPLES)
            assert res.returncode == 0, res.stdout + res.stderr
            assert "SUCCESS" in res.stdout


def test_grafana_dashboard_panels_query_exported_metrics_only():
    d = json.loads(DASHBOARD.read_text())
    assert d["title"] and d["uid"] and d["schemaVersion"] >= 30
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids)) >= 10
    used: set[str] = set()
    for p in d["panels"]:
        assert p["type"] in {"timeseries", "stat", "state-timeline", "table"}, p["type"]
        assert {"x", "y", "w", "h"} <= set(p["gridPos"])
        assert p["targets"], p["title"]
        for t in p["targets"]:
            names = metric_names(t["expr"])
            assert names, (p["title"], t["expr"])
            assert t["expr"].count("(") == t["expr"].count(")")
            used |= names
    for v in d["templating"]["list"]:
        used |= metric_names(v["query"])
    assert used <= set(METRIC_NAMES), used - set(METRIC_NAMES)
    # every family the exporter emits is on the dashboard except the speedup interval's pair
    # (plotted with the ratio) and the bookkeeping ones
    assert set(METRIC_NAMES) - used <= {"specmon_host_connection_state",
                                         "specmon_host_last_update_timestamp_seconds",
                                         "specmon_server_decode_samples",
                                         "specmon_server_running_requests"}
