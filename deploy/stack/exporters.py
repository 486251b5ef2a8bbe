"""The stores' Prometheus exporters: the JMX exporter's agent inside every Kafka process
and Cassandra node, and Debian's postgres exporter beside Postgres.

* **JMX exporter** (``io.prometheus.jmx:jmx_prometheus_javaagent`` 1.0.1 from Maven
  Central, assembled like the stores' jars into ``<lib>/jmx-exporter``): ``kafka.py`` and
  ``cassandra.py`` add ``-javaagent:<jar>=<node address>:<port>:<config>`` to each JVM
  they start, so it serves ``/metrics`` from inside the process, on the node's own
  address: every node of the three-node stack (127.0.0.1-3) uses the same port
  (``FEED_KAFKA_EXPORTER_PORT`` for brokers and the one-node combined process,
  ``FEED_KAFKA_CONTROLLER_EXPORTER_PORT`` for the three-node controllers,
  ``FEED_CASSANDRA_EXPORTER_PORT``). What it reads: ``deploy/prometheus/jmx-kafka.yml``
  and ``jmx-cassandra.yml``, a handful of MBeans each.
* **postgres exporter** (Debian's ``prometheus-postgres-exporter``, 0.11 on bookworm,
  installed when missing): a daemon of the stack like Postgres itself, started after it
  by ``up`` and stopped before it by ``down``, on ``127.0.0.1:FEED_POSTGRES_EXPORTER_PORT``.
  It logs in as ``feed_monitor`` (member of ``pg_monitor``, made by ``postgres.py``) to the
  ``postgres`` database; on three nodes over TLS, the server's name checked against the
  stack's CA, with the role's password read from ``secrets/pg-monitor.password``
  (``DATA_SOURCE_PASS_FILE``: never in its command line or environment). Its default
  queries hold everything the rules read (``pg_up``, ``pg_settings_max_connections``,
  ``pg_stat_activity_count``, ``pg_replication_slots_pg_wal_lsn_diff``).

``targets`` is what the stack's Prometheus scrapes of them (``prometheus.py``), and
``scrape_params`` asks each JMX agent for the metrics of its configuration only (its own
JVM metrics cost three times as much to collect).
"""
from __future__ import annotations

import re
import urllib.parse
import urllib.request
from pathlib import Path

from . import postgres, security
from .layout import REPO, Layout
from .process import (Daemon, StackError, StatusRow, UpReport, ensure_ports_free, spawn, status_row,
                      stop, wait_ready)
from .toolchain import ensure_postgres_exporter, jars

CONFIGS = REPO / "deploy" / "prometheus"
KAFKA_CONFIG = CONFIGS / "jmx-kafka.yml"
CASSANDRA_CONFIG = CONFIGS / "jmx-cassandra.yml"
MONITOR_ROLE = postgres.MONITOR_ROLE
# Scrape jobs (``up{job=...}`` in the rules).
KAFKA_JOB, KAFKA_CONTROLLER_JOB, CASSANDRA_JOB, POSTGRES_JOB = (
    "kafka-jmx", "kafka-controller-jmx", "cassandra-jmx", "postgres")


# JMX exporter -------------------------------------------------------------------
def jmx_agent(layout: Layout) -> Path:
    """The agent's jar (assembled from Maven Central once, ``toolchain.jars``)."""
    lib = jars(layout, "jmx-exporter")
    jar = next(lib.glob("jmx_prometheus_javaagent-*.jar"), None)
    if jar is None:
        raise StackError(f"jmx exporter: no jmx_prometheus_javaagent jar in {lib}; run 'reset' "
                         "to reassemble")
    return jar


def javaagent(jar: Path, host: str, port: int, config: Path) -> str:
    """The JVM flag that runs the exporter inside the process, serving on host:port."""
    return f"-javaagent:{jar}={host}:{port}:{config}"


def kafka_port(layout: Layout, controller: bool) -> int:
    return layout.kafka_controller_exporter_port if controller else layout.kafka_exporter_port


def exported(config: Path) -> list[str]:
    """The metric names a JMX exporter configuration's rules export (``name:`` lines)."""
    return re.findall(r"^\s+name: (\w+)$", config.read_text(), re.M)


