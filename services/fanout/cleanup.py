"""Asynchronous clean-up decisions: which materialized inbox rows must go. Pure.

The read path filters unfollowed, blocked, deleted and removed content at once; these
decisions remove the rows behind it, each ``USING TIMESTAMP`` the time it is decided (so a
row written before it, by a late fan-out, never comes back; 0005_rank_keys.cql).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from services.shared.contracts.envelope import ChangeRecord, require_int

from .tiering import Tier


@dataclass(frozen=True)
class InboxPurge:
    """Remove every row of ``author_id``'s posts from ``reader_id``'s inbox."""

    reader_id: int
    author_id: int
    lsn: int


def purges_for_unfollow(change: ChangeRecord) -> list[InboxPurge]:
    """A follow row deleted: the follower's inbox loses the author's posts."""
    if change.op != "d":
        return []
    row = change.row
    return [InboxPurge(require_int(row, "follower_id"), require_int(row, "followed_id"), change.lsn)]


def purges_for_block(change: ChangeRecord) -> list[InboxPurge]:
    """A block created: both users' inboxes lose each other's posts (blocked either way)."""
    if change.op == "d":
        return []
    row = change.row
    blocker, blocked = require_int(row, "blocker_id"), require_int(row, "blocked_id")
    return [InboxPurge(blocker, blocked, change.lsn), InboxPurge(blocked, blocker, change.lsn)]


def rows_to_purge(inbox_rows: Iterable[tuple[float, int, int]], author_id: int) -> list[tuple[float, int]]:
    """``(rank_key, post_id)`` of a reader's ``(rank_key, post_id, author_id)`` inbox rows
    that are by ``author_id``."""
    return [(key, post_id) for key, post_id, row_author in inbox_rows if row_author == author_id]


def post_removal_reaches_inboxes(fanned_out: bool | None, author_tier: Tier) -> bool:
    """Whether removing a post must walk follower inboxes.

    A post known not to have been fanned out (its author was a celebrity) lives only in
    the author partition. When we do not know (the delete arrived before its create),
    the author's current tier is the best guess; a miss is harmless because the create,
    arriving later, sees the deleted copy and does not fan out.
    """
    if fanned_out is not None:
        return fanned_out
    return author_tier is Tier.ORDINARY
