"""The pipeline as the benchmark runs it: its own database, keyspace, topic prefix and
ports (so it never touches `make run`'s data), the four real services as subprocesses,
and a sampler that records consumer lag, CDC lag and fan-out progress over the run."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from deploy.lag import group_lag, scrape, slot_lag
from deploy.migrate import migrate_all, migrate_cassandra, migrate_kafka
from deploy.stack.workers import Instance
from services.shared.contracts.topics import (cdc_topic, follow_counts_topic, like_counts_topic,
                                              rank_features_topic)
from services.shared.settings import Settings
from services.shared.clients import cql, kafka, pg

REPO = Path(__file__).resolve().parents[2]
# What each worker group consumes (CDC tables; the ranker also reads rank-features).
CONSUMED = {"fanout": ("posts", "follows", "blocks"), "ranker": ("likes",)}


def consumed_topics(kind: str, prefix: str) -> list[str]:
    """The topics a worker consumes: its CDC tables, and the ranker's feature events."""
    topics = [cdc_topic(t, prefix) for t in CONSUMED[kind]]
    return topics + ([rank_features_topic(prefix)] if kind == "ranker" else [])


# Ports apart from `make run`'s (8080, 9101-9103) so both can run at once.
PORTS = {"api_port": 18080, "cdc_metrics_port": 19101, "fanout_metrics_port": 19102,
         "ranker_metrics_port": 19103}


def bench_settings(name: str = "bench") -> Settings:
    return Settings(pg_database=name, cassandra_keyspace=name, topic_prefix=name, **PORTS)


def env_for(settings: Settings, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ,
           "FEED_PG_DATABASE": settings.pg_database, "FEED_CASSANDRA_KEYSPACE": settings.cassandra_keyspace,
           "FEED_TOPIC_PREFIX": settings.topic_prefix, "FEED_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
           "FEED_PG_PORT": str(settings.pg_port), "FEED_CASSANDRA_HOSTS": settings.cassandra_hosts}
    env.update({f"FEED_{k.upper()}": str(v) for k, v in PORTS.items()})
    env.update(extra or {})
    return env


def maintenance(settings: Settings) -> Settings:
    """``settings`` on database ``postgres``, as the configured role (it has CREATEDB and
    REPLICATION, owns the bench databases and may drop their slots): what creating and
    dropping the bench database needs, on a secured cluster as on the development stack."""
    return settings.model_copy(update={"pg_database": "postgres"})


def drop_slots(settings: Settings) -> None:
    """Drop the bench database's replication slots (its relay is stopped): an idle slot
    would hold the WAL of everything written since, up to max_slot_wal_keep_size. The
    database, keyspace and topics stay for inspection until the next run."""
    with pg.connect(maintenance(settings), autocommit=True) as conn:
        for (slot,) in conn.execute("SELECT slot_name FROM pg_replication_slots WHERE database=%s",
                                    (settings.pg_database,)).fetchall():
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


