"""The FastAPI application: ``create_app(settings)``.

Clients (Postgres pool, Snowflake node lease) are created in the lifespan, never at
import, and live in ``app.state``:

- ``settings``: the ``ApiProcess`` settings the app was built with
- ``pg``: ``psycopg_pool.AsyncConnectionPool``
- ``ids``: ``SnowflakeGenerator`` on a node id leased in Postgres (``id_lease``)
- ``known_users``: users this process has already created (``users.KnownUsers``)
- ``readiness``: ``ReadinessChecks`` run by ``/readyz``; a part that adds a store
  registers its check there
- ``metrics``: ``ApiMetrics`` rendered by ``/metrics``

To add a router (the feed read path, say), append it to ``ROUTERS``.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.staticfiles import StaticFiles
from fastapi.telemetry import TelemetryConfig
from starlette.types import ASGIApp

from services.api.http.auth import token_verifier
from services.api.http.edge import Edge
from services.api.http.metrics import ApiMetrics
from services.api.http.problems import install_problem_handlers
from services.api.http.readiness import (ReadinessChecks, cassandra_check, lease_check,
                                         postgres_check)
from services.api.stores.idempotency import purge_expired_periodically
from services.api.stores.social import pool_user_gone
from services.api.write.idgen import NodeLease, SnowflakeGenerator
from services.api.write.users import KnownUsers
from services.shared import runtime
from services.shared.secret_policy import require_safe_secrets
from services.shared.settings import ApiProcess, load
from services.shared.clients import pg
from services.shared.worker import kafka_failover

from .copies.notices import run_notice_consumer
from .feed.wiring import close_read_path, open_read_path, run_fence_reader
from .routes import accounts, feed, health, moderation, posts, preferences, social, stream, user_lists, web
from .routes import profiles
from .routes.feed_fast import FeedFastPath
from .stream.consumer import run_stream_consumer
from .stream.wiring import open_stream

log = logging.getLogger("services.api")

# The largest body we read: a post is at most 5,000 characters (20 KB in UTF-8) plus a
# few media ids; anything much larger is a mistake or an attack.
MAX_BODY_BYTES = 64 * 1024

# FastAPI's native OpenTelemetry off. Nothing here installs an OpenTelemetry SDK or
# provider, so it never recorded anything, but every request still asked whether the
# global providers were configured (three os.environ reads, ~10 us): 6-9% of the app's
# CPU for a /healthz request. Metrics are Prometheus (metrics.py); request ids tie log
# lines together.
NO_OTEL: TelemetryConfig = {"tracing": False, "metrics": False, "logs": False}

ROUTERS: list[APIRouter] = [health.router, posts.router, social.router, moderation.router,
                            feed.router, stream.router, preferences.router, web.router,
                            user_lists.router, accounts.router,
                            profiles.router]
# Coroutines run for the life of the app, given the app (periodic clean-ups).
BACKGROUND_TASKS: list[Callable[[FastAPI], Coroutine[Any, Any, None]]] = [
    purge_expired_periodically, run_stream_consumer, run_notice_consumer, run_fence_reader]


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: ApiProcess = app.state.settings
    require_safe_secrets(settings)  # before any client: a refused app opens nothing
    verifier = token_verifier(app.state)
    if verifier.keys is not None:  # gateway tokens: the issuer's keys before the first request
        await verifier.keys.load_async()
    pool = pg.async_pool(settings, min_size=1, max_size=settings.api_pg_pool_max,
                         timeout=settings.api_pg_wait_s)
    await pool.open(wait=True, timeout=30)
    lease = await asyncio.to_thread(NodeLease.acquire, settings)
    lease.start_renewing()
    app.state.pg = pool
    app.state.id_lease = lease
    app.state.ids = SnowflakeGenerator(lease.node_id, lease=lease)
    lease.on_node += [app.state.ids.rebind, app.state.metrics.id_node.set]
    app.state.known_users = KnownUsers()
    app.state.metrics.id_node.set(lease.node_id)
    app.state.readiness.register("postgres", postgres_check(pool))
    app.state.readiness.register("id_lease", lease_check(lease.is_held))
    # app.state.cassandra, feed_store and the feed reader; the user lists ask Postgres
    # whether a hidden account is deleted (no row) or suspended.
    await open_read_path(app, user_gone=pool_user_gone(pool))
    await open_stream(app)  # the stream's leases, gate and hub on that store
    if getattr(app.state, "cassandra", None) is not None:
        app.state.readiness.register("cassandra", cassandra_check(app.state.cassandra))
    runtime.tune(app.state.metrics.registry, gen0_threshold=settings.api_gc_gen0_threshold,
                 switch_interval_s=settings.api_switch_interval_s, freeze=settings.api_gc_freeze)
    background = [asyncio.create_task(task(app), name=task.__name__)
                  for task in BACKGROUND_TASKS]
    log.info("api started", extra={"node_id": lease.node_id})
    try:
        yield
    finally:
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        await asyncio.to_thread(lease.release)
        await pool.close()
        await close_read_path(app)



class FeedApi(FastAPI):
    """FastAPI with ``edge.Edge`` outermost and the feed's fast path right inside it, both
    outside FastAPI's own stack (its server-error, telemetry and body-limit layers, the
    exception layer, routing). Every request gets its id, counters and access line once;
    a warm ``GET /v1/feed`` (``routes.feed_fast``) pays for no other layer; everything
    else goes through FastAPI as before, where unexpected errors become 500 problems."""

    def build_middleware_stack(self) -> ASGIApp:
        return Edge(FeedFastPath(super().build_middleware_stack()), self.state.metrics,
                    MAX_BODY_BYTES)


def create_app(settings: ApiProcess | None = None) -> FastAPI:
    """Build the API for ``settings`` (the process's settings by default)."""
    app = FeedApi(title="Feed API", version="1.0.0", lifespan=lifespan,
                  openapi_url="/openapi.json", docs_url="/docs", redoc_url=None,
                  telemetry=NO_OTEL)
    settings = settings or load(ApiProcess)
    app.state.settings = settings
    kafka_failover.install(settings.kafka_failed_broker_hold_s)
    app.state.metrics = ApiMetrics()
    app.state.readiness = ReadinessChecks()
    install_problem_handlers(app)
    for router in ROUTERS:
        app.include_router(router)
    app.mount("/static", StaticFiles(directory=web.WEB), name="static")
    return app
