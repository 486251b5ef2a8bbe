"""This process's own consumer of the fan-out's events, feeding the ``StreamHub``.

No consumer group: every API process is assigned every partition of
``<prefix>.inbox-events`` and ``<prefix>.author-events`` and starts at the end (events
before the process started are not news to anyone connected to it; a reconnecting
client catches up through its first page). Nothing is committed. The hub is marked
ready once the end offsets are pinned, which ``/readyz`` reports (``feed_stream``).

A bad message is counted and skipped; a consumer failure is logged, counted and the
consumer restarts after a capped, jittered backoff, while open streams keep their
heartbeats.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import random

from aiokafka import AIOKafkaConsumer
from fastapi import FastAPI

from services.common.settings import Settings
from services.common.topics import author_events_topic, inbox_events_topic

from ..feed.metrics import FeedMetrics
from .hub import StreamHub

log = logging.getLogger(__name__)

# Records per poll: bounds the eligibility checks in flight per batch.
MAX_RECORDS = 200
POLL_TIMEOUT_MS = 500
# Restart backoff after a consumer failure: 0.5 s doubling to 10 s, with jitter so the
# API processes do not reconnect in step after a broker restart.
BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 10.0
# Metadata for two topics arrives in one round trip; 15 s covers a broker that is still
# electing leaders after a restart.
ASSIGNMENT_DEADLINE_S = 15.0
ASSIGNMENT_POLL_S = 0.05


async def _pin_start_offsets(consumer: AIOKafkaConsumer, topics: list[str]) -> None:
    """Wait until every partition of ``topics`` is assigned and its position resolved.

    Without a group, aiokafka assigns every partition of the subscribed topics itself
    once it has their metadata; resolving each position now fixes "latest" to the
    offsets at start, so an event produced after readiness is never skipped.
    """
    deadline = asyncio.get_running_loop().time() + ASSIGNMENT_DEADLINE_S
    while {tp.topic for tp in consumer.assignment()} != set(topics):
        if asyncio.get_running_loop().time() > deadline:
            raise RuntimeError(f"no partitions assigned for {topics} (run the migrations)")
        await asyncio.sleep(ASSIGNMENT_POLL_S)
    for tp in consumer.assignment():
        await consumer.position(tp)


async def _dispatch(hub: StreamHub, topic: str, inbox_topic: str, value: bytes | None) -> str:
    if value is None:
        return "empty"
    event = json.loads(value)
    post_id = int(event["post_id"])
    author_id = int(event["author_id"])
    if topic == inbox_topic:
        sent = await hub.post_landed(int(event["reader_id"]), post_id, author_id)
    else:
        sent = await hub.author_posted(author_id, post_id)
    return "sent" if sent else "not_routed"


async def consume_into_hub(hub: StreamHub, settings: Settings, metrics: FeedMetrics) -> None:
    """Run until cancelled: Kafka -> hub, restarting the consumer on failure."""
    inbox_topic = inbox_events_topic(settings.topic_prefix)
    topics = [inbox_topic, author_events_topic(settings.topic_prefix)]
    failures = 0
    while True:
        consumer = AIOKafkaConsumer(*topics, bootstrap_servers=settings.kafka_bootstrap, group_id=None,
                                    enable_auto_commit=False, auto_offset_reset="latest",
                                    client_id=f"feed-api-stream-{os.getpid()}")
        try:
            await consumer.start()
            await _pin_start_offsets(consumer, topics)
            hub.ready.set()
            failures = 0
            while True:
                batches = await consumer.getmany(timeout_ms=POLL_TIMEOUT_MS,
                                                 max_records=MAX_RECORDS)
                records = [r for batch in batches.values() for r in batch]
                outcomes = await asyncio.gather(
                    *(_dispatch(hub, r.topic, inbox_topic, r.value) for r in records),
                    return_exceptions=True)
                for outcome in outcomes:
                    if isinstance(outcome, BaseException):
                        log.warning("bad fan-out event skipped: %r", outcome)
                        metrics.stream_events.labels("bad_event").inc()
                    else:
                        metrics.stream_events.labels(outcome).inc()
                hub.expire_idle()
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - restart with backoff, streams stay open
            failures += 1
            metrics.stream_consumer_errors.inc()
            log.exception("stream consumer failed (attempt %d); restarting", failures)
            delay = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (failures - 1))
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))
        finally:
            await consumer.stop()


async def run_stream_consumer(app: FastAPI) -> None:
    """Background task of the app (``BACKGROUND_TASKS``): no-op without a hub."""
    hub: StreamHub | None = getattr(app.state, "stream_hub", None)
    if hub is None:
        return
    await consume_into_hub(hub, app.state.settings, app.state.feed_metrics)
