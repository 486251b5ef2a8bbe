"""Shared fixtures. Integration tests run against the real stack that `make test` starts.

Each test session gets its own Postgres database, Cassandra keyspace and Kafka topic
prefix, so runs never see each other's data. When the stack is not reachable, tests that
need it skip locally and FAIL under CI=true (a skipped integration test in CI is a defect).
"""
from __future__ import annotations

import os
import secrets
import shutil
import socket

import pytest

from services.shared.settings import Settings

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# The suite runs on the built-in development secrets, which only a development flag lets
# the API accept (services/shared/secret_policy.py); the processes tests start inherit it.
os.environ.setdefault("FEED_DEV_MODE", "true")


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def require(*services: str) -> None:
    """Skip (locally) or fail (CI) unless each named service answers."""
    base = Settings()
    addresses = {
        "postgres": (base.pg_host, base.pg_port),
        "kafka": tuple(base.kafka_bootstrap.split(",")[0].rsplit(":", 1)),
        "cassandra": (base.cassandra_contact_points[0], base.cassandra_port),
    }
    for name in services:
        host, port = addresses[name]
        if not _reachable(host, int(port)):
            message = f"{name} is not reachable at {host}:{port}; run `make up`"
            if IN_CI:
                pytest.fail(message)
            pytest.skip(message)


def require_tool(name: str, hint: str) -> str:
    """The path of program ``name``; skip (locally) or fail (CI) when it is missing."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} is missing ({hint})"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture(scope="session")
def run_id() -> str:
    return secrets.token_hex(4)


@pytest.fixture(scope="session")
def settings(run_id: str) -> Settings:
    """Settings pointing at a fresh database, keyspace and topic prefix, all migrated."""
    require("postgres", "kafka", "cassandra")
    from deploy.migrate import migrate_all
    from services.shared.clients import pg

    base = Settings()
    name = f"t_{run_id}"
    with pg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    s = Settings(pg_database=name, cassandra_keyspace=name, topic_prefix=name)
    migrate_all(s, keyspace=name, topic_prefix=name)
    yield s
    _drop(base, s, name)


def _drop(base: Settings, s: Settings, name: str) -> None:
    from services.shared.clients import cql, kafka, pg

    try:
        with pg.connect(base, autocommit=True) as conn:
            for (slot,) in conn.execute(
                    "SELECT slot_name FROM pg_replication_slots WHERE database=%s AND NOT active",
                    (name,)).fetchall():
                conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    except Exception:  # noqa: BLE001 - best effort clean-up; an active slot keeps the DB
        pass
    try:
        cl = cql.cluster(s, timeout=60)
        cl.connect().execute(f"DROP KEYSPACE IF EXISTS {name}")
        cl.shutdown()
    except Exception:  # noqa: BLE001
        pass
    # The session's topics (its prefix, and the prefixes its tests derived from it): a
    # run makes hundreds of partitions, and a development broker (512 MB heap) that kept
    # every run's ran out of memory after a few dozen runs.
    try:
        admin = kafka.admin(s)
        ours = [t for t in admin.list_topics(timeout=15).topics
                if t.startswith(name) or f".{name}" in t]  # name: t_ + 8 random hex digits
        if ours:
            for fut in admin.delete_topics(ours, operation_timeout=60).values():
                fut.result()
    except Exception:  # noqa: BLE001
        pass
