"""What the Cassandra sessions and the migration do differently when there are replicas
(RF > 1, the three-node stack): convict silent nodes, speculate on slow replicas."""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from deploy.migrate import _speculative_retry
from services.shared.settings import Settings
from services.shared.clients import cql


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


class _Metadata:
    """A driver Metadata's token map and replica lookups, counted."""

    def __init__(self, hosts: list[str]) -> None:
        self.hosts = hosts
        self.token_map = object()
        self.lookups = 0

    def all_hosts(self) -> list[str]:
        return list(self.hosts)

    def get_replicas(self, keyspace: str, key: bytes) -> list[str]:
        self.lookups += 1
        return self.hosts[: 2] if key[-1] % 2 else self.hosts[1:]


def test_replica_groups_are_looked_up_once_per_key_until_the_token_map_changes():
    from services.shared.stores.cql_async import replica_group

    metadata = _Metadata(["a", "b", "c"])
    session = SimpleNamespace(cluster=SimpleNamespace(metadata=metadata), keyspace="feed")
    first = [replica_group(session, bytes([k])) for k in (1, 2, 1, 2, 1)]  # type: ignore[arg-type]
    assert first[0] == frozenset({"a", "b"}) and first[1] == frozenset({"b", "c"})
    assert first[2:] == [first[0], first[1], first[0]]
    assert metadata.lookups == 2
    # A node leaves: the driver builds a new token map, and the answers are asked again.
    metadata.hosts, metadata.token_map = ["a", "b"], object()
    assert replica_group(session, bytes([2])) == frozenset({"b"})  # type: ignore[arg-type]
    assert metadata.lookups == 3
    # Another keyspace is another cache; no key, no group.
    other = SimpleNamespace(cluster=session.cluster, keyspace="other")
    replica_group(other, bytes([2]))  # type: ignore[arg-type]
    assert metadata.lookups == 4
    assert replica_group(session, None) is None  # type: ignore[arg-type]


def test_one_node_has_no_replica_groups():
    from services.shared.stores.cql_async import replica_group

    metadata = _Metadata(["a"])
    session = SimpleNamespace(cluster=SimpleNamespace(metadata=metadata), keyspace="feed")
    assert replica_group(session, b"\x01") is None  # type: ignore[arg-type]
    assert metadata.lookups == 0
