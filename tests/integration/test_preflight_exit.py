"""A service whose store refuses its settings ends at start with one line naming the
store and the setting, status 78 (EX_CONFIG), and no traceback: run as processes against
the local stack, each with one setting wrong the way a new deployment gets it wrong."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from deploy.stack.layout import REPO
from services.shared.clients.preflight import EXIT_CONFIG

pytestmark = pytest.mark.integration

CASES = [
    # (service, the wrong setting, the variable its one line must name)
    ("services.cdc", {"FEED_PG_SSLMODE": "require"}, "FEED_PG_SSLMODE"),
    ("services.cdc", {"FEED_KAFKA_SECURITY_PROTOCOL": "SSL"}, "FEED_KAFKA_SECURITY_PROTOCOL"),
    ("services.fanout", {"FEED_CASSANDRA_SSL": "true"}, "FEED_CASSANDRA_SSL"),
    ("services.ranker", {"FEED_KAFKA_SECURITY_PROTOCOL": "SSL"}, "FEED_KAFKA_SECURITY_PROTOCOL"),
    ("services.api", {"FEED_PG_SSLMODE": "require"}, "FEED_PG_SSLMODE"),
]


@pytest.mark.parametrize("module, wrong, named", CASES, ids=[f"{m}-{next(iter(w))}" for m, w, _ in CASES])
def test_a_refused_setting_ends_the_service_in_one_line(settings, module: str, wrong: dict[str, str],
                                                         named: str) -> None:
    env = {**os.environ, "FEED_DEV_MODE": "true", "FEED_API_PORT": "0", **wrong}
    done = subprocess.run([sys.executable, "-m", module], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == EXIT_CONFIG, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "refused" in lines[-1] and named in lines[-1], lines[-1]
