"""What counting follows and likes costs: changes/s of one real worker, before and after.

    .venv/bin/python bench/fanout/counted_changes.py [--baseline-root DIR] [--changes 8000]

For each variant (the working tree, and optionally an older checkout of ``services/`` and
``deploy/`` at ``--baseline-root``: ``git archive <commit> services deploy | tar -x -C DIR``),
on its own keyspace and topic prefix (migrated by that variant's own ``deploy.migrate``,
dropped afterwards), against the running stack: a real ``python -m services.fanout``
(follows) or ``python -m services.ranker`` (likes) is started and warmed up, then the
changes are produced; the rate is changes over the time from the first produced to the
group's committed offsets reaching the end (lag 0). Two shapes each:

* spread: the changes over 300 authors (posts), a few changes per partition per batch;
* hot: over 3 authors (posts): most changes of a batch go to the same partition, the
  case where a conditional write per change would contend.

Each run checks that the stored counts sum to the number of changes (read from
``author_stats`` / ``post_counters`` when the variant has them, else from the static
counts of ``follow_edges`` / ``like_edges``). Absolute numbers depend on what else runs on
the machine: compare variants of one run.
"""
from __future__ import annotations

import argparse
import os
import secrets
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cassandra import InvalidRequest  # noqa: E402

from services.shared.contracts.topics import all_topics, cdc_topic  # noqa: E402
from services.shared.settings import Settings  # noqa: E402
from services.shared.clients import cql, kafka  # noqa: E402
from bench.harness.cdc_events import CdcEvents, CdcMessage, send  # noqa: E402
from bench.harness.pipeline import group_caught_up, stop_process  # noqa: E402

# Ids far from anything the workload generates; every follower / liker is new.
AUTHOR_BASE, FOLLOWER_BASE, POST_BASE, LIKER_BASE = 7_000_000, 8_000_000, 9_000_000, 20_000_000
# Partitions per shape: 300 spreads a batch of 1000 over many partitions, 3 piles it up.
SHAPES = {"spread": 300, "hot": 3}
CATCH_UP_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class Run:
    variant: str
    kind: str      # follows | likes
    shape: str
    changes: int
    per_s: float
    counted: int


def migrate(root: Path, name: str) -> None:
    """The variant's own migrations on a fresh keyspace and topic prefix."""
    code = ("import sys; from deploy.migrate import migrate_cassandra, migrate_kafka; "
            "from services.shared.settings import Settings; "
            f"s = Settings(cassandra_keyspace={name!r}, topic_prefix={name!r}); "
            f"migrate_cassandra(s, {name!r}); migrate_kafka(s, {name!r})")
    subprocess.run([sys.executable, "-c", code], cwd=root, check=True)


def wait_caught_up(s: Settings, group: str, topic: str, worker: subprocess.Popen) -> None:
    deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
    while not group_caught_up(s, group, [topic]):
        if worker.poll() is not None:
            raise SystemExit(f"bench: worker exited with {worker.returncode}")
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: timed out waiting for {group}")
        time.sleep(0.1)