def drop_database_and_keyspace(settings: Settings, database: str, keyspace: str, timeout: float = 120) -> None:
    """Drop a bench run's Postgres database (its sessions closed) and Cassandra keyspace."""
    with pg.connect(maintenance(settings), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
    cl = cql.cluster(settings, timeout=timeout)
    try:
        cl.connect().execute(f"DROP KEYSPACE IF EXISTS {keyspace}")
    finally:
        cl.shutdown()


def scratch_keyspace(name: str) -> tuple[Settings, Any, Any]:
    """Settings, cluster and session of a new keyspace and topic prefix ``name``, migrated
    (the fan-out benchmarks' own, dropped when they end)."""
    s = Settings(cassandra_keyspace=name, topic_prefix=name)
    migrate_cassandra(s, name)
    migrate_kafka(s, name)
    cluster = cql.cluster(s, timeout=30)
    return s, cluster, cluster.connect(name)


def stop_process(proc: subprocess.Popen, grace_s: float = 30) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``; waits for the exit either way."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def fresh_stores(settings: Settings) -> None:
    """Drop and recreate the bench database, keyspace and topics, then migrate."""
    drop_slots(settings)
    drop_database_and_keyspace(settings, settings.pg_database, settings.cassandra_keyspace)
    with pg.connect(maintenance(settings), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {settings.pg_database}")  # owned by the configured role
    admin = kafka.admin(settings)
    stale = [t for t in admin.list_topics(timeout=15).topics
             if t.startswith(f"{settings.topic_prefix}.") or t.endswith(f".{settings.topic_prefix}")]
    if stale:
        for fut in admin.delete_topics(stale, operation_timeout=60).values():
            fut.result()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and set(stale) & set(admin.list_topics(timeout=15).topics):
            time.sleep(0.5)
    migrate_all(settings, keyspace=settings.cassandra_keyspace, topic_prefix=settings.topic_prefix)


@dataclass
class Services:
    """The four services for one bench run; ``stop()`` ends them all."""

    settings: Settings
    log_dir: Path
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    def start(self, name: str, extra_env: dict[str, str] | None = None, root: Path = REPO,
              *, instance: Instance | None = None) -> None:
        """Start ``services.<name>`` from ``root`` (another checkout: a baseline) and wait
        until it answers; with ``instance`` (deploy/stack/workers.py), that process of its
        role instead, under its name and on its port, as ``make run`` starts it."""
        role = instance.role if instance is not None else name
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_dir / f"{name}.log", "ab")
        env = {**(extra_env or {}), **(instance.port_env if instance is not None else {})}
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", f"services.{role}"], cwd=root, stdout=log,
            stderr=subprocess.STDOUT, env=env_for(self.settings, env), start_new_session=True)
        port = instance.port if instance is not None else PORTS.get(role + "_metrics_port")
        url = (f"http://127.0.0.1:{PORTS['api_port']}/readyz" if role == "api"
               else f"http://127.0.0.1:{port}/metrics")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.procs[name].poll() is not None:
                raise RuntimeError(f"bench: {name} exited; see {self.log_dir / (name + '.log')}")
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"bench: {name} not ready; see {self.log_dir / (name + '.log')}")

    def stop(self, name: str | None = None) -> None:
        for n in ([name] if name else list(self.procs)):
            proc = self.procs.pop(n, None)
            if proc:
                stop_process(proc)


def shut_down(sampler: "Sampler", services: Services, settings: Settings) -> None:
    """End a run: the sampler, then every service, then the run's replication slots."""
    try:
        sampler.stop()
    finally:
        services.stop()
        drop_slots(settings)


@dataclass
class Sample:
    t: float
    fanout_lag: int
    ranker_lag: int
    cdc_lag_bytes: int
    inbox_rows: float


