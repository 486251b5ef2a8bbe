"""Posts older than the inbox TTL, taken in by the batch: which posts, and what each
needs. Pure (docs/fanout.md, "The backlog intake").

A post older than the inbox TTL (7 days) gets no inbox row, no announcement, and reads
neither its author's count, tier, blocks nor followers: the per-post path writes its
copy, reads the merged copy, and writes its rank key, its author-timeline row and its
``fanned_out = false`` mark (or, for a removal, tombstones the timeline row and re-writes
the key). A month of history is mostly such posts, and each of those steps was a round
trip of its own. The fan-out's posts agent therefore takes a batch's old posts
together (``PostFanout.take_old_posts``): every change's copy in one round of writes,
every merged copy in one round of reads, then each post's writes, decided here from its
merged copy and the batch's changes of it, in one more round.

``takes_together`` picks the posts (whole keys: every change of a post in the batch goes
one way, so a post's changes keep their order); ``plan_old_post`` decides what a post
needs from the copy the batch's writes left, exactly as the per-post path decides from
the copy at each of its changes: that path also reads the copy after writing it, so a
replay of its changes already decides from the merged copy, and so does this.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Sequence

from services.shared.contracts.envelope import ChangeRecord
from services.shared.domain.ids import EPOCH
from services.shared.domain.ranking import rank_key

from .audience import (PostAction, PostCopy, PostFields, inbox_ttl_s, key_write_ts, post_action,
                       post_fields)


@dataclass(frozen=True, slots=True)
class Keep:
    """An old post that stays visible: its key (``write_key``: the copy's key cell must be
    written at ``key_ts``, as the per-post path's ``set_rank_key``), its author-timeline
    row under ``key`` at ``key_ts``, and its ``fanned_out = false`` mark at ``mark_lsn``."""

    post_id: int
    author_id: int
    key: float
    key_ts: int
    write_key: bool
    mark_lsn: int


@dataclass(frozen=True, slots=True)
class Drop:
    """An old post removed, known never to have reached an inbox (``fanned_out`` false):
    its author-timeline rows under every key they may have are tombstoned at
    ``removed_at`` and the copy's key is re-written then (a restore pushes after it)."""

    post_id: int
    author_id: int
    keys: tuple[float, ...]
    removed_at: int


class Outcome(str, Enum):
    KEPT = "kept"            # Keep
    DROPPED = "dropped"      # Drop
    UNCHANGED = "unchanged"  # nothing beyond the copy (an edit, a create already deleted, ...)
    PER_POST = "per_post"    # the per-post path applies the post's changes


Plan = Keep | Drop | Outcome


@dataclass(frozen=True, slots=True)
class OldChange:
    """One change of a post the batch takes together: the change, its row's columns
    (``post_fields``) and what it means for inboxes (``post_action``), each worked out once."""

    change: ChangeRecord
    post: PostFields
    action: PostAction


def takes_together(changes: Sequence[ChangeRecord], now: datetime) -> list[OldChange] | None:
    """A post's changes of a batch (offset order; tombstones left out) as they go by the
    batch, or None when they do not: each must name the post's creation time, and the
    post must be past the inbox TTL at ``now``. Its creation time never changes and
    ``now`` only grows, so a post old now is old for every later decision. Anything else
    (a recent post, a row without its time) keeps the per-post path."""
    taken: list[OldChange] = []
    for change in changes:
        post = post_fields(change.row, deleted_row=change.is_delete)
        if post.created_at is None or inbox_ttl_s(post.created_at, now) > 0:
            return None
        taken.append(OldChange(change, post, post_action(change)))
    return taken or None


def plan_old_post(copy: PostCopy | None, changes: Sequence[OldChange], now: datetime,
                  now_us: int) -> Plan:
    """What one old post needs once the batch's copies are written: ``copy`` is the merged
    copy read after them, ``changes`` the batch's changes of the post in offset order.

    The per-post path, change by change: a materializing change pushes when the copy it
    reads is alive, a removal cleans when it is not, an edit that keeps visibility does
    nothing more. Deciding once from the merged copy gives what a replay of those changes
    gives (each of them then reads this same copy): alive with a materializing change in
    the batch is kept (a restore among them writes at ``now_us``, after any removal's
    tombstones, as the per-post restore does); not alive with a removal in the batch is
    dropped from wherever an earlier batch (or a crashed attempt of this one) left rows;
    a create followed by its delete therefore writes no timeline row at all.
    Anything that would reach inboxes (removing a post that may have been fanned out
    while recent) or a copy that does not say the post is old is the per-post path's."""
    if copy is None or not changes:
        return Outcome.UNCHANGED  # no copy: nothing was ever materialized
    author_id = changes[0].post.author_id
    if copy.alive:
        materializing = [c.change for c in changes if c.action is PostAction.MATERIALIZE]
        if not materializing:
            return Outcome.UNCHANGED  # an edit, or a removal a later change undid
        assert copy.created_at is not None  # alive
        if inbox_ttl_s(copy.created_at, now) > 0:
            return Outcome.PER_POST
        key = copy.rank_key
        if key is None:
            key = rank_key(copy.score, int(copy.created_at.timestamp() * 1000))
        restore = any(c.op == "u" for c in materializing)
        key_ts = key_write_ts(copy.key_ts, copy.created_at, now_us if restore else None)
        write_key = restore or copy.rank_key is None or key_ts != copy.key_ts
        mark_lsn = max(materializing[-1].lsn, copy.visibility_ts or 0)
        return Keep(copy.post_id, author_id, key, key_ts, write_key, mark_lsn)
    if all(c.action is not PostAction.REMOVE for c in changes):
        return Outcome.UNCHANGED  # a create (or edit) whose post is deleted by now
    keys = copy.row_keys
    if not keys:
        return Outcome.UNCHANGED  # never materialized: no rows anywhere
    if copy.fanned_out is not False:
        return Outcome.PER_POST   # may have rows in inboxes: its tier and followers decide
    removed_at = key_write_ts(copy.key_ts, copy.created_at or EPOCH, now_us)
    return Drop(copy.post_id, author_id, tuple(keys), removed_at)
