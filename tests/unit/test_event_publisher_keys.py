"""``EventPublisher.send_keyed`` puts a key on the partition ``AIOKafkaProducer.send``
would: the default partitioner's murmur2, here with a cache in front of it."""
from __future__ import annotations

from aiokafka.partitioner import DefaultPartitioner
from hypothesis import given
from hypothesis import strategies as st

from services.shared.worker.event_publisher import key_partitioner, partition_of


@given(st.binary(min_size=1, max_size=40), st.integers(min_value=1, max_value=64))
def test_a_key_lands_where_the_default_partitioner_puts_it(key: bytes, count: int) -> None:
    partitions = list(range(count))
    expected = DefaultPartitioner()(key, partitions, partitions)
    assert partition_of(key, partitions) == expected
    assert key_partitioner(key, partitions, partitions) == expected  # what send() uses


@given(st.integers(min_value=1, max_value=2**63 - 1))
def test_reader_keys_hash_the_same_cached_or_not(reader: int) -> None:
    key = f'"{reader}"'.encode()  # an inbox event's key (feed_events.encode)
    partitions = [0, 1, 2]
    first = partition_of(key, partitions)
    assert partition_of(key, partitions) == first == DefaultPartitioner()(key, partitions, partitions)


def test_an_aiokafka_without_the_accumulator_parts_gets_one_send_per_record() -> None:
    import asyncio

    from services.shared.settings import Settings
    from services.shared.worker.event_publisher import EventPublisher

    class Producer:  # no _message_accumulator: another aiokafka
        def __init__(self) -> None:
            self.sent: list[tuple[str, bytes, bytes]] = []

        async def send(self, topic, value=None, key=None, headers=None):
            self.sent.append((topic, key, value))
            fut = asyncio.get_running_loop().create_future()
            fut.set_result(None)
            return fut

    async def main() -> tuple[int, list]:
        publisher = EventPublisher(Settings())
        producer = Producer()
        publisher._producer = producer  # type: ignore[assignment]
        futures = await publisher.send_keyed("t", [(b'"1"', b"a"), (b'"2"', b"b")])
        return len(futures), producer.sent

    count, sent = asyncio.run(main())
    assert count == 2 and sent == [("t", b'"1"', b"a"), ("t", b'"2"', b"b")]
