"""The Grafana dashboard and the metrics reference name only metrics the code exports."""
from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import REGISTRY

from deploy.stack import exporters

REPO = Path(__file__).resolve().parents[2]
SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created")


def exported_names() -> set[str]:
    import services.cdc.metrics  # noqa: F401 - registers the relay's collectors
    import services.fanout.metrics  # noqa: F401
    import services.shared.stores.counted_edges  # noqa: F401 - the fan-out's and ranker's counted edges
    import services.shared.stores.store_pressure  # noqa: F401 - the workers' in-flight limit and retry budget
    import services.shared.worker.batch_consumer  # noqa: F401
    import services.shared.stores.read_coalescer  # noqa: F401 - the fan-out's coalesced reads
    import services.shared.stores.write_coalescer  # noqa: F401 - and writes
    import services.shared.worker.poison_guard  # noqa: F401
    from services.api.copies.notices import NoticeStats, register_collector
    from services.api.copies.serving_cache import ServingCache
    from services.api.feed.metrics import FeedMetrics
    from services.api.http.metrics import ApiMetrics
    from services.api.stream.metrics import StreamMetrics
    from services.api.visibility.fence import FenceMetrics
    from services.shared.stores.store_health import CassandraHosts  # also feed_kafka_brokers

    api = ApiMetrics()
    StreamMetrics(api.registry, FeedMetrics(api.registry).skipped)
    FenceMetrics(api.registry)
    api.registry.register(CassandraHosts())
    register_collector(api.registry, ServingCache(posts=1, follows=1, timelines=1, inboxes=1, ttl_s=1,
                                                  max_silence_s=1), NoticeStats())
    names: set[str] = set()
    for registry in (REGISTRY, api.registry):
        for family in registry.collect():
            names.add(family.name)
            names.update(s.name for s in family.samples)
    return names


def referenced(text: str) -> set[str]:
    return set(re.findall(r"\b((?:feed|cdc)_[a-z0-9_]+)", text))


def _base(name: str) -> str:
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def test_dashboard_queries_only_exported_metrics() -> None:
    dash = json.loads((REPO / "deploy/grafana/feed-pipeline.json").read_text())
    exprs = " ".join(t["expr"] for p in dash["panels"] for t in p["targets"])
    names = exported_names()
    missing = {n for n in referenced(exprs) if n not in names and _base(n) not in names}
    assert not missing, f"dashboard uses metrics nobody exports: {sorted(missing)}"


def test_metrics_reference_lists_only_exported_metrics() -> None:
    text = (REPO / "docs/operations.md").read_text()
    # The metrics section only: other sections name tables (feed_inbox, ...), not metrics.
    text = text.split("## Metrics", 1)[1].split("\n## ", 1)[0]
    names = exported_names()
    missing = {n for n in referenced(text) if n not in names and _base(n) not in names
               and not n.startswith("feed_cdc")}
    assert not missing, f"docs/operations.md names metrics nobody exports: {sorted(missing)}"


# The stores' metrics come from their exporters, not from the code: the JMX exporter's
# rules (deploy/prometheus/jmx-*.yml name each metric they export), and the postgres
# exporter's default queries (0.11, Debian bookworm), of which the rules and panels read these.
JMX_CONFIGS = ("jmx-kafka.yml", "jmx-cassandra.yml")
POSTGRES_EXPORTER_DEFAULTS = {"pg_up", "pg_settings_max_connections", "pg_stat_activity_count",
                              "pg_replication_slots_pg_wal_lsn_diff"}


def jmx_exported() -> set[str]:
    names: set[str] = set()
    for conf in JMX_CONFIGS:
        text = (REPO / "deploy" / "prometheus" / conf).read_text()
        # Kept narrow and cheap (docs/operations.md, "What the exporters cost").
        assert re.search(r"^startDelaySeconds: 0$", text, re.M), conf
        assert re.search(r"^lowercaseOutputName: true$", text, re.M), conf
        assert re.search(r"^includeObjectNames:$", text, re.M), conf
        names.update(exporters.exported(REPO / "deploy" / "prometheus" / conf))
    return names


def store_referenced(text: str) -> set[str]:
    return set(re.findall(r"\b((?:kafka|cassandra|pg)_[a-z0-9_]+)", text))


def test_dashboard_and_rules_read_only_what_the_store_exporters_export() -> None:
    dash = json.loads((REPO / "deploy/grafana/feed-pipeline.json").read_text())
    exprs = " ".join(t["expr"] for p in dash["panels"] for t in p["targets"])
    rules = "\n".join(line for line in (REPO / "deploy/prometheus/rules.yml").read_text().splitlines()
                      if not line.strip().startswith("#"))
    exported = jmx_exported() | POSTGRES_EXPORTER_DEFAULTS
    for what, text in (("dashboard", exprs), ("rules", rules)):
        missing = store_referenced(text) - exported
        assert not missing, f"{what} uses store metrics no exporter exports: {sorted(missing)}"
    # Every store metric exported is shown and alerted on.
    assert store_referenced(exprs) == exported
    assert store_referenced(rules) == exported - {"cassandra_client_request_latency_seconds"}
