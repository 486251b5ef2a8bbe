"""``ReplicaGroups``: a routing key's replicas are looked up once per token map, shared
by every store of a session, and looked up again when the ring changes."""
from __future__ import annotations

import struct
from types import SimpleNamespace

from services.shared.stores.cql_async import ReplicaGroups, replica_groups


class _Metadata:
    def __init__(self, hosts: int) -> None:
        self.hosts = [f"h{i}" for i in range(hosts)]
        self.token_map = object()
        self.lookups = 0

    def all_hosts(self) -> list[str]:
        return self.hosts

    def get_replicas(self, keyspace: str, key: bytes) -> list[str]:
        self.lookups += 1
        reader = struct.unpack(">q", key)[0]
        return [self.hosts[reader % len(self.hosts)], self.hosts[(reader + 1) % len(self.hosts)]]


class _Session:
    keyspace = "feed"

    def __init__(self, hosts: int) -> None:
        self.metadata = _Metadata(hosts)
        self.cluster = SimpleNamespace(metadata=self.metadata)


def _key(n: int) -> bytes:
    return struct.pack(">q", n)


def test_a_key_is_looked_up_once_and_equal_groups_are_one_object() -> None:
    session = _Session(3)
    groups = ReplicaGroups(session)  # type: ignore[arg-type]
    first = groups(_key(4))
    assert first == frozenset({"h1", "h2"})
    assert groups(_key(4)) is first and session.metadata.lookups == 1
    assert groups(_key(7)) is first  # 7 % 3 == 4 % 3: the same replicas, the same set
    assert groups(_key(5)) == frozenset({"h2", "h0"})
    assert session.metadata.lookups == 3
    assert groups(None) is None


def test_a_new_token_map_is_looked_up_again() -> None:
    session = _Session(3)
    groups = ReplicaGroups(session)  # type: ignore[arg-type]
    groups(_key(4))
    session.metadata.hosts = ["h0", "h1", "h2", "h3"]
    session.metadata.token_map = object()  # the driver rebuilds it when the ring changes
    assert groups(_key(4)) == frozenset({"h0", "h1"})
    assert session.metadata.lookups == 2


def test_a_full_memory_starts_over() -> None:
    session = _Session(3)
    groups = ReplicaGroups(session, max_keys=2)  # type: ignore[arg-type]
    for n in (1, 2, 3, 1):
        groups(_key(n))
    # 1 and 2 fill it; 3 starts it over (3 kept), so 1 is looked up again.
    assert session.metadata.lookups == 4


def test_one_node_has_no_groups() -> None:
    session = _Session(1)
    groups = ReplicaGroups(session)  # type: ignore[arg-type]
    assert groups(_key(4)) is None and groups(_key(4)) is None
    assert session.metadata.lookups == 0


def test_a_session_has_one_memory() -> None:
    a, b = _Session(3), _Session(3)
    assert replica_groups(a) is replica_groups(a)  # type: ignore[arg-type]
    assert replica_groups(a) is not replica_groups(b)  # type: ignore[arg-type]
