"""Owner of the fan-out tiers: ``author_tiers``, ``celebrities`` and ``fanout_capacity``.

Tables (0001_serving.cql, 0015_fanout_capacity.cql): ``author_tiers (author_id) -> tier,
changed_at, followers``, the fan-out's hysteresis state per author; ``celebrities (shard,
author_id) -> since, until``, the small list of authors whose timelines readers merge:
current celebrities (until null) and recently demoted ones (until set, the row expiring
by TTL); and ``fanout_capacity (name) -> rows_per_s, measured_at``, the tier policy's
last measured capacity per consumer group, which a restarted worker starts from. The
fan-out writes all three (services/fanout/tier_store.py says in which order); the read
path reads the list.

- ``ReadPathCelebrities``: the API's read of the whole list (one partition).
- ``FanoutTiers``: the fan-out's reads and writes of an author's tier (the read alone,
  or with other posts' authors as one coalesced ``IN`` read), of its list row, and of
  the group's saved capacity.

Deliberate: the read path keeps the driver's plain tuples (``CelebrityRow``).
"""
from __future__ import annotations

from datetime import datetime
from typing import NamedTuple, TypeAlias

from .statements import Cql, Statements


class TierRow(NamedTuple):
    """``FanoutTiers.tier`` / ``tiers_in``: an author's tier state (naive UTC)."""

    author_id: int
    tier: str | None
    changed_at: datetime | None


class SinceRow(NamedTuple):
    """``FanoutTiers.since``: when the author became a celebrity."""

    since: datetime | None


class CapacityRow(NamedTuple):
    """``FanoutTiers.capacity``: a consumer group's last measured capacity (naive UTC)."""

    rows_per_s: float | None
    measured_at: datetime | None


# A celebrities row as the read path's tuple profile returns it: (author_id, until in
# Unix ms), until None while the author is current.
CelebrityRow: TypeAlias = tuple[int, int | None]


class ReadPathCelebrities(Statements):
    """shard -> ``CelebrityRow``s."""

    celebrities = Cql("SELECT author_id, toUnixTimestamp(until) FROM celebrities WHERE shard=?",
                      fetch_size=100_000)


class FanoutTiers(Statements):
    """The fan-out's statements on ``author_tiers`` and ``celebrities``."""

    tier = Cql("SELECT author_id, tier, changed_at FROM author_tiers WHERE author_id=?")
    tiers_in = Cql("SELECT author_id, tier, changed_at FROM author_tiers WHERE author_id IN ?")
    # (author_id, tier, changed_at, followers)
    write = Cql("INSERT INTO author_tiers (author_id, tier, changed_at, followers) VALUES (?,?,?,?)")
    # (shard, author_id, since)
    promote = Cql("INSERT INTO celebrities (shard, author_id, since, until) VALUES (?,?,?,null)")
    # (shard, author_id, since, until, ttl_s)
    demote = Cql("INSERT INTO celebrities (shard, author_id, since, until) VALUES (?,?,?,?) USING TTL ?")
    since = Cql("SELECT since FROM celebrities WHERE shard=? AND author_id=?")
    # (name) -> CapacityRow
    capacity = Cql("SELECT rows_per_s, measured_at FROM fanout_capacity WHERE name=?")
    # (name, rows_per_s, measured_at, ttl_s)
    save_capacity = Cql("INSERT INTO fanout_capacity (name, rows_per_s, measured_at) VALUES (?,?,?) "
                        "USING TTL ?")
