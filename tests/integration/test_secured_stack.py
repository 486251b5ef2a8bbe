"""The three-node stack, secured as a production cluster, on a second, private stack.

Like test_stack_manager.py: its own folder and ports, the main stack's jars shared through
FEED_STACK_LIB. One three-node start for the whole module (a few minutes on 2 cores):
three brokers beside three KRaft controllers and a three-node ring, each store reached
only with the stack's CA, over TLS, with the generated credentials; every other client
refused, with the preflight naming the setting to fix. Nothing is left running.
"""
from __future__ import annotations

import dataclasses
import json
import os
import pwd
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from deploy.stack import postgres, security
from deploy.stack.layout import REPO, Layout
from services.shared.clients import cql, kafka, pg
from services.shared.clients.preflight import StoreRefused, check_cassandra, check_kafka, check_postgres
from services.shared.settings import Settings
from tests.conftest import require
from tests.integration.test_stack_manager import stack_ports
from tests.support.ports import free_ports
from tests.support.waiting import wait_until


@dataclass
class Secured:
    env: dict[str, str]  # the environment the stack manager ran with
    root: Path  # the stack folder
    client_env: dict[str, str]  # `deploy.stack env`: what the services are given
    up_seconds: float
    other_ca: Path  # a CA that signed none of the stack's certificates

    def settings(self, **overrides: Any) -> Settings:
        """The services' settings for this stack (``*_FILE`` secrets read), then
        ``overrides``."""
        return Settings(**{**security.settings_fields(self.client_env), **overrides})


def _stack(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deploy.stack", *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def _status(env: dict[str, str]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in json.loads(_stack(env, "status", "--json").stdout)}


def _other_ca(folder: Path) -> Path:
    folder.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=some other CA", "-keyout", str(folder / "ca.key"),
                    "-out", str(folder / "ca.pem")], check=True, capture_output=True)
    return folder / "ca.pem"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    require("postgres", "kafka", "cassandra")  # the main stack assembled the jars
    tmp = tmp_path_factory.mktemp("secured")
    os.chmod(tmp, 0o755)  # the postgres user must reach its data folder
    env = {**os.environ, **stack_ports(), "FEED_STACK_DIR": str(tmp / "stack"),
           "FEED_STACK_LIB": str(Layout.from_env(nodes=1).lib)}
    for name in ("FEED_STACK_NODES", "FEED_KAFKA_BOOTSTRAP", "FEED_CASSANDRA_HOSTS"):
        env.pop(name, None)
    try:
        start = time.monotonic()
        up = _stack(env, "up", "--nodes", "3", timeout=600)
        seconds = time.monotonic() - start
        assert up.returncode == 0, up.stderr + up.stdout
        client_env = dict(line.removeprefix("export ").split("=", 1)
                          for line in _stack(env, "env").stdout.splitlines())
        yield Secured(env=env, root=tmp / "stack", client_env=client_env, up_seconds=seconds,
                      other_ca=_other_ca(tmp / "other-ca"))
    finally:
        # reset, not down: a Postgres folder that fell back to /var/lib/postgresql goes too.
        _stack(env, "reset", timeout=180)


def _refused(check: Any, settings: Settings, *names: str) -> str:
    with pytest.raises(StoreRefused) as refused:
        check(settings)
    message = str(refused.value.code)
    assert all(n in message for n in names), message
    return message


# --- the stack ------------------------------------------------------------------------
def test_three_brokers_three_controllers_and_a_ring_of_three(secured: Secured) -> None:
    rows = _status(secured.env)
    assert {n for n, r in rows.items() if r["pid"]} >= {
        "kafka-1", "kafka-2", "kafka-3", "kafka-controller-1", "kafka-controller-2",
        "kafka-controller-3", "cassandra-1", "cassandra-2", "cassandra-3", "postgres", "prometheus"}
    s = secured.settings()
    assert len(kafka.admin(s).list_topics(timeout=15).brokers) == 3
    cluster = cql.cluster(s)
    try:
        cluster.connect()
        assert sum(1 for h in cluster.metadata.all_hosts() if h.is_up) == 3
    finally:
        cluster.shutdown()
    print(f"secured three-node up (cold): {secured.up_seconds:.0f}s")


