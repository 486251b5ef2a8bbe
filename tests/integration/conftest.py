"""Integration fixtures for the HTTP API: the real app under uvicorn on a free port.

``api_server`` (module scope) serves ``create_app(settings)`` on the session's fresh
database in a background thread and stops it at the end; tests talk to it over real HTTP
with httpx. ``api_server.client(user_id)`` is an httpx client carrying a valid token.
The read path's tests reuse the same fixture; ``world`` seeds their serving store, and
``worker_env`` runs the fan-out and ranker as subprocesses (tests/support/);
``cassandra`` is a driver session on the session's keyspace for the store tests.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cassandra.cluster import Session

from services.shared.clients import cql
from services.shared.settings import Settings
from tests.support.api_server import RunningApi, running_api
# The CDC relay's fixtures, used by test_cdc_relay and test_cdc_faults.
from tests.support.cdc_relay import relays, source  # noqa: F401
from tests.support.feed_world import FeedWorld
from tests.support.worker_env import WorkerEnv, open_worker_env


# Module scope: some modules restart Postgres on purpose; a fresh server per module keeps
# one module's outage (and the pool's reconnect back-off) out of the next module.
@pytest.fixture(scope="module")
def api_server(settings: Settings) -> Iterator[RunningApi]:
    with running_api(settings) as api:
        yield api


@pytest.fixture(scope="module")
def world(settings: Settings, api_server: RunningApi) -> Iterator[FeedWorld]:
    """A ``FeedWorld`` on the session's stores, whose writes ``api_server`` has seen
    (its serving cache applied their notices) before the next request."""
    w = FeedWorld(settings)
    w.watchers.append(api_server)
    yield w
    w.close()


@pytest.fixture(scope="module")
def cassandra(settings: Settings) -> Iterator[Session]:
    """A session on the session's keyspace, from the store's one factory."""
    session = cql.session(settings)
    yield session
    session.cluster.shutdown()


@pytest.fixture
def worker_env(settings: Settings, tmp_path: Path) -> Iterator[WorkerEnv]:
    yield from open_worker_env(settings, tmp_path)
