"""Cassandra sessions for the project's processes (cassandra-driver)."""
from __future__ import annotations

import socket
from typing import Any

from cassandra import ConsistencyLevel
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, Session
from cassandra.cqltypes import ListType
from cassandra.policies import (ConstantSpeculativeExecutionPolicy, DCAwareRoundRobinPolicy,
                                TokenAwarePolicy)
from cassandra.query import BatchStatement, BatchType, PreparedStatement

from .settings import Settings, get_settings

# Every store call has a timeout: a slow node must not hold a request or a worker.
DEFAULT_TIMEOUT_S = 2.0
# Native protocol v4, not v5: v5 wraps every frame in checksummed segments, and
# cassandra-driver 3.30 codes them in pure Python (cassandra/segment.py is not compiled;
# its CRC24 header check is a bit loop, CRC32 is zlib). Measured on the bench machine:
# ~40 us of CPU per statement in the segment codec, ~7% of the driver's CPU for a point
# read, spent on the reactor thread every read waits on. Nothing here uses a v5-only
# feature, and pinning a version skips the negotiation down from the driver's default.
PROTOCOL_VERSION = 4
# Every read and write at LOCAL_QUORUM (LWTs: LOCAL_SERIAL). With RF 1 (the one-node
# stack) that is one replica, as before; with RF 3 (the three-node stack) two of three:
# one node may be dead, paused or cut off, and since reads and writes overlap (2 + 2 > 3)
# a read sees every write acknowledged before it. The pipeline relies on that everywhere:
# the fan-out decides from copies it wrote, the ranker from counts, the API's serving
# cache re-reads a copy right after its serving-changes notice (docs/operations.md has
# the table per query).
CONSISTENCY = ConsistencyLevel.LOCAL_QUORUM
SERIAL_CONSISTENCY = ConsistencyLevel.LOCAL_SERIAL
# A coordinator that is paused, cut off or starved (a node just restarted on a shared
# machine) is not down to the driver: its requests wait for the client timeout (6 s in
# the workers). A statement that is safe to run twice (``speculable``) also goes to the
# next coordinator when the first has not answered after this long: far above a healthy
# request (milliseconds), under the node's own 2 s write timeout. One extra execution at
# most, so a cluster that is slow everywhere gets at most twice the load of those requests.
SPECULATE_AFTER_S = 0.5


def speculable(statement: PreparedStatement) -> bool:
    """Whether running the statement twice at once leaves what running it once leaves: a
    read that is not a Paxos read, or a write whose cells all take the caller's
    ``USING TIMESTAMP`` and that sets no list (a list's elements get new cell ids per
    write, so a second copy would duplicate them). Conditional writes (``IF``), writes
    stamped by the coordinator's clock and counters are not."""
    query = " ".join(statement.query_string.upper().split())
    if statement.consistency_level in (ConsistencyLevel.SERIAL, ConsistencyLevel.LOCAL_SERIAL):
        return False
    if query.startswith("SELECT "):
        return True
    stamped = "TIMESTAMP ?" in query or "TIMESTAMP :" in query
    if not stamped or " IF " in f"{query} ":
        return False
    return not any(isinstance(c.type, type) and issubclass(c.type, ListType)
                   for c in statement.column_metadata or ())


class SpeculableBatch(BatchStatement):
    """An unlogged batch of speculable statements only, so itself safe to speculate."""

    def __init__(self) -> None:
        super().__init__(batch_type=BatchType.UNLOGGED)
        self.is_idempotent = True

    def add(self, statement: Any, parameters: Any = None) -> "SpeculableBatch":
        if not (statement.is_idempotent or (isinstance(statement, PreparedStatement)
                                            and speculable(statement))):
            raise ValueError(f"not speculable, so not for a SpeculableBatch: {statement}")
        super().add(statement, parameters)
        return self


def cluster(settings: Settings | None = None, *, timeout: float = DEFAULT_TIMEOUT_S) -> Cluster:
    s = settings or get_settings()
    profile = ExecutionProfile(
        load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy()),
        request_timeout=timeout, consistency_level=CONSISTENCY,
        serial_consistency_level=SERIAL_CONSISTENCY,
        speculative_execution_policy=ConstantSpeculativeExecutionPolicy(SPECULATE_AFTER_S, 1),
    )
    return Cluster(s.cassandra_contact_points, port=s.cassandra_port,
                   protocol_version=PROTOCOL_VERSION,
                   execution_profiles={EXEC_PROFILE_DEFAULT: profile}, connect_timeout=5,
                   # Nagle + delayed ACK held small request frames back ~40 ms (measured on
                   # the feed's first page: p50 62 -> 9 ms); every process sends them at once.
                   sockopts=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])


def session(settings: Settings | None = None, *, keyspace: str | None = None,
            timeout: float = DEFAULT_TIMEOUT_S) -> Session:
    """A connected session on the feed keyspace (or ``keyspace``). Every statement it
    prepares is marked idempotent when ``speculable`` (the driver speculates only on
    those); a caller that later makes one a Paxos read clears the mark itself."""
    s = settings or get_settings()
    connected = cluster(s, timeout=timeout).connect(keyspace or s.cassandra_keyspace)
    prepare = connected.prepare

    def prepare_marked(query: str, *args: Any, **kwargs: Any) -> PreparedStatement:
        statement = prepare(query, *args, **kwargs)
        statement.is_idempotent = speculable(statement)
        return statement

    connected.prepare = prepare_marked  # type: ignore[method-assign]
    return connected
