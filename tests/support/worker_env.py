"""Harness for the fan-out and ranker integration tests.

``open_worker_env`` (the ``worker_env`` fixture) gives each test its own Cassandra keyspace and Kafka topic prefix
(derived from the session's ``settings``), so one test's events are never replayed into
another's; workers run as real subprocesses (``python -m services.fanout``) with their
own consumer group, so a test can SIGKILL one and start another.
"""
from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.shared.settings import Settings
from services.shared.clients import cql
from bench.harness.cdc_events import CdcEvents, CdcMessage, send

from .waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]  # the repository
_SEQ = itertools.count(1)


# A worker subprocess starts, joins its consumer group and catches up before the
# condition can hold: far longer than an in-process check.
WORKER_WAIT_S = 60.0


def wait_for_workers(condition: Callable[[], Any], *, timeout: float = WORKER_WAIT_S,
                     interval: float = 0.1, message: str = "condition") -> Any:
    """``wait_until`` with a worker's deadline."""
    return wait_until(condition, timeout=timeout, interval=interval, message=message)


@dataclass
class WorkerEnv:
    settings: Settings
    events: CdcEvents
    session: Any
    log_dir: Path
    procs: list[subprocess.Popen] = field(default_factory=list)

    def send(self, *batches: list[CdcMessage]) -> None:
        send(self.settings, [m for batch in batches for m in batch])

    def start(self, module: str, group: str, **overrides: Any) -> subprocess.Popen:
        """Start ``python -m <module>`` on this test's keyspace and topics."""
        env = dict(os.environ)
        values = {"topic_prefix": self.settings.topic_prefix,
                  "cassandra_keyspace": self.settings.cassandra_keyspace,
                  "pg_database": self.settings.pg_database,
                  "fanout_group_id": group, "ranker_group_id": group,
                  "fanout_metrics_port": 0, "ranker_metrics_port": 0,
                  "kafka_session_timeout_s": 6.0, "kafka_commit_interval_s": 0.5,
                  # Pinned so tier decisions do not depend on this machine's speed.
                  "fanout_capacity_pinned_rows_per_s": 100_000.0,
                  "tier_min_dwell_s": 0.0,
                  # No verifier: these workers share the session's database with tests
                  # that leave copies stale on purpose, which it would repair mid-test.
                  "visibility_verify_every_s": 0, **overrides}
        env.update({f"FEED_{k.upper()}": str(v) for k, v in values.items()})
        log = open(self.log_dir / f"{module}-{group}-{len(self.procs)}.log", "wb")
        proc = subprocess.Popen([sys.executable, "-m", module], cwd=ROOT, env=env,
                                stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def kill(self, proc: subprocess.Popen) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)

    def stop(self, proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill(proc)

    def rows(self, query: str, *params: Any) -> list[Any]:
        return list(self.session.execute(query, params))

    def inbox(self, reader_id: int) -> list[int]:
        return [r.post_id for r in self.rows("SELECT post_id FROM feed_inbox WHERE reader_id=%s", reader_id)]


def open_worker_env(settings: Settings, tmp_path: Path) -> Iterator[WorkerEnv]:
    """A ``WorkerEnv`` on its own keyspace and topic prefix derived from ``settings``;
    stops its workers, prints their logs' tails and drops the keyspace at the end (the
    ``worker_env`` fixture, tests/integration/conftest.py)."""
    from deploy.migrate import migrate_cassandra, migrate_kafka

    name = f"{settings.topic_prefix}_w{next(_SEQ)}"
    test_settings = settings.model_copy(update={"topic_prefix": name, "cassandra_keyspace": name})
    migrate_cassandra(test_settings, name)
    migrate_kafka(test_settings, name)
    cluster = cql.cluster(test_settings, timeout=30)
    session = cluster.connect(name)
    env = WorkerEnv(test_settings, CdcEvents(name), session, tmp_path)
    try:
        yield env
    finally:
        for proc in env.procs:
            env.stop(proc)
        for log in sorted(tmp_path.glob("*.log")):
            tail = log.read_bytes()[-3000:].decode("utf-8", "replace")
            print(f"--- {log.name} (tail)\n{tail}")
        try:
            session.execute(f"DROP KEYSPACE IF EXISTS {name}", timeout=60)
        finally:
            cluster.shutdown()


SERVING_TABLES = ("posts", "author_timeline", "feed_inbox", "following", "followers", "blocks",
                  "follow_edges", "author_tiers", "celebrities", "post_likes", "like_edges")


def follower_counts(env: WorkerEnv) -> dict[int, int]:
    """Every author's stored follower count (the static count of its follow_edges partition)."""
    return {r.followed_id: r.followers for r in env.rows("SELECT DISTINCT followed_id, followers FROM follow_edges")
            if r.followers is not None}


def follower_count(env: WorkerEnv, author_id: int) -> int | None:
    """One author's stored follower count; None before anything was counted."""
    rows = env.rows("SELECT followers FROM follow_edges WHERE followed_id=%s LIMIT 1", author_id)
    return rows[0].followers if rows else None


def like_counts(env: WorkerEnv) -> dict[int, int]:
    """Every post's stored like count (the static count of its like_edges partition)."""
    return {r.post_id: r.likes for r in env.rows("SELECT DISTINCT post_id, likes FROM like_edges")
            if r.likes is not None}


def serving_state(env: WorkerEnv) -> dict[str, list[tuple]]:
    """Every row of every serving table, sorted (write timestamps excluded)."""
    state = {}
    for table in SERVING_TABLES:
        rows = env.rows(f"SELECT * FROM {table}")
        state[table] = sorted(tuple(sorted((k, repr(v)) for k, v in r._asdict().items())) for r in rows)
    return state
