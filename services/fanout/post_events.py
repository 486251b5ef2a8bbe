"""Posts changes: keep the copy, then push the post to inboxes or unpush it.

``on_post_changed`` applies one change: it writes the copy (last-write-wins by LSN), then
decides from the *merged* copy, not from the event alone, so an old create arriving
after its delete does nothing, and a replay re-derives exactly the same rows. The posts
of a batch older than the inbox TTL go together instead (``split_batch``,
``take_old_posts``: backlog.py), one round of each step for all of them, and a recent
post's pages of rows join the batch's push round (push_rounds.py). Reads and
writes that do not depend on each other go out together. Posts of one batch fan out
concurrently, so capacity is measured over their overlap (``OverlapMeter``). A page of
inbox rows that times out is retried on its own (``StoreRetry``), not the whole post,
and each timeout halves the capacity estimate, so the tier policy sheds the largest
audiences while the store is overloaded. A post made readable (its rows written, or a
celebrity's kept in the author partition) is announced once on ``author-events``.
"""
from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timezone
from functools import partial
from typing import AsyncIterator, Awaitable, Callable, Sequence

from services.shared.contracts.envelope import ChangeRecord, parse_change
from services.shared.contracts.feed_events import AuthorPosted
from services.shared.contracts.feed_events import encode as encode_event
from services.shared.contracts.rank_moves import RankKeyMoved
from services.shared.contracts.topics import author_events_topic
from services.shared.domain.ids import EPOCH
from services.shared.domain.ranking import rank_key
from services.shared.stores.cql_async import StoreRetry
from services.shared.worker.batch_consumer import Together, key_groups
from services.shared.worker.event_publisher import EventPublisher, delivered
from services.shared.worker.faust_app import RawMessage
from services.shared.worker.notices import flush_notices

from .audience import (Follower, PostAction, inbox_ttl_s, key_write_ts, post_action, post_fields,
                       readers_for_post)
from .backlog import Drop, Keep, OldChange, Outcome, plan_old_post, takes_together
from .cleanup import post_removal_reaches_inboxes
from .copies import CopyStore
from .inbox import InboxPort, InboxRow
from .metrics import (BACKLOG_POSTS, CELEBRITY_POSTS, CLEANUP_ROWS, EVENT_TO_INBOX,
                      FANOUT_CAPACITY, FANOUT_SECONDS, INACTIVE_ROWS_SKIPPED, INBOX_ROWS,
                      POSTS_ANNOUNCED, STORE_RETRIES, TRIMS)
from .push_rounds import PushRounds
from .rank_moves import RankMoves
from .tier_store import TierStore
from .tiering import OverlapMeter, Tier

log = logging.getLogger(__name__)


async def _nobody(_author_id: int) -> frozenset[int]:
    return frozenset()


async def _then(first: list[Follower] | None, rest: AsyncIterator[list[Follower]],
                ) -> AsyncIterator[list[Follower]]:
    """``first`` (a page already read; None: there was none), then the pages of ``rest``."""
    if first is None:
        return
    yield first
    async for page in rest:
        yield page


