"""The ranker worker: likes (CDC) and rank-feature events into per-post rank keys.

Same delivery rules as the fan-out (services/common/kafka_io.py): manual acks after
effects, bounded retries then ``<topic>.dlq``, transient store errors retried then the
worker stops without committing.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass

import faust
from cassandra import OperationTimedOut, ReadTimeout, Unavailable, WriteTimeout
from cassandra.cluster import NoHostAvailable

from services.common import cql
from services.common.envelope import parse_change
from services.common.kafka_io import (ConsumerLag, EventPublisher, GuardedProcessing, OpenedOnce,
                                      RawMessage, build_faust_app, consume_with_manual_acks,
                                      raw_topic)
from services.common.settings import Settings
from services.common.topics import cdc_topic, rank_features_topic

from .features import parse_feature_event
from .rank_keys import RankKeys
from .store import RankStore

LAG_REFRESH_S = 5.0
TRANSIENT_STORE_ERRORS = (OperationTimedOut, ReadTimeout, WriteTimeout, Unavailable, NoHostAvailable)


@dataclass
class RankerPorts:
    rank_keys: RankKeys
    guard: GuardedProcessing
    lag: ConsumerLag


async def open_ports(settings: Settings) -> RankerPorts:
    session = await asyncio.get_running_loop().run_in_executor(None, cql.session, settings)
    publisher = EventPublisher(settings)
    await publisher.start()
    return RankerPorts(RankKeys(RankStore(session)),
                       GuardedProcessing(settings, publisher, TRANSIENT_STORE_ERRORS), ConsumerLag())


def create_app(settings: Settings) -> faust.App:
    app = build_faust_app(settings, settings.ranker_group_id or f"{settings.topic_prefix}.ranker")
    ports = OpenedOnce(lambda: open_ports(settings))

    @app.agent(raw_topic(app, cdc_topic("likes", settings.topic_prefix)), name="likes")
    async def likes(stream: faust.StreamT) -> None:
        p = await ports.get()

        async def handle(msg: RawMessage) -> None:
            change = parse_change(msg.key, msg.value)
            if change is not None:
                await p.rank_keys.on_like_changed(change)

        await consume_with_manual_acks(app, stream, p.guard, p.lag, handle)

    @app.agent(raw_topic(app, rank_features_topic(settings.topic_prefix)), name="rank_features")
    async def rank_features(stream: faust.StreamT) -> None:
        p = await ports.get()

        async def handle(msg: RawMessage) -> None:
            update = parse_feature_event(msg.value)
            if update is not None:
                await p.rank_keys.on_features_observed(update)

        await consume_with_manual_acks(app, stream, p.guard, p.lag, handle)

    @app.timer(interval=LAG_REFRESH_S)
    async def refresh_lag() -> None:
        if ports.opened is not None:
            ports.opened.lag.refresh(app)

    return app
