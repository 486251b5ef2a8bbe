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
from datetime import datetime, timedelta
from typing import Callable, NamedTuple

from cassandra.cluster import Session

from services.shared.domain.rules import CELEBRITY_SHARD, DEMOTED_MERGE_S, as_utc
from services.shared.stores.cql_async import CqlRunner
from services.shared.stores.read_coalescer import PartitionReads
from services.shared.stores.tiers import CapacityRow, FanoutTiers, SinceRow, TierRow

from .metrics import TIER_CHANGES
from .tiering import CapacityEstimate, Tier, TierDecision, TierPolicy, TierState, decide_tier

log = logging.getLogger(__name__)


class _Change(NamedTuple):
    """A tier change this process made: the tier, its ``changed_at``, and its writes."""

    tier: Tier
    at: datetime
    writes: asyncio.Future[None]


class CapacitySaving(NamedTuple):
    """Where and how often the measured capacity is kept for a restarted process
    (``fanout_capacity``): the row's name (the consumer group), seconds between saves
    while samples come, and the oldest estimate a new process takes (the row's TTL)."""

    name: str
    every_s: float = 30.0
    max_age_s: float = 86_400.0


class TierStore:
    def __init__(self, session: Session, runner: CqlRunner, policy: TierPolicy,
                 capacity: CapacityEstimate, clock: Callable[[], datetime], *,
                 read_linger_s: float | None = None,
                 saving: CapacitySaving | None = None) -> None:
        self._run = runner
        self._policy = policy
        self.capacity = capacity
        self._clock = clock
        self._saving = saving if saving is not None and saving.max_age_s > 0 else None
        self._saved_at: datetime | None = None
        self._save: asyncio.Future[None] | None = None
        self._s = statements = FanoutTiers(session)  # the owner's: shared/stores/tiers.py
        # Concurrent posts' tier reads as one IN read (read_coalescer.py), with a linger.
        self._states = None if read_linger_s is None else PartitionReads(
            runner, statements.tiers_in, linger_s=read_linger_s)
        # The changes this process made within the dwell time. Concurrent posts of one
        # author read its state together, so every one of them saw the state before the
        # first one's change: without this each one decided, wrote and counted the same
        # change again (the 2026-12-07 full run counted 22 promotions of 14 authors).
        self._changes: dict[int, _Change] = {}

    async def restore_capacity(self) -> float | None:
        """Start the capacity estimate from the last one saved (by this consumer group's
        processes, within ``max_age_s``) instead of the floor: until its first sample a
        process would otherwise take every author above the floor's line (1,500 followers
        at 2,000 rows/s) for a celebrity, and a promoted author is merged at read time
        for the dwell time and, once demoted, for the inbox TTL and a day more. A hint:
        unreadable or missing, the floor it is. Returns the estimate taken."""
        saving = self._saving
        if saving is None or self.capacity.pinned_rows_per_s > 0:
            return None
        try:
            rows = await self._run.execute(self._s.capacity, (saving.name,))
        except Exception as exc:  # noqa: BLE001 - the floor is the fallback
            log.warning("saved fan-out capacity unreadable, starting from the floor: %r", exc)
            return None
        row = CapacityRow._make(rows[0]) if rows else None
        if row is None or row.rows_per_s is None or row.measured_at is None:
            log.info("no saved fan-out capacity: starting from the floor (%.0f rows/s)",
                     self.capacity.floor_rows_per_s)
            return None
        age_s = (self._clock() - as_utc(row.measured_at)).total_seconds()
        if age_s > saving.max_age_s or not self.capacity.restore(row.rows_per_s):
            log.info("saved fan-out capacity not taken (%.0f rows/s, measured %.0f s ago): "
                     "starting from the floor (%.0f rows/s)", row.rows_per_s, age_s,
                     self.capacity.floor_rows_per_s)
            return None
        self._saved_at = self._clock()  # a save right away would only repeat it
        log.info("fan-out capacity restored: %.0f rows/s, measured %.0f s ago",
                 row.rows_per_s, age_s)
        return row.rows_per_s

    def capacity_sampled(self) -> None:
        """A sample moved the estimate: save it for a restarted process, at most every
        ``every_s``, in the background (the posts never wait on it; a failed save is
        logged, and the next sample due saves again)."""
        saving, value = self._saving, self.capacity.measured
        if saving is None or value is None or self.capacity.pinned_rows_per_s > 0:
            return
        if self._save is not None and not self._save.done():
            return
        now = self._clock()
        if self._saved_at is not None and (now - self._saved_at).total_seconds() < saving.every_s:
            return
        self._saved_at = now
        self._save = asyncio.ensure_future(self._save_capacity(saving, value, now))

    async def _save_capacity(self, saving: CapacitySaving, value: float, now: datetime) -> None:
        try:
            await self._run.execute(self._s.save_capacity,
                                    (saving.name, value, now, max(1, int(saving.max_age_s))))
        except Exception as exc:  # noqa: BLE001 - a hint; the next sample due saves again
            self._saved_at = None
            log.warning("fan-out capacity not saved: %r", exc)

    async def state(self, author_id: int) -> TierState:
        if self._states is not None:
            rows = await self._states.rows(author_id)
        else:
            rows = await self._run.execute(self._s.tier, (author_id,))
        row = TierRow._make(rows[0]) if rows else None
        if row is None or row.tier is None:
            return TierState()
        return TierState(Tier(row.tier), None if row.changed_at is None else as_utc(row.changed_at))

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