def scrape_params() -> dict[str, dict[str, list[str]]]:
    """Query parameters of each JMX job's scrape: only the metrics its rules export
    (``name[]``). The agent then skips its own JVM metrics, three quarters of a
    scrape's CPU (docs/operations.md, "What the exporters cost")."""
    kafka_names = {"name[]": exported(KAFKA_CONFIG)}
    return {KAFKA_JOB: kafka_names, KAFKA_CONTROLLER_JOB: kafka_names,
            CASSANDRA_JOB: {"name[]": exported(CASSANDRA_CONFIG)}}


def targets(layout: Layout) -> dict[str, list[str]]:
    """Scrape job -> the exporters' addresses, one per process of the layout."""
    from . import kafka

    jobs = {KAFKA_JOB: [f"{h}:{layout.kafka_exporter_port}" for h in layout.hosts]}
    if kafka.split(layout):
        jobs[KAFKA_CONTROLLER_JOB] = [f"{h}:{layout.kafka_controller_exporter_port}"
                                      for h in layout.hosts]
    jobs[CASSANDRA_JOB] = [f"{h}:{layout.cassandra_exporter_port}" for h in layout.hosts]
    jobs[POSTGRES_JOB] = [postgres_address(layout)]
    return jobs


# postgres exporter --------------------------------------------------------------
def postgres_address(layout: Layout) -> str:
    return f"127.0.0.1:{layout.postgres_exporter_port}"


def postgres_daemon(layout: Layout) -> Daemon:
    # The exporter takes no file of the stack's; its listen address (this stack's port)
    # is what tells it from any other process that might get the pid.
    address = postgres_address(layout)
    return Daemon(name="postgres-exporter", pid_file=layout.run / "postgres-exporter.pid",
                  log_file=layout.logs / "postgres-exporter.log",
                  marker=f"--web.listen-address={address}")


def postgres_env(layout: Layout) -> dict[str, str]:
    """How the exporter connects (its ``DATA_SOURCE_*`` variables): ``feed_monitor`` to the
    ``postgres`` database; on three nodes with TLS (``verify-full`` against the stack's CA)
    and the role's password from its file."""
    # Empty: whatever the caller's environment holds, these settings alone count.
    env = {"DATA_SOURCE_NAME": "", "DATA_SOURCE_URI_FILE": "", "DATA_SOURCE_USER_FILE": "",
           "DATA_SOURCE_USER": MONITOR_ROLE, "DATA_SOURCE_PASS": ""}
    base = f"{layout.pg_host}:{layout.pg_port}/postgres"
    if security.secured(layout):
        query = urllib.parse.urlencode({"sslmode": "verify-full",
                                        "sslrootcert": str(security.ca_file(layout))})
        env["DATA_SOURCE_PASS_FILE"] = str(security.password_file(layout, "pg-monitor"))
    else:
        query = "sslmode=disable"
        env["DATA_SOURCE_PASS_FILE"] = ""
    env["DATA_SOURCE_URI"] = f"{base}?{query}"
    return env


def _postgres_scraped(layout: Layout) -> bool:
    """The exporter answers and reaches Postgres (``pg_up 1``)."""
    url = f"http://{postgres_address(layout)}/metrics"
    with urllib.request.urlopen(url, timeout=5) as resp:
        return any(line.strip() == b"pg_up 1" for line in resp.read().splitlines())


def postgres_up(layout: Layout, started: list[Daemon]) -> UpReport:
    """Start the exporter (Postgres must be running: its monitoring role is made first)."""
    d = postgres_daemon(layout)
    if d.alive():
        return {"state": "already running"}
    binary = ensure_postgres_exporter(layout.logs / "install.log")
    ensure_ports_free("postgres-exporter", [("127.0.0.1", layout.postgres_exporter_port)])
    postgres.ensure_monitor_role(layout)
    spawn(d, [binary, f"--web.listen-address={postgres_address(layout)}", "--log.level=warn"],
          env=postgres_env(layout))
    started.append(d)
    waited = wait_ready(d, "postgres-exporter", lambda: _postgres_scraped(layout), timeout=30,
                        log_file=d.log_file)
    return {"state": "started", "seconds": round(waited, 1)}


def postgres_down(layout: Layout) -> bool:
    return stop(postgres_daemon(layout), grace=10)


def status(layout: Layout) -> list[StatusRow]:
    return [status_row(postgres_daemon(layout), postgres_address(layout))]