def timed(module: str, root: Path, s: Settings, table: str, warm: list[CdcMessage],
          changes: list[CdcMessage], log: Path) -> float:
    """Changes/s of one worker over ``changes``, after it applied ``warm``."""
    group = f"{s.topic_prefix}.{table}"
    topic = cdc_topic(table, s.topic_prefix)
    env = {**os.environ, "FEED_TOPIC_PREFIX": s.topic_prefix, "FEED_CASSANDRA_KEYSPACE": s.cassandra_keyspace,
           "FEED_FANOUT_GROUP_ID": group, "FEED_RANKER_GROUP_ID": group,
           "FEED_FANOUT_METRICS_PORT": "0", "FEED_RANKER_METRICS_PORT": "0",
           "FEED_KAFKA_COMMIT_INTERVAL_S": "0.2", "FEED_FANOUT_CAPACITY_PINNED_ROWS_PER_S": "1000000"}
    send(s, warm)
    worker = subprocess.Popen([sys.executable, "-m", module], cwd=root, env=env,
                              stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    try:
        wait_caught_up(s, group, topic, worker)
        start = time.perf_counter()
        send(s, changes)
        wait_caught_up(s, group, topic, worker)
        return sum(1 for m in changes if m.value is not None) / (time.perf_counter() - start)
    finally:
        stop_process(worker)


def stored_total(session, old: str, new: str) -> int:
    """Sum of the stored counts, wherever this variant keeps them."""
    try:
        return sum(r[0] or 0 for r in session.execute(old))
    except InvalidRequest:  # no counter table: the counts are static columns
        return sum(r[1] or 0 for r in session.execute(new))


def run_variant(label: str, root: Path, n: int) -> list[Run]:
    runs = []
    for shape, partitions in SHAPES.items():
        name = f"bench_cnt_{secrets.token_hex(3)}"
        s = Settings(cassandra_keyspace=name, topic_prefix=name)
        migrate(root, name)
        cluster = cql.cluster(s, timeout=60)
        session = cluster.connect(name)
        events = CdcEvents(name)
        try:
            since = datetime.now(timezone.utc) - timedelta(days=1)
            follows = [m for i in range(n) for m in events.followed(FOLLOWER_BASE + i, AUTHOR_BASE + i % partitions, since)]
            rate = timed("services.fanout", root, s, "follows", events.followed(FOLLOWER_BASE - 1, AUTHOR_BASE, since),
                         follows, Path(f"/tmp/{name}-fanout.log"))
            counted = stored_total(session, "SELECT followers FROM author_stats",
                                   "SELECT DISTINCT followed_id, followers FROM follow_edges")
            runs.append(Run(label, "follows", shape, n, rate, counted - 1))
            now = datetime.now(timezone.utc)
            likes = [m for i in range(n) for m in events.liked(POST_BASE + i % partitions, LIKER_BASE + i, now)]
            rate = timed("services.ranker", root, s, "likes", events.liked(POST_BASE, LIKER_BASE - 1, now),
                         likes, Path(f"/tmp/{name}-ranker.log"))
            counted = stored_total(session, "SELECT likes FROM post_counters",
                                   "SELECT DISTINCT post_id, likes FROM like_edges")
            runs.append(Run(label, "likes", shape, n, rate, counted - 1))
            for r in runs[-2:]:
                print(f"[{r.variant}] {r.kind:<7} {r.shape:<6} {r.per_s:>8,.0f}/s  counted {r.counted} "
                      f"of {r.changes}", flush=True)
        finally:
            session.execute(f"DROP KEYSPACE IF EXISTS {name}", timeout=120)
            cluster.shutdown()
            kafka.admin(s).delete_topics([t.name for t in all_topics(name)], operation_timeout=30)
    return runs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline-root", type=Path, help="an older services/ + deploy/ checkout")
    ap.add_argument("--changes", type=int, default=8000, help="changes per kind and shape")
    ap.add_argument("--rounds", type=int, default=1, help="alternate the variants this many times")
    args = ap.parse_args()
    runs: list[Run] = []
    for _ in range(args.rounds):
        if args.baseline_root:
            runs += run_variant("baseline", args.baseline_root, args.changes)
        runs += run_variant("current", ROOT, args.changes)
    groups: dict[tuple[str, str, str], list[Run]] = {}
    for r in runs:
        groups.setdefault((r.kind, r.shape, r.variant), []).append(r)
    print(f"\nmedians of {args.rounds}\nvariant    kind     shape   changes/s  all counted")
    for (kind, shape, variant), rs in sorted(groups.items()):
        print(f"{variant:<10} {kind:<8} {shape:<6} {statistics.median(r.per_s for r in rs):>10,.0f}  "
              f"{all(r.counted == r.changes for r in rs)}")
    return 0 if all(r.counted == r.changes for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
