"""``EventPublisher``: an idempotent aiokafka producer (acks=all) for output events and
dead letters; callers await delivery before acking the source message.

``delivered`` is how a handler waits for its events. Inside ``deferred_deliveries()``
(an agent's batch, services/shared/worker/batch_consumer.py) it only collects them: the batch
is acked once they are acknowledged, while the agent applies the next batches. A broker
that stops answering (cut off, or its partitions between leaders) then holds back the
acks of the batches in flight, not the agent: the rows of the posts behind it are
written meanwhile. Outside a batch (jobs, tests) ``delivered`` awaits them at once.
"""
from __future__ import annotations

import asyncio
import copy
import functools
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Awaitable, Iterable, Iterator, Sequence

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError, KafkaTimeoutError, ProducerClosed
from aiokafka.partitioner import DefaultPartitioner, murmur2
from aiokafka.structs import TopicPartition

if TYPE_CHECKING:
    from aiokafka.structs import RecordMetadata

from services.shared.clients import kafka
from services.shared.settings import KafkaSettings

# One batch can leave this many bytes per partition waiting while that partition has no
# reachable leader before ``send`` blocks (aiokafka keeps one open batch per partition
# and waits for it to drain once full; 16 KB is ~100 inbox events). Under the broker's
# message.max.bytes (1 MiB) and aiokafka's max_request_size (1 MiB).
MAX_BATCH_BYTES = 256 * 1024

# Keys whose murmur2 hash ``send_keyed`` remembers: the fan-out's keys are reader ids, and
# the same readers come back post after post (pure-Python murmur2 is ~4 µs a key).
KEY_HASH_CACHE = 1 << 17

_DEFERRED: ContextVar[list[asyncio.Future[Any]] | None] = ContextVar("feed_deferred_deliveries",
                                                                      default=None)


def retriable_kafka_error(exc: BaseException) -> bool:
    """A Kafka client error that says "try again" (a timeout, a leader moving, a broker
    not reachable), as opposed to a bad record: the message is fine, the cluster is not."""
    # aiokafka marks its own client-side timeout (``send`` waited for metadata or for a
    # full batch to drain) not retriable; it is the same cluster-side condition.
    return isinstance(exc, KafkaTimeoutError) or (
        isinstance(exc, KafkaError) and bool(getattr(exc, "retriable", False)))


@contextmanager
def deferred_deliveries() -> Iterator[list[asyncio.Future[Any]]]:
    """Within this block (and the tasks it starts), ``delivered`` collects into the
    yielded list instead of waiting; the caller awaits the list before acking."""
    pending: list[asyncio.Future[Any]] = []
    token = _DEFERRED.set(pending)
    try:
        yield pending
    finally:
        _DEFERRED.reset(token)


async def delivered(futures: Iterable[asyncio.Future[Any]]) -> None:
    """Wait until the broker acknowledged every one of ``futures`` (the first error is
    raised after all settled), or leave them to the enclosing ``deferred_deliveries``."""
    pending = _DEFERRED.get()
    if pending is not None:
        pending.extend(futures)
        return
    await settle(list(futures))


@functools.lru_cache(maxsize=KEY_HASH_CACHE)
def key_hash(key: bytes) -> int:
    """aiokafka's (and the Java client's) default partitioner hash of a record key."""
    hashed: int = murmur2(key) & 0x7FFFFFFF
    return hashed


def partition_of(key: bytes, partitions: Sequence[int]) -> int:
    """The partition of ``key`` among ``partitions`` (sorted): aiokafka's default
    partitioner (the Java client's too), whose hash ``key_hash`` caches."""
    return partitions[key_hash(key) % len(partitions)]


def key_partitioner(key: bytes | None, all_partitions: list[int], available: list[int]) -> int:
    """The publisher's partitioner, for ``send`` and ``send_keyed`` alike: the default
    one, with the hash of a key cached."""
    if key is None:
        chosen: int = DefaultPartitioner()(key, all_partitions, available)
        return chosen
    return partition_of(key, all_partitions)


