"""Follow and like ingestion benchmark: how fast one real worker applies graph changes.

    .venv/bin/python bench/fanout/follows.py [--follows 20000] [--authors 300]
        [--posts-per-author 2] [--likes 20000] [--liked-posts 300]
        [--baseline-root DIR] [--baseline-fraction 0.25]

For each variant (the working tree, and optionally an older checkout of ``services/`` at
``--baseline-root``, e.g. ``git archive <commit> services deploy | tar -x -C DIR``), on its
own keyspace and topic prefix (dropped afterwards), against the running stack:

1. raw: the best raw writer (``bench/fanout/raw_writer.py``) on inbox rows: the store's
   speed in this run.
2. follows: ``--authors`` authors each already have ``--posts-per-author`` fanned-out posts
   of the last 3 days (written straight into Cassandra: posts processed before the
   follows). A real ``python -m services.fanout`` is started and warmed up, then
   ``--follows`` follow changes (Debezium format, following_since 30 days ago, as the
   workload's COPY load has it) are produced; the rate is follows over the time from
   the first produced to the group's committed offsets reaching the end (lag 0).
   Checked: the follower counters sum to the follows, every follower got the authors'
   posts (backfill).
3. likes: the same with ``python -m services.ranker`` and ``--likes`` like changes spread
   over ``--liked-posts`` posts; checked: the like counters sum to the likes.

Absolute numbers depend on the machine and what else runs on it: compare the ratios of
one run.
"""
from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from confluent_kafka import TopicPartition  # noqa: E402

from bench.fanout.raw_writer import best_raw_rate  # noqa: E402
from bench.harness.cdc_events import CdcEvents, post_id_at, send  # noqa: E402
from bench.harness.pipeline import scratch_keyspace, stop_process  # noqa: E402
from services.shared.clients import kafka  # noqa: E402
from services.shared.contracts.topics import all_topics, cdc_topic  # noqa: E402
from services.shared.domain import ids, ranking
from services.shared.domain.rules import INBOX_TTL_S, VISIBLE  # noqa: E402
from services.shared.settings import KafkaSettings, Settings  # noqa: E402

# Ids far from anything the workload generates; followers are unique per follow.
AUTHOR_BASE, FOLLOWER_BASE, LIKED_POST_BASE, LIKER_BASE = 7_000_000, 8_000_000, 9_000_000, 20_000_000
# The workload's COPY load puts following_since 30 days back: every follow looks at the
# full backfill horizon (8 day buckets).
FOLLOW_SINCE_DAYS = 30
RAW_ROWS = 20_000
CATCH_UP_TIMEOUT_S = 3600.0


@dataclass
class VariantResult:
    label: str
    raw_rows_per_s: float
    follows_per_s: float
    follows: int
    likes_per_s: float
    likes: int


class GroupProgress:
    """Committed offsets of a consumer group against the end offsets of its topics."""

    def __init__(self, settings: KafkaSettings, group: str, topics: list[str]) -> None:
        self._consumer = kafka.consumer(settings, {"group.id": group, "enable.auto.commit": False})
        meta = self._consumer.list_topics(timeout=10)
        self._tps = [TopicPartition(t, p) for t in topics for p in meta.topics[t].partitions]

    def caught_up(self) -> bool:
        for tp in self._consumer.committed(self._tps, timeout=10):
            _, high = self._consumer.get_watermark_offsets(tp, timeout=10)
            if high > 0 and tp.offset < high:
                return False
        return True

    def close(self) -> None:
        self._consumer.close()


def wait_caught_up(progress: GroupProgress, what: str) -> None:
    deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
    while not progress.caught_up():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: timed out waiting for {what}")
        time.sleep(0.1)


def start_worker(module: str, root: Path, s: Settings, group: str, log_path: Path) -> subprocess.Popen:
    env = {**os.environ, "FEED_TOPIC_PREFIX": s.topic_prefix,
           "FEED_CASSANDRA_KEYSPACE": s.cassandra_keyspace,
           "FEED_FANOUT_GROUP_ID": group, "FEED_RANKER_GROUP_ID": group,
           "FEED_FANOUT_METRICS_PORT": "0", "FEED_RANKER_METRICS_PORT": "0",
           "FEED_KAFKA_COMMIT_INTERVAL_S": "0.2",
           "FEED_FANOUT_CAPACITY_PINNED_ROWS_PER_S": "1000000"}
    return subprocess.Popen([sys.executable, "-m", module], cwd=root, env=env,
                            stdout=open(log_path, "wb"), stderr=subprocess.STDOUT)


def seed_author_posts(session, authors: list[int], per_author: int) -> None:
    """Posts already fanned out before the follows: the backfill must bring them."""
    now = datetime.now(timezone.utc)
    copy = session.prepare("UPDATE posts USING TIMESTAMP 1 SET author_id=?, created_at=?, "
                           f"visibility={VISIBLE}, deleted=false, fanned_out=true WHERE post_id=?")
    key = session.prepare("UPDATE posts USING TIMESTAMP ? SET rank_key=? WHERE post_id=?")
    part = session.prepare("INSERT INTO author_timeline (author_id, bucket, rank_key, post_id) "
                           "VALUES (?,?,?,?) USING TIMESTAMP ?")
    for a in authors:
        for i in range(per_author):
            created = now - timedelta(hours=36 * (i + 1) / per_author)
            post = post_id_at(created, a % 4096)
            rank = ranking.rank_key(None, int(created.timestamp() * 1000))
            created_us = int(created.timestamp() * 1_000_000)
            session.execute(copy, (a, created, post))
            session.execute(key, (created_us, rank, post))
            session.execute(part, (a, ids.day_bucket(post), rank, post, created_us))


