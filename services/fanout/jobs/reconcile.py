"""``python -m services.fanout.jobs.reconcile``: compare follower counts with Postgres; report drift.

The follower counts (``follow_edges.followers``, moved with each follow's state by the
count's one owner, the fan-out's ``follow_counts`` agent) are denormalised. This job
recounts ``follows`` in Postgres (run it against a replica in production), compares,
prints every author whose stored count differs, and exports the number of drifting
authors (gauge ``feed_reconcile_follower_drift_authors``, to a Prometheus textfile when
``--metrics-file`` is given). It never repairs: drift means a consumer bug to find, or
follows still in flight (compare twice before acting).
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from typing import Mapping

from prometheus_client import REGISTRY, write_to_textfile

from services.fanout.copies import FOLLOW_EDGES
from services.fanout.metrics import FOLLOWER_DRIFT
from services.shared.settings import FanoutProcess, load
from services.shared.clients import cql, pg

# Partitions of follow_edges read at once: bounded memory on a large keyspace.
PAGE_SIZE = 5000


@dataclass(frozen=True)
class FollowerDrift:
    author_id: int
    stored: int
    actual: int

    @property
    def difference(self) -> int:
        return self.stored - self.actual


def follower_drift(stored: Mapping[int, int], actual: Mapping[int, int]) -> list[FollowerDrift]:
    """Authors whose stored count differs from the true count (missing = 0). Pure."""
    authors = set(stored) | set(actual)
    return sorted((FollowerDrift(a, stored.get(a, 0), actual.get(a, 0)) for a in authors
                   if stored.get(a, 0) != actual.get(a, 0)), key=lambda d: d.author_id)


def stored_counts(settings: FanoutProcess) -> dict[int, int]:
    cluster = cql.cluster(settings, timeout=30)
    try:
        session = cluster.connect(settings.cassandra_keyspace)
        session.default_fetch_size = PAGE_SIZE
        # One row per author: the partition key and its static count.
        return {int(r[0]): int(r[1] or 0) for r in session.execute(FOLLOW_EDGES.all_counts_cql())}
    finally:
        cluster.shutdown()


def actual_counts(settings: FanoutProcess) -> dict[int, int]:
    with pg.connect(settings) as conn:
        return {a: n for a, n in conn.execute(
            "SELECT followed_id, count(*) FROM follows GROUP BY followed_id")}


def reconcile(settings: FanoutProcess) -> list[FollowerDrift]:
    drift = follower_drift(stored_counts(settings), actual_counts(settings))
    FOLLOWER_DRIFT.set(len(drift))
    return drift


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.fanout.jobs.reconcile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="one JSON object per drifting author")
    parser.add_argument("--metrics-file", help="write the drift gauge to this Prometheus textfile")
    parser.add_argument("--fail-on-drift", action="store_true", help="exit 1 when any drift")
    args = parser.parse_args(argv)
    drift = reconcile(load(FanoutProcess))
    for d in drift:
        if args.json:
            print(json.dumps({**asdict(d), "difference": d.difference}))
        else:
            print(f"author {d.author_id}: stored {d.stored}, postgres {d.actual} ({d.difference:+d})")
    print(f"reconcile: {len(drift)} author(s) with follower-count drift", file=sys.stderr)
    if args.metrics_file:
        write_to_textfile(args.metrics_file, REGISTRY)
    return 1 if drift and args.fail_on_drift else 0


if __name__ == "__main__":
    sys.exit(main())
