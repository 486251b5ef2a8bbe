"""Follows, blocks and mutes changes: both-direction copies, follower counts, inbox clean-up.

A mute is one copy row in the muter's partition (copies.py, ``add_mute``) and nothing
else: the muted author's rows stay in the muter's inbox, hidden when a page is read, so
an unmute needs no backfill.

A follow (or the unblock of a followed author) brings the author's posts made since
``following_since`` that are not yet in the inbox: normally none; this is what makes
the result independent of whether the post or the follow was processed first. Older
posts never come back (no surprise backfill).

Round trips of a follow change, each step's statements concurrent:
1. write the ``following`` and ``followers`` copies;
2. a follow only: read back the ``followers`` copy's write time (is this change still
   the pair's newest?), and read the author's posts of the window (after the follow is
   written: see docs/fanout.md, post-before-follow);
3. only when there are such posts: the block check and the posts' copies, then pushes.
   Pushed rows are not announced: the posts' own ``author-events`` records went out when
   they were fanned out, and announcing each backfilled row again would bring back one
   record per row (a bulk load of follows backfills most of its rows).
The change is also published to ``<prefix>.follow-counts`` keyed by the author: the
follower count's one owner (the ``follow_counts`` agent) moves it, without a Paxos round
(services/shared/domain/owned_counts.py). The batch is acked once that record is in its
topic, so a crash before loses nothing, and a record published twice counts once.
"""
from __future__ import annotations

import time
from datetime import datetime
from typing import Awaitable, Callable

from services.shared.contracts import edge_counts
from services.shared.contracts.envelope import ChangeRecord, parse_timestamp, require_int
from services.shared.contracts.topics import follow_counts_topic
from services.shared.worker.event_publisher import EventPublisher, delivered, settle

from .audience import PostCopy, backfill_posts, backfill_window, inbox_ttl_s, key_write_ts
from .cleanup import InboxPurge, purges_for_block, purges_for_unfollow
from .copies import CopyStore
from .inbox import InboxPort, InboxRow
from .metrics import CLEANUP_ROWS, INBOX_ROWS


class RelationChanges:
    def __init__(self, copies: CopyStore, inbox: InboxPort, publisher: EventPublisher,
                 topic_prefix: str, clock: Callable[[], datetime],
                 wall_clock_us: Callable[[], int] = lambda: time.time_ns() // 1000,
                 unflag: Callable[[int, list[int]], Awaitable[None]] | None = None) -> None:
        self._copies = copies
        # Clears an inactive-reader flag (inactive.py) left on a follow edge: a reader who
        # follows (again) is reading, and a flag outliving an unfollow must not silence
        # a later follow of the same author.
        self._unflag = unflag
        self._inbox = inbox
        self._publisher = publisher
        self._counts_topic = follow_counts_topic(topic_prefix)
        self._clock = clock
        self._now_us = wall_clock_us

    async def on_follow_changed(self, change: ChangeRecord) -> None:
        row = change.row
        follower, followed = require_int(row, "follower_id"), require_int(row, "followed_id")
        since = None
        if not change.is_delete:
            since = parse_timestamp(row.get("following_since"))
            if since is None:
                raise ValueError("follows row without following_since")
        newest = await self._copies.apply_follow(follower, followed, since, change.lsn)
        key, value = edge_counts.encode(
            edge_counts.EdgeCounted(followed, follower, not change.is_delete, change.lsn))
        work: list[Awaitable[None]] = [self._count(key, value)]
        if change.is_delete:
            old_since = parse_timestamp(row.get("following_since"))
            work += [self._purge(p, "unfollow", old_since) for p in purges_for_unfollow(change)]
        elif newest:
            assert since is not None
            work.append(self._backfill(follower, followed, since))
        if self._unflag is not None and (change.is_delete or newest):
            work.append(self._unflag(follower, [followed]))
        await settle(work)

    async def _count(self, key: bytes, value: bytes) -> None:
        """Hand the change to its count's owner (acked with the batch, ``delivered``)."""
        await delivered([await self._publisher.send(self._counts_topic, key, value)])

    async def on_block_changed(self, change: ChangeRecord) -> None:
        row = change.row
        blocker, blocked = require_int(row, "blocker_id"), require_int(row, "blocked_id")
        if not change.is_delete:
            await self._copies.add_block(blocker, blocked, change.lsn)
            await settle([self._purge(p, "block", None) for p in purges_for_block(change)])
            return
        await self._copies.remove_block(blocker, blocked, change.lsn)
        await settle([self._backfill_if_following(reader, author)
                    for reader, author in ((blocker, blocked), (blocked, blocker))])

    async def on_mute_changed(self, change: ChangeRecord) -> None:
        row = change.row
        muter, muted = require_int(row, "muter_id"), require_int(row, "muted_id")
        if change.is_delete:
            await self._copies.remove_mute(muter, muted, change.lsn)
        else:
            await self._copies.add_mute(muter, muted, change.lsn)

    async def _purge(self, purge: InboxPurge, reason: str, since: datetime | None) -> None:
        """Remove the author's rows from the reader's inbox. A fan-out that read the
        follow (or no block) before this change may push after the inbox is scanned, so
        the author's fanned-out posts of the window (the ones a fan-out may be pushing)
        get a tombstone at this change's LSN too: a late push is shadowed (the post
        handler marks fanned_out before it reads followers, so it is seen here)."""
        window = await self._window_posts(purge.author_id, since)
        removed = await self._inbox.purge_author(
            purge.reader_id, purge.author_id, self._now_us(),
            in_flight=[(k, c.post_id) for c in window for k in c.row_keys])
        CLEANUP_ROWS.labels(reason).inc(removed)

    async def _window_posts(self, author_id: int, since: datetime | None) -> list[PostCopy]:
        """The author's fanned-out, visible posts made since ``since`` (within the horizon)."""
        lowest, newest = backfill_window(since, self._clock())
        candidates = backfill_posts(await self._copies.author_posts_since(author_id, lowest, newest), lowest)
        if not candidates:
            return []
        return [c for c in await self._copies.read_posts(candidates)
                if c.alive and c.fanned_out is True and (since is None or _created_at(c) >= since)]

    async def _backfill_if_following(self, reader_id: int, author_id: int) -> None:
        since = await self._copies.following_since(reader_id, author_id)
        if since is not None:
            await self._backfill(reader_id, author_id, since)

    async def _backfill(self, reader_id: int, author_id: int, since: datetime) -> None:
        """Push the author's visible, fanned-out posts made since the reader followed."""
        # Celebrity posts (fanned_out false) stay in the author partition; posts whose
        # own change is not processed yet (no copy) are pushed when it is.
        pushed = await self._window_posts(author_id, since)
        if not pushed or await self._copies.blocked_either_way(author_id, reader_id):
            return  # the common case: one read (no posts in the window), nothing to push
        now = self._clock()
        landing = [(c, ttl) for c in pushed if (ttl := inbox_ttl_s(_created_at(c), now)) > 0]
        if not landing:
            return  # all older than any inbox keeps
        # Written now, after any purge of an earlier unfollow or block (its tombstones
        # are older); a rank move decided later still shadows these rows.
        at = self._now_us()
        await self._inbox.push_posts(reader_id, [
            InboxRow(c.post_id, author_id, c.rank_key, key_write_ts(c.key_ts, _created_at(c), at), ttl)
            for c, ttl in landing if c.rank_key is not None])
        INBOX_ROWS.inc(len(landing))


def _created_at(copy: PostCopy) -> datetime:
    """The creation time of a live copy (``PostCopy.alive`` implies it is set)."""
    assert copy.created_at is not None, copy
    return copy.created_at
