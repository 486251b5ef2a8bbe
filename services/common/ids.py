"""64-bit Snowflake ids (seed 002): 41-bit ms since 2026-01-01T00:00:00Z | 10-bit node | 12-bit seq.

Ids are time-ordered, so "newest first" is "largest id first" everywhere (inbox and
author partitions cluster on post_id DESC). Every id is a decimal string in JSON.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)
EPOCH_MS = int(EPOCH.timestamp() * 1000)
TIMESTAMP_BITS = 41
NODE_BITS = 10
SEQUENCE_BITS = 12
MAX_NODE = (1 << NODE_BITS) - 1
MAX_SEQUENCE = (1 << SEQUENCE_BITS) - 1
NODE_SHIFT = SEQUENCE_BITS
TIMESTAMP_SHIFT = SEQUENCE_BITS + NODE_BITS
MS_PER_DAY = 86_400_000


@dataclass(frozen=True)
class ParsedId:
    timestamp_ms: int  # Unix epoch milliseconds
    node: int
    sequence: int

    @property
    def created_at(self) -> datetime:
        return datetime.fromtimestamp(self.timestamp_ms / 1000, tz=timezone.utc)


def parse(snowflake: int) -> ParsedId:
    return ParsedId(
        timestamp_ms=(snowflake >> TIMESTAMP_SHIFT) + EPOCH_MS,
        node=(snowflake >> NODE_SHIFT) & MAX_NODE,
        sequence=snowflake & MAX_SEQUENCE,
    )


def timestamp_ms(snowflake: int) -> int:
    return (snowflake >> TIMESTAMP_SHIFT) + EPOCH_MS


def day_bucket(snowflake: int) -> int:
    """Days since the epoch of the id's timestamp: the author-partition bucket."""
    return (snowflake >> TIMESTAMP_SHIFT) // MS_PER_DAY


def lowest_id_at(unix_ms: int) -> int:
    """The smallest id that a generator could issue at ``unix_ms`` (for range scans)."""
    return max(0, unix_ms - EPOCH_MS) << TIMESTAMP_SHIFT
