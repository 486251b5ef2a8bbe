"""``EventPublisher``: an idempotent aiokafka producer (acks=all) for output events and
dead letters; callers await delivery before acking the source message."""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Sequence

from aiokafka import AIOKafkaProducer

if TYPE_CHECKING:
    from aiokafka.structs import RecordMetadata

from .settings import Settings


class EventPublisher:
    """Publishes keyed JSON events and dead letters (idempotent producer, acks=all)."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._producer: AIOKafkaProducer | None = None

    async def start(self) -> None:
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self._settings.kafka_bootstrap, acks="all",
            enable_idempotence=True,
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
