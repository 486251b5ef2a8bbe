"""CDC relay against the real Postgres and Kafka: envelopes, ordering, fail-fast, heartbeats,
unexpected column types. Fault tests (SIGKILL, Postgres restart) are in test_cdc_faults.py.

Each test gets its own database (derived from the session's) and topic prefix, so a
snapshot sees only that test's rows and a test may change the publication freely.
"""
from __future__ import annotations

import json
import time

from confluent_kafka.admin import NewTopic

from services.cdc.pgoutput import lsn_from_str
from services.shared.clients import kafka, pg
from services.shared.contracts.topics import cdc_topic, heartbeat_topic
from services.shared.domain.rules import REMOVED
from services.shared.settings import Settings
from tests.support.cdc_relay import Event, changes, confirmed_lsn, consume, wait_for, wait_streaming


def test_every_committed_change_arrives_once_in_order_with_debeziums_envelope(
        source: Settings, relays) -> None:
    with pg.connect(source, autocommit=True) as conn:
        conn.execute("INSERT INTO users (user_id) VALUES (1), (2), (3)")
        conn.execute("INSERT INTO posts (post_id, author_id, created_at, text) "
                     "VALUES (100, 1, '2026-01-02 03:04:05.5+00', 'before the relay')")
    relays(source)
    wait_streaming(source)
    with pg.connect(source, autocommit=True) as conn:
        with conn.transaction():
            conn.execute("INSERT INTO posts (post_id, author_id, created_at, text, media_ids) "
                         "VALUES (101, 2, now(), 'streamed', '[\"m1\"]')")
            conn.execute("INSERT INTO follows VALUES (1, 2, now())")
        conn.execute("INSERT INTO likes (post_id, user_id) VALUES (100, 3)")
        conn.execute("INSERT INTO blocks (blocker_id, blocked_id) VALUES (3, 1)")
        conn.execute(f"UPDATE posts SET visibility = {REMOVED} WHERE post_id = 100")
        conn.execute("INSERT INTO moderation_actions (post_id, state, moderator_id) "
                     "VALUES (100, 'removed', 3)")
        for i in range(5):
            conn.execute("UPDATE posts SET text = %s WHERE post_id = 101", (f"edit {i}",))
        conn.execute("DELETE FROM likes WHERE post_id = 100")
        conn.execute("DELETE FROM follows WHERE follower_id = 1")
    # 4 snapshot rows + 2 + 1 + 1 + 1 + 1 + 5 + 2 deletes = 17 changes, 2 tombstones.
    events = consume(source, lambda ev: len(ev) >= 19)
    time.sleep(2)
    events = consume(source, lambda ev: len(ev) >= 19)
    assert len(events) == 19, [(e.table, e.value and e.value["op"]) for e in events]
    ops = sorted((e.table, e.value["op"]) for e in changes(events))
    assert ops == sorted([("users", "r")] * 3 + [("posts", "r"), ("posts", "c"), ("follows", "c"),
                         ("likes", "c"), ("blocks", "c"), ("posts", "u"),
                         ("moderation_actions", "c")] + [("posts", "u")] * 5
                         + [("likes", "d"), ("follows", "d")])
    # Per key, events arrive in WAL order (snapshot first); keys are the primary keys.
    by_key: dict[tuple, list[Event]] = {}
    for e in events:
        by_key.setdefault((e.topic, json.dumps(e.key, sort_keys=True)), []).append(e)
    for (_topic, _key), evs in by_key.items():
        lsns = [e.value["source"]["lsn"] for e in evs if e.value]
        assert lsns == sorted(lsns)
    texts = [e.value["after"]["text"] for e in by_key[(cdc_topic("posts", source.topic_prefix),
                                                       '{"post_id": 101}')]]
    assert texts == ["streamed"] + [f"edit {i}" for i in range(5)]
    [snap] = [e for e in events if e.value and e.value["op"] == "r" and e.table == "posts"]
    assert snap.key == {"post_id": 100}
    assert snap.value["after"]["created_at"] == "2026-01-02T03:04:05.500000Z"
    assert snap.value["source"]["snapshot"] in ("first", "last", "first_in_data_collection")
    [like_delete] = [e for e in changes(events) if e.table == "likes" and e.value["op"] == "d"]
    assert like_delete.value["after"] is None and like_delete.value["before"]["user_id"] == 3
    assert like_delete.key == {"post_id": 100, "user_id": 3}
    tombstones = [e for e in events if e.value is None]
    assert sorted(e.table for e in tombstones) == ["follows", "likes"]
    [created] = [e for e in changes(events) if e.table == "posts" and e.value["op"] == "c"]
    src = created.value["source"]
    assert (src["connector"], src["name"], src["db"], src["schema"], src["snapshot"]) == (
        "postgresql", source.topic_prefix, source.pg_database, "public", "false")
    assert isinstance(src["txId"], int) and src["lsn"] > snap.value["source"]["lsn"]
    assert created.value["after"]["media_ids"] == '["m1"]'
    # Everything acknowledged is confirmed to Postgres: the slot moved past the last change.
    last_lsn = max(e.value["source"]["lsn"] for e in changes(events))
    wait_for(lambda: confirmed_lsn(source) > last_lsn, 15, "slot confirmed past last change")


