"""This process's consumer of ``<prefix>.serving-changes``, feeding the ``ServingCache``.

No consumer group and nothing committed, like the stream's consumer: every API process
is assigned every partition and starts at the end, after clearing its cache (a notice
before the start offsets is already visible to any read the empty cache makes). The
cache is usable only while this consumer is live: positioned, every partition answered
a fetch within ``cache_max_silence_s``, and fewer than ``MAX_BEHIND`` notices
fetched but not applied. Any failure makes the cache stand aside (reads go to
Cassandra) until the restarted consumer is positioned again.

A notice that cannot be parsed cannot say what to drop, so it drops everything (counted
and logged); every API process reads the same record, so it is not dead-lettered here.

``ApiNotices`` is the other direction: the notices of what the API itself stores and
every process caches (a reader's preferences), published and acknowledged before the
request that stored it answers; and, on the same producer, ``reader_returned`` on
``<prefix>.reader-events`` (a reader the fan-out stopped writing for is back, feed/activity.py).
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Iterator
from datetime import datetime, timezone

from fastapi import FastAPI
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from services.shared.clients import kafka
from services.shared.contracts import reader_events
from services.shared.contracts.serving_changes import ServingChange, parse
from services.shared.contracts.topics import reader_events_topic, serving_changes_topic
from services.shared.settings import ApiProcess
from services.shared.worker.event_publisher import EventPublisher
from services.shared.worker.kafka_consumers import restart_delay, wait_for_assignment
from services.shared.worker.notices import Notices

from .serving_cache import ServingCache

log = logging.getLogger(__name__)

MAX_RECORDS = 1000
# A fetch long-polls this long on an idle topic: several answers per silence limit.
FETCH_WAIT_MS = 250
# Notices fetched but not yet applied beyond which the cache stands aside (a burst
# after a pause; applying 1,000 takes about a millisecond).
MAX_BEHIND = 1000


class NoticeStats:
    def __init__(self) -> None:
        self.applied = 0
        self.malformed = 0
        self.restarts = 0


async def consume_notices(cache: ServingCache, settings: ApiProcess, stats: NoticeStats) -> None:
    """Run until cancelled: notices -> cache, restarting the consumer on failure."""
    topic = serving_changes_topic(settings.topic_prefix)
    failures = 0
    silence_ms = settings.cache_max_silence_s * 1000
    while True:
        consumer = kafka.aio_consumer(settings, topic, group_id=None,
                                      enable_auto_commit=False, auto_offset_reset="latest",
                                      fetch_max_wait_ms=FETCH_WAIT_MS,
                                      request_timeout_ms=settings.kafka_request_timeout_ms,
                                      client_id=f"feed-api-notices-{os.getpid()}")
        try:
            await consumer.start()
            partitions = await wait_for_assignment(consumer, [topic])
            await consumer.seek_to_end(*partitions)
            # Pinned now, before the cache goes live.
            cache.go_live({tp.partition: await consumer.position(tp) for tp in partitions})
            failures = 0
            while True:
                batches = await consumer.getmany(timeout_ms=FETCH_WAIT_MS, max_records=MAX_RECORDS)
                for tp, records in batches.items():
                    for record in records:
                        _apply(cache, stats, record.value)
                    if records:
                        cache.applied[tp.partition] = records[-1].offset + 1
                now_ms = time.time() * 1000
                current = True
                for tp in partitions:
                    polled = consumer.last_poll_timestamp(tp)
                    high = consumer.highwater(tp)
                    if (polled is None or now_ms - polled > silence_ms
                            or (high is not None and high - await consumer.position(tp) > MAX_BEHIND)):
                        current = False
                        break
                if current:
                    cache.heard()
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - the cache stands aside; restart with backoff
            failures += 1
            stats.restarts += 1
            cache.stand_aside()
            log.exception("serving-changes consumer failed (attempt %d); cache bypassed", failures)
            await asyncio.sleep(restart_delay(failures))
        finally:
            cache.stand_aside()
            await consumer.stop()


def _apply(cache: ServingCache, stats: NoticeStats, value: bytes | None) -> None:
    try:
        change = parse(value)
    except Exception:  # noqa: BLE001 - unknown scope: drop everything
        stats.malformed += 1
        log.warning("malformed serving-changes notice: cache cleared", exc_info=True)
        cache.clear()
        return
    if change is not None:
        cache.apply(change)
        stats.applied += 1


class CacheCollector:
    """Prometheus view of the cache (read at scrape time, nothing on the request path)."""

    def __init__(self, cache: ServingCache, stats: NoticeStats) -> None:
        self._cache = cache
        self._stats = stats

    def collect(self) -> Iterator[Metric]:  # prometheus_client's collector protocol
        cache = self._cache
        lookups = CounterMetricFamily("feed_cache_lookups", "Serving-cache lookups by kind and outcome",
                                      labels=("kind", "outcome"))
        for kind, n in cache.hits.items():
            lookups.add_metric((kind, "hit"), n)
        for kind, n in cache.misses.items():
            lookups.add_metric((kind, "miss"), n)
        yield lookups
        yield CounterMetricFamily("feed_cache_stale_fills", "Reads not cached because a notice "
                                  "arrived while they ran", value=cache.stale_fills)
        yield CounterMetricFamily("feed_cache_stale_served", "Post states served from the "
                                  "stood-aside cache because their read failed",
                                  value=cache.stale_served)
        notices = CounterMetricFamily("feed_cache_notices", "serving-changes notices by outcome",
                                      labels=("outcome",))
        notices.add_metric(("applied",), self._stats.applied)
        notices.add_metric(("malformed",), self._stats.malformed)
        yield notices
        yield CounterMetricFamily("feed_cache_consumer_restarts",
                                  "Restarts of the serving-changes consumer", value=self._stats.restarts)
        yield GaugeMetricFamily("feed_cache_usable", "1 while the serving cache answers reads",
                                value=1 if cache.usable else 0)
        entries = GaugeMetricFamily("feed_cache_entries", "Serving-cache entries by kind",
                                    labels=("kind",))
        entries.add_metric(("post",), len(cache.posts))
        entries.add_metric(("graph",), len(cache.graphs))
        entries.add_metric(("timeline",), len(cache.timelines))
        entries.add_metric(("inbox",), len(cache.inboxes))
        entries.add_metric(("preferences",), len(cache.preferences))
        yield entries


class ApiNotices:
    """A ``ChangeSink`` for the API's own writes, and the publisher of its reader events.
    Its producer (idempotent, acks=all) is started by the first event, so a process that
    publishes nothing opens no connection; a failed start is tried again by the next one."""

    def __init__(self, settings: ApiProcess) -> None:
        self._publisher = EventPublisher(settings)
        self._notices = Notices(self._publisher, serving_changes_topic(settings.topic_prefix))
        self._reader_events = reader_events_topic(settings.topic_prefix)
        self._started: asyncio.Task[None] | None = None

    async def _start(self) -> None:
        if self._started is None:
            self._started = asyncio.get_running_loop().create_task(self._publisher.start())
        try:
            await asyncio.shield(self._started)
        except Exception:
            self._started = None
            raise

    async def changed(self, change: ServingChange) -> None:
        await self._start()
        await self._notices.changed(change)

    async def reader_returned(self, reader_id: int) -> None:
        """Tell the fan-out a reader it stopped writing for is back; returns once the
        brokers have the event (acks=all)."""
        await self._start()
        event = reader_events.ReaderReturned(reader_id, datetime.now(timezone.utc))
        key, value = reader_events.encode(event)
        await (await self._publisher.send(self._reader_events, key, value))

    async def close(self) -> None:
        if self._started is not None and self._started.done() and not self._started.exception():
            await self._publisher.stop()


def register_collector(registry: CollectorRegistry, cache: ServingCache, stats: NoticeStats) -> None:
    registry.register(CacheCollector(cache, stats))


async def run_notice_consumer(app: FastAPI) -> None:
    """Background task of the app: no-op when the cache is off."""
    cache: ServingCache | None = getattr(app.state, "serving_cache", None)
    if cache is None:
        return
    await consume_notices(cache, app.state.settings, app.state.notice_stats)
