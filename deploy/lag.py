"""What an SRE looks at when the feed falls behind, in one command.

    python -m deploy.lag [--json] [--watch SECONDS] [--all]

- Kafka consumer lag per group, topic and partition (committed offset vs. log end).
- CDC replication-slot lag in bytes (Postgres) and seconds (the relay's metric).
- By default only the product's: topics of ``FEED_TOPIC_PREFIX`` and the relay's slot of
  this database (test runs leave their own prefixes, groups and slots in the development
  stack); ``--all`` shows every group, topic and slot.
- Freshness: commit-to-inbox latency as the fan-out measures it (p50/p95 over its
  histogram since start) and its current capacity estimate.

Every source is optional: a part that is down is reported as such, not as an error.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, TypeVar, TypeVarTuple

from services.shared.domain.rules import iso_utc
from services.shared.settings import Settings, get_settings
from services.shared.clients import kafka, pg

_T = TypeVar("_T")
_Args = TypeVarTuple("_Args")


def committed_offsets(settings: Settings, group: str, partitions: list[Any]) -> dict[tuple[str, int], int]:
    """``group``'s committed offsets of ``partitions`` (``TopicPartition``s; a partition it
    never committed is absent), read by a consumer of that group: ``committed()`` asks the
    group's coordinator without joining the group.

    Not the admin client's ListConsumerGroupOffsets: on a NOT_COORDINATOR answer (the
    coordinator moving, or still loading) librdkafka 2.16 handles that response through a
    consumer-group handle an admin client does not have, and its main thread segfaults
    (docs/reliability.md, "the suite's own segfaults"). A segfault is not an exception:
    it would take down ``make lag --watch`` and a benchmark sampling every second."""
    if not partitions:
        return {}
    reader = kafka.consumer(settings, {"group.id": group, "enable.auto.commit": False})
    try:
        return {(tp.topic, tp.partition): tp.offset
                for tp in reader.committed(partitions, timeout=10) if tp.offset >= 0}
    finally:
        reader.close()


def kafka_lag(settings: Settings, topic_prefix: str | None = None) -> list[dict[str, Any]]:
    """Every group's committed offset against the log end, per partition it committed,
    over every topic (or those starting with ``topic_prefix``)."""
    from confluent_kafka import TopicPartition

    admin = kafka.admin(settings)
    groups = sorted(g.group_id for g in admin.list_consumer_groups(request_timeout=10).result().valid)
    meta = admin.list_topics(timeout=10)
    partitions = [TopicPartition(t, p) for t in sorted(meta.topics)
                  if not t.startswith("__") and (topic_prefix is None or t.startswith(topic_prefix))
                  for p in sorted(meta.topics[t].partitions)]
    probe = kafka.consumer(settings, {"group.id": "feed-lag-probe", "enable.auto.commit": False})
    rows: list[dict[str, Any]] = []
    try:
        for group in groups:
            for (topic, partition), offset in committed_offsets(settings, group, partitions).items():
                low, high = probe.get_watermark_offsets(TopicPartition(topic, partition), timeout=5)
                rows.append({"group": group, "topic": topic, "partition": partition,
                             "committed": offset, "end": high, "lag": max(0, high - offset)})
    finally:
        probe.close()
    return rows


def group_lag(settings: Settings, group: str, topics: list[str]) -> int:
    """Total lag of ``group`` on ``topics``, counting a partition the group never committed
    from its log start (``kafka_lag`` lists only committed partitions)."""
    from confluent_kafka import TopicPartition

    meta = kafka.admin(settings).list_topics(timeout=10)
    wanted = [TopicPartition(t, p) for t in topics if t in meta.topics
              for p in meta.topics[t].partitions]
    committed = committed_offsets(settings, group, wanted)
    probe = kafka.consumer(settings, {"group.id": "feed-lag-probe", "enable.auto.commit": False})
    try:
        total = 0
        for tp in wanted:
            low, high = probe.get_watermark_offsets(tp, timeout=5)
            done = committed.get((tp.topic, tp.partition), -1)
            total += max(0, high - (done if done >= 0 else low))
        return total
    finally:
        probe.close()


def slot_lag(settings: Settings) -> list[dict[str, Any]]:
    with pg.connect(settings) as conn:
        rows = conn.execute(
            "SELECT slot_name, database, active, "
            "pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint, wal_status "
            "FROM pg_replication_slots WHERE slot_type = 'logical' ORDER BY slot_name").fetchall()
    return [{"slot": r[0], "database": r[1], "active": r[2], "lag_bytes": r[3], "wal_status": r[4]}
            for r in rows]


def scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Parse a Prometheus text page into {metric: [(labels, value)]}."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
        text = resp.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def histogram_quantile(buckets: list[tuple[dict[str, str], float]], q: float) -> float | None:
    """The upper bound of the bucket where the q-quantile falls (Prometheus' way, coarse)."""
    points = sorted((float(labels["le"]), value) for labels, value in buckets)
    if not points or points[-1][1] == 0:
        return None
    target = q * points[-1][1]
    for bound, count in points:
        if count >= target:
            return bound
    return None


def freshness(settings: Settings) -> dict[str, Any]:
    """Over every fan-out worker that answers (``deploy.services``' ports): their
    histograms summed; the capacity is the lowest worker's estimate (each decides tiers
    on its own)."""
    from deploy.services import worker_ports
    from deploy.stack.layout import Layout

    summed: dict[str, float] = {}
    capacities: list[float] = []
    failure: Exception | None = None
    for port in worker_ports(settings, Layout.from_env())["fanout"]:
        try:
            metrics = scrape(port)
        except OSError as exc:
            failure = exc
            continue
        for labels, value in metrics.get("feed_fanout_commit_to_inbox_seconds_bucket", []):
            summed[labels["le"]] = summed.get(labels["le"], 0.0) + value
        capacities += [v for _, v in metrics.get("feed_fanout_capacity_rows_per_second", [])]
    if failure is not None and not capacities:
        raise failure
    buckets = [({"le": le}, value) for le, value in summed.items()]
    return {"commit_to_inbox_p50_s": histogram_quantile(buckets, 0.5),
            "commit_to_inbox_p95_s": histogram_quantile(buckets, 0.95),
            "fanout_capacity_rows_per_s": min(capacities, default=0.0),
            "fanout_workers": len(capacities)}


def cdc_seconds(settings: Settings) -> float | None:
    values = scrape(settings.cdc_metrics_port).get("cdc_slot_lag_seconds", [])
    return values[0][1] if values else None


def _attempt(fn: Callable[[*_Args], _T], *args: *_Args) -> _T | dict[str, str]:
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - a part that is down is reported, not raised
        return {"unavailable": f"{type(exc).__name__}: {exc}"}


def product_only(data: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """The report without other prefixes' topics (and their groups) and other slots."""
    from services.cdc.slot import slot_name_for

    out = dict(data)
    if isinstance(data["kafka"], list):
        out["kafka"] = [r for r in data["kafka"] if r["topic"].startswith(f"{settings.topic_prefix}.")]
    if isinstance(data["cdc_slots"], list):
        out["cdc_slots"] = [s for s in data["cdc_slots"] if s["slot"] == slot_name_for(settings)]
    return out


def report(settings: Settings, everything: bool = True) -> dict[str, Any]:
    if everything:
        return _report(settings)
    # Only the product's topics are asked about (a development stack holds many test
    # runs' topics and groups); the filter then drops other slots.
    return product_only(_report(settings, f"{settings.topic_prefix}."), settings)


def _report(settings: Settings, topic_prefix: str | None = None) -> dict[str, Any]:
    return {"at": iso_utc(datetime.now(timezone.utc), "seconds"),
            "kafka": _attempt(kafka_lag, settings, topic_prefix),
            "cdc_slots": _attempt(slot_lag, settings),
            "cdc_lag_seconds": _attempt(cdc_seconds, settings),
            "freshness": _attempt(freshness, settings)}


def render(data: dict[str, Any]) -> str:
    lines = [f"feed lag at {data['at']}", "", "consumer lag (group / topic / partition):"]
    kafka = data["kafka"]
    if isinstance(kafka, dict):
        lines.append(f"  unavailable: {kafka['unavailable']}")
    elif not kafka:
        lines.append("  no committed consumer groups (--all shows other prefixes' groups)")
    else:
        for r in kafka:
            lines.append(f"  {r['group']:<28} {r['topic']:<34} {r['partition']:>3}  "
                         f"lag {r['lag']:>8}  (committed {r['committed']}, end {r['end']})")
    lines += ["", "CDC slots:"]
    slots = data["cdc_slots"]
    if isinstance(slots, dict):
        lines.append(f"  unavailable: {slots['unavailable']}")
    else:
        for s in slots:
            lines.append(f"  {s['slot']:<28} db {s['database']:<14} active {str(s['active']):<5} "
                         f"lag {s['lag_bytes'] or 0:>10} bytes  wal {s['wal_status']}")
    secs = data["cdc_lag_seconds"]
    lines.append("  relay not running" if isinstance(secs, dict) else f"  relay lag: {secs:.2f} s")
    fresh = data["freshness"]
    lines += ["", "freshness (fan-out):"]
    if "unavailable" in fresh:
        lines.append("  fan-out not running")
    else:
        lines.append(f"  commit→inbox p50 ≤ {fresh['commit_to_inbox_p50_s']} s, "
                     f"p95 ≤ {fresh['commit_to_inbox_p95_s']} s; "
                     f"capacity {fresh['fanout_capacity_rows_per_s']:.0f} rows/s")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.lag", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--watch", type=float, default=0, help="repeat every N seconds")
    parser.add_argument("--all", action="store_true",
                        help="every consumer group, topic and slot, not only the product's")
    parser.add_argument("--stack", action="store_true",
                        help="the local development stack's addresses and client security for "
                             "every FEED_* variable not set (make lag)")
    args = parser.parse_args()
    if args.stack:
        from deploy.stack.layout import Layout
        Layout.from_env().use_as_default()
    settings = get_settings()
    while True:
        data = report(settings, everything=args.all)
        print(json.dumps(data, indent=2) if args.json else render(data), flush=True)
        if not args.watch:
            return 0
        time.sleep(args.watch)


if __name__ == "__main__":
    sys.exit(main())
