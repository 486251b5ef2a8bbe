"""Reading a topic back whole, as a test checks what a worker published."""
from __future__ import annotations

import collections
import time
from typing import Any

from confluent_kafka import TopicPartition

from services.shared.clients import kafka
from services.shared.settings import KafkaSettings

READ_DEADLINE_S = 60


def _messages(settings: KafkaSettings, topic: str) -> list[Any]:
    """Every message in ``topic`` up to its end offsets now, partition by partition in
    offset order."""
    consumer = kafka.consumer(settings, {"group.id": f"reader-{topic}",
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        meta = consumer.list_topics(topic, timeout=10)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in meta.topics[topic].partitions}
        consumer.subscribe([topic])
        out: list[Any] = []
        seen: collections.Counter[int] = collections.Counter()
        stop = time.monotonic() + READ_DEADLINE_S
        while any(seen[p] < ends[p] for p in ends) and time.monotonic() < stop:
            m = consumer.poll(0.5)
            if m is None or m.error():
                continue
            seen[m.partition()] = m.offset() + 1
            out.append(m)
        return out
    finally:
        consumer.close()


def read_topic(settings: KafkaSettings, topic: str, *, with_headers: bool = False) -> list[tuple]:
    """Every record in ``topic`` up to its end offsets now, as ``(key, value)`` (or
    ``(key, value, headers)``), partition by partition in offset order."""
    return [(m.key(), m.value(), m.headers() or []) if with_headers else (m.key(), m.value())
            for m in _messages(settings, topic)]


def read_topic_partitions(settings: KafkaSettings, topic: str) -> list[tuple]:
    """Every record in ``topic`` up to its end offsets now, as ``(key, value,
    partition)``."""
    return [(m.key(), m.value(), m.partition()) for m in _messages(settings, topic)]
