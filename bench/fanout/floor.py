"""The fan-out contract's floor: the least work any fan-out on this data model must do for
a post, done by the cheapest client we can write, so that the fan-out's rows/s can be read
against what its contract allows here, beside the best raw writer.

The contract (docs/fanout.md) asks, per post of an ordinary author:
- **read** its audience: the author's follower rows (``followers``, the table the fan-out
  pages), every page;
- **write** one inbox row per follower, with the inbox TTL and a write time;
- **announce** the post once, after its rows are written: one ``AuthorPosted`` record on
  ``<prefix>.author-events`` (the API's streams read it), keyed by author, the bytes
  ``feed_events.encode`` builds. (Until 2026-12-04 it was one ``inbox-events`` record per
  follower; the floor's results from before then announced per row.)

The floor client does only that, for posts in the order given, ``in_flight`` posts at
once: reads through ``CqlRunner`` (as the fan-out), writes as the raw writer's ``posts``
strategy (one post's readers that share replicas in unlogged batches of up to 200 rows,
kept serialized as the fan-out's: the post's values bound once, each reader packed; at
most 16 batches in flight across the posts, as the raw writer's best),
the post's event through confluent-kafka's producer once its batches are acknowledged
(librdkafka, in C: acks=all, idempotent, the Java client's murmur2 partitioner, 5 ms
linger), flushed once at the end (the fan-out waits for each post's ack). It reads no
copy, tier, block or inactive reader, writes no copy, timeline row or mark, consumes
nothing from Kafka and commits no offset: all of those the fan-out does as well, so the
floor is an upper bound for it, not a peer.

Four steps, each over the same posts, so each part's cost shows: write; read + write;
write + announce (an audience the client knew, as a graph held in memory would give);
read + write + announce (the floor). Rates are rows/s (inbox rows written; a post's
event is part of its cost, not a row). CPU per row of the client, the Cassandra nodes and
the Kafka brokers is computed from ``process_time`` and /proc.
"""
from __future__ import annotations

import asyncio
import struct
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Mapping, Sequence

from confluent_kafka import TopicPartition

from bench.fanout.raw_writer import inbox_insert, serialized_batches, worker_collector
from services.shared.clients import kafka
from services.shared.contracts.feed_events import AuthorPosted, encode
from services.shared.settings import KafkaSettings
from services.shared.stores.cql_async import CqlRunner, replica_group

BATCH_ROWS = 200  # the raw writer's best batch size for one post's rows
# Batches in flight across all posts (the raw writer's best with batches of 200): a post
# of a large audience is hundreds of batches, and sent at once with 64 posts in flight
# they time out on the node (the fan-out bounds its own: fanout_push_batches_in_flight).
REQUESTS_IN_FLIGHT = 16
STEPS: tuple[tuple[str, bool, bool], ...] = (
    # (name, reads the audience, announces)
    ("write", False, False),
    ("read + write", True, False),
    ("write + announce", False, True),
    ("read + write + announce (floor)", True, True),
)
FLOOR_STEP = STEPS[-1][0]


@dataclass(frozen=True)
class Step:
    name: str
    in_flight: int
    rows: int
    seconds: float
    client_cpu_s: float
    cassandra_cpu_s: float
    kafka_cpu_s: float

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0

    def summary(self) -> dict[str, Any]:
        per_row = (lambda cpu: round(cpu * 1e6 / self.rows, 1)) if self.rows else (lambda cpu: None)
        return {"step": self.name, "posts in flight": self.in_flight, "rows": self.rows,
                "seconds": round(self.seconds, 2), "rows/s": round(self.rows_per_s),
                "client CPU µs per row (computed)": per_row(self.client_cpu_s),
                "Cassandra CPU µs per row (computed)": per_row(self.cassandra_cpu_s),
                "Kafka CPU µs per row (computed)": per_row(self.kafka_cpu_s)}


class _Announcer:
    """Author events through librdkafka; ``produce`` never blocks the loop: a full local
    queue is drained by ``poll`` and the record retried. ``flush`` checks, from the
    topic's end offsets, that every record produced since the last flush was stored (a
    failed delivery would otherwise only show in a per-record callback, whose Python call
    would cost more than the record)."""

    def __init__(self, settings: KafkaSettings, topic: str) -> None:
        self._topic = topic
        self._producer = kafka.producer(settings, {"acks": "all", "enable.idempotence": True,
                                                   "partitioner": "murmur2_random",
                                                   "linger.ms": 5, "compression.type": "none"})
        self._offsets = kafka.consumer(settings, {"group.id": f"{topic}.floor",
                                                  "enable.auto.commit": False})
        self._produced = 0
        self._stored = self._end()

    def _end(self) -> int:
        partitions = self._offsets.list_topics(self._topic, timeout=30).topics[self._topic].partitions
        return sum(self._offsets.get_watermark_offsets(TopicPartition(self._topic, p), timeout=30)[1]
                   for p in partitions)

    def send(self, records: list[tuple[bytes, bytes]]) -> None:
        produce, poll = self._producer.produce, self._producer.poll
        for key, value in records:
            while True:
                try:
                    produce(self._topic, value, key)
                    break
                except BufferError:
                    poll(0.01)
        self._produced += len(records)
        poll(0)

    def flush(self) -> None:
        if self._producer.flush(60) != 0:
            raise SystemExit("bench floor: author events were not all delivered within 60 s")
        end = self._end()
        if end - self._stored < self._produced:
            raise SystemExit(f"bench floor: {self._produced} author events produced, "
                             f"{end - self._stored} stored")
        self._stored, self._produced = end, 0

    def close(self) -> None:
        self._offsets.close()


