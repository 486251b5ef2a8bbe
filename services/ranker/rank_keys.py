"""Keeps each post's rank key (``posts.score``) in step with its likes and features.

The score is recomputed from the stored state (like counter + feature map) after every
change, never incremented, so it converges whatever the order of events; it may lag
by one event when a like and a feature of the same post are applied concurrently
(ranking scores may be stale for seconds, seed 003).
"""
from __future__ import annotations

from services.common.envelope import ChangeRecord, require_int
from services.common.ranking import engagement_score

from .features import FeaturesObserved
from .store import RankStore


class RankKeys:
    def __init__(self, store: RankStore) -> None:
        self._store = store

    async def on_like_changed(self, change: ChangeRecord) -> None:
        row = change.row
        post_id, user_id = require_int(row, "post_id"), require_int(row, "user_id")
        delta = await self._store.set_like(post_id, user_id, not change.is_delete, change.lsn)
        if delta:
            await self._store.bump_likes(post_id, delta)
        await self._rescore(post_id)

    async def on_features_observed(self, update: FeaturesObserved) -> None:
        await self._store.merge_features(update.post_id, update.features, update.write_timestamp_us)
        await self._rescore(update.post_id)

    async def _rescore(self, post_id: int) -> None:
        likes = await self._store.likes(post_id)
        features = await self._store.features(post_id)
        await self._store.set_score(post_id, engagement_score(likes, features))
