"""Cassandra clusters and sessions (cassandra-driver), every one built here from
``CassandraSettings``: contact points, PasswordAuthenticator credentials and client TLS."""
from __future__ import annotations

import socket
import ssl

from cassandra import ConsistencyLevel
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, Session
from cassandra.auth import PlainTextAuthProvider
from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy, WhiteListRoundRobinPolicy

from services.shared.settings import CassandraSettings

# Every store call has a timeout: a slow node must not hold a request or a worker.
DEFAULT_TIMEOUT_S = 2.0
# Native protocol v4, not v5: v5 wraps every frame in checksummed segments, and
# cassandra-driver 3.30 codes them in pure Python (its cassandra.segment is not compiled;
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


def cluster(settings: CassandraSettings, *, timeout: float = DEFAULT_TIMEOUT_S,
            contact_points: list[str] | None = None, connect_timeout: float = 5,
            probe: bool = False) -> Cluster:
    """A cluster for ``settings``. With ``probe`` (a readiness check of the contact
    points): connections to the contact points only, and no schema or token metadata
    read on connect, which a loaded node answered slowly enough to time the check out."""
    points = contact_points or settings.cassandra_contact_points
    profile = ExecutionProfile(
        load_balancing_policy=(WhiteListRoundRobinPolicy(points) if probe else
                               TokenAwarePolicy(DCAwareRoundRobinPolicy())),
        request_timeout=timeout, consistency_level=CONSISTENCY,
        serial_consistency_level=SERIAL_CONSISTENCY,
    )
    return Cluster(points, port=settings.cassandra_port,
                   protocol_version=PROTOCOL_VERSION,
                   execution_profiles={EXEC_PROFILE_DEFAULT: profile},
                   schema_metadata_enabled=not probe, token_metadata_enabled=not probe,
                   connect_timeout=connect_timeout, **_heartbeat(settings), **security(settings),
                   # Nagle + delayed ACK held small request frames back ~40 ms (measured on
                   # the feed's first page: p50 62 -> 9 ms); every process sends them at once.
                   sockopts=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])


def _heartbeat(settings: CassandraSettings) -> dict[str, float]:
    """A silent node convicted in seconds (Settings.cassandra_heartbeat_s) where there are
    other replicas to go to; with one, the driver's defaults: convicting the only node
    (a long GC pause on a loaded machine) would fail every request until it reconnects."""
    if settings.cassandra_replication_factor <= 1:
        return {}
    return {"idle_heartbeat_interval": settings.cassandra_heartbeat_s,
            "idle_heartbeat_timeout": settings.cassandra_heartbeat_timeout_s}


def security(settings: CassandraSettings) -> dict[str, object]:
    """The driver's ``auth_provider`` and ``ssl_context`` for these settings. With a
    hostname check the driver matches the node's certificate against the address it
    connected to, so certificates name the nodes' addresses (IP SANs)."""
    out: dict[str, object] = {}
    if settings.cassandra_username:
        out["auth_provider"] = PlainTextAuthProvider(
            settings.cassandra_username, settings.cassandra_password.get_secret_value())
    if settings.cassandra_tls:
        ctx = ssl.create_default_context(cafile=settings.cassandra_ssl_ca_file or None)
        if settings.cassandra_ssl_cert_file:
            ctx.load_cert_chain(settings.cassandra_ssl_cert_file, settings.cassandra_ssl_key_file or None)
        ctx.check_hostname = settings.cassandra_ssl_check_hostname
        out["ssl_context"] = ctx
    return out


def session(settings: CassandraSettings, *, keyspace: str | None = None,
            timeout: float = DEFAULT_TIMEOUT_S) -> Session:
    """A connected session on the feed keyspace (or ``keyspace``)."""
    return cluster(settings, timeout=timeout).connect(keyspace or settings.cassandra_keyspace)
