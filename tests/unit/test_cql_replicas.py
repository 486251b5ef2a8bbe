"""What the Cassandra sessions and the migration do differently when there are replicas
(RF > 1, the three-node stack): convict silent nodes, speculate on slow replicas."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from deploy.migrate import _speculative_retry
from services.shared.settings import Settings
from services.shared.stores import cql


def test_one_replica_keeps_the_drivers_heartbeat_and_replicas_convict_in_seconds():
    assert cql._heartbeat(Settings(cassandra_replication_factor=1)) == {}
    assert cql._heartbeat(Settings(cassandra_replication_factor=3)) == {
        "idle_heartbeat_interval": 1.0, "idle_heartbeat_timeout": 2.0}
    cluster = cql.cluster(Settings(cassandra_replication_factor=3, cassandra_heartbeat_s=0.5))
    assert cluster.idle_heartbeat_interval == 0.5  # not connected: nothing to shut down


class _Session:
    def __init__(self, tables: dict[str, str]) -> None:
        self.tables = tables
        self.statements: list[str] = []

    def execute(self, statement: str, params: Any = None) -> list[SimpleNamespace]:
        self.statements.append(statement)
        if statement.startswith("SELECT"):
            assert params == ("feed",)
            return [SimpleNamespace(table_name=t, speculative_retry=v) for t, v in self.tables.items()]
        return []


def test_only_tables_not_yet_speculating_as_wanted_are_altered():
    session = _Session({"posts": "99p", "feed_inbox": "MIN(99p,50ms)", "blocks": "min(99p, 50ms)"})
    changed = _speculative_retry(session, "feed", "MIN(99p,50ms)")
    assert changed == ["posts: speculative_retry MIN(99p,50ms)"]
    assert session.statements[1:] == ["ALTER TABLE posts WITH speculative_retry = 'MIN(99p,50ms)'"]
