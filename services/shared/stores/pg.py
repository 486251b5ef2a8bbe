"""Postgres connections for the project's processes (psycopg 3)."""
from __future__ import annotations

from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from services.shared.settings import Settings


def connect(settings: Settings, **kwargs: Any) -> psycopg.Connection:
    return psycopg.connect(settings.pg_dsn, **kwargs)


def pool(settings: Settings, *, min_size: int = 1, max_size: int = 10) -> ConnectionPool:
    return ConnectionPool(settings.pg_dsn, min_size=min_size,
                          max_size=max_size, open=True)


def async_pool(settings: Settings, *, min_size: int = 1,
               max_size: int = 10) -> AsyncConnectionPool:
    """Create (not open) an async pool; open it inside the running event loop.

    Connections are checked when handed out, so after a Postgres restart the pool
    replaces its dead connections instead of failing one request per connection."""
    return AsyncConnectionPool(settings.pg_dsn, min_size=min_size,
                               max_size=max_size, open=False,
                               check=AsyncConnectionPool.check_connection)
