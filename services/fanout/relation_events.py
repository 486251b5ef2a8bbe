"""Follows and blocks changes: both-direction copies, follower counts, inbox clean-up.

A follow (or the unblock of a followed author) brings the author's posts made since
``following_since`` that are not yet in the inbox: normally none; this is what makes
the result independent of whether the post or the follow was processed first. Older
posts never come back (no surprise backfill).
"""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Callable

from services.common import ids
from services.common.envelope import ChangeRecord, parse_timestamp, require_int
from services.common.kafka_io import EventPublisher
from services.common.topics import inbox_events_topic

from .audience import backfill_posts
from .cleanup import InboxPurge, purges_for_block, purges_for_unfollow
from .copies import CopyStore
from .events import post_landed_in_inbox
from .inbox import InboxStore
from .metrics import CLEANUP_ROWS, INBOX_ROWS

# Inbox rows expire after 7 days; a backfill never looks further back than that.
BACKFILL_HORIZON = timedelta(days=7)


class RelationChanges:
    def __init__(self, copies: CopyStore, inbox: InboxStore, publisher: EventPublisher,
                 topic_prefix: str, clock: Callable[[], datetime]) -> None:
        self._copies = copies
        self._inbox = inbox
        self._publisher = publisher
        self._inbox_topic = inbox_events_topic(topic_prefix)
        self._clock = clock

    async def on_follow_changed(self, change: ChangeRecord) -> None:
        row = change.row
        follower, followed = require_int(row, "follower_id"), require_int(row, "followed_id")
        if change.is_delete:
            delta = await self._copies.remove_follow(follower, followed, change.lsn)
            if delta:
                await self._copies.bump_followers(followed, delta)
            for purge in purges_for_unfollow(change):
                await self._purge(purge, "unfollow")
            return
        since = parse_timestamp(row.get("following_since"))
        if since is None:
            raise ValueError("follows row without following_since")
        delta = await self._copies.add_follow(follower, followed, since, change.lsn)
        if delta:
            await self._copies.bump_followers(followed, delta)
        await self._backfill(follower, followed)

    async def on_block_changed(self, change: ChangeRecord) -> None:
        row = change.row
        blocker, blocked = require_int(row, "blocker_id"), require_int(row, "blocked_id")
        if not change.is_delete:
            await self._copies.add_block(blocker, blocked, change.lsn)
            for purge in purges_for_block(change):
                await self._purge(purge, "block")
            return
        await self._copies.remove_block(blocker, blocked, change.lsn)
        for reader, author in ((blocker, blocked), (blocked, blocker)):
            await self._backfill(reader, author)

    async def _purge(self, purge: InboxPurge, reason: str) -> None:
        removed = await self._inbox.purge_author(purge.reader_id, purge.author_id, purge.lsn)
        CLEANUP_ROWS.labels(reason).inc(removed)

    async def _backfill(self, reader_id: int, author_id: int) -> None:
        """Push the author's visible, fanned-out posts made since the reader followed."""
        since = await self._copies.following_since(reader_id, author_id)
        if since is None or await self._copies.blocked_either_way(author_id, reader_id):
            return
        now = self._clock()
        start = max(since, now - BACKFILL_HORIZON)
        lowest = ids.lowest_id_at(int(start.timestamp() * 1000))
        newest = ids.lowest_id_at(int(now.timestamp() * 1000) + 60_000)  # a minute of skew
        candidates = backfill_posts(
            await self._copies.author_posts_since(author_id, lowest, newest), lowest)
        pushed = []
        for post_id in candidates:
            copy = await self._copies.read_post(post_id)
            # Celebrity posts (fanned_out false) stay in the author partition; posts whose
            # own change is not processed yet (None) are pushed when it is.
            if copy is None or not copy.alive or copy.fanned_out is not True:
                continue
            assert copy.created_at is not None
            if copy.created_at < since:
                continue
            await self._inbox.push([reader_id], post_id, author_id, copy.visibility_ts or 0)
            key, value = post_landed_in_inbox(reader_id, post_id, author_id, copy.created_at)
            pushed.append(await self._publisher.send(self._inbox_topic, key, value))
        INBOX_ROWS.inc(len(pushed))
        for future in pushed:
            await future
