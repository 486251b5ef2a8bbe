"""Which readers get a post, where its rows sort and when they were written. Pure.

Write timestamps of inbox and author-timeline rows (0005_rank_keys.cql, docs/fanout.md):
a post's rows are written at the write time of its rank key (``posts.rank_key``, in
microseconds), and every removal (post delete or removal, unfollow, block, trim, a
move's old key) at the time it is decided. ``key_write_ts`` picks the time a (re-)push
writes at: after the key's own write time and after anything that removed the rows, so
a restored post's rows are not shadowed by the tombstones of its removal, while a rank
move decided later still shadows them.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from enum import Enum
from typing import Any, Iterable, Mapping, NamedTuple

from services.shared.contracts.envelope import (UNAVAILABLE_VALUE, ChangeRecord, parse_jsonb,
                                                parse_timestamp, require_int)
from services.shared.domain import ids
from services.shared.domain.rules import CLOCK_SKEW, INBOX_TTL, VISIBLE


@dataclass(frozen=True)
class PostFields:
    """The columns of a posts change that the serving copy keeps. ``text`` or
    ``media_ids`` is None when the change did not carry it (unchanged TOASTed value):
    the copy keeps what it has."""

    post_id: int
    author_id: int
    created_at: datetime | None
    text: str | None
    media_ids: list[str] | None
    visibility: int | None
    deleted: bool

    @property
    def alive(self) -> bool:
        return self.visibility == VISIBLE and not self.deleted


def post_fields(row: Mapping[str, Any], *, deleted_row: bool = False) -> PostFields:
    """Map a posts row image (CDC or snapshot: one mapping, so they cannot drift)."""
    raw_media = row.get("media_ids")
    media: list[str] | None = None
    if raw_media != UNAVAILABLE_VALUE:
        decoded = parse_jsonb(raw_media) or []
        media = [str(m) for m in decoded] if isinstance(decoded, list) else []
    text = row.get("text")
    visibility = row.get("visibility")
    return PostFields(
        post_id=require_int(row, "post_id"),
        author_id=require_int(row, "author_id"),
        created_at=parse_timestamp(row.get("created_at")),
        text=None if text == UNAVAILABLE_VALUE else text,
        media_ids=media,
        visibility=int(visibility) if visibility is not None else None,
        deleted=deleted_row or row.get("deleted_at") is not None,
    )


class PostAction(str, Enum):
    MATERIALIZE = "materialize"  # the change made the post visible: fan it out
    REMOVE = "remove"            # the change made it invisible: clean materialized rows
    COPY_ONLY = "copy_only"      # an edit that keeps visibility: update the copy only


def post_action(change: ChangeRecord) -> PostAction:
    """What a posts change means for the inboxes."""
    if change.op == "d":
        return PostAction.REMOVE
    after = post_fields(change.row)
    if change.op in ("c", "r"):
        return PostAction.MATERIALIZE if after.alive else PostAction.REMOVE
    was_alive = change.before is not None and post_fields(change.before).alive
    if after.alive and not was_alive:
        return PostAction.MATERIALIZE
    if not after.alive and (was_alive or change.before is None):
        return PostAction.REMOVE
    return PostAction.COPY_ONLY


@dataclass(frozen=True)
class PostCopy:
    """The merged serving copy of a post as Cassandra holds it after last-write-wins."""

    post_id: int
    author_id: int | None
    created_at: datetime | None
    visibility: int | None
    deleted: bool | None
    visibility_ts: int | None  # WRITETIME(visibility): LSN of the change that set it
    fanned_out: bool | None
    score: float | None = None
    rank_key: float | None = None        # what the post's rows are clustered by
    rank_key_next: float | None = None   # where a rank move is taking them
    key_ts: int | None = None            # WRITETIME(rank_key), µs: the rows' write time

    @property
    def row_keys(self) -> list[float]:
        """Every key the post's rows may be stored under now (both, during a move)."""
        return [k for k in dict.fromkeys((self.rank_key, self.rank_key_next)) if k is not None]

    @property
    def alive(self) -> bool:
        return (self.visibility == VISIBLE and not self.deleted
                and self.author_id is not None and self.created_at is not None)