def timed_changes(module: str, root: Path, s: Settings, table: str, warm_up: list, changes: list,
                  log_path: Path) -> float:
    """Changes/s for one worker: warm it up on ``warm_up``, then time ``changes`` to lag 0."""
    group = f"{s.topic_prefix}.{module.rsplit('.', 1)[-1]}"
    topic = cdc_topic(table, s.topic_prefix)
    send(s, warm_up)
    worker = start_worker(module, root, s, group, log_path)
    progress = None
    try:
        deadline = time.monotonic() + 120
        while progress is None:
            try:
                progress = GroupProgress(s, group, [topic])
            except KeyError:
                time.sleep(0.5)
            if time.monotonic() > deadline:
                raise SystemExit("bench: topic metadata never appeared")
        wait_caught_up(progress, f"{module} warm-up")
        start = time.perf_counter()
        send(s, changes)
        wait_caught_up(progress, f"{module} changes")
        elapsed = time.perf_counter() - start
        if worker.poll() is not None:
            raise SystemExit(f"bench: {module} exited with {worker.returncode} (see {log_path})")
        return sum(1 for m in changes if m.value is not None) / elapsed
    finally:
        if progress is not None:
            progress.close()
        stop_process(worker)


def run_variant(label: str, root: Path, args: argparse.Namespace, fraction: float) -> VariantResult:
    name = f"bench_{secrets.token_hex(3)}"
    s, cluster, session = scratch_keyspace(name)
    try:
        # The best raw writer (bench/fanout/raw_writer.py) on inbox rows of 5,000 readers:
        # the store's speed in this run.
        raw = best_raw_rate(session, [(10**12 + i % 5000, i + 1) for i in range(RAW_ROWS)],
                            INBOX_TTL_S)["rows_per_s"]
        session.execute("TRUNCATE feed_inbox")
        authors = [AUTHOR_BASE + i for i in range(args.authors)]
        seed_author_posts(session, authors, args.posts_per_author)
        events = CdcEvents(name)
        since = datetime.now(timezone.utc) - timedelta(days=FOLLOW_SINCE_DAYS)
        n_follows = max(1, int(args.follows * fraction))
        follows = [m for i in range(n_follows)
                   for m in events.followed(FOLLOWER_BASE + i, authors[i % len(authors)], since)]
        warm = events.followed(FOLLOWER_BASE - 1, authors[0], since)
        log_dir = Path("/tmp")
        f_rate = timed_changes("services.fanout", root, s, "follows", warm, follows,
                               log_dir / f"{name}-fanout.log")
        counted = sum(r.followers or 0 for r in session.execute(
            "SELECT DISTINCT followed_id, followers FROM follow_edges"))
        inbox_rows = session.execute("SELECT count(*) AS n FROM feed_inbox", timeout=120).one().n
        expect_rows = (n_follows + 1) * args.posts_per_author
        print(f"[{label}] follows: {f_rate:,.0f}/s ({n_follows} changes); follower counters "
              f"sum {counted} (expect {n_follows + 1}); backfilled inbox rows {inbox_rows} "
              f"(expect {expect_rows})", flush=True)

        now = datetime.now(timezone.utc)
        n_likes = max(1, int(args.likes * fraction))
        likes = [m for i in range(n_likes)
                 for m in events.liked(LIKED_POST_BASE + i % args.liked_posts, LIKER_BASE + i, now)]
        warm = events.liked(LIKED_POST_BASE, LIKER_BASE - 1, now)
        l_rate = timed_changes("services.ranker", root, s, "likes", warm, likes,
                               log_dir / f"{name}-ranker.log")
        counted = sum(r.likes or 0 for r in session.execute("SELECT DISTINCT post_id, likes FROM like_edges"))
        print(f"[{label}] likes: {l_rate:,.0f}/s ({n_likes} changes over {args.liked_posts} posts); "
              f"like counters sum {counted} (expect {n_likes + 1})", flush=True)
        return VariantResult(label, raw, f_rate, n_follows, l_rate, n_likes)
    finally:
        session.execute(f"DROP KEYSPACE IF EXISTS {name}", timeout=120)
        cluster.shutdown()
        kafka.admin(s).delete_topics([t.name for t in all_topics(name)], operation_timeout=30)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--follows", type=int, default=20_000)
    ap.add_argument("--authors", type=int, default=300)
    ap.add_argument("--posts-per-author", type=int, default=2)
    ap.add_argument("--likes", type=int, default=20_000)
    ap.add_argument("--liked-posts", type=int, default=300)
    ap.add_argument("--baseline-root", type=Path, help="an older services/ checkout to compare")
    ap.add_argument("--baseline-fraction", type=float, default=0.25,
                    help="share of the changes the (slow) baseline gets")
    args = ap.parse_args()
    results = []
    if args.baseline_root:
        results.append(run_variant("baseline", args.baseline_root, args, args.baseline_fraction))
    results.append(run_variant("current", ROOT, args, 1.0))
    print("\nvariant    raw rows/s   follows/s  (vs raw)   likes/s  (vs raw)")
    for r in results:
        print(f"{r.label:<10} {r.raw_rows_per_s:>10,.0f} {r.follows_per_s:>11,.0f} "
              f"{r.follows_per_s / r.raw_rows_per_s:>8.1%} {r.likes_per_s:>9,.0f} "
              f"{r.likes_per_s / r.raw_rows_per_s:>8.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
