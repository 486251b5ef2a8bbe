"""Kafka topic names and their settings: the contracts between the parts.

Every name takes the deployment's topic prefix (``KafkaSettings.topic_prefix``) as an
argument. CDC topics follow Debezium's naming, ``<prefix>.<schema>.<table>``; each has a
JSON Schema and examples in ``schemas/``. Partition counts come from the migrator's
settings (``TopicSettings``; docs/capacity.md sizes them): order matters per key only, and
a role's processes share a topic's partitions, so the count is the most processes of a
role that can work on it. Whether a topic may gain partitions in place is part of its
contract (``Growth``): adding partitions moves keys to other partitions.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Mapping

CAPTURED_TABLES = ("users", "posts", "follows", "blocks", "likes", "moderation_actions", "mutes",
                   "account_states")


class Growth(Enum):
    """What adding partitions to an existing topic does to its consumers (docs/deploy.md,
    "Growing a topic")."""

    # Every record stands alone (a cache drop, a hint, a heartbeat): a key that moves
    # partition changes nothing. The migrator grows these.
    IN_PLACE = "in place"
    # A key's records must be applied in order: grow it only once nothing is in flight
    # (producers stopped, consumers' lag zero), or a key's next record may overtake the
    # last one it had in its old partition.
    DRAINED = "drained"
    # One writer per key owns a count; a key that moves gets a second writer: recreate the
    # topic and rebuild the counts instead.
    NEVER = "never"


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)
    growth: Growth = Growth.DRAINED
    # The name ``FEED_KAFKA_TOPIC_PARTITIONS`` sizes it by ("" for fixed topics).
    short: str = ""


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


# The topics FEED_KAFKA_TOPIC_PARTITIONS can size, by short name, and how each may grow.
SIZED: dict[str, Growth] = {
    **{table: Growth.DRAINED for table in CAPTURED_TABLES},
    "author-events": Growth.IN_PLACE,      # SSE hints; a reader fetches what they name
    "rank-features": Growth.DRAINED,       # a post's features, latest wins
    "rank-key-moves": Growth.DRAINED,      # a post's rank key moves old -> new
    "reader-events": Growth.IN_PLACE,      # "came back": the fan-out's act is idempotent
    # Count topics: a key must never move partition (domain/owned_counts.py).
    "follow-counts": Growth.NEVER,
    "like-counts": Growth.NEVER,
    "serving-changes": Growth.IN_PLACE,    # cache drops, in any order
}
DEFAULT_PARTITIONS = 3


def all_topics(prefix: str, partitions: Mapping[str, int] | None = None,
               default: int = DEFAULT_PARTITIONS) -> list[TopicSpec]:
    """Every topic the pipeline uses, sized ``partitions[short name]`` or ``default``
    (``TopicSettings``); an unknown short name is a ValueError naming it."""
    counts = dict(partitions or {})
    unknown = sorted(set(counts) - set(SIZED))
    if unknown:
        raise ValueError(f"no topic is named {', '.join(unknown)} (known: {', '.join(SIZED)})")

    def sized(short: str, name: str, retention_ms: str) -> TopicSpec:
        return TopicSpec(name, counts.get(short, default), {"retention.ms": retention_ms},
                         SIZED[short], short)
    specs = [sized(t, cdc_topic(t, prefix), _WEEK_MS) for t in CAPTURED_TABLES]
    specs += [
        sized("author-events", author_events_topic(prefix), str(24 * 3600 * 1000)),
        sized("rank-features", rank_features_topic(prefix), _WEEK_MS),
        sized("rank-key-moves", rank_moves_topic(prefix), _WEEK_MS),
        sized("reader-events", reader_events_topic(prefix), _WEEK_MS),
        # A week covers any count owner's downtime.
        sized("follow-counts", follow_counts_topic(prefix), _WEEK_MS),
        sized("like-counts", like_counts_topic(prefix), _WEEK_MS),
        sized("serving-changes", serving_changes_topic(prefix), str(3600 * 1000)),
        TopicSpec(heartbeat_topic(prefix), 1, {"retention.ms": str(3600 * 1000)}, Growth.IN_PLACE),
    ]
    consumed = [s.name for s in specs if s.name.startswith(f"{prefix}.")]
    # A dead letter is read by people, not by a keyed consumer.
    specs += [TopicSpec(dlq_topic(name), 1, {"retention.ms": _MONTH_MS}, Growth.IN_PLACE)
              for name in consumed]
    return specs
