"""``EventPublisher.send_keyed`` against the real broker: every record arrives once, on the
partition ``send`` puts the same key on, in the order sent for each key."""
from __future__ import annotations

import asyncio
from collections import defaultdict

from confluent_kafka.admin import NewTopic

from services.shared.clients import kafka
from services.shared.settings import Settings
from services.shared.worker.event_publisher import MAX_BATCH_BYTES, EventPublisher
from tests.support.kafka_topics import read_topic_partitions


def _topics(settings: Settings, *names: str) -> None:
    admin = kafka.admin(settings)
    rf = min(3, len(admin.list_topics(timeout=10).brokers))
    for fut in admin.create_topics([NewTopic(n, 3, rf) for n in names]).values():
        fut.result()


def test_keyed_batches_land_where_send_puts_each_key(settings: Settings) -> None:
    batched, one_by_one = f"{settings.topic_prefix}.keyed", f"{settings.topic_prefix}.single"
    _topics(settings, batched, one_by_one)
    keys = [f'"{reader}"'.encode() for reader in range(10**12, 10**12 + 400)]
    # Two records a key, in two calls; the first holds more than one batch's bytes
    # (MAX_BATCH_BYTES) for every partition, so full batches are queued mid-call.
    first = [(k, b"1" + b"x" * (3 * MAX_BATCH_BYTES // len(keys) * 2)) for k in keys]
    second = [(k, b"2") for k in keys]

    async def main() -> int:
        publisher = EventPublisher(settings)
        await publisher.start()
        try:
            futures = await publisher.send_keyed(batched, first)
            futures += await publisher.send_keyed(batched, second)
            futures += [await publisher.send(one_by_one, k, b"") for k in keys]
            await asyncio.gather(*futures)
            return len(futures)
        finally:
            await publisher.stop()

    sent = asyncio.run(main())
    assert sent < 2 * len(keys)  # a few futures for the batched records, one per send
    got = read_topic_partitions(settings, batched)
    where = {key: p for key, _, p in read_topic_partitions(settings, one_by_one)}
    by_key: dict[bytes, list[tuple[bytes, int]]] = defaultdict(list)
    for key, value, partition in got:
        by_key[key].append((value[:1], partition))
    assert sorted(by_key) == sorted(keys)
    for key, seen in by_key.items():
        assert seen == [(b"1", where[key]), (b"2", where[key])], key
