"""Tier state in Cassandra (author_tiers, celebrities) around the pure policy in tiering.py.

Order of writes on a change, so that no post is ever invisible to a reader:

* promotion: the ``celebrities`` row (until = null) is written BEFORE ``author_tiers``
  says celebrity, hence before any post is routed only to the author partition;
  readers merge that partition from then on, and posts already fanned out are deduped
  by post_id;
* demotion: the row gets ``until`` = now and a TTL of the inbox TTL plus a day, so
  readers keep merging the partition while posts skipped during the celebrity period
  can still be in a feed; posts after it are fanned out again.
"""
from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta, timezone
from typing import Callable, NamedTuple

from cassandra.cluster import Session

from services.shared.domain.rules import CELEBRITY_SHARD, DEMOTED_MERGE_S
from services.shared.stores.cql_async import CqlRunner
from services.shared.stores.read_coalescer import PartitionReads
from services.shared.stores.tiers import FanoutTiers, SinceRow, TierRow

from .metrics import TIER_CHANGES
from .tiering import CapacityEstimate, Tier, TierDecision, TierPolicy, TierState, decide_tier

log = logging.getLogger(__name__)


class _Change(NamedTuple):
    """A tier change this process made: the tier, its ``changed_at``, and its writes."""

    tier: Tier
    at: datetime
    writes: asyncio.Future[None]


class TierStore:
    def __init__(self, session: Session, runner: CqlRunner, policy: TierPolicy,
                 capacity: CapacityEstimate, clock: Callable[[], datetime], *,
                 read_linger_s: float | None = None) -> None:
        self._run = runner
        self._policy = policy
        self.capacity = capacity
        self._clock = clock
        self._s = statements = FanoutTiers(session)  # the owner's: shared/stores/tiers.py
        # Concurrent posts' tier reads as one IN read (read_coalescer.py), with a linger.
        self._states = None if read_linger_s is None else PartitionReads(
            runner, statements.tiers_in, linger_s=read_linger_s)
        # The changes this process made within the dwell time. Concurrent posts of one
        # author read its state together, so every one of them saw the state before the
        # first one's change: without this each one decided, wrote and counted the same
        # change again (the 2026-12-07 full run counted 22 promotions of 14 authors).
        self._changes: dict[int, _Change] = {}

    async def state(self, author_id: int) -> TierState:
        if self._states is not None:
            rows = await self._states.rows(author_id)
        else:
            rows = await self._run.execute(self._s.tier, (author_id,))
        row = TierRow._make(rows[0]) if rows else None
        if row is None or row.tier is None:
            return TierState()
        changed = row.changed_at
        if changed is not None and changed.tzinfo is None:
            changed = changed.replace(tzinfo=timezone.utc)
        return TierState(Tier(row.tier), changed)

    async def tier_for_post(self, author_id: int, followers: int,
                            current: TierState | None = None) -> TierDecision:
        """Decide the author's tier now; persist and count a change. ``current``: the
        author's state if the caller read it (``state``, beside the follower count)."""
        now = self._clock()
        if current is None:
            current = await self.state(author_id)
        mine = self._changes.get(author_id)
        if mine is not None and (current.changed_at is None or current.changed_at < mine.at):
            # Read before this process's own change of the author: that change is the
            # state, once its writes are in (a post is routed by a tier only after the
            # tier's rows are written; if they failed, this raises and the post retries).
            await asyncio.shield(mine.writes)
            current = TierState(mine.tier, mine.at)
        decision = decide_tier(current, followers, self.capacity.rows_per_s, now, self._policy)
        if decision.changed:
            await self._change(author_id, decision.tier, followers, now)
            TIER_CHANGES.labels(decision.tier.value).inc()
            log.info("author %d -> %s (%d followers, cost %.3fs at %.0f rows/s): %s", author_id,
                     decision.tier.value, followers, decision.cost_s, self.capacity.rows_per_s,
                     decision.reason)
        return decision

    async def _change(self, author_id: int, tier: Tier, followers: int, now: datetime) -> None:
        """Write a change, known to this process's concurrent posts of the author while
        it is written and for the dwell time after (their reads may predate it)."""
        horizon = now - timedelta(seconds=self._policy.min_dwell_s)
        for author in [a for a, c in self._changes.items() if c.at < horizon and c.writes.done()]:
            del self._changes[author]
        entry = _Change(tier, now, asyncio.ensure_future(self._persist(author_id, tier, followers, now)))
        self._changes[author_id] = entry
        try:
            await entry.writes
        except BaseException:
            if self._changes.get(author_id) is entry:
                del self._changes[author_id]  # not written: the next post decides again
            raise

    async def _persist(self, author_id: int, tier: Tier, followers: int, now: datetime) -> None:
        if tier is Tier.CELEBRITY:
            await self._run.execute(self._s.promote, (CELEBRITY_SHARD, author_id, now))
        else:
            rows = await self._run.execute(self._s.since, (CELEBRITY_SHARD, author_id))
            since = SinceRow._make(rows[0]).since if rows else now
            # The demoted author's row lives rules.DEMOTED_MERGE: readers merge the
            # partition until every post skipped while a celebrity has left the inbox window.
            await self._run.execute(self._s.demote, (CELEBRITY_SHARD, author_id, since, now,
                                                   DEMOTED_MERGE_S))
        await self._run.execute(self._s.write, (author_id, tier.value, now, followers))
