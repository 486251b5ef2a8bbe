"""Versioned, idempotent migrations for all three stores, applied by one command.

    python -m deploy.migrate [--only postgres|cassandra|kafka] [--stack]

Postgres and Cassandra files in ``deploy/migrations/<store>/NNNN_name.{sql,cql}`` are
applied in order and recorded in a ``schema_migrations`` table, so a second run does
nothing. Kafka topics come from ``services/shared/contracts/topics.py``, sized by
``FEED_KAFKA_PARTITIONS`` and ``FEED_KAFKA_TOPIC_PARTITIONS``. An existing topic with fewer
partitions than declared is grown when its records stand alone (``Growth.IN_PLACE``);
any other is left as it is and reported with why and how (docs/deploy.md, "Growing a
topic"); a topic is never shrunk.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from services.shared.contracts.topics import Growth, TopicSpec, all_topics
from services.shared.settings import MigrateProcess, load
from services.shared.settings.services import partition_counts
from services.shared.clients import cql, kafka, pg
from services.shared.clients.preflight import preflight

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def _files(store: str, suffix: str) -> list[tuple[str, Path]]:
    out = []
    for path in sorted((MIGRATIONS / store).glob(f"*.{suffix}")):
        version = path.name.split("_", 1)[0]
        out.append((version, path))
    return out


def migrate_postgres(settings: MigrateProcess) -> list[str]:
    applied: list[str] = []
    with pg.connect(settings) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations ("
                     "version TEXT PRIMARY KEY, name TEXT NOT NULL, "
                     "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
        conn.commit()
        done = {r[0] for r in conn.execute("SELECT version FROM schema_migrations")}
        for version, path in _files("postgres", "sql"):
            if version in done:
                continue
            with conn.transaction():
                # Serialise concurrent migrators (two test workers, say).
                conn.execute("SELECT pg_advisory_xact_lock(724211)")
                if conn.execute("SELECT 1 FROM schema_migrations WHERE version=%s",
                                (version,)).fetchone():
                    continue
                conn.execute(path.read_text())
                conn.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
                             (version, path.name))
            applied.append(path.name)
    return applied


def _cql_statements(text: str) -> list[str]:
    text = re.sub(r"--[^\n]*", "", text)
    return [s.strip() for s in text.split(";") if s.strip()]


def migrate_cassandra(settings: MigrateProcess, keyspace: str | None = None) -> list[str]:
    ks = keyspace or settings.cassandra_keyspace
    applied: list[str] = []
    cl = cql.cluster(settings, timeout=60)
    try:
        session = cl.connect()
        session.execute(
            f"CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = "
            f"{{'class': 'SimpleStrategy', 'replication_factor': {settings.cassandra_replication_factor}}}")
        session.set_keyspace(ks)
        session.execute("CREATE TABLE IF NOT EXISTS schema_migrations "
                        "(version text PRIMARY KEY, name text, applied_at timestamp)")
        done = {r.version for r in session.execute("SELECT version FROM schema_migrations")}
        for version, path in _files("cassandra", "cql"):
            if version in done:
                continue
            for statement in _cql_statements(path.read_text()):
                session.execute(statement)  # every statement is IF NOT EXISTS
            session.execute("INSERT INTO schema_migrations (version, name, applied_at) "
                            "VALUES (%s, %s, toTimestamp(now()))", (version, path.name))
            applied.append(path.name)
        if settings.cassandra_replication_factor > 1:  # one replica: nothing to speculate on
            applied += _speculative_retry(session, ks, settings.cassandra_speculative_retry)
        cl.control_connection.wait_for_schema_agreement()
    finally:
        cl.shutdown()
    return applied


def _speculative_retry(session: Any, keyspace: str, wanted: str) -> list[str]:
    """Every table of ``keyspace`` set to ``wanted`` (Settings.cassandra_speculative_retry);
    tables already set are left alone, so a migrated keyspace costs one read."""
    rows = session.execute("SELECT table_name, speculative_retry FROM system_schema.tables "
                           "WHERE keyspace_name = %s", (keyspace,))
    changed = []
    for row in rows:
        if row.speculative_retry.replace(" ", "").lower() != wanted.replace(" ", "").lower():
            session.execute(f"ALTER TABLE {row.table_name} WITH speculative_retry = '{wanted}'")
            changed.append(f"{row.table_name}: speculative_retry {wanted}")
    return changed


# What to do instead of growing a topic in place (docs/deploy.md, "Growing a topic").
NOT_GROWN = {
    Growth.DRAINED: "a key's records must stay in order: stop its producers, wait for the "
                    "consumers' lag to reach zero, then grow it with kafka-topics --alter",
    Growth.NEVER: "one writer owns each key's count: raise FEED_COUNTS_GENERATION, then "
                  "recreate the topic and rebuild the counts instead",
}


def wanted_topics(settings: MigrateProcess, prefix: str | None = None) -> list[TopicSpec]:
    return all_topics(prefix or settings.topic_prefix,
                      partition_counts(settings.kafka_topic_partitions), settings.kafka_partitions)


def migrate_kafka(settings: MigrateProcess, prefix: str | None = None) -> list[str]:
    from confluent_kafka.cimpl import NewPartitions, NewTopic  # re-exported untyped

    admin = kafka.admin(settings)
    meta = admin.list_topics(timeout=15)
    brokers = len(meta.brokers)
    rf = 3 if brokers >= 3 else 1
    wanted = wanted_topics(settings, prefix)
    done: list[str] = []
    missing = [t for t in wanted if t.name not in meta.topics]
    grow: list[tuple[TopicSpec, int]] = []
    for spec in wanted:
        if spec.name not in meta.topics:
            continue
        have = len(meta.topics[spec.name].partitions)
        if have >= spec.partitions:
            continue
        if spec.growth is Growth.IN_PLACE:
            grow.append((spec, have))
        else:
            print(f"migrate: kafka: {spec.name} has {have} partitions, declared {spec.partitions}: "
                  f"not grown ({NOT_GROWN[spec.growth]})", file=sys.stderr)
    if missing:
        futures = admin.create_topics(
            [NewTopic(t.name, num_partitions=t.partitions, replication_factor=rf, config=t.config)
             for t in missing], operation_timeout=30)
        for name, fut in futures.items():
            try:
                fut.result()
                done.append(name)
            except Exception as exc:  # noqa: BLE001
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise
    if grow:
        futures = admin.create_partitions(
            [NewPartitions(spec.name, spec.partitions) for spec, _ in grow], operation_timeout=30)
        sizes = {spec.name: (have, spec.partitions) for spec, have in grow}
        for name, fut in futures.items():
            fut.result()
            done.append(f"{name} ({sizes[name][0]} -> {sizes[name][1]} partitions)")
    return done


def migrate_all(settings: MigrateProcess, *, keyspace: str | None = None,
                topic_prefix: str | None = None, only: str | None = None) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    if only in (None, "postgres"):
        out["postgres"] = migrate_postgres(settings)
    if only in (None, "cassandra"):
        out["cassandra"] = migrate_cassandra(settings, keyspace)
    if only in (None, "kafka"):
        out["kafka"] = migrate_kafka(settings, topic_prefix)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.migrate", description=__doc__)
    parser.add_argument("--only", choices=["postgres", "cassandra", "kafka"])
    parser.add_argument("--keyspace")
    parser.add_argument("--topic-prefix")
    parser.add_argument("--stack", action="store_true",
                        help="the local development stack's addresses, replication and "
                             "client security for every FEED_* variable not set (make migrate)")
    args = parser.parse_args()
    if args.stack:
        # RF 3 on three nodes: ``make up NODES=3 && make migrate NODES=3`` must not create
        # a keyspace with one replica. Without --stack only the environment counts, so a
        # FEED_PG_CONNINFO is not overridden by the stack's loopback host.
        from deploy.stack.layout import Layout
        Layout.from_env().use_as_default()
    settings = load(MigrateProcess)
    # A store that refuses our credentials or TLS: one line naming it and the setting.
    preflight(settings, [args.only] if args.only else ("postgres", "cassandra", "kafka"))
    result = migrate_all(settings, keyspace=args.keyspace, topic_prefix=args.topic_prefix,
                         only=args.only)
    for store, names in result.items():
        print(f"migrate: {store}: " + (", ".join(names) if names else "up to date"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
