"""The operator's lag command sees a lagging consumer group and the CDC slots."""
from __future__ import annotations

import uuid

from confluent_kafka.admin import NewTopic

from deploy.lag import kafka_lag, render, report
from services.shared.clients import kafka
from services.shared.contracts.topics import cdc_topic
from services.shared.settings import Settings


def test_lag_command_reports_committed_group_lag_per_partition(settings: Settings) -> None:
    topic = f"{settings.topic_prefix}.lagcheck.{uuid.uuid4().hex[:6]}"
    admin = kafka.admin(settings)  # keep alive until done
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
    producer = kafka.producer(settings)
    for i in range(7):
        producer.produce(topic, value=str(i).encode())
    producer.flush(30)
    group = f"{topic}.g"
    consumer = kafka.consumer(settings, {"group.id": group,
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


def test_lag_shows_the_products_topics_and_slot_unless_asked_for_all(settings: Settings) -> None:
    from deploy.lag import product_only
    from services.cdc.slot import slot_name_for

    data = {"at": "now", "cdc_lag_seconds": 0.0, "freshness": {},
            "kafka": [{"group": "feed.fanout", "topic": cdc_topic("posts", settings.topic_prefix),
                       "partition": 0, "committed": 1, "end": 1, "lag": 0},
                      {"group": "t_other.g", "topic": cdc_topic("posts", "t_other"), "partition": 0,
                       "committed": 1, "end": 2, "lag": 1}],
            "cdc_slots": [{"slot": slot_name_for(settings), "database": settings.pg_database,
                           "active": True, "lag_bytes": 0, "wal_status": "reserved"},
                          {"slot": "feed_cdc_t_other", "database": "t_other", "active": False,
                           "lag_bytes": 9, "wal_status": "reserved"}]}
    mine = product_only(data, settings)
    assert [r["group"] for r in mine["kafka"]] == ["feed.fanout"]
    assert [s["slot"] for s in mine["cdc_slots"]] == [slot_name_for(settings)]
    # The live report, filtered, holds nothing of another prefix.
    live = report(settings, everything=False)
    assert all(r["topic"].startswith(f"{settings.topic_prefix}.") for r in live["kafka"])


def test_lag_answers_with_the_broker_down(settings: Settings) -> None:
    """``make lag`` with no broker answering (a refused port): it prints what it can (the
    slots, from Postgres) and says Kafka is unavailable, in bounded time; no crash."""
    import json
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]   # closed again: nothing listens there
    env = {**os.environ, "FEED_KAFKA_BOOTSTRAP": f"127.0.0.1:{dead}", "FEED_PG_DATABASE": settings.pg_database,
           "FEED_TOPIC_PREFIX": settings.topic_prefix}
    done = subprocess.run([sys.executable, "-m", "deploy.lag", "--json"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(done.stdout)
    assert "unavailable" in data["kafka"]
    assert isinstance(data["cdc_slots"], list)   # Postgres still answers