def test_every_store_exporter_is_scraped_on_its_nodes_address(secured: Secured) -> None:
    """The JMX exporter in each broker, controller and Cassandra node, on the node's own
    address, and the postgres exporter over TLS with its role's password: the stack's
    Prometheus scrapes every one of them (deploy/stack/exporters.py)."""
    env = secured.env
    prom = f"http://127.0.0.1:{env['FEED_PROMETHEUS_PORT']}"
    expected = {("kafka-jmx", f"127.0.0.{i}:{env['FEED_KAFKA_EXPORTER_PORT']}") for i in (1, 2, 3)}
    expected |= {("kafka-controller-jmx", f"127.0.0.{i}:{env['FEED_KAFKA_CONTROLLER_EXPORTER_PORT']}")
                 for i in (1, 2, 3)}
    expected |= {("cassandra-jmx", f"127.0.0.{i}:{env['FEED_CASSANDRA_EXPORTER_PORT']}") for i in (1, 2, 3)}
    expected |= {("postgres", f"127.0.0.1:{env['FEED_POSTGRES_EXPORTER_PORT']}")}
    assert _status(env)["postgres-exporter"]["pid"]

    def stores() -> dict[tuple[str, str], str] | None:
        targets = httpx.get(f"{prom}/api/v1/targets", timeout=10).json()["data"]["activeTargets"]
        health = {(t["labels"]["job"], t["labels"]["instance"]): t["health"] for t in targets
                  if not t["labels"]["job"].startswith("feed-")}
        return health if set(health) == expected and set(health.values()) == {"up"} else None

    def value(expr: str) -> float | None:
        result = httpx.get(f"{prom}/api/v1/query", params={"query": expr}, timeout=10).json()["data"]["result"]
        return float(result[0]["value"][1]) if result else None

    wait_until(stores, timeout=60, interval=2, message=f"every store exporter scraped and up: {sorted(expected)}")
    # What they say: Postgres reached (TLS, verify-full, feed_monitor's password), one
    # active controller of three, every partition led and in sync, three nodes' compactions.
    wait_until(lambda: value("pg_up") == 1.0, timeout=30, interval=1, message="pg_up 1")
    assert value("sum(kafka_controller_kafkacontroller_activecontrollercount)") == 1.0
    # (the three controllers; a broker-only process has no KafkaController MBeans)
    assert (value("count(kafka_controller_kafkacontroller_activecontrollercount)") or 0) >= 3
    assert value("max(kafka_controller_kafkacontroller_offlinepartitionscount)") == 0.0
    assert value("count(kafka_server_replicamanager_underreplicatedpartitions)") == 3.0
    assert value("count(cassandra_compaction_pending_tasks)") == 3.0


