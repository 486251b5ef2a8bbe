"""The stores' exporters the stack runs (deploy/stack/exporters.py): the JMX exporter's
agent in every Kafka process and Cassandra node, bound to the node's own address; the
postgres exporter's connection; what the stack's Prometheus scrapes of them."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from deploy.stack import cassandra, exporters, kafka, prometheus
from deploy.stack.layout import Layout

StackLayout = Callable[[int], Layout]
AGENT = Path("/lib/jmx-exporter/jmx_prometheus_javaagent-1.0.1.jar")


@pytest.fixture(autouse=True)
def _default_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("FEED_KAFKA_EXPORTER_PORT", "FEED_KAFKA_CONTROLLER_EXPORTER_PORT",
                 "FEED_CASSANDRA_EXPORTER_PORT", "FEED_POSTGRES_EXPORTER_PORT", "FEED_STACK_SECURED"):
        monkeypatch.delenv(name, raising=False)


def _agents(argv: list[str]) -> list[str]:
    return [a for a in argv if a.startswith("-javaagent:") and "jmx_prometheus" in a]


def test_every_kafka_process_serves_on_its_own_address(stack_layout: StackLayout, tmp_path: Path) -> None:
    one = stack_layout(1)
    argv = kafka._argv(one, "java", tmp_path, tmp_path / "server.properties", False, 1, AGENT)
    assert _agents(argv) == [f"-javaagent:{AGENT}=127.0.0.1:9404:{exporters.KAFKA_CONFIG}"]
    # Before the main class: a -javaagent after it would be the program's argument.
    assert argv.index(_agents(argv)[0]) < argv.index("kafka.Kafka")
    three = stack_layout(3)
    broker = kafka._argv(three, "java", tmp_path, tmp_path / "b.properties", False, 2, AGENT)
    controller = kafka._argv(three, "java", tmp_path, tmp_path / "c.properties", True, 3, AGENT)
    assert _agents(broker) == [f"-javaagent:{AGENT}=127.0.0.2:9404:{exporters.KAFKA_CONFIG}"]
    assert _agents(controller) == [f"-javaagent:{AGENT}=127.0.0.3:9405:{exporters.KAFKA_CONFIG}"]
    assert _agents(kafka._argv(one, "java", tmp_path, tmp_path / "server.properties")) == []


def test_every_cassandra_node_serves_on_its_own_address(stack_layout: StackLayout, tmp_path: Path) -> None:
    (tmp_path / "jamm-0.4.0.jar").touch()
    argv = cassandra._argv(stack_layout(3), 3, "java", tmp_path, AGENT)
    assert _agents(argv) == [f"-javaagent:{AGENT}=127.0.0.3:9406:{exporters.CASSANDRA_CONFIG}"]
    assert argv.index(_agents(argv)[0]) < argv.index("org.apache.cassandra.service.CassandraDaemon")


def test_prometheus_scrapes_one_target_per_process(stack_layout: StackLayout) -> None:
    assert exporters.targets(stack_layout(1)) == {
        "kafka-jmx": ["127.0.0.1:9404"], "cassandra-jmx": ["127.0.0.1:9406"],
        "postgres": ["127.0.0.1:9407"]}
    three = exporters.targets(stack_layout(3))
    assert three["kafka-jmx"] == ["127.0.0.1:9404", "127.0.0.2:9404", "127.0.0.3:9404"]
    assert three["kafka-controller-jmx"] == ["127.0.0.1:9405", "127.0.0.2:9405", "127.0.0.3:9405"]
    assert three["cassandra-jmx"] == ["127.0.0.1:9406", "127.0.0.2:9406", "127.0.0.3:9406"]
    conf: Any = prometheus.config({"feed-api": "127.0.0.1:8080", **three}, prometheus.RULES,
                                  exporters.scrape_params())
    jobs = {c["job_name"]: c for c in conf["scrape_configs"]}
    assert jobs["feed-api"]["static_configs"][0]["targets"] == ["127.0.0.1:8080"]
    assert "params" not in jobs["feed-api"]
    assert jobs["kafka-jmx"]["static_configs"][0]["targets"] == three["kafka-jmx"]
    # The JMX agents are asked for their configuration's metrics only (not the JVM's).
    assert jobs["kafka-controller-jmx"]["params"] == {"name[]": [
        "kafka_server_replicamanager_underreplicatedpartitions",
        "kafka_controller_kafkacontroller_offlinepartitionscount",
        "kafka_controller_kafkacontroller_activecontrollercount"]}
    assert jobs["cassandra-jmx"]["params"]["name[]"] == [
        "cassandra_dropped_messages_total", "cassandra_compaction_pending_tasks",
        "cassandra_client_request_latency_seconds"]
    assert "params" not in jobs["postgres"]


def test_exporter_ports_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEED_KAFKA_EXPORTER_PORT", "19404")
    monkeypatch.setenv("FEED_CASSANDRA_EXPORTER_PORT", "19406")
    monkeypatch.setenv("FEED_POSTGRES_EXPORTER_PORT", "19407")
    layout = Layout.from_env(nodes=1)
    assert exporters.targets(layout) == {"kafka-jmx": ["127.0.0.1:19404"],
                                         "cassandra-jmx": ["127.0.0.1:19406"],
                                         "postgres": ["127.0.0.1:19407"]}
    assert exporters.postgres_daemon(layout).marker == "--web.listen-address=127.0.0.1:19407"


def test_the_postgres_exporter_logs_in_as_the_monitoring_role(stack_layout: StackLayout) -> None:
    one = exporters.postgres_env(stack_layout(1))
    assert one["DATA_SOURCE_USER"] == "feed_monitor" and one["DATA_SOURCE_PASS_FILE"] == ""
    assert one["DATA_SOURCE_URI"].endswith("/postgres?sslmode=disable")
    # Whatever the caller's environment holds, DATA_SOURCE_NAME would win: it is emptied.
    assert one["DATA_SOURCE_NAME"] == ""
    three = stack_layout(3)
    secured = exporters.postgres_env(three)
    assert secured["DATA_SOURCE_URI"].startswith(f"127.0.0.1:{three.pg_port}/postgres?sslmode=verify-full&")
    assert "sslrootcert=" + str(three.root / "pki" / "ca.pem").replace("/", "%2F") in secured["DATA_SOURCE_URI"]
    assert secured["DATA_SOURCE_PASS_FILE"] == str(three.root / "secrets" / "pg-monitor.password")
    # The password itself is never in the environment.
    assert secured["DATA_SOURCE_PASS"] == ""


def test_the_benchmarks_never_count_the_exporter_as_postgres() -> None:
    """bench/harness/servers.py meters the stores' CPU by component from ``stack status``:
    the postgres exporter is a process of its own, not Postgres."""
    from bench.harness.servers import _component

    assert [_component(n) for n in ("postgres", "postgres-exporter", "kafka-1", "kafka-controller-2",
                                    "cassandra-3", "prometheus")] == \
        ["postgres", "postgres-exporter", "kafka", "kafka", "cassandra", "prometheus"]
