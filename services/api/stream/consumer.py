"""This process's own consumer of the fan-out's events, feeding the ``StreamHub``.

No consumer group: every API process is assigned every partition of
``<prefix>.author-events`` (one record per post made readable, not per inbox row, so a
process reads O(posts) whatever the audiences) and starts at the end (events before the
process started are not news to anyone connected to it; a reconnecting client catches up
through its first page). Nothing is committed. The hub is marked
ready once the end offsets are pinned, which ``/readyz`` reports (``feed_stream``).

A bad message is counted and skipped; a consumer failure is logged, counted and the
consumer restarts after a capped, jittered backoff, while open streams keep their
heartbeats. The process remembers the offset after the last event it handed to the hub;
a restarted consumer replays from there, or, when the gap is gone from the log or too
long (``restart_plan.py``), starts at the end and sends every open stream ``resync``.
Kafka never moves a position by itself (``auto_offset_reset="none"``): an offset out of
range is an error, hence a restart and that same decision, never a silent jump.
"""
from __future__ import annotations

import asyncio
import logging
import os

from aiokafka import AIOKafkaConsumer, TopicPartition
from fastapi import FastAPI

from services.shared.clients import kafka
from services.shared.contracts.feed_events import parse_author
from services.shared.contracts.topics import author_events_topic
from services.shared.settings import ApiProcess
from services.shared.worker.kafka_consumers import restart_delay, wait_for_assignment

from .hub import StreamHub
from .metrics import StreamMetrics
from .restart_plan import plan_restart

log = logging.getLogger(__name__)

# Records per poll: bounds the eligibility checks in flight per batch.
MAX_RECORDS = 200
POLL_TIMEOUT_MS = 500
# Longest gap a restarted consumer replays instead of telling streams to resync. An
# event nobody connected here is owed costs 15-20 us to dispatch (measured on the 2-core
# machine under a benchmark, for the per-row events these replaced; a post's event
# routed to no follower is a dict lookup), so 20,000 take under a second with the fetches: the
# events behind them wait less than the freshness target (1.5 s), and no client refetches.
# A longer gap (a consumer down for minutes under load) is cheaper as one resync.
MAX_REPLAY_EVENTS = 20_000


async def _position_consumer(consumer: AIOKafkaConsumer, topics: list[str],
                             consumed: dict[TopicPartition, int], hub: StreamHub,
                             metrics: StreamMetrics, max_replay: int) -> None:
    """Seek every partition: to the end on the first start, else per ``plan_restart``.

    Positions are explicit offsets read now, so an event produced after readiness is
    never skipped. ``consumed`` becomes the new starting offsets; on a resync the open
    streams are told only after the positions are fixed, so everything after the signal
    reaches them and everything before it is in Cassandra for the refetch they make.
    """
    partitions = await wait_for_assignment(consumer, topics)
    earliest = await consumer.beginning_offsets(partitions)
    latest = await consumer.end_offsets(partitions)
    plan = plan_restart(consumed, earliest, latest, max_replay)
    start = {tp: plan.seek_to.get(tp, latest[tp]) for tp in partitions}
    for tp, offset in start.items():
        consumer.seek(tp, offset)
    restarted = bool(consumed)
    consumed.clear()
    consumed.update(start)
    if plan.resync:
        told = hub.resync_all()
        metrics.stream_consumer_restarts.labels("resync").inc()
        log.warning("stream consumer restarted at the end (%s): %d open streams told to "
                    "resync", plan.reason, told)
    elif restarted:
        metrics.stream_consumer_restarts.labels("replayed").inc()
        log.info("stream consumer restarted: %s", plan.reason)


async def _dispatch(hub: StreamHub, value: bytes | None) -> str:
    """One record to the hub; a malformed one raises ``MalformedEnvelope`` (services/shared/
    contracts/feed_events.py), counted and skipped by the caller."""
    if value is None:
        return "empty"
    posted = parse_author(value)
    sent = await hub.author_posted(posted.author_id, posted.post_id)
    return "sent" if sent else "not_routed"


async def consume_into_hub(hub: StreamHub, settings: ApiProcess, metrics: StreamMetrics,
                           max_replay: int = MAX_REPLAY_EVENTS) -> None:
    """Run until cancelled: Kafka -> hub, restarting the consumer on failure."""
    topics = [author_events_topic(settings.topic_prefix)]
    # Per partition, the offset after the last event handed to the hub: where a restarted
    # consumer resumes. Kept across restarts of the consumer, for the life of the process.
    consumed: dict[TopicPartition, int] = {}
    failures = 0
    while True:
        consumer = kafka.aio_consumer(settings, *topics, group_id=None,
                                      enable_auto_commit=False, auto_offset_reset="none",
                                      request_timeout_ms=settings.kafka_request_timeout_ms,
                                      client_id=f"feed-api-stream-{os.getpid()}")
        try:
            await consumer.start()
            await _position_consumer(consumer, topics, consumed, hub, metrics, max_replay)
            hub.ready.set()
            failures = 0
            while True:
                batches = await consumer.getmany(timeout_ms=POLL_TIMEOUT_MS,
                                                 max_records=MAX_RECORDS)
                records = [r for batch in batches.values() for r in batch]
                outcomes = await asyncio.gather(
                    *(_dispatch(hub, r.value) for r in records),
                    return_exceptions=True)
                for outcome in outcomes:
                    if isinstance(outcome, BaseException):
                        log.warning("bad fan-out event skipped: %r", outcome)
                        metrics.stream_events.labels("bad_event").inc()
                    else:
                        metrics.stream_events.labels(outcome).inc()
                for tp, batch in batches.items():
                    if batch:
                        consumed[tp] = batch[-1].offset + 1
                hub.expire_idle()
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - restart with backoff, streams stay open
            failures += 1
            metrics.stream_consumer_errors.inc()
            log.exception("stream consumer failed (attempt %d); restarting", failures)
            await asyncio.sleep(restart_delay(failures))
        finally:
            await consumer.stop()


async def run_stream_consumer(app: FastAPI) -> None:
    """Background task of the app (``BACKGROUND_TASKS``): no-op without a hub."""
    hub: StreamHub | None = getattr(app.state, "stream_hub", None)
    if hub is None:
        return
    await consume_into_hub(hub, app.state.settings, app.state.stream_metrics)