class Sampler(threading.Thread):
    """Records lag and fan-out progress every ``interval`` seconds until stopped."""

    def __init__(self, settings: Settings, interval: float = 1.0,
                 fanout_ports: Sequence[int] | None = None) -> None:
        super().__init__(daemon=True)
        self.settings, self.interval = settings, interval
        # Every fan-out process's metrics port (their inbox-row counters are summed).
        self.fanout_ports = list(fanout_ports or [settings.fanout_metrics_port])
        self.samples: list[Sample] = []
        self.t0 = time.monotonic()
        self._halt = threading.Event()

    def snapshot(self) -> Sample:
        s = self.settings
        lag = {}
        for kind in CONSUMED:
            try:
                lag[kind] = group_lag(s, f"{s.topic_prefix}.{kind}", consumed_topics(kind, s.topic_prefix))
            except Exception:  # noqa: BLE001 - a sample is best effort; unknown = not caught up
                lag[kind] = -1
        try:
            slot = sum(x["lag_bytes"] or 0 for x in slot_lag(s) if x["database"] == s.pg_database)
        except Exception:  # noqa: BLE001
            slot = 0
        return Sample(time.monotonic() - self.t0, lag["fanout"], lag["ranker"], slot, self.inbox_rows())

    def inbox_rows(self) -> float:
        """The fan-out workers' inbox-row counters alone (one scrape each; NaN when one is
        unreachable): cheap enough to poll while a fan-out is being timed."""
        try:
            return sum(v for port in self.fanout_ports
                       for _l, v in scrape(port).get("feed_fanout_inbox_rows_total", []))
        except Exception:  # noqa: BLE001
            return float("nan")

    def sample_after(self, t: float, timeout: float = 30.0) -> Sample:
        """The first recorded sample taken after ``t`` (the thread's own, so a waiter does
        not query Kafka and Postgres a second time); a fresh one if none comes."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.samples and self.samples[-1].t > t:
                return self.samples[-1]
            time.sleep(0.1)
        return self.snapshot()

    def run(self) -> None:
        while not self._halt.is_set():
            self.samples.append(self.snapshot())
            self._halt.wait(self.interval)

    def stop(self) -> None:
        self._halt.set()
        self.join(10)


def records_in(settings: Settings, wanted: Callable[[str], bool]) -> dict[str, int]:
    """Records ever written to each existing topic whose name is ``wanted`` (the sum of
    its partitions' end offsets)."""
    from confluent_kafka import TopicPartition

    meta = kafka.admin(settings).list_topics(timeout=10)
    probe = kafka.consumer(settings, {"group.id": "feed-bench-probe"})
    try:
        return {name: sum(probe.get_watermark_offsets(TopicPartition(name, p), timeout=5)[1]
                          for p in meta.topics[name].partitions)
                for name in sorted(meta.topics) if wanted(name)}
    finally:
        probe.close()


def topic_sizes(settings: Settings, tables: list[str]) -> dict[str, int]:
    """Records ever written to each table's CDC topic (0 for a topic not made yet)."""
    topics = {table: cdc_topic(table, settings.topic_prefix) for table in tables}
    sizes = records_in(settings, set(topics.values()).__contains__)
    return {table: sizes.get(topic, 0) for table, topic in topics.items()}


def wait_caught_up(sampler: Sampler, expected: dict[str, int], *, timeout: float,
                   settle: int = 3, before: dict[str, int] | None = None, label: str = "") -> float:
    """Wait until each table's topic holds at least ``expected[table]`` records (the relay
    has produced every committed row: slot lag alone cannot tell, as a large transaction
    is buffered by Postgres until its commit is decoded) and the workers' lag is zero for
    ``settle`` samples in a row. A progress bar (stderr) counts the records of this load
    (above ``before``) that the relay produced and the workers consumed."""
    from tqdm import tqdm

    base = before or {t: 0 for t in expected}
    total = sum(n - base.get(t, 0) for t, n in expected.items())
    start = time.monotonic()
    quiet = 0
    with tqdm(total=total, desc=label or "pipeline", unit="rec", mininterval=2.0, file=sys.stderr,
              dynamic_ncols=True) as bar:
        while time.monotonic() - start < timeout:
            sizes = topic_sizes(sampler.settings, list(expected))
            # A lag sample taken after the sizes were read, as a fresh snapshot would be.
            s = sampler.sample_after(time.monotonic() - sampler.t0)
            produced = sum(min(sizes[t], n) - base.get(t, 0) for t, n in expected.items())
            bar.n = max(0, min(total, produced - s.fanout_lag - s.ranker_lag))
            bar.set_postfix(produced=produced, lag=s.fanout_lag + s.ranker_lag, refresh=False)
            bar.refresh()
            done = all(sizes[t] >= n for t, n in expected.items())
            quiet = quiet + 1 if done and s.fanout_lag == 0 and s.ranker_lag == 0 else 0
            if quiet >= settle:
                bar.n = total
                return time.monotonic() - start
    raise RuntimeError(f"bench: pipeline did not catch up within {timeout:.0f}s")


def group_caught_up(settings: Settings, group: str, topics: list[str]) -> bool:
    """True when ``group`` has committed the end offset of every partition of ``topics``.

    A follow or a like is done only when its count's owner, in the same worker and group,
    has applied it from the repartition topic (docs/fanout.md, "Counts"): with the follows
    or likes CDC topic, its count topic is waited for too. Otherwise a caller could read a
    count the owner has not written yet (CI found three such races)."""
    from confluent_kafka import TopicPartition

    prefix = settings.topic_prefix
    topics = list(topics)
    for table, counts in (("follows", follow_counts_topic(prefix)), ("likes", like_counts_topic(prefix))):
        if cdc_topic(table, prefix) in topics and counts not in topics:
            topics.append(counts)
    consumer = kafka.consumer(settings, {"group.id": group, "enable.auto.commit": False})
    try:
        meta = consumer.list_topics(timeout=10)
        tps = [TopicPartition(t, p) for t in topics for p in meta.topics[t].partitions]
        committed = consumer.committed(tps, timeout=10)
        for tp in committed:
            _, high = consumer.get_watermark_offsets(tp, timeout=10)
            if high > 0 and tp.offset < high:
                return False
        return True
    finally:
        consumer.close()
