"""Fan-out benchmark: sustained fan-out rows/s against the raw insert rate of the same
Cassandra in the same run, and commit-to-inbox latency p50/p95 under a steady post rate.

    .venv/bin/python bench/fanout/rows.py [--followers 5000] [--posts 10] [--authors 1]
        [--rate 4] [--seconds 20] [--worker-root DIR]

Runs on its own keyspace and topic prefix (dropped at the end) against the running
stack, with a real ``python -m services.fanout`` worker subprocess.

1. fan-out: ``authors`` ordinary authors with ``followers`` followers each publish
   ``posts`` posts each at once; rows/s = authors*followers*posts (the posts' audiences)
   over the time from the first post produced to the last post's ``AuthorPosted`` record
   arriving on ``<prefix>.author-events`` (the worker publishes one per post once all
   the post's rows are written, and waits for its ack: the fan-out of a post is done
   when its record is readable). The rows are checked, once at the end, against the
   worker's row counter (``feed_fanout_inbox_rows_total``, rows Cassandra acknowledged,
   from its /metrics): a post whose readers were skipped is announced all the same, so
   the announcements alone would not prove the rows. One author (the default) is a
   large audience; many authors with small audiences (``--authors 200
   --followers 100``) is the full run's history, where each post's own reads and writes
   weigh beside its rows. Several authors draw their followers from one pool of readers
   (each reader follows about 8 of them, as in the full run's graph).
2. raw: the best raw writer (``bench/fanout/raw_writer.py``) on the same (reader, post) rows, TTL
   and keyspace, into a copy of ``feed_inbox``'s definition, after the fan-out, with the
   worker running and idle. Beside it, the raw writer's best writing post by post (as the
   fan-out does), and CPU per row of the worker, the raw writer and Cassandra (computed
   from /proc and ``process_time``).
   Then the contract's floor (``bench/fanout/floor.py``) on the same posts, announcing
   one event per post on the worker's own author-events topic, as the worker does.
   Last, every side charged alike (``bench/fanout/alike.py``): the fan-out's window
   above, the raw writer's best setting and the floor's best, each into its own table,
   run from a settled start until Cassandra flushed what it wrote and no compaction is
   pending or running; CPU µs per row of the worker or client, Cassandra and Kafka, side
   by side, and the fan-out's ratios to the floor (computed).
3. latency: ``--rate`` posts/s for ``--seconds`` s by an author with 100 followers; per
   post, from the CDC event's commit time (source.ts_ms = when produced) to its
   ``AuthorPosted`` record on ``<prefix>.author-events`` (its CreateTime: when the worker
   produced it, after all the post's inbox rows were written).
"""
from __future__ import annotations

import argparse
import os
import random
import secrets
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition  # noqa: E402

from bench.fanout.alike import Charge, charged, table as alike_table  # noqa: E402
from bench.fanout.floor import FLOOR_STEP, floor_once, floor_rates  # noqa: E402
from bench.fanout.raw_writer import best_of, best_raw_rate, raw_once  # noqa: E402
from bench.harness.cdc_events import CdcEvents, post_id_at, send  # noqa: E402
from bench.harness.pipeline import scratch_keyspace, stop_process  # noqa: E402
from bench.harness.profiling import profiler, stop_profiler  # noqa: E402
from bench.harness.servers import stack_cpu_meter  # noqa: E402
from bench.harness.wrk_load import tree_cpu_s  # noqa: E402
from services.shared.clients import kafka  # noqa: E402
from services.shared.contracts.feed_events import parse_author  # noqa: E402
from services.shared.contracts.topics import all_topics, author_events_topic  # noqa: E402
from services.shared.domain.rules import INBOX_TTL_S  # noqa: E402
from services.shared.settings import KafkaSettings  # noqa: E402


CLIENT = "worker or client"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def raw_table_cql(cluster, keyspace: str, table: str) -> str:
    """``feed_inbox``'s CREATE TABLE (every option, from the driver's schema metadata),
    renamed ``table``."""
    cluster.refresh_table_metadata(keyspace, "feed_inbox")
    cql_text = cluster.metadata.keyspaces[keyspace].tables["feed_inbox"].as_cql_query()
    prefix = f"CREATE TABLE {keyspace}.feed_inbox ("
    if not cql_text.startswith(prefix):
        raise SystemExit(f"bench: unexpected schema text for feed_inbox: {cql_text[:80]!r}")
    return f"CREATE TABLE IF NOT EXISTS {keyspace}.{table} (" + cql_text[len(prefix):]


