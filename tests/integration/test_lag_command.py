"""The operator's lag command sees a lagging consumer group and the CDC slots."""
from __future__ import annotations

import uuid

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from deploy.lag import kafka_lag, render, report
from services.common.settings import Settings


def test_lag_command_reports_committed_group_lag_per_partition(settings: Settings) -> None:
    topic = f"{settings.topic_prefix}.lagcheck.{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap})  # keep alive until done
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": settings.kafka_bootstrap})
    for i in range(7):
        producer.produce(topic, value=str(i).encode())
    producer.flush(30)
    group = f"{topic}.g"
    consumer = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen = 0
    while seen < 3:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            seen += 1
    consumer.commit(asynchronous=False)
    consumer.close()

    rows = [r for r in kafka_lag(settings) if r["group"] == group]
    assert rows == [{"group": group, "topic": topic, "partition": 0, "committed": 3, "end": 7,
                     "lag": 4}]
    text = render(report(settings))
    assert group in text and "CDC slots:" in text
