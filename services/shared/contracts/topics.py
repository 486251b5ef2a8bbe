"""Kafka topic names and their settings: the contracts between the parts.

Every name takes the deployment's topic prefix (``Settings.topic_prefix``) as an argument.
CDC topics follow Debezium's naming, ``<prefix>.<schema>.<table>``; each has a JSON
Schema and examples in ``schemas/``. Partition counts are sized for a 2-core machine:
order matters per key only, and fan-out parallelism comes from concurrent Cassandra
writes, not from partitions.
"""
from __future__ import annotations

from dataclasses import dataclass, field

CAPTURED_TABLES = ("users", "posts", "follows", "blocks", "likes", "moderation_actions", "mutes")


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)


# The Postgres schema every captured table lives in.
CDC_SCHEMA = "public"


def cdc_topic(table: str, prefix: str, schema: str = CDC_SCHEMA) -> str:
    """A captured table's change topic, ``<prefix>.<schema>.<table>``: Debezium's naming
    (its topic.prefix is ``Settings.topic_prefix``), which the relay reproduces (its
    envelope.topic_for asks here) and every consumer subscribes to."""
    return f"{prefix}.{schema}.{table}"


def dlq_topic(topic: str) -> str:
    return f"{topic}.dlq"


def author_events_topic(prefix: str) -> str:
    """One event per post the fan-out made readable (key = author_id), for SSE. It
    replaced ``<prefix>.inbox-events`` (one per inbox row), which is no longer created."""
    return f"{prefix}.author-events"


def rank_features_topic(prefix: str) -> str:
    """External ranking features, published by other services (key = post_id)."""
    return f"{prefix}.rank-features"


def rank_moves_topic(prefix: str) -> str:
    """The ranker moved a post's rank key; the fan-out moves its rows (key = post_id)."""
    return f"{prefix}.rank-key-moves"


def reader_events_topic(prefix: str) -> str:
    """A reader did something the fan-out acts on: came back after going idle
    (contracts/reader_events.py; key = reader_id). Published by the API."""
    return f"{prefix}.reader-events"


def follow_counts_topic(prefix: str) -> str:
    """Follows changes re-keyed by the followed author, for the follower counts' one
    writer (key = author_id; contracts/edge_counts.py). Its partition count never changes."""
    return f"{prefix}.follow-counts"


def like_counts_topic(prefix: str) -> str:
    """Likes changes re-keyed by the post, for the like counts' one writer (key = post_id)."""
    return f"{prefix}.like-counts"


def serving_changes_topic(prefix: str) -> str:
    """Workers name the serving copies they changed; API caches drop them (key = first id)."""
    return f"{prefix}.serving-changes"


def heartbeat_topic(prefix: str) -> str:
    """CDC relay heartbeats (Debezium's __debezium-heartbeat.<prefix> equivalent)."""
    return f"__feed-heartbeat.{prefix}"


# A week of history for the data teams; a DLQ keeps its records for a month.
_WEEK_MS = str(7 * 24 * 3600 * 1000)
_MONTH_MS = str(30 * 24 * 3600 * 1000)


def all_topics(prefix: str) -> list[TopicSpec]:
    specs = [TopicSpec(cdc_topic(t, prefix), 3, {"retention.ms": _WEEK_MS}) for t in CAPTURED_TABLES]
    specs += [
        TopicSpec(author_events_topic(prefix), 3, {"retention.ms": str(24 * 3600 * 1000)}),
        TopicSpec(rank_features_topic(prefix), 3, {"retention.ms": _WEEK_MS}),
        TopicSpec(rank_moves_topic(prefix), 3, {"retention.ms": _WEEK_MS}),
        TopicSpec(reader_events_topic(prefix), 3, {"retention.ms": _WEEK_MS}),
        # Count topics: a key must never move partition (domain/owned_counts.py), so
        # these are never repartitioned; a week covers any owner's downtime.
        TopicSpec(follow_counts_topic(prefix), 3, {"retention.ms": _WEEK_MS}),
        TopicSpec(like_counts_topic(prefix), 3, {"retention.ms": _WEEK_MS}),
        TopicSpec(serving_changes_topic(prefix), 3, {"retention.ms": str(3600 * 1000)}),
        TopicSpec(heartbeat_topic(prefix), 1, {"retention.ms": str(3600 * 1000)}),
    ]
    consumed = [s.name for s in specs if s.name.startswith(f"{prefix}.")]
    specs += [TopicSpec(dlq_topic(name), 1, {"retention.ms": _MONTH_MS}) for name in consumed]
    return specs