def scrape(port: int, name: str) -> float:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    for line in body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def wait(cond, timeout: float, what: str, every: float = 0.05):
    deadline = time.monotonic() + timeout
    while not (result := cond()):
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: timed out waiting for {what}")
        time.sleep(every)
    return result


def announcements(settings: KafkaSettings, topic: str) -> Consumer:
    """A consumer of every partition of ``topic`` from its beginning (assigned: no group
    to join, and no record produced before its first fetch is skipped). For the run's own
    author-events topic, whose records are all this run's."""
    consumer = kafka.consumer(settings, {"group.id": f"{topic}.bench", "enable.auto.commit": False})
    partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    return consumer


def until_announced(consumer: Consumer, post_ids: set[int], timeout: float) -> None:
    """Consume author events until every one of ``post_ids`` was announced. The fan-out's
    end is read from Kafka rather than by polling the worker's /metrics, which cost it CPU
    (5 % of its samples at 0.05 s, bench/results/2026-12-02-fanout-profile); it is
    late by the consumer's fetch at most, which only lowers the measured rate."""
    left = set(post_ids)
    deadline = time.monotonic() + timeout
    while left:
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: timed out waiting for fan-out: {len(left)} of "
                             f"{len(post_ids)} posts not announced")
        m = consumer.poll(0.2)
        if m is not None and not m.error():
            left.discard(parse_author(m.value()).post_id)


