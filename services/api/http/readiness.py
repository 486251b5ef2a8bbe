"""Readiness: named async checks, run by ``GET /readyz``.

The app registers one check per store it uses (``app.state.readiness``); a part that adds
a store (the read path's Cassandra session) registers its own check next to it.
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from psycopg_pool import AsyncConnectionPool

ReadinessCheck = Callable[[], Awaitable[None]]
# Readiness must answer before a load balancer's probe times out (typically 1-5 s).
CHECK_TIMEOUT_SECONDS = 2.0


class ReadinessChecks:
    """A registry of checks; each raises (or times out) when its dependency is not ready."""

    def __init__(self) -> None:
        self._checks: dict[str, ReadinessCheck] = {}

    def register(self, name: str, check: ReadinessCheck) -> None:
        self._checks[name] = check

    async def run(self) -> dict[str, str]:
        """``{name: "ok" | error text}`` for every check, run concurrently."""
        names = list(self._checks)
        results = await asyncio.gather(
            *(asyncio.wait_for(self._checks[n](), CHECK_TIMEOUT_SECONDS) for n in names),
            return_exceptions=True)
        return {n: "ok" if r is None else (type(r).__name__ + (f": {r}" if str(r) else ""))
                for n, r in zip(names, results)}


def postgres_check(pool: AsyncConnectionPool) -> ReadinessCheck:
    async def check() -> None:
        async with pool.connection(timeout=CHECK_TIMEOUT_SECONDS) as conn:
            await conn.execute("SELECT 1")
    return check


def cassandra_check(session: Any) -> ReadinessCheck:
    """For a cassandra-driver ``Session``: one cheap query against the local node."""
    async def check() -> None:
        await asyncio.to_thread(session.execute, "SELECT release_version FROM system.local",
                                timeout=CHECK_TIMEOUT_SECONDS)
    return check


def lease_check(is_held: Callable[[], bool]) -> ReadinessCheck:
    """Not ready to take writes once the Snowflake node-id lease is lost."""
    async def check() -> None:
        if not is_held():
            raise RuntimeError("node id lease not held")
    return check