async def _run(session: Any, runner: CqlRunner, insert: Any, page: Any,
               posts: Sequence[tuple[int, int]], audiences: Mapping[int, Sequence[int]],
               created_at: datetime, ttl_s: int, reads: bool, announcer: _Announcer | None,
               in_flight: int) -> int:
    ts = time.time_ns() // 1000
    pack = struct.Struct(">q").pack
    limit = asyncio.Semaphore(in_flight)
    requests = asyncio.Semaphore(REQUESTS_IN_FLIGHT)
    written = 0

    async def send(batch: Any) -> None:
        async with requests:
            await runner.execute(batch)

    async def one(post_id: int, author_id: int) -> None:
        nonlocal written
        try:
            if reads:
                readers = [r[0] async for rows in runner.pages(page, (author_id,)) for r in rows]
            else:
                readers = list(audiences[author_id])
            groups: dict[Any, list[int]] = {}
            for reader in readers:
                groups.setdefault(replica_group(session, pack(reader)), []).append(reader)
            # Rows kept serialized, as the fan-out's and the raw writer's: the post's
            # values bound once, each reader packed.
            tail = list(insert.bind((0, float(post_id), post_id, author_id, ttl_s, ts)).values[1:])
            batches = serialized_batches(insert.query_id, lambda r, _p: [pack(r), *tail],
                                         [[(r, post_id) for r in g] for g in groups.values()],
                                         BATCH_ROWS, session.keyspace)
            await asyncio.gather(*(send(b) for b, _ in batches))
            if announcer is not None:
                # One event per post, once its rows are written (as the fan-out).
                announcer.send([encode(AuthorPosted(author_id, post_id, created_at))])
            written += len(readers)
        finally:
            limit.release()

    tasks = []
    for post_id, author_id in posts:
        await limit.acquire()
        tasks.append(asyncio.ensure_future(one(post_id, author_id)))
    await asyncio.gather(*tasks)
    if announcer is not None:
        announcer.flush()
    return written


def _statements(session: Any, table: str, followers_table: str, follower_page: int) -> tuple[Any, Any]:
    """The row INSERT into ``table`` and the audience read, paged as the fan-out pages it."""
    page = session.prepare(f"SELECT follower_id FROM {followers_table} WHERE followed_id=?")
    page.fetch_size = follower_page
    return inbox_insert(session, table), page


def floor_rates(session: Any, posts: Sequence[tuple[int, int]],
                audiences: Mapping[int, Sequence[int]], created_at: datetime, ttl_s: int, *,
                table: str, settings: KafkaSettings, topic: str, follower_page: int,
                cassandra_cpu: Callable[[], float], kafka_cpu: Callable[[], float],
                followers_table: str = "followers",
                in_flight: Sequence[int] = (16, 64)) -> dict[str, Any]:
    """Each step over ``posts`` ((post_id, author_id), in order) at each ``in_flight``,
    after one warm-up pass; per step, its best setting. ``table`` is a scratch table of
    ``feed_inbox``'s shape in the session's keyspace; ``audiences`` the followers each
    author has in ``followers_table`` (the fan-out's ``followers``, in this keyspace or
    qualified with another; the steps that do not read use ``audiences``); ``topic`` the
    author-events topic the posts are announced on (the fan-out's, or one with its
    partitions and replication: ``topics.author_events_topic`` of a migrated prefix)."""
    insert, page = _statements(session, table, followers_table, follower_page)
    runner = CqlRunner(session)
    announcer = _Announcer(settings, topic)

    async def sweep() -> list[Step]:
        await _run(session, runner, insert, page, posts[: max(1, len(posts) // 5)], audiences,
                   created_at, ttl_s, True, announcer, 16)
        out = []
        for name, reads, announces in STEPS:
            for n in in_flight:
                client, cass, kafka = time.process_time(), cassandra_cpu(), kafka_cpu()
                start = time.perf_counter()
                rows = await _run(session, runner, insert, page, posts, audiences, created_at,
                                  ttl_s, reads, announcer if announces else None, n)
                seconds = time.perf_counter() - start
                out.append(Step(name, n, rows, seconds, time.process_time() - client,
                                cassandra_cpu() - cass, kafka_cpu() - kafka))
        return out

    try:
        with worker_collector():  # the fan-out worker's collector settings (runtime.py)
            tried = asyncio.run(sweep())
    finally:
        announcer.close()
    best = {name: max((t for t in tried if t.name == name), key=lambda t: t.rows_per_s).summary()
            for name, _, _ in STEPS}
    return {"steps": best, "floor_rows_per_s": best[FLOOR_STEP]["rows/s"],
            "tried": [t.summary() for t in tried]}


def floor_once(session: Any, posts: Sequence[tuple[int, int]],
               audiences: Mapping[int, Sequence[int]], created_at: datetime, ttl_s: int, *,
               table: str, settings: KafkaSettings, topic: str, follower_page: int,
               in_flight: int, followers_table: str = "followers") -> int:
    """The floor's step (it reads each audience, writes the rows, announces each post once)
    over ``posts`` once at ``in_flight``, no warm-up: for a window of the caller's own
    (bench/fanout/alike.py). The rows written."""
    insert, page = _statements(session, table, followers_table, follower_page)
    announcer = _Announcer(settings, topic)
    try:
        with worker_collector():
            return asyncio.run(_run(session, CqlRunner(session), insert, page, posts, audiences,
                                    created_at, ttl_s, True, announcer, in_flight))
    finally:
        announcer.close()
