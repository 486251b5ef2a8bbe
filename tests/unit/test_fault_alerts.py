"""Each fault scenario that must raise an alert names a rule of deploy/prometheus/rules.yml
and holds its fault past that rule's ``for`` (plus a scrape and an evaluation), so the
alert can fire while the fault lasts; every service role and every store has one."""
from __future__ import annotations

import re

import yaml

from deploy.stack.layout import REPO
from deploy.stack.prometheus import SCRAPE_INTERVAL_S
from tests.faults.__main__ import EXPECTED_ALERT
from tests.faults.injectors import HOLD_S, ROLE_DOWN, SCENARIOS

# A scrape and an evaluation.
SEEN_AFTER_S = 2.0 * SCRAPE_INTERVAL_S
# Down past the hold: a killed Cassandra node is back only once it has started again
# (30-32 s on these machines; at least this much).
RESTART_S = {"cassandra-kill": 20.0}


def _rules() -> dict[str, dict]:
    doc = yaml.safe_load((REPO / "deploy/prometheus/rules.yml").read_text())
    return {r["alert"]: r for g in doc["groups"] for r in g["rules"] if "alert" in r}


def _seconds(duration: str) -> float:
    total = 0.0
    for amount, unit in re.findall(r"(\d+)([smh])", duration):
        total += int(amount) * {"s": 1, "m": 60, "h": 3600}[unit]
    return total


def test_every_expected_alert_is_a_rule_the_fault_outlasts() -> None:
    rules = _rules()
    for scenario, alert in EXPECTED_ALERT.items():
        assert scenario in SCENARIOS, scenario
        assert alert in rules, alert
        held = HOLD_S[scenario] + RESTART_S.get(scenario, 0.0)
        assert held >= _seconds(rules[alert].get("for", "0s")) + SEEN_AFTER_S, (scenario, alert)


def test_every_role_and_store_has_a_scenario_that_fires_an_alert() -> None:
    expected = set(EXPECTED_ALERT)
    assert {f"{role}-down" for role in ("fanout", "relay", "ranker", "api")} <= expected
    assert set(ROLE_DOWN) <= expected
    assert {"cassandra-kill", "broker-kill", "postgres-down"} <= expected