async def settle(futures: Sequence[Awaitable[Any]]) -> None:
    """Await ``futures`` (or any independent steps) together; the first error is raised
    after all settled."""
    if not futures:
        return
    results = await asyncio.gather(*futures, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result


class EventPublisher:
    """Publishes keyed JSON events and dead letters (idempotent producer, acks=all)."""

    def __init__(self, settings: KafkaSettings) -> None:
        self._settings = settings
        self._producer: AIOKafkaProducer | None = None
        # The producer's accumulator, where ``send_keyed`` queues its batches; None where
        # this aiokafka lacks what ``_queue`` uses (records then go one by one).
        self._accumulator: Any = None

    async def start(self) -> None:
        # Brokers, SASL and TLS from the factory: the workers publish through this
        # producer, not faust's, so it must carry the same credentials faust's consumer has.
        self._producer = kafka.aio_producer(
            self._settings, acks="all",
            enable_idempotence=True, max_batch_size=MAX_BATCH_BYTES, partitioner=key_partitioner,
            # 5 ms lets a fan-out's events share batches without adding visible latency.
            linger_ms=5, request_timeout_ms=self._settings.kafka_request_timeout_ms)
        accumulator = getattr(self._producer, "_message_accumulator", None)
        if all(hasattr(accumulator, name) for name in _ACCUMULATOR_PARTS):
            self._accumulator = accumulator
        await self._producer.start()

    async def stop(self) -> None:
        if self._producer is not None:
            await self._producer.stop()

    async def send(self, topic: str, key: bytes | None, value: bytes | None,
                   headers: Sequence[tuple[str, bytes]] = ()) -> asyncio.Future[RecordMetadata]:
        """Enqueue; the returned future resolves when the broker acknowledged it."""
        assert self._producer is not None, "EventPublisher.start() was not awaited"
        delivery: asyncio.Future[RecordMetadata] = await self._producer.send(
            topic, value=value, key=key, headers=list(headers))
        return delivery

    async def send_keyed(self, topic: str, records: Sequence[tuple[bytes, bytes]],
                         ) -> list[asyncio.Future[Any]]:
        """Enqueue many keyed records (no headers), each on the partition ``send`` would
        pick for its key, as one record batch per partition; the returned futures (a
        few, not one per record) resolve when the broker acknowledged their batch.

        A record costs an append to aiokafka's C batch builder and a cached hash instead
        of ``send``'s future and pure-Python hash. Batches are queued as ``send`` queues
        its full ones (``_append_batch``: idempotent, acks=all, in order, never waiting;
        the public ``send_batch`` waits for the previous produce's ack: docs/reliability.md,
        "Inbox events batched per partition"). Without that accumulator, records go one by
        one through ``send``."""
        producer = self._producer
        assert producer is not None, "EventPublisher.start() was not awaited"
        if not records:
            return []
        accumulator = self._accumulator
        if accumulator is None:
            return [await self.send(topic, key, value) for key, value in records]
        partitions = sorted(await producer.partitions_for(topic))
        by_partition: dict[int, list[tuple[bytes, bytes]]] = {}
        for key, value in records:
            by_partition.setdefault(partition_of(key, partitions), []).append((key, value))
        futures: list[asyncio.Future[Any]] = []
        for partition, batch_records in by_partition.items():
            tp = TopicPartition(topic, partition)
            batch = producer.create_batch()
            for key, value in batch_records:
                if batch.append(key=key, value=value, timestamp=None) is None:
                    # Full (MAX_BATCH_BYTES): queue it and start the next.
                    futures.append(_queue(accumulator, batch, tp))
                    batch = producer.create_batch()
                    if batch.append(key=key, value=value, timestamp=None) is None:
                        raise ValueError(f"a record of {len(key) + len(value)} bytes does "
                                         f"not fit a batch of {MAX_BATCH_BYTES}")
            futures.append(_queue(accumulator, batch, tp))
        return futures


# What ``_queue`` uses of aiokafka's ``MessageAccumulator`` (0.14), all private.
_ACCUMULATOR_PARTS = ("_append_batch", "_closed", "_exception")


def _queue(accumulator: Any, batch: Any, tp: TopicPartition) -> asyncio.Future[Any]:
    """Put a filled ``BatchBuilder`` at the end of ``tp``'s queue in aiokafka's
    accumulator, as ``MessageAccumulator.add_batch`` does once the queue is empty."""
    if accumulator._closed:
        raise ProducerClosed()
    if accumulator._exception is not None:
        raise copy.copy(accumulator._exception)
    queued: asyncio.Future[Any] = asyncio.shield(accumulator._append_batch(batch, tp).future)
    return queued
