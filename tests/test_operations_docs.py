"""The dashboard and the alert rules in docs/operations/ load, and every query in them names a
metric the service exports (read from its own /metrics); docs/operations.md explains each alert."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.operations_fixtures import *  # noqa: F403  (served_on_loopback)

DOCS = Path(__file__).resolve().parent.parent / "docs"
METRIC = re.compile(r"\bsvc_[a-z_]+\b")
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


@pytest.fixture
def exported(client, served_on_loopback) -> set[str]:
    text = client.simulate_get("/metrics").text
    names = set()
    for family in text_string_to_metric_families(text):
        names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ("",)))
    return names


def dashboard_queries() -> list[tuple[str, str]]:
    dashboard = json.loads((DOCS / "operations" / "dashboard.json").read_text())
    queries = []
    ids = set()
    for panel in dashboard["panels"]:
        assert panel["id"] not in ids and {"h", "w", "x", "y"} <= set(panel["gridPos"])
        ids.add(panel["id"])
        if panel["type"] == "row":
            continue
        assert panel["targets"], panel["title"]
        assert panel["gridPos"]["x"] >= 0 and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        queries += [(panel["title"], target["expr"]) for target in panel["targets"]]
    return queries


def alert_rules() -> list[dict]:
    rules = yaml.safe_load((DOCS / "operations" / "alerts.yml").read_text())
    return [rule for group in rules["groups"] for rule in group["rules"]]


def test_every_dashboard_query_names_an_exported_metric(exported, storage):
    queries = dashboard_queries()
    assert len(queries) >= 20
    for title, expr in queries:
        names = METRIC.findall(expr)
        assert names, f"{title}: {expr}"
        assert set(names) <= exported, f"{title}: {set(names) - exported} is not exported"


def test_every_alert_names_an_exported_metric_and_is_explained(exported, storage):
    rules = alert_rules()
    explained = (DOCS / "operations.md").read_text()
    for wanted in ("SvcConsumerDown", "SvcOutboxStalled", "SvcWebhookFailureRate", "SvcThrottled", "SvcHigh5xxRate"):
        assert wanted in {rule["alert"] for rule in rules}
    for rule in rules:
        assert {"alert", "expr", "for", "labels", "annotations"} <= set(rule), rule
        assert set(METRIC.findall(rule["expr"])) <= exported, rule["alert"]
        assert f"`{rule['alert']}`" in explained, f"{rule['alert']} is not explained in docs/operations.md"