def audiences_of(authors: list[int], followers: int) -> dict[int, list[int]]:
    """Each author's followers: readers from 10,000 on; several authors share a pool of
    readers, each reader following about 8 of them (a fixed seed: the same every run)."""
    if len(authors) == 1:
        return {authors[0]: list(range(10_000, 10_000 + followers))}
    pool = range(10_000, 10_000 + max(followers, len(authors) * followers // 8))
    rng = random.Random(14)
    return {a: sorted(rng.sample(pool, followers)) for a in authors}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--followers", type=int, default=5000)
    ap.add_argument("--posts", type=int, default=10, help="posts per author")
    ap.add_argument("--authors", type=int, default=1)
    ap.add_argument("--rate", type=float, default=4.0)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--profile", type=Path, default=None,
                    help="py-spy samples of the worker over the fan-out window, as a collapsed-stack "
                         "file (its own CPU slows the worker: that run's rows/s is not comparable)")
    ap.add_argument("--worker-root", type=Path, default=ROOT,
                    help="run the worker from another checkout of services/ (a baseline)")
    args = ap.parse_args()

    name = f"bench_{secrets.token_hex(3)}"
    s, cluster, session = scratch_keyspace(name)
    port = free_port()
    worker = None
    try:
        rows = args.authors * args.followers * args.posts
        events = CdcEvents(name)
        since = datetime.now(timezone.utc) - timedelta(hours=1)
        small = 2
        authors = [1] if args.authors == 1 else list(range(1_000_000, 1_000_000 + args.authors))
        audiences = audiences_of(authors, args.followers)
        follows = [m for a in authors for f in audiences[a] for m in events.followed(f, a, since)]
        follows += [m for f in range(900_000, 900_100) for m in events.followed(f, small, since)]
        send(s, follows)
        env = {**os.environ, "FEED_TOPIC_PREFIX": name, "FEED_CASSANDRA_KEYSPACE": name,
               "FEED_FANOUT_GROUP_ID": f"{name}.fanout", "FEED_FANOUT_METRICS_PORT": str(port),
               "FEED_FANOUT_CAPACITY_PINNED_ROWS_PER_S": "1000000"}
        log = open(f"/tmp/{name}-worker.log", "wb")
        worker = subprocess.Popen([sys.executable, "-m", "services.fanout"], cwd=args.worker_root, env=env,
                                  stdout=log, stderr=subprocess.STDOUT)
        # The author's follower count: the static count of its follow_edges partition.
        stat = session.prepare("SELECT followers FROM follow_edges WHERE followed_id=? LIMIT 1")

        def count(author: int) -> int:
            found = list(session.execute(stat, (author,)))
            return found[0].followers if found else 0
        wait(lambda: count(small) == 100 and all(count(a) == args.followers for a in authors),
             900, "follows applied", every=1.0)

        now = datetime.now(timezone.utc)
        # Post i of author k: authors interleaved, as a history's posts arrive.
        post_ids = {(i, a): post_id_at(now, i * len(authors) + k)
                    for i in range(args.posts) for k, a in enumerate(authors)}
        posts = [m for (i, a), pid in post_ids.items()
                 for m in events.post_created(events.post_row(pid, a, now))]
        # Every author (and the small one) has no post yet: the topic is empty until now.
        done = announcements(s, author_events_topic(name))
        before = scrape(port, "feed_fanout_inbox_rows_total")
        cassandra_cpu_s, kafka_cpu_s = stack_cpu_meter("cassandra"), stack_cpu_meter("kafka")
        worker_pid = worker.pid
        stores = {"Cassandra": cassandra_cpu_s, "Kafka": kafka_cpu_s}
        alike: list[Charge] = []
        with charged("fan-out (worker)", name,
                     {CLIENT: lambda: tree_cpu_s(worker_pid), **stores}) as charge:
            cpu, cass = tree_cpu_s(worker.pid), cassandra_cpu_s()
            spy = profiler(worker.pid, args.profile) if args.profile else None
            start = time.perf_counter()
            send(s, posts)
            try:
                until_announced(done, set(post_ids.values()), 600)
            finally:
                done.close()
                stop_profiler(spy)
            fan = rows / (time.perf_counter() - start)
            charge.rows = rows
        alike.append(charge)
        # Each post's rows are counted before its announcement is produced.
        counted = scrape(port, "feed_fanout_inbox_rows_total") - before
        if counted < rows:
            raise SystemExit(f"bench: every post was announced, but the worker counted "
                             f"{counted:.0f} inbox rows of {rows}")
        fan_cpu_us = (tree_cpu_s(worker.pid) - cpu) * 1e6 / rows
        fan_cass_us = (cassandra_cpu_s() - cass) * 1e6 / rows
        # The same rows again, by the best raw writer, into a scratch table of the same
        # keyspace (same replication), the worker running and idle. The table is
        # feed_inbox's own definition under another name: same clustering order,
        # compaction, default TTL and compression as the rows the fan-out wrote.
        session.execute(raw_table_cql(cluster, name, "raw_inbox"))
        pairs = [(f, pid) for (_, a), pid in post_ids.items() for f in audiences[a]]
        raw = best_raw_rate(session, pairs, INBOX_TTL_S, table="raw_inbox", server_cpu=cassandra_cpu_s)
        print(f"raw writer: {raw['rows_per_s']:,} rows/s, best of {len(raw['tried'])} settings: {raw['best']}")
        print(f"fan-out:    {fan:,.0f} rows/s ({args.authors} authors x {args.posts} posts x "
              f"{args.followers} followers, to the last post's author event) "
              f"= {fan / raw['rows_per_s']:.0%} of the best raw writer (computed)")
        print(f"CPU per row (computed from /proc and process_time): worker {fan_cpu_us:.1f} µs, "
              f"raw writer {raw['best']['client CPU µs per row (computed)']} µs; Cassandra "
              f"{fan_cass_us:.1f} µs during the fan-out, "
              f"{raw['best']['Cassandra CPU µs per row (computed)']} µs during the raw writer's best")
        by_post = best_of(raw, "posts")
        if by_post is not None:
            # What the fan-out can do at best: it writes each post as it arrives, one
            # partition mutation per row; the best raw writer groups a reader's rows.
            print(f"raw writer post by post (as the fan-out writes): {by_post['rows/s']:,} rows/s, "
                  f"Cassandra {by_post['Cassandra CPU µs per row (computed)']} µs a row; the fan-out is "
                  f"{fan / by_post['rows/s']:.0%} of it (computed)")

        # The contract's floor (bench/fanout/floor.py): the least any fan-out here must do
        # for these posts (read the audience, write the rows, announce each post once), by
        # the cheapest client, into the same scratch table and the worker's author-events
        # topic (its partitions and replication).
        floor = floor_rates(session, [(pid, a) for (_, a), pid in post_ids.items()], audiences, now,
                            INBOX_TTL_S, table="raw_inbox", settings=s,
                            topic=author_events_topic(name), follower_page=s.fanout_follower_page,
                            cassandra_cpu=cassandra_cpu_s, kafka_cpu=stack_cpu_meter("kafka"))
        for step in floor["steps"].values():
            print(f"floor step {step['step']}: {step['rows/s']:,} rows/s "
                  f"= {step['rows/s'] / raw['rows_per_s']:.0%} of the best raw writer (computed); "
                  f"CPU µs a row (computed): client {step['client CPU µs per row (computed)']}, "
                  f"Cassandra {step['Cassandra CPU µs per row (computed)']}, "
                  f"Kafka {step['Kafka CPU µs per row (computed)']}")
        print(f"fan-out / floor: {fan / floor['floor_rows_per_s']:.0%} (computed; target >= 60%); the "
              f"floor is {floor['floor_rows_per_s'] / raw['rows_per_s']:.0%} of the best raw writer "
              f"(computed); fan-out / raw writer target >= 30%")

        # Charged alike (bench/fanout/alike.py): the raw writer's best setting and the
        # floor's best, each once more into its own table, from a settled start to
        # settled compactions, as the fan-out's window above.
        best = raw["best"]
        session.execute(raw_table_cql(cluster, name, "raw_alike"))
        with charged("best raw writer", name, {CLIENT: time.process_time, **stores}) as charge:
            charge.rows = raw_once(session, pairs, INBOX_TTL_S, "raw_alike", best["strategy"],
                                   best["rows per request (at most)"], best["in flight"]).rows
        alike.append(charge)
        session.execute(raw_table_cql(cluster, name, "floor_alike"))
        with charged("floor", name, {CLIENT: time.process_time, **stores}) as charge:
            charge.rows = floor_once(session, [(pid, a) for (_, a), pid in post_ids.items()],
                                     audiences, now, INBOX_TTL_S, table="floor_alike", settings=s,
                                     topic=author_events_topic(name),
                                     follower_page=s.fanout_follower_page,
                                     in_flight=floor["steps"][FLOOR_STEP]["posts in flight"])
        alike.append(charge)
        print("CPU per inbox row charged alike (each side to its own table, from a settled "
              "start until Cassandra flushed it and no compaction was pending or running):")
        print(alike_table(alike, (CLIENT, "Cassandra", "Kafka")))
        fan_alike, floor_alike = alike[0].per_row_us(), alike[2].per_row_us()
        for component, target in ((CLIENT, 2.0), ("Cassandra", 1.5)):
            print(f"fan-out / floor, {component} µs per row: "
                  f"{fan_alike[component] / floor_alike[component]:.2f}x (computed; target <= {target}x)")
        for c in alike:
            print(f"  {c.summary()}")

        consumer = kafka.consumer(s, {"group.id": f"{name}.bench",
                                      "auto.offset.reset": "latest", "enable.auto.commit": False})
        # From the end: the topic holds phase 1's and the floor's events (other authors').
        consumer.subscribe([author_events_topic(name)])
        wait(lambda: consumer.poll(0.2) is None and consumer.assignment(), 60, "bench consumer")
        committed: dict[int, float] = {}
        seen: dict[int, float] = {}
        total = int(args.rate * args.seconds)
        producer = kafka.producer(s, {"partitioner": "murmur2_random",
                                      "enable.idempotence": True, "linger.ms": 0})

        def record(m) -> None:
            # The post's author event's CreateTime: when the worker produced it, right
            # after all the post's rows were written (same machine clock as the commit time).
            event = parse_author(m.value())
            if event.author_id == small:
                seen.setdefault(event.post_id, m.timestamp()[1] / 1000)
        t0 = time.time()
        for i in range(total):
            target = t0 + i / args.rate
            while time.time() < target:
                m = consumer.poll(max(0.0, min(0.05, target - time.time())))
                if m is not None and not m.error():
                    record(m)
            ts = datetime.now(timezone.utc)
            pid = post_id_at(ts, 1000 + i)
            committed[pid] = time.time()
            for c in events.post_created(events.post_row(pid, small, ts)):
                producer.produce(c.topic, key=c.key, value=c.value)
            producer.flush(10)
        deadline = time.time() + 60
        while len(seen.keys() & committed.keys()) < total and time.time() < deadline:
            m = consumer.poll(0.2)
            if m is not None and not m.error():
                record(m)
        consumer.close()
        per_post = scrape(port, "feed_fanout_post_seconds_sum") / max(1, scrape(port, "feed_fanout_post_seconds_count"))
        print(f"worker: {per_post * 1000:.0f} ms per post fan-out on average (all phases)")
        lat = sorted((seen[p] - committed[p]) * 1000 for p in committed if p in seen)
        p50 = statistics.median(lat)
        p95 = lat[min(len(lat) - 1, int(0.95 * len(lat)))]
        print(f"commit-to-inbox: p50 {p50:.0f} ms, p95 {p95:.0f} ms "
              f"({len(lat)}/{total} posts at {args.rate}/s, 100 followers each)")
        return 0
    finally:
        if worker is not None:
            stop_process(worker)
        session.execute(f"DROP KEYSPACE IF EXISTS {name}", timeout=120)
        cluster.shutdown()
        kafka.admin(s).delete_topics([t.name for t in all_topics(name)], operation_timeout=30)


if __name__ == "__main__":
    sys.exit(main())
