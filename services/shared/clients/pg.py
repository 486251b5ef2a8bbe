"""Postgres connections (psycopg 3, and psycopg2 for the relay's logical replication),
every one built here from ``PostgresSettings``: host, credentials and TLS, or a whole
libpq connection string."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from services.shared.settings import PostgresSettings

if TYPE_CHECKING:
    import psycopg2.extras

def conninfo(settings: PostgresSettings, **overrides: Any) -> str:
    """The libpq connection string (``PostgresSettings.libpq_conninfo``)."""
    return settings.libpq_conninfo(**overrides)


def describe(settings: PostgresSettings) -> str:
    """Where these settings connect, without secrets (for logs and errors)."""
    info = conninfo_to_dict(conninfo(settings))
    return (f"{info.get('user', '')}@{info.get('host', '')}:{info.get('port', '')}/"
            f"{info.get('dbname', '')} sslmode={info.get('sslmode', 'prefer')}")


def connect(settings: PostgresSettings, **kwargs: Any) -> psycopg.Connection[Any]:
    return psycopg.connect(conninfo(settings), **kwargs)


async def async_connect(settings: PostgresSettings, **kwargs: Any) -> psycopg.AsyncConnection[Any]:
    return await psycopg.AsyncConnection.connect(conninfo(settings), **kwargs)


def pool(settings: PostgresSettings, *, min_size: int = 1, max_size: int = 10) -> ConnectionPool:
    return ConnectionPool(conninfo(settings), min_size=min_size,
                          max_size=max_size, open=True)


def async_pool(settings: PostgresSettings, *, min_size: int = 1, max_size: int = 10,
               **kwargs: Any) -> AsyncConnectionPool:
    """Create (not open) an async pool; open it inside the running event loop.

    Connections are checked when handed out, so after a Postgres restart the pool
    replaces its dead connections instead of failing one request per connection."""
    kwargs.setdefault("check", AsyncConnectionPool.check_connection)
    return AsyncConnectionPool(conninfo(settings), min_size=min_size,
                               max_size=max_size, open=False, **kwargs)


def replication_connect(settings: PostgresSettings) -> "psycopg2.extras.LogicalReplicationConnection":
    """The relay's logical replication connection (psycopg2: psycopg 3 has no
    replication protocol). It matches ordinary ``hostssl`` lines of pg_hba."""
    import psycopg2
    import psycopg2.extras
    conn: psycopg2.extras.LogicalReplicationConnection = psycopg2.connect(
        conninfo(settings), connection_factory=psycopg2.extras.LogicalReplicationConnection)
    return conn
