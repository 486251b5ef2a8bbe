"""The read path's store contract (tests/support/contracts/feed_store_contract.py) run
against ``FeedStore`` on the session's Cassandra keyspace; tests/unit/
test_feed_store_contract.py runs the same tests against the in-memory store.

Rows are written the fan-out's way, through its own stores (``CopyStore``,
``InboxStore``, ``TierStore``) and their prepared statements, each copy with a fresh,
increasing write timestamp (what the workers' LSNs are), rank-key rows at the times the
tests give (µs). The tables are shared by the session's tests: every test writes under
fresh user and post ids, and reads of the shared celebrities partition keep its own
authors only.
"""
from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator, Sequence
from datetime import datetime

import pytest
from cassandra.cluster import Session

from services.api.copies.store import FeedStore
from services.fanout.audience import PostFields
from services.fanout.copies import CopyStore
from services.fanout.inbox import InboxStore
from services.fanout.tier_store import TierStore
from services.fanout.tiering import CapacityEstimate, Tier, TierPolicy
from services.shared.domain.rules import VISIBLE
from services.shared.domain.edge_transitions import EdgeChange
from services.shared.stores.counted_edges import LIKE_EDGES, CountedEdges, OwnedChange
from services.shared.stores.cql_async import CqlRunner
from tests.support.contracts.common import BASE, Run
from tests.support.contracts.feed_store_contract import FeedStoreContract, FeedSubject

pytestmark = pytest.mark.integration

MAX_FOLLOWING = 50  # the store's page of follows and blocks: above what any test writes
_TS = itertools.count(int(time.time() * 1_000_000))  # copy write timestamps, increasing
_OFFSETS = itertools.count(int(time.time() * 1000))  # count-topic offsets, increasing


class CassandraWriter:
    """``FeedWriter`` through the fan-out's stores. A tier change is decided by the tier
    policy, as ``FeedWorld.make_celebrity`` does: a pinned capacity of 1 row/s and no
    dwell, so a million followers promote at once and none demote, at ``at``."""

    def __init__(self, session: Session, runner: CqlRunner, run: Run) -> None:
        self._run = run
        self._copies = CopyStore(session, runner, 500)
        self._likes = CountedEdges(session, runner, LIKE_EDGES, 1)
        self._now = BASE
        self._tiers = TierStore(session, runner, TierPolicy(min_dwell_s=0.0),
                                CapacityEstimate(1.0, pinned_rows_per_s=1.0), lambda: self._now)

    def follow(self, reader_id: int, author_id: int, since: datetime) -> None:
        self._run(self._copies.write_following_copy(reader_id, author_id, since, next(_TS)))

    def unfollow(self, reader_id: int, author_id: int) -> None:
        self._run(self._copies.write_following_copy(reader_id, author_id, None, next(_TS)))

    def block(self, blocker_id: int, blocked_id: int) -> None:
        self._run(self._copies.add_block(blocker_id, blocked_id, next(_TS)))

    def mute(self, muter_id: int, muted_id: int) -> None:
        self._run(self._copies.add_mute(muter_id, muted_id, next(_TS)))

    def write_post(self, post_id: int, author_id: int, created_at: datetime, text: str,
                   visibility: int = VISIBLE, deleted: bool = False,
                   media: Sequence[str] = ()) -> None:
        fields = PostFields(post_id, author_id, created_at, text, list(media), visibility, deleted)
        self._run(self._copies.write_post(fields, next(_TS)))

    def like(self, post_id: int, user_id: int, liked: bool = True) -> None:
        """Through the count's owner (the ranker's ``CountedEdges``), offsets increasing."""
        change = OwnedChange(EdgeChange(user_id, liked, next(_TS)), next(_OFFSETS))
        self._run(self._likes.apply(post_id, [change]))

    def set_rank_key(self, post_id: int, rank_key: float, key_ts: int) -> None:
        self._run(self._copies.set_rank_key(post_id, rank_key, key_ts))

    def set_rank_key_next(self, post_id: int, rank_key: float, key_ts: int) -> None:
        self._run(self._copies.set_rank_key_next(post_id, rank_key, key_ts))

    def add_author_post(self, author_id: int, post_id: int, rank_key: float, key_ts: int) -> None:
        self._run(self._copies.add_author_post(author_id, post_id, rank_key, key_ts))

    def remove_author_post(self, author_id: int, post_id: int, rank_key: float, ts: int) -> None:
        self._run(self._copies.remove_author_post(author_id, post_id, [rank_key], ts))

    def promote(self, author_id: int, at: datetime) -> None:
        self._now = at
        decision = self._run(self._tiers.tier_for_post(author_id, 1_000_000))
        assert decision.changed and decision.tier is Tier.CELEBRITY

    def demote(self, author_id: int, at: datetime) -> None:
        self._now = at
        decision = self._run(self._tiers.tier_for_post(author_id, 0))
        assert decision.changed and decision.tier is Tier.ORDINARY


class TestCassandraFeedStore(FeedStoreContract):
    @pytest.fixture
    def subject(self, cassandra: Session) -> Iterator[FeedSubject]:
        loop = asyncio.new_event_loop()
        runner = CqlRunner(cassandra)
        inbox = InboxStore(cassandra, runner, max_in_flight=16, cap=500, trim_every=1_000_000)
        try:
            yield FeedSubject(FeedStore(cassandra, timeout=5.0, max_following=MAX_FOLLOWING), inbox,
                              CassandraWriter(cassandra, runner, loop.run_until_complete),
                              loop.run_until_complete)
        finally:
            loop.close()
