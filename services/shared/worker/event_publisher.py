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
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Awaitable, Iterable, Iterator, Sequence

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError, KafkaTimeoutError

if TYPE_CHECKING:
    from aiokafka.structs import RecordMetadata

from services.shared.settings import Settings

# One batch can leave this many bytes per partition waiting while that partition has no
# reachable leader before ``send`` blocks (aiokafka keeps one open batch per partition
# and waits for it to drain once full; 16 KB is ~100 inbox events). Under the broker's
# message.max.bytes (1 MiB) and aiokafka's max_request_size (1 MiB).
MAX_BATCH_BYTES = 256 * 1024

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

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._producer: AIOKafkaProducer | None = None

    async def start(self) -> None:
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self._settings.kafka_bootstrap, acks="all",
            enable_idempotence=True, max_batch_size=MAX_BATCH_BYTES,
            # 5 ms lets a fan-out's events share batches without adding visible latency.
            linger_ms=5, request_timeout_ms=self._settings.kafka_request_timeout_ms)
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
