"""The ranker worker: likes (CDC) and rank-feature events into per-post rank keys, and
``<prefix>.rank-key-moves`` when a key moves far enough for the post's rows to follow.

The ``likes`` agent writes the like copy and re-publishes the change keyed by the post to
``<prefix>.like-counts``; the ``like_counts`` agent is the like counts' one writer (one
plain batch per post and batch, services/shared/worker/count_owner.py) and rescores the
posts whose counts it wrote.

Same delivery rules as the fan-out (services/shared/worker/batch_consumer.py, poison_guard.py): batches with keys
applied concurrently and each key in order, manual acks after effects, bounded retries
then ``<topic>.dlq``, transient store errors retried then the worker stops without
committing. Each agent rescores the posts its batch touched once, before the ack.
"""
from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from typing import Awaitable, Callable

import faust

from services.shared.contracts import edge_counts
from services.shared.contracts.envelope import parse_change
from services.shared.contracts.rank_moves import RankKeyMoved
from services.shared.contracts.rank_moves import encode as encode_move
from services.shared.contracts.topics import (cdc_topic, like_counts_topic, rank_features_topic,
                                              rank_moves_topic, serving_changes_topic)
from services.shared.settings import RankerProcess
from services.shared.clients import cql
from services.shared.stores.counted_edges import CountedEdges
from services.shared.stores.cql_async import TRANSIENT_STORE_ERRORS, CqlRunner, use_plain_tuples
from services.shared.stores.store_health import watch_cassandra
from services.shared.stores.store_pressure import StorePressure
from services.shared.worker.batch_consumer import (ConsumerLag, consume_in_batches,
                                                   refresh_lag_periodically)
from services.shared.worker.count_owner import CountOwner
from services.shared.worker.event_publisher import EventPublisher, delivered
from services.shared.worker.faust_app import (OpenedOnce, RawMessage, build_faust_app, raw_topic,
                                              tune_worker_process)
from services.shared.worker.notices import Notices
from services.shared.worker.poison_guard import GuardedProcessing, Handler

from .features import parse_feature_event
from .rank_keys import RankKeys
from .store import LIKE_EDGES, RankStore


@dataclass
class RankerPorts:
    store: RankStore
    guard: GuardedProcessing
    lag: ConsumerLag
    publisher: EventPublisher
    like_counts: CountedEdges


async def open_ports(settings: RankerProcess) -> RankerPorts:
    session = await asyncio.get_running_loop().run_in_executor(
        None, functools.partial(cql.session, settings, timeout=settings.worker_store_timeout_s))
    use_plain_tuples(session)
    watch_cassandra(session.cluster)
    publisher = EventPublisher(settings)
    await publisher.start()
    notices = Notices(publisher, serving_changes_topic(settings.topic_prefix))
    # The adaptive in-flight limit and retry budget of the process (store_pressure.py).
    pressure = StorePressure.from_settings(settings)
    pressure.export_metrics()
    runner = CqlRunner(session, permits=pressure.permits)
    store = RankStore(session, runner=runner, notices=notices)
    tune_worker_process(settings)
    return RankerPorts(store, GuardedProcessing(settings, publisher, TRANSIENT_STORE_ERRORS,
                                                retries=pressure.retries),
                       ConsumerLag(), publisher,
                       CountedEdges(session, runner, LIKE_EDGES, settings.counts_generation))


def create_app(settings: RankerProcess) -> faust.App:
    app = build_faust_app(settings, settings.ranker_group_id or f"{settings.topic_prefix}.ranker")
    ports = OpenedOnce(lambda: open_ports(settings))
    moves_topic = rank_moves_topic(settings.topic_prefix)
    counts_topic = like_counts_topic(settings.topic_prefix)

    def rank_keys(p: RankerPorts) -> RankKeys:
        async def publish_move(move: RankKeyMoved) -> None:
            key, value = encode_move(move)
            await delivered([await p.publisher.send(moves_topic, key, value)])

        async def publish_count(record: edge_counts.EdgeCounted) -> None:
            key, value = edge_counts.encode(record)
            await delivered([await p.publisher.send(counts_topic, key, value)])
        return RankKeys(p.store, publish_move, publish_count)

    async def consume(stream: faust.StreamT[bytes], p: RankerPorts, handle: Handler,
                      finish_batch: Callable[[], Awaitable[None]] | None) -> None:
        await consume_in_batches(app, stream, p.guard, p.lag, handle,
                                 max_batch=settings.consumer_batch_max,
                                 within_s=settings.consumer_batch_within_s,
                                 keys_in_flight=settings.ranker_keys_in_flight,
                                 max_unacked=settings.consumer_max_unacked,
                                 finish_batch=finish_batch)

    @app.agent(raw_topic(app, cdc_topic("likes", settings.topic_prefix)), name="likes")
    async def likes(stream: faust.StreamT[bytes]) -> None:
        p = await ports.get()
        keys = rank_keys(p)

        async def handle(msg: RawMessage) -> None:
            change = parse_change(msg.key, msg.value)
            if change is not None:
                await keys.on_like_changed(change)

        await consume(stream, p, handle, None)  # nothing to rescore: the counts move later

    @app.agent(raw_topic(app, counts_topic), name="like_counts")
    async def like_counts(stream: faust.StreamT[bytes]) -> None:
        p = await ports.get()
        keys = rank_keys(p)
        owner = CountOwner(p.like_counts, settings.ranker_keys_in_flight, applied=keys.count_written)

        async def finish_batch() -> None:
            await owner.apply()
            await keys.rescore_pending()

        await consume(stream, p, owner.take, finish_batch)

    @app.agent(raw_topic(app, rank_features_topic(settings.topic_prefix)), name="rank_features")
    async def rank_features(stream: faust.StreamT[bytes]) -> None:
        p = await ports.get()
        keys = rank_keys(p)

        async def handle(msg: RawMessage) -> None:
            update = parse_feature_event(msg.value)
            if update is not None:
                await keys.on_features_observed(update)

        await consume(stream, p, handle, keys.rescore_pending)

    refresh_lag_periodically(app, lambda: ports.opened.lag if ports.opened is not None else None)

    return app
