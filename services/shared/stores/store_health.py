"""What this process's clients see of the stores' nodes, as metrics (the alerts
FeedCassandraNodeUnreachable and FeedKafkaBrokerUnreachable, deploy/prometheus/rules.yml).

- ``feed_cassandra_hosts{state}``: the nodes the Cassandra driver knows, up or down,
  read from its cluster metadata at scrape time (no task, nothing to keep in step).
- ``feed_kafka_brokers{state}``: the brokers a librdkafka client knows, from its
  statistics callback (``statistics.interval.ms``): ``up`` when connected, ``down`` while
  it fails to connect. A broker the client never needed (``INIT``) counts as neither.
"""
from __future__ import annotations

import json
import time
import weakref
from typing import Any, Iterator

from prometheus_client import REGISTRY, CollectorRegistry, Gauge
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

# librdkafka broker states (src/rdkafka_broker.c rd_kafka_broker_state_names).
_UP = {"UP", "UPDATE"}
_DOWN = {"DOWN", "CONNECT", "AUTH_LEGACY", "AUTH_HANDSHAKE", "AUTH_REQ", "APIVERSION_QUERY",
         "TRY_CONNECT"}

KAFKA_BROKERS = Gauge("feed_kafka_brokers", "Kafka brokers this process's librdkafka client "
                      "knows, by state (up: connected; down: failing to connect)", ["state"])


class CassandraHosts(Collector):
    """``feed_cassandra_hosts{state}`` over the live clusters of this process; a node any
    of them sees down counts as down."""

    def __init__(self) -> None:
        self._clusters: weakref.WeakSet[Any] = weakref.WeakSet()

    def watch(self, cluster: Any) -> None:
        self._clusters.add(cluster)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        hosts: dict[str, bool] = {}
        for cluster in list(self._clusters):
            if getattr(cluster, "is_shutdown", False):
                continue
            for host in cluster.metadata.all_hosts():
                key = str(host.endpoint)
                hosts[key] = hosts.get(key, True) and bool(host.is_up)
        family = GaugeMetricFamily("feed_cassandra_hosts", "Cassandra nodes this process's "
                                   "driver knows, by state", labels=["state"])
        up = sum(hosts.values())
        family.add_metric(["up"], up)
        family.add_metric(["down"], len(hosts) - up)
        yield family


_DEFAULT: CassandraHosts | None = None


def watch_cassandra(cluster: Any, registry: CollectorRegistry | None = None) -> CassandraHosts:
    """Export ``cluster``'s view of the nodes: in ``registry`` (its own collector), or in
    the process's default registry (one collector for every cluster of the process)."""
    global _DEFAULT
    if registry is not None:
        collector = CassandraHosts()
        registry.register(collector)
    else:
        if _DEFAULT is None:
            _DEFAULT = CassandraHosts()
            REGISTRY.register(_DEFAULT)
        collector = _DEFAULT
    collector.watch(cluster)
    return collector


def kafka_broker_states(stats_json: str) -> dict[str, int]:
    """Brokers up and down in one librdkafka statistics document (bootstrap placeholders,
    node id -1, are not brokers)."""
    stats = json.loads(stats_json)
    counts = {"up": 0, "down": 0}
    for broker in (stats.get("brokers") or {}).values():
        if broker.get("nodeid", -1) < 0:
            continue
        state = broker.get("state", "")
        if state in _UP:
            counts["up"] += 1
        elif state in _DOWN:
            counts["down"] += 1
    return counts


# The last statistics document's broker states and when it came (time.monotonic()):
# the relay's readiness (services/cdc/health.py) reads them.
_last_kafka_states: tuple[float, dict[str, int]] | None = None


def record_kafka_stats(stats_json: str) -> None:
    """librdkafka ``stats_cb``: the broker states into ``feed_kafka_brokers``."""
    global _last_kafka_states
    try:
        counts = kafka_broker_states(stats_json)
    except (ValueError, AttributeError):
        return  # a malformed document changes nothing
    for state, n in counts.items():
        KAFKA_BROKERS.labels(state).set(n)
    _last_kafka_states = (time.monotonic(), counts)


def last_kafka_states() -> tuple[float, dict[str, int]] | None:
    """When the last statistics document came (``time.monotonic()``) and its broker
    states; None before the first."""
    return _last_kafka_states
