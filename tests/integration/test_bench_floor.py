"""The contract's floor (bench/fanout/floor.py) on the session's Cassandra and Kafka: each
step writes every follower's row once, the steps that read take the audience from
``followers``, and the steps that announce put one author event per post on the topic
(as the fan-out does since 2026-12-04), keyed by the author, readable by the author-events
parser."""
from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest
from confluent_kafka.admin import NewTopic

from bench.fanout.floor import FLOOR_STEP, STEPS, floor_rates
from services.shared.contracts.feed_events import author_event_id, parse_author
from services.shared.settings import Settings
from services.shared.clients import cql, kafka

pytestmark = pytest.mark.integration


def test_the_floor_writes_reads_every_row_and_announces_every_post(settings: Settings) -> None:
    session = cql.session(settings)
    topic = f"{settings.topic_prefix}.floor-test"
    admin = kafka.admin(settings)
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])[topic].result(30)
    try:
        session.execute("CREATE TABLE IF NOT EXISTS floor_inbox (reader_id bigint, rank_key double, "
                        "post_id bigint, author_id bigint, PRIMARY KEY (reader_id, rank_key, post_id))")
        authors = {7_500_000_001: list(range(7_510_000_000, 7_510_000_030)),
                   7_500_000_002: list(range(7_510_000_020, 7_510_000_045))}
        since = datetime.now(timezone.utc) - timedelta(hours=1)
        add = session.prepare("INSERT INTO followers (followed_id, follower_id, following_since) VALUES (?,?,?)")
        for author, readers in authors.items():
            for reader in readers:
                session.execute(add, (author, reader, since))
        posts = [(7_520_000_000 + 10 * i + k, author) for i in range(5) for k, author in enumerate(authors)]
        expected = {(r, p) for p, a in posts for r in authors[a]}
        created_at = datetime.now(timezone.utc).replace(microsecond=0)  # events carry ms

        result = floor_rates(session, posts, authors, created_at, 3600,
                             table="floor_inbox", settings=settings, topic=topic,
                             follower_page=7, cassandra_cpu=lambda: 0.0, kafka_cpu=lambda: 0.0,
                             in_flight=(1, 4))

        assert list(result["steps"]) == [name for name, _, _ in STEPS]
        assert [t["rows"] for t in result["tried"]] == [len(expected)] * len(result["tried"])
        assert result["floor_rows_per_s"] == result["steps"][FLOOR_STEP]["rows/s"] > 0
        read = session.prepare("SELECT reader_id, post_id FROM floor_inbox WHERE reader_id IN ?")
        stored = {(r.reader_id, r.post_id) for r in session.execute(
            read, ([r for readers in authors.values() for r in readers],))}
        assert stored == expected

        # The warm-up (a fifth of the posts, reading and announcing) and the two
        # announcing steps at each setting: every post once each time, not once per row.
        warm = set(posts[: len(posts) // 5])
        announced = len(warm) + len(posts) * 2 * 2
        consumer = kafka.consumer(settings, {"group.id": f"{topic}.check",
                                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe([topic])
        seen: dict[tuple[int, int], int] = {}  # (post, author) -> events
        deadline = time.monotonic() + 60
        # Until the topic has been quiet for 2 s after the expected count: an event per
        # row, or any extra event, would be counted.
        while time.monotonic() < deadline:
            m = consumer.poll(0.5 if sum(seen.values()) < announced else 2.0)
            if m is None and sum(seen.values()) >= announced:
                break
            if m is None or m.error():
                continue
            event = parse_author(m.value())
            assert m.key() == f'"{event.author_id}"'.encode()
            assert event.event_id == author_event_id(event.author_id, event.post_id)
            assert event.created_at == created_at
            pair = (event.post_id, event.author_id)
            seen[pair] = seen.get(pair, 0) + 1
        consumer.close()
        assert set(seen) == set(posts)
        assert sum(seen.values()) == announced
        assert all(seen[post] == (5 if post in warm else 4) for post in posts)
    finally:
        session.execute("DROP TABLE IF EXISTS floor_inbox")
        admin.delete_topics([topic], operation_timeout=30)
        session.cluster.shutdown()