def test_client_settings_come_from_the_example_file_with_passwords_as_files(secured: Secured) -> None:
    env = secured.client_env
    assert env["FEED_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
    assert env["FEED_KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512"
    assert env["FEED_PG_SSLMODE"] == "verify-full"
    assert env["FEED_KAFKA_SSL_CA_FILE"] == str(secured.root / "pki" / "ca.pem")
    assert not {"FEED_PG_PASSWORD", "FEED_KAFKA_SASL_PASSWORD", "FEED_CASSANDRA_PASSWORD"} & set(env)
    for name in ("FEED_PG_PASSWORD_FILE", "FEED_KAFKA_SASL_PASSWORD_FILE", "FEED_CASSANDRA_PASSWORD_FILE"):
        assert Path(env[name]).parent == secured.root / "secrets"


def test_keys_and_passwords_are_private(secured: Secured) -> None:
    def mode(p: Path) -> int:
        return stat.S_IMODE(p.stat().st_mode)

    secrets = sorted((secured.root / "secrets").glob("*.password"))
    assert {p.stem for p in secrets} == set(security.PASSWORDS)
    assert all(mode(p) == 0o600 and len(p.read_text().strip()) >= 24 for p in secrets)
    keys = sorted((secured.root / "pki").glob("*.key")) + sorted((secured.root / "pki").glob("*-bundle.pem"))
    assert len(keys) >= 9 and all(mode(p) == 0o600 for p in keys)
    # Kafka's properties hold the brokers' SCRAM password.
    assert all(mode(p) == 0o600 for p in (secured.root / "data" / "kafka-3n").glob("*/server.properties"))
    layout = dataclasses.replace(Layout.from_env(nodes=3), root=secured.root)
    server_key = postgres._pgdata(layout) / "server.key"
    if os.geteuid() == 0:
        assert server_key.stat().st_uid == pwd.getpwnam("postgres").pw_uid
    assert mode(server_key) == 0o600


# --- the right credentials --------------------------------------------------------------
def test_the_stacks_credentials_work_on_every_store(secured: Secured) -> None:
    s = secured.settings()
    for check in (check_postgres, check_kafka, check_cassandra):
        check(s)
    with pg.connect(s) as conn:
        row = conn.execute("SELECT current_user, ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone()
        assert row == ("feed", True)
    topic = f"secured-{uuid.uuid4().hex[:8]}"
    from confluent_kafka.admin import NewTopic
    admin = kafka.admin(s)
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(timeout=30)
    producer = kafka.producer(s, {"acks": "all"})
    delivered: list[Any] = []
    producer.produce(topic, b"hello", on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(30) == 0 and delivered == [None]
    # The feed role may create, use and drop keyspaces (migrations), not being a superuser.
    cluster = cql.cluster(s, timeout=30)
    try:
        session = cluster.connect()
        keyspace = f"secured_{uuid.uuid4().hex[:8]}"
        session.execute(f"CREATE KEYSPACE {keyspace} WITH replication = "
                        "{'class': 'SimpleStrategy', 'replication_factor': 3}")
        session.execute(f"CREATE TABLE {keyspace}.t (k int PRIMARY KEY, v text)")
        session.execute(f"INSERT INTO {keyspace}.t (k, v) VALUES (1, 'one')")
        assert session.execute(f"SELECT v FROM {keyspace}.t WHERE k = 1").one().v == "one"
        session.execute(f"DROP KEYSPACE {keyspace}")
        me = session.execute("LIST ROLES OF feed").one()
        assert (me.role, me.super, me.login) == ("feed", False, True)
    finally:
        cluster.shutdown()


# --- Postgres refuses -----------------------------------------------------------------
def test_postgres_refuses_other_clients(secured: Secured) -> None:
    _refused(check_postgres, secured.settings(pg_password=""), "FEED_PG_PASSWORD")
    _refused(check_postgres, secured.settings(pg_password="wrong"), "FEED_PG_PASSWORD")
    _refused(check_postgres, secured.settings(pg_sslrootcert=str(secured.other_ca)), "FEED_PG_SSLROOTCERT")
    _refused(check_postgres, secured.settings(pg_sslmode="disable"), "FEED_PG_SSLMODE")
    # The superuser has a password now (trust is gone), and only the stack uses it.
    _refused(check_postgres, secured.settings(pg_user="postgres", pg_password=""), "FEED_PG_PASSWORD")


# --- Kafka refuses --------------------------------------------------------------------
def test_kafka_refuses_other_clients(secured: Secured) -> None:
    _refused(check_kafka, secured.settings(kafka_sasl_username="", kafka_sasl_password=""),
             "FEED_KAFKA_SASL_PASSWORD")
    _refused(check_kafka, secured.settings(kafka_sasl_password="wrong"), "FEED_KAFKA_SASL_PASSWORD")
    _refused(check_kafka, secured.settings(kafka_ssl_ca_file=str(secured.other_ca)), "FEED_KAFKA_SSL_CA_FILE")
    _refused(check_kafka, secured.settings(kafka_security_protocol="PLAINTEXT"), "FEED_KAFKA_SECURITY_PROTOCOL")
    # TLS without SASL: the brokers' listener is SASL_SSL only.
    _refused(check_kafka, secured.settings(kafka_security_protocol="SSL"), "FEED_KAFKA_SECURITY_PROTOCOL")


def test_a_broker_that_is_down_is_not_a_refusal(secured: Secured,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    """librdkafka names the broker "sasl_ssl://host:port/bootstrap" in every error: a
    connection refused there must leave the process to its retries (no StoreRefused),
    not end it as misconfigured (its supervisor would not restart it)."""
    nobody = free_ports(("FEED_NOBODY_PORT",))["FEED_NOBODY_PORT"]
    check_kafka(secured.settings(kafka_bootstrap=f"127.0.0.1:{nobody}"), timeout_s=3)
    assert "kafka: not reachable yet" in caplog.text


# --- Cassandra refuses ----------------------------------------------------------------
def test_cassandra_refuses_other_clients(secured: Secured) -> None:
    _refused(check_cassandra, secured.settings(cassandra_username="", cassandra_password=""),
             "FEED_CASSANDRA_PASSWORD")
    _refused(check_cassandra, secured.settings(cassandra_password="wrong"), "FEED_CASSANDRA_PASSWORD")
    _refused(check_cassandra, secured.settings(cassandra_ssl_ca_file=str(secured.other_ca)),
             "FEED_CASSANDRA_SSL_CA_FILE")
    _refused(check_cassandra, secured.settings(cassandra_ssl=False, cassandra_ssl_ca_file=""),
             "FEED_CASSANDRA_SSL")
    # The default superuser is disabled.
    message = _refused(check_cassandra, secured.settings(cassandra_username="cassandra",
                                                         cassandra_password="cassandra"),
                       "FEED_CASSANDRA_PASSWORD")
    assert "not permitted to log in" in message


# --- a name the certificates do not carry ------------------------------------------------
def _short_form(address: str) -> str:
    """The same IPv4 address in inet_aton's short form ("127.0.0.1" -> "127.1"): it still
    resolves to the node, but it is neither an IP literal matched against the
    certificates' IP SANs nor a DNS name there."""
    a, b, c, d = (int(part) for part in address.split("."))
    return f"{a}.{(b << 16) | (c << 8) | d}"


def test_postgres_and_kafka_refuse_a_name_their_certificates_do_not_carry(secured: Secured) -> None:
    """(cassandra-driver resolves contact points to addresses first and checks the
    certificate against the address, so a Cassandra client cannot ask for another name.)"""
    s = secured.settings()
    # libpq connects to hostaddr and checks the certificate against host.
    _refused(check_postgres, secured.settings(pg_conninfo=f"hostaddr={s.pg_host}",
                                              pg_host="not-in-the-certificate.test"), "FEED_PG_HOST")
    bootstrap = ",".join(f"{_short_form(h)}:{p}" for h, p in
                         (b.rsplit(":", 1) for b in s.kafka_bootstrap.split(",")))
    _refused(check_kafka, secured.settings(kafka_bootstrap=bootstrap), "FEED_KAFKA_BOOTSTRAP")


# --- restart ----------------------------------------------------------------------------
def test_down_and_up_again_reuse_the_pki_passwords_and_data(secured: Secured) -> None:
    pki = {p.name: p.read_bytes() for p in (secured.root / "pki").iterdir()}
    secrets = {p.name: p.read_bytes() for p in (secured.root / "secrets").iterdir()}
    s = secured.settings()
    with pg.connect(s, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS kept (v int)")
        conn.execute("INSERT INTO kept VALUES (7)")
    down = _stack(secured.env, "down")
    assert down.returncode == 0 and "stopped" in down.stdout
    assert not any(r["pid"] for r in _status(secured.env).values())
    start = time.monotonic()
    up = _stack(secured.env, "up", "--nodes", "3", timeout=600)
    assert up.returncode == 0, up.stderr + up.stdout
    print(f"secured three-node up (warm): {time.monotonic() - start:.0f}s")
    assert "formatting it again" not in up.stdout
    assert {p.name: p.read_bytes() for p in (secured.root / "pki").iterdir()} == pki
    assert {p.name: p.read_bytes() for p in (secured.root / "secrets").iterdir()} == secrets
    for check in (check_postgres, check_kafka, check_cassandra):
        check(s)
    with pg.connect(s) as conn:
        assert conn.execute("SELECT v FROM kept").fetchone() == (7,)
    assert _stack(secured.env, "down").returncode == 0
    assert not any(r["pid"] for r in _status(secured.env).values())