class PostFanout:
    def __init__(self, copies: CopyStore, inbox: InboxPort, tiers: TierStore,
                 publisher: EventPublisher, topic_prefix: str,
                 retry: StoreRetry | None = None,
                 wall_clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
                 monotonic: Callable[[], float] = time.monotonic,
                 wall_clock_us: Callable[[], int] = lambda: time.time_ns() // 1000,
                 inactive: Callable[[int], Awaitable[frozenset[int]]] = _nobody,
                 push_rounds: bool = False) -> None:
        self._copies = copies
        # With rounds, the pushes of the changes applied at once are written together,
        # grouped by reader (push_rounds.py); without, each push leaves on its own.
        self._rounds = PushRounds(inbox) if push_rounds else None
        # An author's followers the fan-out skips: they have not read their feed for
        # FEED_INACTIVE_AFTER (services/fanout/inactive.py).
        self._inactive = inactive
        self._inbox = inbox
        self._tiers = tiers
        self._publisher = publisher
        self._author_topic = author_events_topic(topic_prefix)
        self._now_ms = wall_clock_ms
        self._now_us = wall_clock_us
        self._monotonic = monotonic
        self._meter = OverlapMeter(tiers.capacity.min_sample_rows)
        self._retry = retry or StoreRetry()
        self._last_overload: BaseException | None = None  # the timeout that last halved capacity
        self._moves = RankMoves(copies, inbox,
                                lambda: datetime.fromtimestamp(self._now_ms() / 1000, timezone.utc),
                                inactive)

    def _store_timed_out(self, exc: BaseException) -> None:
        STORE_RETRIES.inc()
        if exc is self._last_overload:
            return  # one shared batch's failure (write_coalescer.py), seen by each of its posts
        self._last_overload = exc
        self._tiers.capacity.overloaded()
        log.warning("fan-out page timed out (capacity estimate now %.0f rows/s): %r",
                    self._tiers.capacity.rows_per_s, exc)

    async def on_post_changed(self, change: ChangeRecord) -> None:
        if self._rounds is None:
            await self._apply(change)
            return
        with self._rounds.applying():  # a push round waits for this change to push or end
            await self._apply(change)

    async def _apply(self, change: ChangeRecord) -> None:
        action = post_action(change)
        post = post_fields(change.row, deleted_row=change.is_delete)
        await self._copies.write_post(post, change.lsn)
        if action is PostAction.REMOVE:
            await self._remove(post.author_id, post.post_id)
        elif action is PostAction.MATERIALIZE:
            await self._materialize(post.post_id, change)

    def split_batch(self, msgs: Sequence[RawMessage]) -> tuple[Together | None, list[RawMessage]]:
        """The posts of a batch older than the inbox TTL, taken together
        (``take_old_posts``; backlog.py ``takes_together``), and the messages left to
        ``on_post_changed``. Whole keys: a post whose changes do not all parse, or do not
        all name an old post, goes message by message (the guard dead-letters a poison
        one)."""
        now = datetime.fromtimestamp(self._now_ms() / 1000, timezone.utc)
        taken: list[RawMessage] = []
        posts: list[list[OldChange]] = []
        rest: list[RawMessage] = []
        for group in key_groups(msgs):
            try:
                together = takes_together(
                    [c for c in (parse_change(m.key, m.value) for m in group) if c is not None], now)
            except Exception:  # noqa: BLE001 - decided message by message, under the guard
                together = None
            if together is not None:
                taken += group
                posts.append(together)
            else:
                rest += group
        if not posts:
            return None, rest
        return Together(taken, partial(self.take_old_posts, posts)), rest

    async def take_old_posts(self, posts: Sequence[Sequence[OldChange]]) -> None:
        """Posts older than the inbox TTL, by the batch (backlog.py): every change's copy
        in one round of writes, then every merged copy in one round of reads, then each
        post's key, author-timeline row and mark (or a removal's tombstones) in one more
        round, decided by ``plan_old_post``. A post the plan leaves to the per-post path
        has its changes applied by ``on_post_changed`` in order, beside that round.
        Idempotent as a whole, like the per-post path: a retry or a replay writes the
        same copies, reads the same merged copies and so writes the same cells."""
        await self._copies.write_posts([(c.post, c.change.lsn) for changes in posts for c in changes])
        copies = {c.post_id: c for c in await self._copies.read_posts([changes[0].post.post_id
                                                                      for changes in posts])}
        now_us = self._now_us()
        now = datetime.fromtimestamp(self._now_ms() / 1000, timezone.utc)
        kept: list[Keep] = []
        dropped: list[Drop] = []
        per_post: list[list[ChangeRecord]] = []
        outcomes: dict[Outcome, int] = {}
        for changes in posts:
            plan = plan_old_post(copies.get(changes[0].post.post_id), changes, now, now_us)
            if isinstance(plan, Keep):
                kept.append(plan)
                outcome = Outcome.KEPT
            elif isinstance(plan, Drop):
                dropped.append(plan)
                outcome = Outcome.DROPPED
            else:
                outcome = plan
                if plan is Outcome.PER_POST:
                    per_post.append([c.change for c in changes])
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
        await asyncio.gather(self._copies.settle_old_posts(kept, dropped),
                             *(self._one_by_one(changes) for changes in per_post))
        for outcome, count in outcomes.items():
            BACKLOG_POSTS.labels(outcome.value).inc(count)

    async def _one_by_one(self, changes: Sequence[ChangeRecord]) -> None:
        for change in changes:
            await self.on_post_changed(change)

    async def _remove(self, author_id: int, post_id: int) -> None:
        """Tombstone the post's rows (every key they may be under) at the time of the
        decision, and re-write the copy's key at that time: a restore then pushes after
        it, and a rank move of a removed post is not made (the ranker checks the copy)."""
        copy, state = await asyncio.gather(self._copies.read_post(post_id),
                                           self._tiers.state(author_id))
        if copy is not None and copy.alive:
            return  # a newer change made it visible again; that change owns the rows
        keys = copy.row_keys if copy is not None else []
        if not keys:
            return  # never materialized: no rows anywhere
        assert copy is not None  # the keys are the copy's
        removed_at = key_write_ts(copy.key_ts, copy.created_at or EPOCH, self._now_us())
        await asyncio.gather(self._copies.remove_author_post(author_id, post_id, keys, removed_at),
                             self._copies.set_rank_key(post_id, keys[0], removed_at))
        if not post_removal_reaches_inboxes(copy.fanned_out, state.tier):
            return
        async for page in self._copies.follower_pages(author_id):
            removed = await self._inbox.unpush([f.reader_id for f in page], post_id, keys, removed_at)
            CLEANUP_ROWS.labels("post_removed").inc(removed)

    async def _materialize(self, post_id: int, change: ChangeRecord) -> None:
        copy = await self._copies.read_post(post_id)
        if copy is None or not copy.alive:
            return  # deleted or removed by a change we already applied: nothing to push
        assert copy.author_id is not None and copy.created_at is not None
        lsn = max(change.lsn, copy.visibility_ts or 0)
        # The rows' key and write time: a first push keys the post by its score so far,
        # at its creation time (a replay writes the same cells; a rank move decided later
        # has a later time and wins). A restore (an update that made it visible again)
        # re-keys after the removal's tombstones.
        key = copy.rank_key
        if key is None:
            key = rank_key(copy.score, int(copy.created_at.timestamp() * 1000))
        restore = change.op == "u"
        key_ts = key_write_ts(copy.key_ts, copy.created_at, self._now_us() if restore else None)
        if restore or copy.rank_key is None or key_ts != copy.key_ts:
            await self._copies.set_rank_key(post_id, key, key_ts)
        ttl_s = inbox_ttl_s(copy.created_at, datetime.fromtimestamp(self._now_ms() / 1000, timezone.utc))
        timeline_row = self._copies.add_author_post(copy.author_id, post_id, key, key_ts)
        if ttl_s == 0:
            # Older than any inbox keeps (a replay, a bulk load, a worker catching up):
            # the author's timeline row only, no rows, so clean-up and backfill have
            # nothing to look for either. Neither the follower count nor the tier is read
            # (no audience is written), and nothing is announced (it is not news): most
            # of a month's backlog is such posts.
            await asyncio.gather(timeline_row, self._copies.mark_fanned_out(post_id, False, lsn))
            return
        # The count and the tier state at once: the decision needs both, neither the other.
        _, followers, tier_now = await asyncio.gather(
            timeline_row, self._copies.followers_count(copy.author_id), self._tiers.state(copy.author_id))
        decision = await self._tiers.tier_for_post(copy.author_id, followers, tier_now)
        if decision.tier is Tier.CELEBRITY:
            await self._copies.mark_fanned_out(post_id, False, lsn)
            await self._announce(copy.author_id, post_id, copy.created_at)
            CELEBRITY_POSTS.inc()
            return
        # Marked before the first row: a crash mid-way leaves a post that clean-up
        # knows to look for in inboxes. Marked before blocks and followers are read, too:
        # an unfollow or block that does not see the mark is seen by those reads.
        await self._copies.mark_fanned_out(post_id, True, lsn)
        # Read after the timeline row and the mark: a returning reader's rebuild, which
        # runs after their flags are gone, finds whatever this read still skipped them for.
        # The followers' first page is read with them (an ordinary audience is that page).
        pages = aiter(self._copies.follower_pages(copy.author_id, followers))
        blocked, inactive, first = await asyncio.gather(self._copies.blocked_set(copy.author_id),
                                                        self._inactive(copy.author_id),
                                                        anext(pages, None))
        started = self._monotonic()
        metered = followers >= self._meter.min_rows
        if metered:
            self._meter.started(started)
        rows = skipped = 0
        try:
            async for page in _then(first, pages):
                readers = readers_for_post(copy.author_id, copy.created_at, page, blocked)
                if inactive:
                    active = [r for r in readers if r not in inactive]
                    skipped += len(readers) - len(active)
                    readers = active
                if not readers:
                    continue
                written = await self._retry(partial(self._push, readers, post_id,
                                                    copy.author_id, key, key_ts, ttl_s),
                                            self._store_timed_out)
                rows += written
                if metered:
                    sample = self._meter.wrote(self._monotonic(), written)
                    if sample is not None:
                        self._tiers.capacity.observe(*sample)
                        self._tiers.capacity_sampled()
                TRIMS.inc(await self._inbox.enforce_cap(readers, post_id, self._now_us()))
        finally:
            finished = self._monotonic()
            if metered:
                self._meter.finished(finished)
        elapsed = finished - started
        FANOUT_CAPACITY.set(self._tiers.capacity.rows_per_s)
        INBOX_ROWS.inc(rows)
        INACTIVE_ROWS_SKIPPED.inc(skipped)
        FANOUT_SECONDS.observe(elapsed)
        if rows and change.commit_ts_ms and not change.snapshot:
            EVENT_TO_INBOX.observe(max(0, self._now_ms() - change.commit_ts_ms) / 1000)
        # One announcement per post, after every row of it is written (the API's streams
        # route it to connected followers; a replay announces again, same event id). A
        # rank move the rows missed is followed beside it: neither waits for the other.
        await asyncio.gather(self._announce(copy.author_id, post_id, copy.created_at),
                             self._follow_a_move(post_id, copy.author_id, copy.created_at, key))

    async def _push(self, readers: list[int], post_id: int, author_id: int, key: float,
                    key_ts: int, ttl_s: int) -> int:
        """A page of the post's rows: in the current push round (written with the other
        posts' rows, grouped by reader), or on its own without rounds."""
        if self._rounds is None:
            return await self._inbox.push(readers, post_id, author_id, key, key_ts, ttl_s)
        return await self._rounds.push(readers, InboxRow(post_id, author_id, key, key_ts, ttl_s))

    async def _announce(self, author_id: int, post_id: int, created_at: datetime) -> None:
        """Publish the post's ``author-events`` record and wait for the broker's ack; the
        serving-changes notices merged so far in the batch go first (a stream that shows
        the post then reads a page whose cached inbox top was dropped)."""
        await flush_notices()
        event_key, value = encode_event(AuthorPosted(author_id, post_id, created_at))
        await delivered([await self._publisher.send(self._author_topic, event_key, value)])
        POSTS_ANNOUNCED.inc()

    async def _follow_a_move(self, post_id: int, author_id: int, created_at: datetime,
                             pushed_key: float) -> None:
        """The rows just pushed are under ``pushed_key``, read before the post was marked
        fanned out. A rank move that read the mark before it was set moved no inbox rows;
        if its key is on the copy now, move the rows to it (the ranker's side of the race
        is in rank_moves.py)."""
        current = await self._copies.read_post(post_id)
        if (current is None or not current.alive or current.rank_key is None
                or current.rank_key == pushed_key or current.key_ts is None):
            return
        await self._moves.on_rank_key_moved(RankKeyMoved(
            post_id, author_id, created_at, (pushed_key,), current.rank_key, current.key_ts))

