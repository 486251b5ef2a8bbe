"""Annotated dependencies on what the lifespan put in ``app.state``."""
from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from psycopg_pool import AsyncConnectionPool

from services.api.idgen import SnowflakeGenerator

from .metrics import ApiMetrics


def _pool(request: Request) -> AsyncConnectionPool:
    return request.app.state.pg


def _ids(request: Request) -> SnowflakeGenerator:
    return request.app.state.ids


def _metrics(request: Request) -> ApiMetrics:
    return request.app.state.metrics


Pg = Annotated[AsyncConnectionPool, Depends(_pool)]
Ids = Annotated[SnowflakeGenerator, Depends(_ids)]
Metrics = Annotated[ApiMetrics, Depends(_metrics)]
