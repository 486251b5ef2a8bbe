"""Reconciliation reports follower-count drift against Postgres and repairs nothing."""
from __future__ import annotations

import secrets
from datetime import datetime, timezone

from services.fanout.jobs.reconcile import FollowerDrift, follower_drift, reconcile
from services.shared.domain.owned_counts import write_time
from services.shared.clients import pg


def test_drift_is_the_difference_per_author_with_missing_as_zero():
    assert follower_drift({1: 2, 2: 5, 3: 1}, {1: 2, 2: 4, 4: 1}) == [
        FollowerDrift(2, 5, 4), FollowerDrift(3, 1, 0), FollowerDrift(4, 0, 1)]


def test_reconcile_reports_drift_between_cassandra_and_postgres_without_repairing(worker_env):
    env = worker_env
    base = secrets.randbelow(1 << 40) + 1000
    right, wrong, fans = base, base + 1, [base + 10 + i for i in range(3)]
    with pg.connect(env.settings) as conn:
        for u in [right, wrong, *fans]:
            conn.execute("INSERT INTO users (user_id) VALUES (%s)", (u,))
        for f in fans:
            for a in (right, wrong):
                conn.execute("INSERT INTO follows VALUES (%s, %s, %s)", (f, a, datetime.now(timezone.utc)))
        conn.commit()
    for author, stored in ((right, 3), (wrong, 5)):  # at an owned write time, as the owner writes
        env.session.execute("UPDATE follow_edges USING TIMESTAMP %s SET followers = %s, lsn = 0 "
                            "WHERE followed_id=%s AND follower_id = -1", (write_time(1, 0), stored, author))
    drift = {d.author_id: d for d in reconcile(env.settings) if d.author_id in (right, wrong)}
    assert drift == {wrong: FollowerDrift(wrong, 5, 3)}
    assert env.rows("SELECT followers FROM follow_edges WHERE followed_id=%s LIMIT 1", wrong)[0].followers == 5