def test_second_relay_on_the_same_slot_fails_fast_with_a_clear_error(source: Settings,
                                                                    relays) -> None:
    first = relays(source)
    wait_streaming(source)
    second = relays(source)
    assert second.proc.wait(30) == 2
    assert "in use" in second.log() and "refusing to start a second" in second.log()
    assert first.proc.poll() is None


def test_quiet_tables_still_advance_the_slot_and_heartbeats_flow(source: Settings,
                                                                 relays) -> None:
    relays(source)
    wait_streaming(source)
    with pg.connect(source, autocommit=True) as conn:
        # WAL that the publication does not capture (idempotency keys are not in feed_cdc).
        for i in range(20):
            conn.execute("INSERT INTO idempotency_keys (author_id, key, request_hash, expires_at) "
                         "VALUES (1, %s, 'h', now())", (f"k{i}",))
        target = lsn_from_str(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])
    wait_for(lambda: confirmed_lsn(source) >= target, 30, "slot to advance while quiet")
    beats = consume(source, lambda ev: len(ev) >= 2, 30,
                    topics=[heartbeat_topic(source.topic_prefix)])
    assert beats[0].key == {"serverName": source.topic_prefix} and "ts_ms" in beats[0].value


def test_unexpected_column_type_stops_the_relay_clearly_or_renders_as_text(source: Settings,
                                                                          relays) -> None:
    topic = cdc_topic("probe", source.topic_prefix)
    admin = kafka.admin(source)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result()
    with pg.connect(source, autocommit=True) as conn:
        conn.execute("CREATE TABLE probe (id INT PRIMARY KEY, addr INET, note TEXT)")
        conn.execute("ALTER PUBLICATION feed_cdc ADD TABLE probe")
    failing = relays(source)
    wait_streaming(source)
    with pg.connect(source, autocommit=True) as conn:
        conn.execute("INSERT INTO probe VALUES (1, '10.1.2.3', 'x')")
        change = lsn_from_str(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])
    assert failing.proc.wait(30) == 3
    assert "public.probe.addr: type oid 869 has no rendering" in failing.log()
    assert confirmed_lsn(source) < change  # nothing confirmed past the change it refused
    relays(source, FEED_CDC_UNKNOWN_TYPES="text")
    [event] = consume(source, lambda ev: len(ev) >= 1, 60, topics=[topic])
    assert event.value["after"] == {"id": 1, "addr": "10.1.2.3", "note": "x"}


def test_delivery_trace_names_each_change_by_xid_and_where_kafka_put_it(source: Settings, relays,
                                                                        tmp_path) -> None:
    trace = tmp_path / "delivery.jsonl"
    relays(source, FEED_CDC_DELIVERY_TRACE=str(trace))
    wait_streaming(source)
    with pg.connect(source, autocommit=True) as conn:
        conn.execute("INSERT INTO users (user_id) VALUES (11), (12)")
        with conn.transaction():
            conn.execute("INSERT INTO follows (follower_id, followed_id, following_since) "
                         "VALUES (11, 12, now())")
            xid = conn.execute("SELECT txid_current() % (1::bigint << 32)").fetchone()[0]
    events = consume(source, lambda ev: any(e.table == "follows" for e in changes(ev)), 30)
    follow = next(e for e in changes(events) if e.table == "follows")

    def traced() -> list[dict]:
        return [d for d in map(json.loads, trace.read_text().splitlines()) if d["xid"] == xid]

    wait_for(lambda: traced(), 10, "the follow's delivery in the trace")
    (line,) = traced()
    assert (line["topic"], line["partition"], line["offset"]) == (follow.topic, follow.partition,
                                                                  follow.offset)
    assert line["error"] is None and line["lsn"] == follow.value["source"]["lsn"]