class Follower(NamedTuple):
    """One follower of an author. ``following_since`` is UTC, aware or naive: the fan-out's
    follower pages keep the driver's naive UTC value, since making each one aware
    (``datetime.replace``) cost more than the rest of the follower's row together."""

    reader_id: int
    following_since: datetime | None


def readers_for_post(author_id: int, created_at: datetime, followers: Iterable[Follower],
                     blocked: frozenset[int] | set[int]) -> list[int]:
    """Followers who get the post: followed by then (no backfill), not blocked either way."""
    if created_at.tzinfo is None:
        aware, naive = created_at.replace(tzinfo=timezone.utc), created_at
    else:
        aware, naive = created_at, created_at.astimezone(timezone.utc).replace(tzinfo=None)
    return [f.reader_id for f in followers
            if f.reader_id != author_id
            and (since := f.following_since) is not None
            and since <= (naive if since.tzinfo is None else aware)
            and f.reader_id not in blocked]


def inbox_ttl_s(created_at: datetime, now: datetime) -> int:
    """Seconds an inbox row of a post made at ``created_at`` has left at ``now``: a post
    fanned out late (a replay, a bulk load, a worker catching up) expires when it would
    have, not a full TTL after the late write. 0: too old for any inbox."""
    left = INBOX_TTL - max(timedelta(0), now - created_at)
    return max(0, int(left.total_seconds()))


def key_write_ts(key_ts: int | None, created_at: datetime, now_us: int | None = None) -> int:
    """Write time (µs) of a post's rows: the key's write time, never before the post was
    made; ``now_us`` when the push must shadow earlier removals (a backfill after an
    unfollow, a restore after a removal)."""
    created_us = int(created_at.timestamp() * 1_000_000)
    return max(key_ts or 0, created_us, now_us or 0)


def backfill_window(since: datetime | None, now: datetime) -> tuple[int, int]:
    """The post ids ``(lowest, newest)`` a backfill (a follow, an unblock, the purge of an
    unfollow or block) or an inbox rebuild reads from an author's timeline at ``now``: the
    posts made since ``since`` (the follow; None: no lower bound of its own), never
    further back than an inbox keeps (``INBOX_TTL``: older rows would expire at once),
    up to ``now`` plus ``CLOCK_SKEW`` (posts stamped by a clock slightly ahead count)."""
    start = max(since, now - INBOX_TTL) if since is not None else now - INBOX_TTL
    lowest = ids.lowest_id_at(int(start.timestamp() * 1000))
    newest = ids.lowest_id_at(int((now + CLOCK_SKEW).timestamp() * 1000))
    return lowest, newest


def backfill_posts(post_ids: Iterable[int], lowest_id: int) -> list[int]:
    """Posts a new follow (or an unblock) brings: only those made since following_since."""
    return [p for p in post_ids if p >= lowest_id]


_MIX = 0x9E3779B97F4A7C15  # Fibonacci hashing: spreads consecutive ids evenly
_MASK = (1 << 64) - 1


def should_check_cap(reader_id: int, post_id: int, every: int) -> bool:
    """Deterministic sampling of cap checks: one insert in ``every`` per reader, replay-stable."""
    if every <= 1:
        return True
    mixed = (((reader_id ^ post_id) * _MIX) & _MASK) >> 32
    return mixed % every == 0


def trim_boundary(keys_top_down: list[float], cap: int) -> float | None:
    """The rank key below which the inbox is over its cap (delete ``rank_key < boundary``):
    the lowest-ranked rows go first, the ones no first page would reach. Rows that tie
    with the boundary stay (at most a few over the cap)."""
    if cap <= 0 or len(keys_top_down) <= cap:
        return None
    return keys_top_down[cap - 1]
