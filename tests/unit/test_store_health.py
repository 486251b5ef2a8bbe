"""The stores' nodes as the services see them (services/shared/stores/store_health.py)."""
from __future__ import annotations

import json
from types import SimpleNamespace

from prometheus_client import CollectorRegistry

from services.shared.stores.store_health import CassandraHosts, kafka_broker_states, watch_cassandra


class _Cluster:
    """What the collector reads of a driver ``Cluster`` (weakly referenced, like one)."""

    def __init__(self, *up: bool, shut: bool = False) -> None:
        self.hosts = [SimpleNamespace(endpoint=f"127.0.0.{i + 1}:9042", is_up=u) for i, u in enumerate(up)]
        self.metadata = SimpleNamespace(all_hosts=lambda: self.hosts)
        self.is_shutdown = shut


_cluster = _Cluster


def _sample(registry: CollectorRegistry, state: str) -> float | None:
    return registry.get_sample_value("feed_cassandra_hosts", {"state": state})


def test_cassandra_hosts_counts_what_the_driver_sees_at_scrape_time() -> None:
    registry = CollectorRegistry()
    cluster = _cluster(True, True, True)
    watch_cassandra(cluster, registry)  # type: ignore[arg-type]
    assert (_sample(registry, "up"), _sample(registry, "down")) == (3, 0)
    cluster.hosts[2].is_up = False
    assert (_sample(registry, "up"), _sample(registry, "down")) == (2, 1)


def test_a_node_down_for_any_live_cluster_counts_down_and_shut_clusters_are_ignored() -> None:
    registry = CollectorRegistry()
    collector = CassandraHosts()
    registry.register(collector)
    a, b, old = _cluster(True, True), _cluster(True, False), _cluster(False, False, shut=True)
    for c in (a, b, old):
        collector.watch(c)
    assert (_sample(registry, "up"), _sample(registry, "down")) == (1, 1)


def test_kafka_broker_states_from_librdkafka_statistics() -> None:
    stats = {"brokers": {
        "127.0.0.1:9092/bootstrap": {"nodeid": -1, "state": "DOWN"},  # a placeholder, not a broker
        "127.0.0.1:9092/1": {"nodeid": 1, "state": "UP"},
        "127.0.0.2:9092/2": {"nodeid": 2, "state": "CONNECT"},
        "127.0.0.3:9092/3": {"nodeid": 3, "state": "INIT"},  # never needed: neither
    }}
    assert kafka_broker_states(json.dumps(stats)) == {"up": 1, "down": 1}
    assert kafka_broker_states("{}") == {"up": 0, "down": 0}
