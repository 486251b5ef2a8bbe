"""The product's rules and shared formats, each written once.

A change of one of these is one edit here (plus, where a table carries it, the
migration named beside it): every module that applies a rule imports it from here.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import overload

# posts.visibility (and the serving copy's): a post is shown only while it is VISIBLE;
# moderation sets REMOVED (and a restore VISIBLE again). Deletion is apart (deleted_at).
# The values are the column's contract (CHECK (visibility IN (0, 1)),
# deploy/migrations/postgres/0001_core.sql): queries embed these constants, not digits.
VISIBLE = 1
REMOVED = 0

# An inbox row lives this long after its post was made (docs/fanout.md, "Inbox age"):
# by then a post has lost 28 units of rank to decay (ranking.HALF_LIFE_S, 6 h). Every
# push writes what is left of it (audience.inbox_ttl_s); feed_inbox's
# default_time_to_live (604800, deploy/migrations/cassandra/0005_rank_keys.cql) is the
# same week, the data contract's copy. Nothing older is pushed, backfilled or rebuilt.
INBOX_TTL = timedelta(days=7)
INBOX_TTL_S = int(INBOX_TTL.total_seconds())

# Posts stamped up to this far ahead of a worker's clock count as made now when a worker
# reads "everything up to now" from the author timelines (audience.backfill_window): an
# id may run ahead of its API host's clock (ids.MAX_LOGICAL_DRIFT_MS, drift level 2), and
# hosts' clocks differ; a minute covers both with room.
CLOCK_SKEW = timedelta(minutes=1)

# A demoted author's celebrity-period posts were never fanned out: readers merge their
# partitions for this long after the demotion (the celebrities row's TTL, a day more
# than any inbox keeps, so every such post has left the window by then).
DEMOTED_MERGE = INBOX_TTL + timedelta(days=1)
DEMOTED_MERGE_S = int(DEMOTED_MERGE.total_seconds())

# The tier store keeps every celebrity in one partition of ``celebrities``.
CELEBRITY_SHARD = 0


@overload
def as_utc(ts: datetime) -> datetime: ...
@overload
def as_utc(ts: None) -> None: ...
def as_utc(ts: datetime | None) -> datetime | None:
    """A timestamp the Cassandra driver read (naive, in UTC) as an aware one; an aware
    one, or None, as it is."""
    return ts.replace(tzinfo=timezone.utc) if ts is not None and ts.tzinfo is None else ts


def iso_utc(ts: datetime, timespec: str = "milliseconds") -> str:
    """A timestamp as every event, page and report writes one: ISO 8601 in UTC with ``Z``,
    to the millisecond (events and pages: what the JSON schemas expect) or to
    ``timespec`` ("seconds": the operators' reports)."""
    return ts.astimezone(timezone.utc).isoformat(timespec=timespec).replace("+00:00", "Z")
