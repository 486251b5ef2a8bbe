"""The fan-out worker: faust agents over the CDC topics of posts, follows and blocks.

One agent per topic (posts, follows, blocks), each processing its partitions in order;
acks are manual: a message is acked only after its effects (Cassandra rows, output
events, or a dead letter) are acknowledged, so the committed offset never passes work
that was not done (at-least-once; every effect is idempotent by write timestamp).

Moderation removal reaches the fan-out as a posts change (``visibility`` 0, written in
the same transaction as ``moderation_actions``), so that topic is not consumed here.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Awaitable, Callable

import faust

from services.common import cql
from services.common.envelope import ChangeRecord, parse_change
from services.common.kafka_io import (ConsumerLag, EventPublisher, GuardedProcessing, RawMessage,
                                      WorkerMustStop, build_faust_app, raw_message, raw_topic,
                                      stop_worker_without_commit)
from services.common.settings import Settings
from services.common.topics import cdc_topic

from .copies import CopyStore
from .cql_async import TRANSIENT_STORE_ERRORS, CqlRunner
from .inbox import InboxStore
from .post_events import PostFanout
from .relation_events import RelationChanges
from .tier_store import TierStore
from .tiering import CapacityEstimate, TierPolicy

log = logging.getLogger(__name__)

# How often the consumer-lag gauge is refreshed: well under a scrape interval.
LAG_REFRESH_S = 5.0


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class FanoutPorts:
    """Everything the agents need, created on the worker's event loop at start."""

    posts: PostFanout
    relations: RelationChanges
    guard: GuardedProcessing
    publisher: EventPublisher
    lag: ConsumerLag


def tier_policy(settings: Settings) -> TierPolicy:
    return TierPolicy(settings.freshness_target_s, settings.tier_promote_share,
                      settings.tier_demote_share, settings.tier_min_dwell_s)


async def open_ports(settings: Settings) -> FanoutPorts:
    session = cql.session(settings)
    runner = CqlRunner(session)
    copies = CopyStore(session, runner, settings.fanout_follower_page)
    inbox = InboxStore(session, runner, max_in_flight=settings.fanout_max_in_flight,
                       cap=settings.inbox_cap, trim_every=settings.inbox_trim_every)
    capacity = CapacityEstimate(settings.fanout_capacity_floor_rows_per_s,
                                settings.fanout_capacity_pinned_rows_per_s)
    tiers = TierStore(session, runner, tier_policy(settings), capacity, _utc_now)
    publisher = EventPublisher(settings)
    await publisher.start()
    return FanoutPorts(
        posts=PostFanout(copies, inbox, tiers, publisher, settings.topic_prefix),
        relations=RelationChanges(copies, inbox, publisher, settings.topic_prefix, _utc_now),
        guard=GuardedProcessing(settings, publisher, TRANSIENT_STORE_ERRORS),
        publisher=publisher, lag=ConsumerLag())


def create_app(settings: Settings) -> faust.App:
    app = build_faust_app(settings, settings.fanout_group_id or f"{settings.topic_prefix}.fanout")
    prefix = settings.topic_prefix
    ports: list[FanoutPorts] = []
    opening: list[asyncio.Lock] = []

    async def ready() -> FanoutPorts:
        """Open the ports once, on the worker's loop, whichever agent starts first."""
        if not opening:
            opening.append(asyncio.Lock())
        async with opening[0]:
            if not ports:
                ports.append(await open_ports(settings))
        return ports[0]

    def change_handler(apply: Callable[[FanoutPorts], Callable[[ChangeRecord], Awaitable[None]]],
                       p: FanoutPorts) -> Callable[[RawMessage], Awaitable[None]]:
        async def handle(msg: RawMessage) -> None:
            change = parse_change(msg.key, msg.value)
            if change is not None:  # None: the tombstone after a delete
                await apply(p)(change)
        return handle

    async def consume(stream: faust.StreamT, apply: Callable[[FanoutPorts], Callable]) -> None:
        p = await ready()
        handle = change_handler(apply, p)
        manual = stream.noack()
        async for event in manual.events():
            msg = raw_message(event)
            try:
                await p.guard.process(msg, handle)
            except WorkerMustStop as exc:
                await stop_worker_without_commit(app, exc)
            p.lag.processed(msg)
            await manual.ack(event)

    @app.agent(raw_topic(app, cdc_topic("posts", prefix)), name="posts")
    async def posts(stream: faust.StreamT) -> None:
        await consume(stream, lambda p: p.posts.on_post_changed)

    @app.agent(raw_topic(app, cdc_topic("follows", prefix)), name="follows")
    async def follows(stream: faust.StreamT) -> None:
        await consume(stream, lambda p: p.relations.on_follow_changed)

    @app.agent(raw_topic(app, cdc_topic("blocks", prefix)), name="blocks")
    async def blocks(stream: faust.StreamT) -> None:
        await consume(stream, lambda p: p.relations.on_block_changed)

    @app.timer(interval=LAG_REFRESH_S)
    async def refresh_lag() -> None:
        if ports:
            ports[0].lag.refresh(app)

    return app
