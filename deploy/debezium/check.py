"""Interoperability check: real Debezium and the relay capture the same changes; compare.

    make debezium-check        (or: .venv/bin/python -m deploy.debezium.check)

On a scratch database: seed rows, start the relay (topic prefix ``<db>_relay``, its own
slot) and Kafka Connect standalone with Debezium's PostgreSQL connector 3.6.1
(``plugin.name=pgoutput``, prefix ``<db>_dbz``, its own slot and publication), wait for
both snapshots, apply the same changes once, then compare every record field by field.
Known, documented differences (docs/cdc.md) are listed as such; anything else fails
the check. Leaves nothing running; the scratch database and slots are dropped.
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable

from psycopg.conninfo import conninfo_to_dict

from deploy.migrate import migrate_kafka, migrate_postgres
from deploy.stack.layout import REPO, Layout
from deploy.stack.toolchain import jars, java17
from services.shared.clients import kafka, pg
from services.shared.contracts.topics import CAPTURED_TABLES, CDC_SCHEMA, cdc_topic
from services.shared.domain.rules import REMOVED
from services.shared.settings import KafkaSettings, PostgresSettings, Settings

from .compare import Difference, Record, compare_streams

CONNECTOR_PROPERTIES = Path(__file__).with_name("connector.properties")
WORKER_PROPERTIES = Path(__file__).with_name("worker.properties")
LOG4J = REPO / "deploy" / "stack" / "templates" / "log4j2.properties"
# The user the last change inserts: its record marks the end of the changes' records.
MARKER_USER = 999


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _properties_value(value: str) -> str:
    """``value`` escaped for a Java properties file (backslashes, line breaks, a leading
    blank)."""
    out = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    return "\\" + out if out[:1] in (" ", "\t") else out


def _jaas_quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def kafka_client_properties(k: KafkaSettings) -> dict[str, str]:
    """The Java Kafka clients' security properties for the settings the relay uses
    (``clients.kafka.librdkafka_config`` in Java's names): SASL, the CA (PEM) and a
    client certificate (PEM, the key in PKCS#8)."""
    props: dict[str, str] = {"security.protocol": k.kafka_security_protocol}
    if k.kafka_security_protocol.startswith("SASL"):
        module = ("org.apache.kafka.common.security.plain.PlainLoginModule"
                  if k.kafka_sasl_mechanism == "PLAIN"
                  else "org.apache.kafka.common.security.scram.ScramLoginModule")
        props["sasl.mechanism"] = k.kafka_sasl_mechanism
        props["sasl.jaas.config"] = (
            f"{module} required username={_jaas_quoted(k.kafka_sasl_username)} "
            f"password={_jaas_quoted(k.kafka_sasl_password.get_secret_value())};")
    if k.kafka_security_protocol in ("SSL", "SASL_SSL"):
        if k.kafka_ssl_ca_file:
            props["ssl.truststore.type"] = "PEM"
            props["ssl.truststore.location"] = k.kafka_ssl_ca_file
        if k.kafka_ssl_cert_file and k.kafka_ssl_key_file:
            props["ssl.keystore.type"] = "PEM"
            props["ssl.keystore.certificate.chain"] = Path(k.kafka_ssl_cert_file).read_text()
            props["ssl.keystore.key"] = Path(k.kafka_ssl_key_file).read_text()
            if k.kafka_ssl_key_password.get_secret_value():
                props["ssl.key.password"] = k.kafka_ssl_key_password.get_secret_value()
        props["ssl.endpoint.identification.algorithm"] = "https" if k.kafka_ssl_check_hostname else ""
    return props


def worker_security(k: KafkaSettings) -> str:
    """Kafka Connect worker lines: the worker's own clients, and its connectors'
    producers, consumers and admin clients (``producer.`` etc.), all secured alike."""
    props = kafka_client_properties(k)
    if props == {"security.protocol": "PLAINTEXT"}:
        return ""
    return "".join(f"{prefix}{key}={_properties_value(value)}\n"
                   for prefix in ("", "producer.", "consumer.", "admin.")
                   for key, value in props.items())


def connector_postgres(settings: PostgresSettings) -> dict[str, str]:
    """Debezium's ``database.*`` connection values from the relay's own conninfo (so
    FEED_PG_CONNINFO counts too): where, who, and the server's TLS check. A client
    certificate is not passed: pgjdbc wants its key in another format than libpq."""
    info = conninfo_to_dict(pg.conninfo(settings))
    values = {key: _properties_value(str(info.get(key, default))) for key, default in
              (("host", ""), ("port", "5432"), ("user", ""), ("password", ""))}
    lines = []
    # libpq's allow and prefer are left to the connector's default.
    if info.get("sslmode") in ("disable", "require", "verify-ca", "verify-full"):
        lines.append(f"database.sslmode={info['sslmode']}")
    if info.get("sslrootcert"):
        lines.append(f"database.sslrootcert={_properties_value(str(info['sslrootcert']))}")
    values["pg_security"] = "".join(line + "\n" for line in lines)
    return values


def _seed(s: Settings) -> None:
    with pg.connect(s, autocommit=True) as conn:
        conn.execute("INSERT INTO users (user_id, created_at) VALUES "
                     "(1, '2026-01-01 00:00:00+00'), (2, '2026-01-01 00:00:00.5+00'), (3, now())")
        conn.execute("INSERT INTO posts (post_id, author_id, created_at, text, media_ids) VALUES "
                     "(100, 1, '2026-02-03 04:05:06.789+00', 'seeded', '[\"m1\", \"m2\"]')")
        conn.execute("INSERT INTO follows VALUES (2, 1, '2026-01-05 00:00:00+00')")


def _changes(s: Settings) -> None:
    with pg.connect(s, autocommit=True) as conn:
        with conn.transaction():
            conn.execute("INSERT INTO posts (post_id, author_id, created_at, text, rank_features) "
                         "VALUES (101, 2, now(), 'unicode ✓ \"quoted\"', '{\"q\": 0.5}')")
            conn.execute("INSERT INTO likes (post_id, user_id) VALUES (100, 2), (101, 3)")
        conn.execute("INSERT INTO follows VALUES (3, 1, now())")
        conn.execute("INSERT INTO blocks (blocker_id, blocked_id) VALUES (3, 2)")
        conn.execute(f"UPDATE posts SET visibility = {REMOVED} WHERE post_id = 100")
        conn.execute("INSERT INTO moderation_actions (post_id, state, reason, moderator_id) "
                     "VALUES (100, 'removed', 'spam', 3)")
        conn.execute("UPDATE posts SET text = repeat('long text ', 500) WHERE post_id = 101")
        conn.execute("UPDATE posts SET deleted_at = now() WHERE post_id = 101")  # TOASTed text
        conn.execute("DELETE FROM likes WHERE post_id = 100")
        conn.execute("DELETE FROM follows WHERE follower_id = 2")
        conn.execute("UPDATE blocks SET blocked_id = 1 WHERE blocker_id = 3")  # key change
        # Last, and committed after every change above: once its record is read, every
        # record the changes produce is there (one slot, commit order), bar stragglers.
        conn.execute(f"INSERT INTO users (user_id, created_at) VALUES ({MARKER_USER}, '2026-01-01 00:00:00+00')")


def _has_marker(records: list[Record]) -> bool:
    return any(r["table"] == "users" and r["key"] is not None
               and (r["key"].get("payload") or r["key"]).get("user_id") == MARKER_USER for r in records)


def _consume(s: Settings, prefix: str, until: Callable[[list[Record]], bool], timeout: float) -> list[Record]:
    """Every record under ``prefix`` until ``until(records)`` holds (then 3 s more, so
    extra records, duplicates, are seen too) or ``timeout``."""
    consumer = kafka.consumer(s, {"group.id": str(uuid.uuid4()),
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([cdc_topic(t, prefix) for t in CAPTURED_TABLES])
    records: list[Record] = []
    deadline = time.monotonic() + timeout
    quiet_until = None
    try:
        while time.monotonic() < deadline:
            batch = consumer.consume(500, 0.5)
            for msg in batch:
                if msg.error():
                    continue
                topic, key, value = msg.topic(), msg.key(), msg.value()
                assert topic is not None  # a consumed message (not an error) has its topic
                records.append({"table": topic.rsplit(".", 1)[-1],
                                "partition": msg.partition(),
                                "key": json.loads(key) if key else None,
                                "value": json.loads(value) if value else None})
            if until(records):
                # Let stragglers arrive so extra records (duplicates) are seen too.
                quiet_until = quiet_until or time.monotonic() + 3
                if time.monotonic() > quiet_until:
                    break
    finally:
        consumer.close()
    return records


def _wait_records(s: Settings, prefix: str, count: int, timeout: float) -> None:
    if len(_consume(s, prefix, lambda records: len(records) >= count, timeout)) < count:
        raise SystemExit(f"{prefix}: fewer than {count} records after {timeout:.0f} s")


class Scratch:
    """A scratch database with the project's schema and the publication Debezium reads,
    relay settings for it, Kafka topics under the relay's prefix and ``<db>_<suffix>``
    for each of ``suffixes``, a work folder for logs and Connect's files, and the
    launchers of both capturers (used by this check and bench/cdc/debezium.py)."""

    def __init__(self, name: str, suffixes: tuple[str, ...] = ()) -> None:
        self.layout = Layout.from_env()
        self.base = Settings()
        self.db = f"{name}_{secrets.token_hex(3)}"
        self.relay = Settings(pg_database=self.db, topic_prefix=f"{self.db}_relay", cdc_metrics_port=0)
        self.work = Path(tempfile.mkdtemp(prefix=f"{name.replace('_', '-')}-"))
        with pg.connect(self.base, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {self.db}")
        migrate_postgres(self.relay)
        for prefix in (self.relay.topic_prefix, *map(self.prefix, suffixes)):
            migrate_kafka(self.relay, prefix)
        with pg.connect(self.relay, autocommit=True) as conn:
            conn.execute("CREATE PUBLICATION dbz_pub FOR TABLE " + ", ".join(CAPTURED_TABLES))

    def prefix(self, suffix: str) -> str:
        return f"{self.db}_{suffix}"

    def start_relay(self) -> subprocess.Popen[bytes]:
        env = {**os.environ, "FEED_PG_DATABASE": self.db, "FEED_TOPIC_PREFIX": self.relay.topic_prefix,
               "FEED_CDC_METRICS_PORT": "0"}
        return subprocess.Popen([sys.executable, "-m", "services.cdc"], cwd=REPO, env=env,
                                stdout=open(self.work / "relay.log", "a"), stderr=subprocess.STDOUT)

    def connect_files(self, name: str, prefix: str, connector: Callable[[str], str] = lambda c: c) -> Path:
        """Kafka Connect's worker and connector files for a connector named ``name``
        (its own slot, offsets file and REST port), in ``work/<name>/``; ``connector``
        may edit the connector's properties."""
        values = {"bootstrap": self.base.kafka_bootstrap, "offsets": str(self.work / f"{name}-offsets.dat"),
                  "rest_port": str(_free_port()), **connector_postgres(self.base),
                  "kafka_security": worker_security(self.base), "db": self.db,
                  "prefix": prefix, "slot": f"{name.replace('-', '_')}_{self.db}",
                  "tables": ",".join(f"{CDC_SCHEMA}.{t}" for t in CAPTURED_TABLES)}
        folder = self.work / name
        folder.mkdir(exist_ok=True)
        (folder / WORKER_PROPERTIES.name).write_text(WORKER_PROPERTIES.read_text().format(**values))
        (folder / CONNECTOR_PROPERTIES.name).write_text(
            connector(CONNECTOR_PROPERTIES.read_text().format(**values)))
        return folder

    def start_connect(self, folder: Path) -> subprocess.Popen[bytes]:
        lib = jars(self.layout, "connect")
        return subprocess.Popen(
            [java17(self.layout), "-Xmx512m", f"-Dlog4j2.configurationFile={LOG4J}", "-cp", f"{lib}/*",
             "org.apache.kafka.connect.cli.ConnectStandalone", str(folder / WORKER_PROPERTIES.name),
             str(folder / CONNECTOR_PROPERTIES.name)],
            stdout=open(folder / "connect.log", "a"), stderr=subprocess.STDOUT)

    def drop(self) -> None:
        """The database and every slot on it (its capturers stopped)."""
        with pg.connect(self.base, autocommit=True) as conn:
            for (slot,) in conn.execute("SELECT slot_name FROM pg_replication_slots "
                                        "WHERE database = %s", (self.db,)).fetchall():
                conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            conn.execute(f"DROP DATABASE IF EXISTS {self.db} WITH (FORCE)")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def run_check() -> list[Difference]:
    scratch = Scratch("dbz_check", ("dbz",))
    dbz_prefix, relay_s = scratch.prefix("dbz"), scratch.relay
    procs: list[subprocess.Popen[bytes]] = []
    try:
        _seed(relay_s)
        procs.append(scratch.start_relay())
        procs.append(scratch.start_connect(scratch.connect_files("dbz", dbz_prefix)))
        seeded = 5
        _wait_records(relay_s, relay_s.topic_prefix, seeded, 120)
        _wait_records(relay_s, dbz_prefix, seeded, 240)
        _changes(relay_s)
        relay_records = _consume(relay_s, relay_s.topic_prefix, _has_marker, 120)
        dbz_records = _consume(relay_s, dbz_prefix, _has_marker, 120)
        if not (_has_marker(relay_records) and _has_marker(dbz_records)):
            raise SystemExit("debezium-check: the last change's record did not arrive within 120 s "
                             f"(relay {len(relay_records)} records, debezium {len(dbz_records)})")
        print(f"debezium-check: relay {len(relay_records)} records, debezium "
              f"{len(dbz_records)} records (logs in {scratch.work})")
        return compare_streams(relay_records, dbz_records)
    finally:
        for proc in procs:
            stop(proc)
        scratch.drop()


def main() -> int:
    differences = run_check()
    unexpected = [d for d in differences if not d.documented]
    for d in differences:
        print(("  documented  " if d.documented else "  UNEXPECTED  ") + d.describe())
    print(f"debezium-check: {len(differences)} differences, {len(unexpected)} unexpected")
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
