"""CDC relay benchmark: relay throughput and lag against two raw baselines, in one run.

    .venv/bin/python bench/cdc/relay.py [--backlog 20000] [--rate 300] [--seconds 15]

Measured against a scratch database and topic prefix (dropped afterwards):
1. raw decode: how fast Postgres decodes the backlog through pgoutput on a scratch slot
   (pg_logical_slot_peek_binary_changes), changes/s;
2. raw produce: how fast confluent-kafka sends as many envelope-sized records with the
   relay's producer settings (idempotent, acks=all), records/s;
3. relay catch-up: the relay started on the same backlog, changes/s until a consumer saw
   them all;
4. relay steady: inserts at a fixed rate; lag = consumer receive time - commit time
   (source.ts_ms), p50/p95/max, and achieved events/s.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from confluent_kafka.admin import NewTopic  # noqa: E402

from deploy.migrate import migrate_kafka, migrate_postgres  # noqa: E402
from services.cdc.publisher import producer_config  # noqa: E402
from services.shared.clients import kafka, pg  # noqa: E402
from services.shared.contracts.topics import cdc_topic  # noqa: E402
from services.shared.settings import Settings  # noqa: E402

# Rows per insert transaction when building the backlog: like an API writing a post.
BACKLOG_TX_ROWS = 10
POST_BODY = "benchmark post body of typical length, a sentence or two about the day"


def _insert_backlog(s: Settings, count: int, first_id: int, tx_rows: int = BACKLOG_TX_ROWS) -> None:
    """``count`` posts by user 1 from ``first_id`` on, ``tx_rows`` to a transaction."""
    with pg.connect(s) as conn:
        for start in range(first_id, first_id + count, tx_rows):
            with conn.transaction():
                conn.cursor().executemany(
                    "INSERT INTO posts (post_id, author_id, created_at, text) VALUES (%s, 1, now(), %s)",
                    [(i, POST_BODY) for i in range(start, min(start + tx_rows, first_id + count))])


def raw_decode_rate(s: Settings, count: int) -> float:
    slot = f"bench_raw_{secrets.token_hex(3)}"
    with pg.connect(s, autocommit=True) as conn:
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        try:
            _insert_backlog(s, count, 10_000_000)
            started = time.perf_counter()
            n = conn.execute(
                "SELECT count(*) FILTER (WHERE get_byte(data, 0) = 73) FROM "
                "pg_logical_slot_peek_binary_changes(%s, NULL, NULL, 'proto_version', '1', "
                "'publication_names', %s)", (slot, s.cdc_publication)).fetchone()[0]
            elapsed = time.perf_counter() - started
        finally:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    assert n == count, f"decoded {n} inserts, expected {count}"
    return count / elapsed


def raw_produce_rate(s: Settings, count: int, sample: bytes) -> float:
    topic = f"{s.topic_prefix}.bench-raw"
    admin = kafka.admin(s)
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result()
    # The relay's own options; the connection part comes from the factory.
    connection = kafka.librdkafka_config(s)
    producer = kafka.producer(s, {k: v for k, v in producer_config(s).items() if k not in connection})
    started = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, key=b'{"post_id":%d}' % i, value=sample)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(120)
    elapsed = time.perf_counter() - started
    admin.delete_topics([topic])
    return count / elapsed


class LagConsumer(threading.Thread):
    """Consumes the posts topic; records (receive time, commit time) per create event."""

    def __init__(self, s: Settings) -> None:
        super().__init__(daemon=True)
        self.samples: list[tuple[float, float]] = []
        self.stop = threading.Event()
        self.consumer = kafka.consumer(s, {"group.id": str(uuid.uuid4()), "auto.offset.reset": "earliest",
                                           "enable.auto.commit": False, "fetch.wait.max.ms": 10})
        self.consumer.subscribe([cdc_topic("posts", s.topic_prefix)])

    def run(self) -> None:
        while not self.stop.is_set():
            for msg in self.consumer.consume(1000, 0.1):
                if msg.error() or msg.value() is None:
                    continue
                received = time.time()
                value = json.loads(msg.value())
                if value["op"] == "c":
                    self.samples.append((received, value["source"]["ts_us"] / 1e6))
        self.consumer.close()

    def count(self) -> int:
        return len(self.samples)


def _wait_count(consumer: LagConsumer, count: int, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while consumer.count() < count:
        if time.monotonic() > deadline:
            raise SystemExit(f"relay delivered {consumer.count()} of {count} in {timeout} s")
        time.sleep(0.02)
    return time.time()


def _wait_snapshot_done(s: Settings, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    with pg.connect(s, autocommit=True) as conn:
        while not conn.execute("SELECT 1 FROM cdc_relay_state "
                               "WHERE snapshot_completed_at IS NOT NULL").fetchone():
            if time.monotonic() > deadline:
                raise SystemExit("relay snapshot did not complete")
            time.sleep(0.1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backlog", type=int, default=20000)
    parser.add_argument("--rate", type=int, default=300, help="steady inserts per second")
    parser.add_argument("--seconds", type=float, default=15)
    args = parser.parse_args()
    name = f"bench_cdc_{secrets.token_hex(3)}"
    base = Settings()
    with pg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    s = Settings(pg_database=name, topic_prefix=name)
    relay = None
    try:
        migrate_postgres(s)
        migrate_kafka(s, name)
        with pg.connect(s, autocommit=True) as conn:
            conn.execute("INSERT INTO users (user_id) VALUES (1)")
        decode = raw_decode_rate(s, args.backlog)
        sample = (REPO / "schemas/examples/cdc/posts/create.json").read_text()
        produce = raw_produce_rate(s, args.backlog, json.dumps(json.loads(sample)["value"]).encode())

        env = {**os.environ, "FEED_PG_DATABASE": name, "FEED_TOPIC_PREFIX": name,
               "FEED_CDC_METRICS_PORT": "0"}
        def start_relay() -> subprocess.Popen:
            return subprocess.Popen([sys.executable, "-m", "services.cdc"], cwd=REPO, env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        # Catch-up: the first start snapshots the scratch-slot backlog; then, with the relay
        # stopped, a second backlog accumulates in the slot and the restarted relay streams it.
        relay = start_relay()
        _wait_snapshot_done(s, 300)
        relay.send_signal(signal.SIGTERM)
        relay.wait(60)
        _insert_backlog(s, args.backlog, 20_000_000)
        consumer = LagConsumer(s)
        consumer.start()
        started = time.time()
        relay = start_relay()
        finished = _wait_count(consumer, args.backlog, 300)
        catch_up = args.backlog / (finished - started)

        consumer.samples.clear()
        total = int(args.rate * args.seconds)
        begin = time.monotonic()
        with pg.connect(s, autocommit=True) as conn:
            for i in range(total):
                delay = begin + i / args.rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                conn.execute("INSERT INTO posts (post_id, author_id, created_at, text) "
                             "VALUES (%s, 1, now(), 'steady')", (30_000_000 + i,))
        write_s = time.monotonic() - begin
        _wait_count(consumer, total, 120)
        lags = sorted(r - c for r, c in consumer.samples)
        span = max(r for r, _ in consumer.samples) - min(r for r, _ in consumer.samples)
        consumer.stop.set()
        p95 = lags[int(0.95 * (len(lags) - 1))]
        print(f"raw pgoutput decode (peek, scratch slot): {decode:10.0f} changes/s")
        print(f"raw confluent-kafka produce (acks=all):    {produce:10.0f} records/s")
        print(f"relay catch-up on a backlog:               {catch_up:10.0f} changes/s "
              f"({catch_up / decode:.0%} of decode, {catch_up / produce:.0%} of produce)")
        print(f"relay steady load {args.rate}/s for {write_s:.1f} s: {total / span:8.0f} events/s, "
              f"lag p50 {statistics.median(lags) * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, "
              f"max {lags[-1] * 1000:.0f} ms")
    finally:
        if relay is not None:
            relay.send_signal(signal.SIGTERM)
            relay.wait(30)
        with pg.connect(base, autocommit=True) as conn:
            for (slot,) in conn.execute("SELECT slot_name FROM pg_replication_slots "
                                        "WHERE database = %s", (name,)).fetchall():
                conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
