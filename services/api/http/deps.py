"""Annotated dependencies on what the lifespan put in ``app.state``."""
from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from psycopg_pool import AsyncConnectionPool

from services.api.write.idgen import SnowflakeGenerator

from .metrics import ApiMetrics


def _pool(request: Request) -> AsyncConnectionPool:
    pool: AsyncConnectionPool = request.app.state.pg
    return pool


def _ids(request: Request) -> SnowflakeGenerator:
    ids: SnowflakeGenerator = request.app.state.ids
    return ids


def _commit_wait(request: Request) -> float:
    """Seconds a hiding write's answer waits after its commit (visibility/commit_wait.py)."""
    return float(request.app.state.settings.visibility_commit_wait_s)


def _metrics(request: Request) -> ApiMetrics:
    metrics: ApiMetrics = request.app.state.metrics
    return metrics


Pg = Annotated[AsyncConnectionPool, Depends(_pool)]
Ids = Annotated[SnowflakeGenerator, Depends(_ids)]
Metrics = Annotated[ApiMetrics, Depends(_metrics)]
CommitWait = Annotated[float, Depends(_commit_wait)]
