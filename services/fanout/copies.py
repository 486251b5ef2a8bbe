"""Cassandra copies the fan-out maintains: posts, author partitions, follows, blocks, mutes,
user names.

The statements, columns and row types are their tables' owners' (services/shared/stores:
posts.py, timelines.py, follows.py, blocks.py, counted_edges.py, profiles.py); this store decides how
they run (coalesced writes and reads, batches) and tells the API's caches what changed.

Every write of a CDC-derived row carries ``USING TIMESTAMP <lsn>`` (idempotent replay,
deletes beat late creates), except the rank-key rows (``author_timeline`` and the copy's
``rank_key`` cells), which are in microseconds (0005_rank_keys.cql). A follow's state and
its author's follower count live in ``follow_edges`` (0006_counted_edges.cql), written by
the count's one owner (the ``follow_counts`` agent, services/shared/stores/counted_edges.py);
this store only reads the count.
"""
from __future__ import annotations

import asyncio
import functools
import operator
from datetime import datetime
from typing import Any, AsyncIterator, Sequence

from cassandra.cluster import Session
from cassandra.query import BatchStatement, BatchType, PreparedStatement

from services.shared.contracts.serving_changes import NO_NOTICES, ChangeSink, ServingChange
from services.shared.domain import ids
from services.shared.domain.rules import REMOVED, as_utc
from services.shared.stores.blocks import BLOCK_DIRECTIONS, FanoutBlocks, audience_other, both_ways, mute_row
from services.shared.stores.counted_edges import FOLLOW_EDGES as FOLLOW_EDGES
from services.shared.stores.counted_edges import CountReads, count_of
from services.shared.stores.cql_async import CqlRunner
from services.shared.stores.follows import FanoutFollows, SinceRow, WrittenRow
from services.shared.stores.posts import CopyRow, FanoutPosts
from services.shared.stores.profiles import FanoutProfiles
from services.shared.stores.read_coalescer import PartitionReads
from services.shared.stores.timelines import FanoutTimelines
from services.shared.stores.write_coalescer import Row, WriteCoalescer

from .audience import Follower, PostCopy, PostFields
from .backlog import Drop, Keep


# Post ids per multi-partition read: the backfill's candidates are a few posts; a bound
# keeps one request from fanning out to hundreds of partitions on the coordinator.
READ_POSTS_PER_QUERY = 50


