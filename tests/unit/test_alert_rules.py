"""The alert and recording rules (deploy/prometheus/rules.yml) pass ``promtool check`` and
their unit tests (rules.test.yml: each alert fires on its series, quiet on healthy ones)."""
from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import require_tool

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"


def _promtool() -> str:
    return require_tool("promtool", "Debian's prometheus package; `make up` installs it")


def test_rules_are_valid() -> None:
    result = subprocess.run([_promtool(), "check", "rules", "rules.yml"], cwd=RULES,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_fires_on_its_series_and_only_there() -> None:
    result = subprocess.run([_promtool(), "test", "rules", "rules.test.yml"], cwd=RULES,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_unit_test_and_a_runbook_entry() -> None:
    import re

    rules = (RULES / "rules.yml").read_text()
    tests = (RULES / "rules.test.yml").read_text()
    runbook = (RULES.parents[1] / "docs" / "operations.md").read_text()
    alerts = re.findall(r"- alert: (\w+)", rules)
    assert alerts
    for name in alerts:
        assert f"alertname: {name}" in tests, name
        anchor = re.search(r"runbook: docs/operations.md#(\S+)", rules[rules.index(f"alert: {name}"):])
        assert anchor is not None, name
        assert f'<a id="{anchor.group(1)}"></a>' in runbook, (name, anchor.group(1))
