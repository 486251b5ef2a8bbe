"""The demo's progress reading (deploy/pipeline_progress.py ``PipelineOffsets``) on the
shared Kafka: events arrived and applied by the worker groups, read with consumers that
never join the groups (a worker of the group is not rebalanced by the demo's wait)."""
from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import NewTopic

from deploy.pipeline_progress import Offsets, PipelineOffsets
from services.shared.clients import kafka
from services.shared.contracts.topics import cdc_topic
from services.shared.settings import Settings

pytestmark = pytest.mark.integration


def _commit_after(settings: Settings, group: str, topic: str, messages: int) -> None:
    """A member of ``group`` reads ``messages`` of ``topic`` and commits them."""
    consumer = kafka.consumer(settings, {"group.id": group,
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen = 0
    try:
        while seen < messages:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                seen += 1
                consumer.commit(msg, asynchronous=False)
    finally:
        consumer.close()


def test_progress_counts_events_arrived_and_applied_by_the_worker_groups(settings: Settings) -> None:
    # A prefix of its own (the session's clean-up drops topics named after the session).
    prefix = f"{settings.topic_prefix}_progress{uuid.uuid4().hex[:6]}"
    ours = settings.model_copy(update={"topic_prefix": prefix})
    follows, likes = cdc_topic("follows", prefix), cdc_topic("likes", prefix)
    admin = kafka.admin(settings)
    for fut in admin.create_topics([NewTopic(t, num_partitions=1, replication_factor=1)
                                    for t in (follows, likes)]).values():
        fut.result(30)
    producer = kafka.producer(settings)
    for i in range(9):
        producer.produce(follows, key=b"%d" % i, value=b"f")
    for i in range(4):
        producer.produce(likes, key=b"%d" % i, value=b"l")
    producer.flush(30)

    reader = PipelineOffsets(ours)
    try:
        assert reader.read() == Offsets(applied=0, arrived=13)  # nothing committed yet
        _commit_after(ours, f"{prefix}.fanout", follows, 5)
        _commit_after(ours, f"{prefix}.ranker", likes, 4)
        after = reader.read()
    finally:
        reader.close()
    assert after == Offsets(applied=9, arrived=13) and after.lag == 4