class CopyStore:
    def __init__(self, session: Session, runner: CqlRunner, follower_page: int,
                 notices: ChangeSink = NO_NOTICES, writes: WriteCoalescer | None = None,
                 read_linger_s: float | None = None) -> None:
        self._run = runner
        # Single-row writes of concurrent posts leave together (write_coalescer.py); with
        # none, each is its own request.
        self._writes = writes
        # Told after every write of a copy the read path caches (post states, follows,
        # blocks, author timelines): services/shared/contracts/serving_changes.py.
        self._notices = notices
        # The owners' statements (services/shared/stores), with follower and block pages
        # of ``follower_page`` rows.
        self._posts = FanoutPosts(session)
        self._timelines = FanoutTimelines(session)
        self._follows = FanoutFollows(session, page=follower_page)
        self._blocks = FanoutBlocks(session, page=follower_page)
        self._counts = CountReads(session, FOLLOW_EDGES)
        self._profiles = FanoutProfiles(session)
        # With a linger, concurrent posts' reads of these partitions leave as one IN read
        # each (read_coalescer.py); without, each is its own request.
        self._coalesced: tuple[PartitionReads, PartitionReads, PartitionReads] | None = None
        # A small audience (one page of followers, by the count) is read with those of the
        # other posts in flight: one IN read for up to 50 authors instead of a request each.
        self._small_audiences: PartitionReads | None = None
        self._follower_page = follower_page
        if read_linger_s is not None:
            self._coalesced = (PartitionReads(runner, self._posts.read_in, linger_s=read_linger_s),
                               PartitionReads(runner, self._blocks.others_in, linger_s=read_linger_s),
                               PartitionReads(runner, self._counts.counts_in, linger_s=read_linger_s))
            self._small_audiences = PartitionReads(runner, self._follows.followers_in,
                                                   linger_s=read_linger_s)

    async def _write(self, statement: PreparedStatement, params: Sequence[Any]) -> None:
        if self._writes is not None:
            await self._writes.write(statement, params)
        else:
            await self._run.execute(statement, params)

    async def _write_all(self, rows: list[Row]) -> None:
        if self._writes is not None:
            await self._writes.write_all(rows)
        else:
            await self._run.run_bounded(rows, len(rows))

    # -- posts ---------------------------------------------------------------------------
    def _post_row(self, post: PostFields, lsn: int) -> Row:
        with_text, with_media = post.text is not None, post.media_ids is not None
        params: list[object] = [lsn, post.author_id, post.created_at]
        params += ([post.text] if with_text else []) + ([post.media_ids] if with_media else [])
        params += [post.visibility if not post.deleted else REMOVED, post.deleted, post.post_id]
        return self._posts.writer(with_text, with_media), params

    async def write_post(self, post: PostFields, lsn: int) -> None:
        await self._write(*self._post_row(post, lsn))
        await self._notices.changed(ServingChange(posts=(post.post_id,)))

    async def write_posts(self, changes: Sequence[tuple[PostFields, int]]) -> None:
        """The copies of several changes (``(post, lsn)``), one round of writes: each at
        its LSN, so the cells end as the changes one after another would leave them."""
        await self._write_all([self._post_row(post, lsn) for post, lsn in changes])
        await self._notices.changed(ServingChange(posts=tuple(dict.fromkeys(p.post_id for p, _ in changes))))

    async def settle_old_posts(self, kept: Sequence[Keep], dropped: Sequence[Drop]) -> None:
        """Old posts' writes (backlog.py), one round: for a kept post its key (when it
        must be written), its author-timeline row and its ``fanned_out = false`` mark,
        the same statements and write times as ``set_rank_key``, ``add_author_post`` and
        ``mark_fanned_out``; for a dropped one the tombstones and key of
        ``remove_author_post`` and ``set_rank_key``."""
        posts, timelines = self._posts, self._timelines
        rows: list[Row] = []
        changed: list[int] = []
        for k in kept:
            if k.write_key:
                rows.append((posts.set_rank_key, (k.key_ts, k.key, k.post_id)))
                changed.append(k.post_id)
            rows.append((timelines.add, (k.author_id, ids.day_bucket(k.post_id), k.key, k.post_id, k.key_ts)))
            rows.append((posts.mark_fanned_out, (k.mark_lsn, False, k.post_id)))
        for d in dropped:
            bucket = ids.day_bucket(d.post_id)
            rows += [(timelines.delete, (d.removed_at, d.author_id, bucket, key, d.post_id))
                     for key in dict.fromkeys(d.keys)]
            rows.append((posts.set_rank_key, (d.removed_at, d.keys[0], d.post_id)))
            changed.append(d.post_id)
        if not rows:
            return
        await self._write_all(rows)
        written: list[Keep | Drop] = [*kept, *dropped]
        await self._notices.changed(ServingChange(
            posts=tuple(changed),
            timelines=tuple(dict.fromkeys((p.author_id, ids.day_bucket(p.post_id)) for p in written))))

    async def read_post(self, post_id: int) -> PostCopy | None:
        if self._coalesced is not None:
            rows = await self._coalesced[0].rows(post_id)
        else:
            rows = await self._run.execute(self._posts.read, (post_id,))
        return _post_copy(CopyRow._make(rows[0])) if rows else None

    async def read_posts(self, post_ids: Sequence[int]) -> list[PostCopy]:
        """Copies of several posts (those that exist), ``READ_POSTS_PER_QUERY`` per request."""
        chunks = [post_ids[i:i + READ_POSTS_PER_QUERY] for i in range(0, len(post_ids), READ_POSTS_PER_QUERY)]
        results = await asyncio.gather(*(self._run.execute(self._posts.read_in, (list(c),)) for c in chunks))
        return [_post_copy(CopyRow._make(r)) for rows in results for r in rows]

    async def mark_fanned_out(self, post_id: int, fanned_out: bool, lsn: int) -> None:
        await self._write(self._posts.mark_fanned_out, (lsn, fanned_out, post_id))

    async def set_rank_key(self, post_id: int, rank_key: float, key_ts: int) -> None:
        """The key the post's rows are clustered by, written at ``key_ts`` (µs)."""
        await self._write(self._posts.set_rank_key, (key_ts, rank_key, post_id))
        await self._notices.changed(ServingChange(posts=(post_id,)))

    async def set_rank_key_next(self, post_id: int, rank_key: float, key_ts: int) -> None:
        """The key the post's rows are moving to (written before the first row moves)."""
        await self._write(self._posts.set_rank_key_next, (key_ts, rank_key, post_id))
        await self._notices.changed(ServingChange(posts=(post_id,)))

    async def add_author_post(self, author_id: int, post_id: int, rank_key: float, key_ts: int) -> None:
        await self._write(self._timelines.add,
                          (author_id, ids.day_bucket(post_id), rank_key, post_id, key_ts))
        await self._notices.changed(_timeline(author_id, post_id))

    async def remove_author_post(self, author_id: int, post_id: int, keys: Sequence[float],
                                 ts: int) -> None:
        bucket = ids.day_bucket(post_id)
        await self._write_all(
            [(self._timelines.delete, (ts, author_id, bucket, k, post_id)) for k in dict.fromkeys(keys)])
        await self._notices.changed(_timeline(author_id, post_id))

    async def move_author_post(self, author_id: int, post_id: int, old_keys: Sequence[float],
                               new_key: float, key_ts: int) -> None:
        """The author-timeline row from ``old_keys`` to ``new_key``: one partition, one batch."""
        bucket = ids.day_bucket(post_id)
        batch = BatchStatement(batch_type=BatchType.UNLOGGED)
        for key in dict.fromkeys(old_keys):
            if key != new_key:
                batch.add(self._timelines.delete, (key_ts, author_id, bucket, key, post_id))
        batch.add(self._timelines.add, (author_id, bucket, new_key, post_id, key_ts))
        await self._run.execute(batch)
        await self._notices.changed(_timeline(author_id, post_id))

    async def author_posts_since(self, author_id: int, lowest_id: int, newest_id: int) -> list[int]:
        """Post ids of an author from ``lowest_id`` on, over the day buckets up to ``newest_id``."""
        buckets = list(range(ids.day_bucket(lowest_id), ids.day_bucket(newest_id) + 1))
        rows = await self._run.execute(self._timelines.posts_in, (author_id, buckets))
        return sorted((post_id for (post_id,) in rows if post_id >= lowest_id), reverse=True)

    # -- follows -------------------------------------------------------------------------
    async def write_following_copy(self, follower_id: int, followed_id: int,
                                   since: datetime | None, lsn: int) -> None:
        """The reader-side copy (``following``): a row, or its tombstone when ``since`` is None."""
        if since is None:
            await self._write(self._follows.delete_following, (lsn, follower_id, followed_id))
        else:
            await self._write(self._follows.add_following, (follower_id, followed_id, since, lsn))
        await self._notices.changed(ServingChange(graphs=(follower_id,)))

    async def write_follower_copy(self, follower_id: int, followed_id: int,
                                  since: datetime | None, lsn: int) -> None:
        """The author-side copy (``followers``): a row, or its tombstone when ``since`` is None."""
        if since is None:
            await self._write(self._follows.delete_follower, (lsn, followed_id, follower_id))
        else:
            await self._write(self._follows.add_follower, (followed_id, follower_id, since, lsn))

    async def apply_follow(self, follower_id: int, followed_id: int, since: datetime | None,
                           lsn: int) -> bool:
        """Apply a follow (``since`` set) or an unfollow (None) to both copies; returns
        whether the change is the edge's newest (its effects stand: a backfill).

        The copies are written every time, replays and overtaken changes included: by
        LSN write time, so the newest change wins whatever the order. A follow is the
        newest when the author-side copy still carries its LSN as write time (a later
        unfollow or follow of the pair has not overtaken it). The follower count moves
        elsewhere: the follows handler publishes the change to its count's owner."""
        await asyncio.gather(self.write_following_copy(follower_id, followed_id, since, lsn),
                             self.write_follower_copy(follower_id, followed_id, since, lsn))
        if since is None:
            return True
        rows = await self._run.execute(self._follows.follower_written, (followed_id, follower_id))
        return bool(rows) and WrittenRow._make(rows[0]).written == lsn

    async def following_since(self, follower_id: int, followed_id: int) -> datetime | None:
        """The author-side copy's following_since (``followers``; None: no row)."""
        rows = await self._run.execute(self._follows.follower_since, (followed_id, follower_id))
        return as_utc(SinceRow._make(rows[0]).following_since) if rows else None

    async def followers_count(self, author_id: int) -> int:
        """The author's follower count (what the tier decision weighs)."""
        if self._coalesced is not None:
            rows = await self._coalesced[2].rows(author_id)
            return int(rows[0][1] or 0) if rows else 0
        return count_of(await self._run.execute(self._counts.count, (author_id,)))

    async def follower_pages(self, author_id: int, expected: int | None = None,
                             ) -> AsyncIterator[list[Follower]]:
        """The author's followers, one page at a time (bounded memory for any author).
        ``expected``: the author's follower count, if the caller read it; an audience of
        at most one page is read with the other small audiences asked for in the linger
        (a count that lags the partition by a few rows only makes that read larger)."""
        small = self._small_audiences
        if small is not None and expected is not None and expected <= self._follower_page:
            rows = await small.rows(author_id)
            for start in range(0, len(rows), self._follower_page):
                yield list(map(_as_follower, map(_reader_and_since, rows[start:start + self._follower_page])))
            return
        async for rows in self._run.pages(self._follows.followers, (author_id,)):
            if rows:
                # The driver's (follower_id, naive UTC time) rows as they are, made
                # Followers without a call per row (audience.Follower).
                yield list(map(_as_follower, rows))

    # -- blocks --------------------------------------------------------------------------
    async def add_block(self, blocker_id: int, blocked_id: int, lsn: int) -> None:
        await self._write_all([(self._blocks.add, (user, other, direction, lsn))
                               for user, other, direction in both_ways(blocker_id, blocked_id)])
        await self._notices.changed(ServingChange(graphs=(blocker_id, blocked_id)))

    async def remove_block(self, blocker_id: int, blocked_id: int, lsn: int) -> None:
        await self._write_all([(self._blocks.delete, (lsn, user, other, direction))
                               for user, other, direction in both_ways(blocker_id, blocked_id)])
        await self._notices.changed(ServingChange(graphs=(blocker_id, blocked_id)))

    async def blocked_either_way(self, user_id: int, other_id: int) -> bool:
        """A block either way (a mute of one by the other does not count)."""
        rows = await self._run.execute(self._blocks.between, (user_id, other_id))
        return any(r[0] in BLOCK_DIRECTIONS for r in rows)

    async def blocked_set(self, user_id: int) -> frozenset[int]:
        """Everyone ``user_id`` blocks or is blocked by (small for ordinary authors): the
        users the author's posts are kept from. Whom ``user_id`` mutes is not in it."""
        if self._coalesced is not None:
            return frozenset(r[1] for r in await self._coalesced[1].rows(user_id) if audience_other(r[2]))
        out: set[int] = set()
        async for rows in self._run.pages(self._blocks.others, (user_id,)):
            out.update(r[0] for r in rows if audience_other(r[1]))
        return frozenset(out)

    # -- mutes ---------------------------------------------------------------------------
    # One row in the muter's partition of ``blocks`` (services/shared/stores/blocks.py):
    # the read path hides it with the blocks, the audience reads above skip it. No inbox
    # purge or backfill: the muted author's rows stay in the muter's inbox, hidden at read
    # time, so an unmute shows them again at once.
    async def add_mute(self, muter_id: int, muted_id: int, lsn: int) -> None:
        user, other, direction = mute_row(muter_id, muted_id)
        await self._write(self._blocks.add, (user, other, direction, lsn))
        await self._notices.changed(ServingChange(graphs=(muter_id,)))

    async def remove_mute(self, muter_id: int, muted_id: int, lsn: int) -> None:
        user, other, direction = mute_row(muter_id, muted_id)
        await self._write(self._blocks.delete, (lsn, user, other, direction))
        await self._notices.changed(ServingChange(graphs=(muter_id,)))

    # -- user names ----------------------------------------------------------------------
    async def write_profile(self, user_id: int, handle: str | None, display_name: str | None,
                            lsn: int) -> None:
        """The user's names as of the change at ``lsn`` (a None is written as null)."""
        await self._write(self._profiles.write, (user_id, handle, display_name, lsn))
        await self._notices.changed(ServingChange(profiles=(user_id,)))

    async def delete_profile(self, user_id: int, lsn: int) -> None:
        await self._write(self._profiles.delete, (lsn, user_id))
        await self._notices.changed(ServingChange(profiles=(user_id,)))


_as_follower = functools.partial(tuple.__new__, Follower)
# (follower_id, following_since) of a (followed_id, follower_id, following_since) row.
_reader_and_since = operator.itemgetter(1, 2)


def _timeline(author_id: int, post_id: int) -> ServingChange:
    return ServingChange(timelines=((author_id, ids.day_bucket(post_id)),))


def _post_copy(r: CopyRow) -> PostCopy:
    """A ``posts`` row read by ``read_post`` / ``read_posts`` as the decisions' copy."""
    return PostCopy(r.post_id, r.author_id, as_utc(r.created_at), r.visibility, r.deleted,
                    r.vis_ts, r.fanned_out, r.score, r.rank_key, r.rank_key_next, r.key_ts)
