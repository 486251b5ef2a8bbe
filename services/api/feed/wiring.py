"""Opening and closing the read path's clients in the app's lifespan.

``open_read_path(app)`` connects the Cassandra session and puts into ``app.state``:
``cassandra`` (the session; ``app.py`` registers its readiness check), ``feed``
(``FeedReader``, recording reads and regenerating returning inactive readers' inboxes,
activity.py, unless ``inactive_after`` is 0), ``feed_metrics``, the stream's
``stream_hub``, ``stream_gate`` and ``stream_leases``, and (unless ``feed_cache_enabled``
is off) the ``serving_cache``, whose notice consumer is another background task
(``notices.run_notice_consumer``). It registers the ``feed_stream`` readiness check (the
hub's Kafka consumer has pinned its start offsets). The consumer itself runs as one of
the app's ``BACKGROUND_TASKS`` (``stream.consumer.run_stream_consumer``).
"""
from __future__ import annotations

import asyncio

from fastapi import FastAPI

from services.common import cql
from services.common.activity import ActivityStore, Window
from services.common.cql_async import CqlRunner
from services.common.settings import Settings
from services.common.store_health import watch_cassandra

from ..stream.gate import EligibilityGate
from ..stream.hub import StreamHub
from ..stream.leases import StreamLeases
from .activity import InboxRebuilder, ReaderActivity
from .bodies import BodyCache, PostCopies
from .metrics import FeedMetrics
from .notices import NoticeStats, register_collector
from .reader import FeedReader, utc_now
from .serving_cache import CachedFeedStore, ServingCache
from .store import FeedStore


def _build(app: FastAPI, settings: Settings) -> None:
    """Blocking part (connect, prepare statements): run in a thread."""
    session = cql.cluster(settings).connect(settings.cassandra_keyspace)  # TCP_NODELAY set there
    watch_cassandra(session.cluster, app.state.metrics.registry)
    metrics = FeedMetrics(app.state.metrics.registry)
    raw = FeedStore(session, settings.feed_store_timeout_s, settings.feed_max_following,
                    settings.feed_hedge_after_s,
                    on_hedge=lambda outcome: metrics.store_hedges.labels(outcome).inc())
    store: FeedStore = raw
    cache: ServingCache | None = None
    if settings.feed_cache_enabled:
        cache = ServingCache(posts=settings.feed_cache_posts, follows=settings.feed_cache_follows,
                             timelines=settings.feed_cache_timelines,
                             inboxes=settings.feed_cache_inboxes, ttl_s=settings.feed_cache_ttl_s,
                             max_silence_s=settings.feed_cache_max_silence_s)
        stats = NoticeStats()
        register_collector(app.state.metrics.registry, cache, stats)
        app.state.serving_cache = cache
        app.state.notice_stats = stats
        store = CachedFeedStore(raw, cache, settings.feed_max_following)  # type: ignore[assignment]
    app.state.cassandra = session
    app.state.feed_metrics = metrics
    app.state.feed_store = store
    copies = PostCopies(store, BodyCache(settings.feed_body_cache_size), cache)
    activity = None
    if settings.inactive_after.total_seconds() > 0:
        rebuilder = InboxRebuilder(session, settings)
        app.state.inbox_rebuilder = rebuilder
        activity = ReaderActivity(
            ActivityStore(session, CqlRunner(session)),
            Window(settings.inactive_after, settings.activity_resolution), rebuilder,
            settings.feed_regenerating_stale_s, timeout_s=2 * settings.feed_store_timeout_s,
            on_returned=lambda s: (metrics.readers_returned.inc(),
                                   metrics.regeneration_seconds.observe(s)),
            on_failure=metrics.activity_failures.inc)
    app.state.feed = FeedReader(store, copies, settings, metrics, utc_now, activity)
    # A lease outlives two missed heartbeats, so one slow refresh does not free the slot.
    app.state.stream_leases = StreamLeases(session, store, int(settings.stream_heartbeat_s * 2) + 5)


async def open_read_path(app: FastAPI) -> None:
    settings: Settings = app.state.settings
    await asyncio.to_thread(_build, app, settings)
    store: FeedStore = app.state.feed_store
    gate = EligibilityGate(store)

    async def followed(reader_id: int) -> frozenset[int]:
        return frozenset(await store.following(reader_id, settings.feed_max_following))

    hub = StreamHub(gate, followed, settings.stream_resume_buffer, settings.stream_resume_window_s)
    app.state.stream_gate = gate
    app.state.stream_hub = hub

    async def stream_ready() -> None:
        if not hub.ready.is_set():
            raise RuntimeError("stream consumer has not pinned its offsets yet")

    app.state.readiness.register("feed_stream", stream_ready)


async def close_read_path(app: FastAPI) -> None:
    reader = getattr(app.state, "feed", None)
    if reader is not None:
        await reader.close()  # queued snapshots stored before the session closes
    rebuilder = getattr(app.state, "inbox_rebuilder", None)
    if rebuilder is not None:
        await rebuilder.close()
    session = getattr(app.state, "cassandra", None)
    if session is not None:
        await asyncio.to_thread(session.cluster.shutdown)
