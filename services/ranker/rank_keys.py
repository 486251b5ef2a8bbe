"""Keeps each post's rank key (``posts.score``) in step with its likes and features.

The score is recomputed from the stored state (like counter + feature map), never
incremented, so it converges whatever the order of events. Each change marks its post;
``rescore_pending`` recomputes every marked post once, after the batch's changes are
applied and before the batch is acked (a post liked 200 times in a batch is scored
once, not 200 times). It may lag by one batch when the likes and the features agents
rescore the same post at the same time (ranking scores may be stale for seconds, seed 003).
"""
from __future__ import annotations

import asyncio

from services.common.envelope import ChangeRecord, require_int
from services.common.ranking import engagement_score

from .features import FeaturesObserved
from .store import RankStore


class RankKeys:
    """One per agent: the marked posts belong to that agent's current batch."""

    def __init__(self, store: RankStore) -> None:
        self._store = store
        self._pending: set[int] = set()

    async def on_like_changed(self, change: ChangeRecord) -> None:
        row = change.row
        post_id, user_id = require_int(row, "post_id"), require_int(row, "user_id")
        delta = await self._store.set_like(post_id, user_id, not change.is_delete, change.lsn)
        if delta:
            await self._store.bump_likes(post_id, delta)
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
        likes, features = await asyncio.gather(self._store.likes(post_id), self._store.features(post_id))
        await self._store.set_score(post_id, engagement_score(likes, features))
