"""Kafka topic names and their settings: the contracts between the parts.

CDC topics follow Debezium's naming, ``<prefix>.<schema>.<table>``; each has a JSON
Schema and examples in ``schemas/``. Partition counts are sized for a 2-core machine:
order matters per key only, and fan-out parallelism comes from concurrent Cassandra
writes, not from partitions.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .settings import get_settings

CAPTURED_TABLES = ("users", "posts", "follows", "blocks", "likes", "moderation_actions")


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)


def cdc_topic(table: str, prefix: str | None = None) -> str:
    return f"{prefix or get_settings().topic_prefix}.public.{table}"


def dlq_topic(topic: str) -> str:
    return f"{topic}.dlq"


def inbox_events_topic(prefix: str | None = None) -> str:
    """Fan-out announces a post landing in a reader's inbox (key = reader_id)."""
    return f"{prefix or get_settings().topic_prefix}.inbox-events"


def author_events_topic(prefix: str | None = None) -> str:
    """One event per post of a high-degree author (key = author_id), for SSE."""
    return f"{prefix or get_settings().topic_prefix}.author-events"


def rank_features_topic(prefix: str | None = None) -> str:
    """External ranking features, published by other services (key = post_id)."""
    return f"{prefix or get_settings().topic_prefix}.rank-features"


def rank_moves_topic(prefix: str | None = None) -> str:
    """The ranker moved a post's rank key; the fan-out moves its rows (key = post_id)."""
    return f"{prefix or get_settings().topic_prefix}.rank-key-moves"


def serving_changes_topic(prefix: str | None = None) -> str:
    """Workers name the serving copies they changed; API caches drop them (key = first id)."""
    return f"{prefix or get_settings().topic_prefix}.serving-changes"


def heartbeat_topic(prefix: str | None = None) -> str:
    """CDC relay heartbeats (Debezium's __debezium-heartbeat.<prefix> equivalent)."""
    return f"__feed-heartbeat.{prefix or get_settings().topic_prefix}"


# A week of history for the data teams; a DLQ keeps its records for a month.
_WEEK_MS = str(7 * 24 * 3600 * 1000)
_MONTH_MS = str(30 * 24 * 3600 * 1000)


def all_topics(prefix: str | None = None) -> list[TopicSpec]:
    specs = [TopicSpec(cdc_topic(t, prefix), 3, {"retention.ms": _WEEK_MS}) for t in CAPTURED_TABLES]
    specs += [
        TopicSpec(inbox_events_topic(prefix), 3, {"retention.ms": str(24 * 3600 * 1000)}),
        TopicSpec(author_events_topic(prefix), 3, {"retention.ms": str(24 * 3600 * 1000)}),
        TopicSpec(rank_features_topic(prefix), 3, {"retention.ms": _WEEK_MS}),
        TopicSpec(rank_moves_topic(prefix), 3, {"retention.ms": _WEEK_MS}),
        TopicSpec(serving_changes_topic(prefix), 3, {"retention.ms": str(3600 * 1000)}),
        TopicSpec(heartbeat_topic(prefix), 1, {"retention.ms": str(3600 * 1000)}),
    ]
    consumed = [s.name for s in specs if s.name.startswith(f"{prefix or get_settings().topic_prefix}.")]
    specs += [TopicSpec(dlq_topic(name), 1, {"retention.ms": _MONTH_MS}) for name in consumed]
    return specs
