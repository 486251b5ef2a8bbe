"""Each store of the real stack is usable from the project's own client code."""
from __future__ import annotations

import asyncio
import gc
import time
import uuid

from cassandra.cluster import ResponseFuture
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import NewTopic

from services.api.copies.store import FeedStore
from services.api.snapshots.snapshot_writer import SlotRow
from services.shared.settings import Settings
from services.shared.clients import cql, kafka, pg
from services.shared.stores.cql_async import CqlRunner


def _new_topic(settings: Settings, partitions: int = 1) -> str:
    name = f"{settings.topic_prefix}.storecheck.{uuid.uuid4().hex[:8]}"
    admin = kafka.admin(settings)
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(30)
    return name


def _consume(consumer: Consumer, want: int, deadline_s: float = 30) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + deadline_s
    while len(got) < want and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    return got


def test_postgres_round_trip_through_project_connection(settings: Settings) -> None:
    with pg.connect(settings) as conn:
        conn.execute("INSERT INTO users (user_id) VALUES (%s)", (4242,))
        conn.commit()
        row = conn.execute("SELECT user_id FROM users WHERE user_id = %s", (4242,)).fetchone()
        slot_ok = conn.execute("SHOW wal_level").fetchone()
    assert row == (4242,)
    assert slot_ok == ("logical",)


def test_kafka_produce_consume_and_group_offsets_resume(settings: Settings) -> None:
    topic = _new_topic(settings)
    producer = kafka.producer(settings, {"enable.idempotence": True, "acks": "all"})
    for i in range(10):
        producer.produce(topic, key=str(i).encode(), value=f"m{i}".encode())
    assert producer.flush(30) == 0

    group = f"{topic}.group"
    conf = {"group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False}
    first = kafka.consumer(settings, conf)
    first.subscribe([topic])
    got = _consume(first, 4)
    assert got == [b"m0", b"m1", b"m2", b"m3"]
    first.commit(asynchronous=False)
    first.close()

    second = kafka.consumer(settings, conf)
    second.subscribe([topic])
    rest = _consume(second, 6)
    committed = second.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
    second.close()
    assert rest == [f"m{i}".encode() for i in range(4, 10)]
    assert committed == 4


def test_aiokafka_produce_consume_with_group_commit(settings: Settings) -> None:
    topic = _new_topic(settings)

    async def scenario() -> tuple[list[bytes], int]:
        producer = kafka.aio_producer(settings, acks="all")
        await producer.start()
        try:
            for i in range(5):
                await producer.send_and_wait(topic, f"a{i}".encode(), key=b"k")
        finally:
            await producer.stop()
        consumer = kafka.aio_consumer(settings, topic, group_id=f"{topic}.aio",
                                      auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        try:
            values: list[bytes] = []
            async with asyncio.timeout(30):
                while len(values) < 5:
                    batch = await consumer.getmany(timeout_ms=500)
                    for records in batch.values():
                        values.extend(r.value for r in records)
            await consumer.commit()
            from aiokafka import TopicPartition as AioTP
            offset = await consumer.committed(AioTP(topic, 0))
        finally:
            await consumer.stop()
        return values, offset

    values, offset = asyncio.run(scenario())
    assert values == [f"a{i}".encode() for i in range(5)]
    assert offset == 5


def test_cassandra_round_trip_through_project_session(settings: Settings) -> None:
    session = cql.session(settings)
    try:
        insert = session.prepare("INSERT INTO following (follower_id, followed_id, following_since) "
                                 "VALUES (?, ?, toTimestamp(now()))")
        session.execute(insert, (1, 2))
        session.execute(insert, (1, 3))
        rows = session.execute("SELECT followed_id FROM following WHERE follower_id = 1").all()
    finally:
        session.cluster.shutdown()
    assert sorted(r.followed_id for r in rows) == [2, 3]


def test_finished_cassandra_requests_leave_no_cycles_for_the_collector(settings: Settings) -> None:
    """Reads and batched writes of the read path and of ``CqlRunner`` are freed by
    reference counting once done (cql_async.release): the driver's futures otherwise
    stay cyclic garbage that the collector's full collections free in long pauses."""
    session = cql.session(settings)
    feed = FeedStore(session, timeout=2.0, max_following=10)
    runner = CqlRunner(session)
    select = session.prepare("SELECT followed_id FROM following WHERE follower_id = ?")

    async def scenario() -> None:
        for i in range(20):
            await feed.inbox_top(i, 10)
            await feed.save_snapshot_slot(SlotRow(f"slot{i}", ((0, b"\x01\x00\x00"),), 60, 0), 2.0)
            await runner.execute(select, (i,))

    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        asyncio.run(scenario())
        gc.collect()
        # Our requests only: the prepares above are the driver's own (their cancelled
        # timers can keep them reachable past the first collect).
        futures = [o for o in gc.garbage if isinstance(o, ResponseFuture)
                   and type(o.message).__name__ != "PrepareMessage"]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        session.cluster.shutdown()
    assert futures == []


def test_snapshot_slots_round_trip_and_a_damaged_row_reads_as_no_snapshot(settings: Settings) -> None:
    """The read path's snapshot rows (services/api/snapshots/snapshot_writer.py): a snapshot is
    found by its version among its index's parts (an older writer's part 0 too), a slot's
    rows written as one batch are each found, the longest copy wins, another reader's
    version or a damaged row gives None (the walk restarts: snapshot_expired), never an
    error."""
    from datetime import datetime, timezone

    from services.api.snapshots import snapshot

    session = cql.session(settings)
    feed = FeedStore(session, timeout=2.0, max_following=10)
    slot = f"t{uuid.uuid4().hex[:12]}"
    at = datetime.now(timezone.utc).replace(microsecond=0)
    version = snapshot.slot_version(at, slot, 0)
    ms = int(at.timestamp() * 1000)

    async def scenario() -> list:
        # An older writer's row: several snapshots in part 0, found by index 0's range.
        base = snapshot.pack_slot([(7, version, ms, b"\x02\x00short"), (8, version, ms, b"x")])
        await feed.save_snapshot_slot(SlotRow(slot, ((0, base),), 60, 2), 2.0)
        longer = snapshot.pack_slot([(7, version, ms, b"\x02\x00short-and-extended")])
        second = snapshot.slot_version(at, slot, 1)
        await feed.save_snapshot_slot(SlotRow(slot, (
            (snapshot.part_of(0, 99), longer),
            (snapshot.part_of(1), snapshot.pack_slot([(9, second, ms, b"\x02\x00nine")]))), 60, 2), 2.0)
        found = [await feed.load_snapshot(7, version), await feed.load_snapshot(9, version),
                 await feed.load_snapshot(7, "v-not-a-slot"), await feed.load_snapshot(9, second)]
        await feed.save_snapshot_slot(SlotRow(slot, ((snapshot.part_of(0, 5), base[:-3]),), 60, 2), 2.0)
        found.append(await feed.load_snapshot(7, version))
        return found

    try:
        extended, other, stray, second, damaged = asyncio.run(scenario())
    finally:
        session.cluster.shutdown()
    assert extended == (b"\x02\x00short-and-extended", at)
    assert second == (b"\x02\x00nine", at)  # its slot's other row, written in the same batch
    assert other is None and stray is None and damaged is None
