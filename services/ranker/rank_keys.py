"""Keeps each post's rank key (``posts.score``) in step with its likes and features.

The score is recomputed from the stored state (like counter + feature map), never
incremented, so it converges whatever the order of events. Each change marks its post;
``rescore_pending`` recomputes every marked post once, after the batch's changes are
applied and before the batch is acked (a post liked 200 times in a batch is scored
once, not 200 times). It may lag by one batch when the likes and the features agents
rescore the same post at the same time (the specification allows scores stale for seconds).

When the rescored post's exact rank key (``ranking.rank_key``) is ``MOVE_THRESHOLD`` or
more away from the key its rows are stored under, its rows move: the copy's
``rank_key_next`` is written first (the read path accepts rows under either key while
the move is under way), then a ``RankKeyMoved`` is published for the fan-out, which
owns the rows (services/fanout/rank_moves.py). The move's write time is after the key's
own, so its tombstones shadow every earlier write of the old key. A crash before the
publish is acked re-runs the batch: the copy still has the old key, so the move is made
again (at a later time, which wins).
"""
from __future__ import annotations

import asyncio
import time
from datetime import datetime, timezone
from typing import Awaitable, Callable

from services.shared.contracts.edge_counts import EdgeCounted
from services.shared.contracts.envelope import ChangeRecord, require_int
from services.shared.contracts.rank_moves import RankKeyMoved
from services.shared.domain.ranking import engagement_score, needs_move, rank_key

from .features import FeaturesObserved
from .store import KeyState, RankStore

PublishMove = Callable[[RankKeyMoved], Awaitable[None]]
PublishCount = Callable[[EdgeCounted], Awaitable[None]]


def planned_move(post_id: int, state: KeyState, score: float, now_us: int) -> RankKeyMoved | None:
    """The move a new score calls for, or None (coalesced, or the post is not shown). Pure."""
    if not state.alive:
        return None
    exact = rank_key(score, state.created_at_ms)
    if not needs_move(state.rank_key, exact):
        return None
    created = datetime.fromtimestamp(state.created_at_ms / 1000, timezone.utc)
    return RankKeyMoved(post_id, state.author_id, created, state.row_keys, exact,
                        max(now_us, state.key_ts + 1))


class RankKeys:
    """One per agent: the marked posts belong to that agent's current batch."""

    def __init__(self, store: RankStore, publish_move: PublishMove, publish_count: PublishCount,
                 wall_clock_us: Callable[[], int] = lambda: time.time_ns() // 1000) -> None:
        self._store = store
        self._publish_move = publish_move
        self._publish_count = publish_count
        self._now_us = wall_clock_us
        self._pending: set[int] = set()
        self.moves = 0

    async def on_like_changed(self, change: ChangeRecord) -> None:
        row = change.row
        post_id, user_id = require_int(row, "post_id"), require_int(row, "user_id")
        # The copy here; the like's state and the post's count by the count's one owner
        # (the like_counts agent), which rescores the post once the count is written.
        await self._store.write_like_copy(post_id, user_id, not change.is_delete, change.lsn)
        await self._publish_count(EdgeCounted(post_id, user_id, not change.is_delete, change.lsn))

    def count_written(self, post_id: int) -> None:
        """The post's like count was written (CountOwner): rescore it with the batch."""
        self._pending.add(post_id)

    async def on_features_observed(self, update: FeaturesObserved) -> None:
        await self._store.merge_features(update.post_id, update.features, update.write_timestamp_us)
        self._pending.add(update.post_id)

    async def rescore_pending(self) -> None:
        """Recompute the score of every post changed since the last call."""
        posts = sorted(self._pending)
        await asyncio.gather(*(self._rescore(p) for p in posts))
        self._pending.difference_update(posts)

    async def _rescore(self, post_id: int) -> None:
        likes, features, state = await asyncio.gather(
            self._store.likes(post_id), self._store.features(post_id), self._store.key_state(post_id))
        score = engagement_score(likes, features)
        await self._store.set_score(post_id, score)
        move = planned_move(post_id, state, score, self._now_us()) if state is not None else None
        if move is None:
            return
        await self._store.set_rank_key_next(post_id, move.to_key, move.key_ts)
        await self._publish_move(move)
        self.moves += 1
