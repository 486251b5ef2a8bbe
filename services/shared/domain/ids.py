"""64-bit Snowflake ids: 41-bit ms since 2026-01-01T00:00:00Z | 10-bit node | 12-bit seq.

Ids are time-ordered, so "newest first" is "largest id first" everywhere (inbox and
author partitions cluster on post_id DESC). Every id is a decimal string in JSON.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from enum import Enum

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


def compose(unix_ms: int, node: int, sequence: int) -> int:
    """Pack a timestamp (Unix ms), node id and sequence into one id; inverse of ``parse``."""
    if not 0 <= node <= MAX_NODE:
        raise ValueError(f"node id {node} outside 0..{MAX_NODE}")
    if not 0 <= sequence <= MAX_SEQUENCE:
        raise ValueError(f"sequence {sequence} outside 0..{MAX_SEQUENCE}")
    delta = unix_ms - EPOCH_MS
    if not 0 <= delta < (1 << TIMESTAMP_BITS):
        raise ValueError(f"timestamp {unix_ms} outside the 41-bit range after the epoch")
    return (delta << TIMESTAMP_SHIFT) | (node << NODE_SHIFT) | sequence


# Clock drift, three levels (docs/architecture.md). A backwards step up to 5 ms is NTP
# slew: wait it out. Up to 1 s (a leap second, a large slew): keep issuing on the last timestamp, ids
# stay unique because the sequence keeps counting. Beyond that the host clock is wrong and
# issuing would risk collisions with ids already out there: refuse.
MAX_WAIT_DRIFT_MS = 5
MAX_LOGICAL_DRIFT_MS = 1000


class Drift(Enum):
    NONE = "none"                  # the clock is at or after the last timestamp
    WAIT = "wait"                  # level 1: sleep until the clock catches up
    CONTINUE_ON_LAST = "continue"  # level 2: issue on the last timestamp
    REFUSE = "refuse"              # level 3: error


def classify_drift(last_ms: int, now_ms: int) -> Drift:
    """Which of the three drift levels applies when the clock reads ``now_ms``."""
    behind = last_ms - now_ms
    if behind <= 0:
        return Drift.NONE
    if behind <= MAX_WAIT_DRIFT_MS:
        return Drift.WAIT
    if behind <= MAX_LOGICAL_DRIFT_MS:
        return Drift.CONTINUE_ON_LAST
    return Drift.REFUSE
