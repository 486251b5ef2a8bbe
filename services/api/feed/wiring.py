"""Opening and closing the read path's clients in the app's lifespan.

``open_read_path(app)`` connects the Cassandra session and puts into ``app.state``:
``cassandra`` (the session; ``app.py`` registers its readiness check), ``feed``
(``FeedReader``, recording reads and announcing returning inactive readers to the
fan-out, activity.py, unless ``inactive_after`` is 0), ``feed_metrics``, ``feed_store`` and
(unless ``cache_enabled`` is off) the ``serving_cache``, whose notice consumer is
one of the app's background tasks (``notices.run_notice_consumer``), and the
``visibility_fence`` (visibility/fence.py) that every page and stream event is judged after; its
log's first read starts here, and ``run_fence_reader`` (another background task) sees it
through, then keeps an idle process's copy forgetting what the verifier released; the
``visibility_log`` readiness check answers ready once a read has reached the log's head;
and ``user_lists`` (``UserLists``: an author's posts, followers, following) on the same
store, copies and fence. The stream's parts are opened on that store by
``stream.wiring.open_stream``. ``like_counts`` (copies/likes.py) is the process's kept
like counts, which pages and ``GET /v1/posts/{id}`` share; ``names`` (copies/names.py) the
process's kept authors' names, which pages, post reads and timelines share.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

from fastapi import FastAPI

from services.shared.settings import ApiProcess
from services.shared.clients import cql
from services.shared.stores.activity import ActivityStore, Window
from services.shared.stores.counted_edges import FOLLOW_EDGES, CountReads
from services.shared.stores.cql_async import CqlRunner
from services.shared.stores.follows import ReadPathFollowLists
from services.shared.stores.profiles import ProfileReads
from services.shared.stores.timelines import ReadPathTimelines
from services.shared.stores.store_health import watch_cassandra

from ..copies.accounts import AccountCopies
from ..copies.bodies import BodyCache, PostCopies
from ..copies.likes import (LikeCounts, PageLikes, ReaderLikes, pool_liked_reader,
                           pool_recent_reader)
from ..copies.names import Names, store_reader
from ..copies.notices import ApiNotices, NoticeStats, register_collector
from ..copies.serving_cache import CachedFeedStore, ServingCache
from ..copies.store import FeedPort, FeedStore
from ..snapshots.cursor import CursorKeys
from ..visibility.fence import FenceMetrics, FenceUnavailable, VisibilityFence
from ..visibility.window_check import pool_window_check

from .activity import ReaderActivity
from .metrics import FeedMetrics
from .reader import FeedReader, utc_now
from .reuse import SnapshotReuse
from .user_lists import UserLists

log = logging.getLogger(__name__)


def _build(app: FastAPI, settings: ApiProcess,
           user_gone: Callable[[int], Awaitable[bool]]) -> None:
    """Blocking part (connect, prepare statements): run in a thread."""
    session = cql.cluster(settings).connect(settings.cassandra_keyspace)  # TCP_NODELAY set there
    watch_cassandra(session.cluster, app.state.metrics.registry)
    metrics = FeedMetrics(app.state.metrics.registry)
    raw = FeedStore(session, settings.store_timeout_s, settings.max_following,
                    settings.hedge_after_s,
                    on_hedge=lambda outcome: metrics.store_hedges.labels(outcome).inc())
    store: FeedPort = raw
    cache: ServingCache | None = None
    if settings.cache_enabled:
        cache = ServingCache(posts=settings.cache_posts, follows=settings.cache_follows,
                             timelines=settings.cache_timelines,
                             inboxes=settings.cache_inboxes,
                             preferences=settings.cache_preferences,
                             ttl_s=settings.cache_ttl_s,
                             max_silence_s=settings.cache_max_silence_s,
                             stale_if_error_s=settings.cache_stale_if_error_s)
        stats = NoticeStats()
        register_collector(app.state.metrics.registry, cache, stats)
        app.state.serving_cache = cache
        app.state.notice_stats = stats
        store = CachedFeedStore(raw, cache, settings.max_following)
    app.state.cassandra = session
    app.state.feed_metrics = metrics
    app.state.feed_store = store
    copies = PostCopies(store, BodyCache(settings.body_cache_size), cache)
    # The notices of what this process stores and every process caches (preferences),
    # and the reader events (returns): one producer, started by the first of them.
    notices = ApiNotices(settings)
    app.state.api_notices = notices
    activity = None
    if settings.inactive_after.total_seconds() > 0:
        activity = ReaderActivity(
            ActivityStore(session, CqlRunner(session)),
            Window(settings.inactive_after, settings.activity_resolution), notices.reader_returned,
            settings.regenerating_stale_s, timeout_s=2 * settings.store_timeout_s,
            on_returned=metrics.readers_returned.inc, on_failure=metrics.activity_failures.inc)
    fence = VisibilityFence(settings, settings.visibility_timeout_s,
                            FenceMetrics(app.state.metrics.registry),
                            max_entries=settings.visibility_max_entries,
                            window_check=pool_window_check(app.state.pg))
    app.state.visibility_fence = fence
    reuse = None
    if cache is not None and settings.snapshot_reuse_s > 0:
        # At most half the snapshot's TTL: a reused snapshot's next pages still have time.
        reuse = SnapshotReuse(cache, min(settings.snapshot_reuse_s, settings.snapshot_ttl_s / 2),
                              settings.snapshot_reuse_size)
    # Authors' account states, kept account_cache_s and dropped by notices, used past the
    # unheard TTL only while the notices are heard (no serving cache: never).
    if cache is not None:
        serving = cache
        accounts = AccountCopies(session, raw, settings.account_cache_s, live=lambda: serving.usable)
        cache.account_listeners.append(accounts.drop)
    else:
        accounts = AccountCopies(session, raw)
    app.state.account_copies = accounts
    like_counts = LikeCounts(store, settings.like_count_cache_s)
    app.state.like_counts = like_counts
    # Authors' names (the user_profiles copy), kept name_cache_s and dropped by notices.
    names = Names(store_reader(raw.run, ProfileReads(session).names_in), settings.name_cache_s)
    if cache is not None:
        cache.profile_listeners.append(names.drop)
    app.state.names = names
    # The posts each reader liked, kept liked_cache_s; dropped by the reader's own like in
    # this process and by the likers notice in the others, so kept only where notices are
    # heard (the serving cache consumes them).
    reader_likes = ReaderLikes(pool_recent_reader(app.state.pg), pool_liked_reader(app.state.pg),
                               settings.liked_cache_s if cache is not None else 0.0,
                               settings.liked_horizon_s)
    if cache is not None:
        cache.liker_listeners.append(reader_likes.drop)
    app.state.reader_likes = reader_likes
    app.state.feed = FeedReader(store, copies, settings, metrics, utc_now, activity, reuse, notices,
                                fence, likes=PageLikes(like_counts, reader_likes.liked_among,
                                                      reader_likes.held_among),
                                accounts=accounts, names=names)
    app.state.user_lists = UserLists(
        store, raw, copies, fence, CursorKeys.parse(settings.cursor_keys.get_secret_value()),
        ReadPathTimelines(session), ReadPathFollowLists(session, page=settings.follow_list_max),
        CountReads(session, FOLLOW_EDGES), settings.follow_list_max,
        lambda: int(utc_now().timestamp() * 1000), accounts, user_gone)


async def open_read_path(app: FastAPI, user_gone: Callable[[int], Awaitable[bool]]) -> None:
    """The read path on ``app.state``. ``user_gone``: whether an account the copies hide is
    deleted or suspended in Postgres (asked by the user lists; api/stores/social.py)."""
    settings: ApiProcess = app.state.settings
    await asyncio.to_thread(_build, app, settings, user_gone)
    fence: VisibilityFence = app.state.visibility_fence
    fence.arrive()  # the log's first read goes out now, not with the first page

    async def fence_ready() -> None:
        if not fence.ready:
            raise RuntimeError(f"the visibility log is being read (head {fence.head}, "
                               f"{len(fence.changes)} entries so far)")
    app.state.readiness.register("visibility_log", fence_ready)


async def run_fence_reader(app: FastAPI) -> None:
    """Background task: the visibility log read until a read reaches its head (a failed
    chunk is retried), then once a ``FEED_VISIBILITY_IDLE_READ_S``, so that a process no
    page reaches still forgets what the verifier released, and sees a restore."""
    settings: ApiProcess = app.state.settings
    fence: VisibilityFence = app.state.visibility_fence
    while True:
        try:
            await fence.sync()
        except FenceUnavailable:
            log.warning("the visibility log could not be read; trying again", exc_info=True)
            await asyncio.sleep(1.0)
            continue
        await asyncio.sleep(settings.visibility_idle_read_s)


async def close_read_path(app: FastAPI) -> None:
    reader = getattr(app.state, "feed", None)
    if reader is not None:
        await reader.close()  # queued snapshots stored before the session closes
    fence = getattr(app.state, "visibility_fence", None)
    if fence is not None:
        await fence.close()
    notices = getattr(app.state, "api_notices", None)
    if notices is not None:
        await notices.close()
    session = getattr(app.state, "cassandra", None)
    if session is not None:
        await asyncio.to_thread(session.cluster.shutdown)
