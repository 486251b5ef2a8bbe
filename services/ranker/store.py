"""The ranker's Cassandra rows: like copies, like counters, and the post copy's rank key.

Calls run in the default executor (the driver is synchronous here; the ranker does a
handful of statements per event, so a thread hop is cheap and keeps this module small).
"""
from __future__ import annotations

import asyncio
from typing import Any, Sequence

from cassandra.cluster import Session
from cassandra.query import PreparedStatement


class RankStore:
    def __init__(self, session: Session) -> None:
        self._session = session
        p = session.prepare
        self._like = p("INSERT INTO post_likes (post_id, user_id) VALUES (?,?) USING TIMESTAMP ?")
        self._unlike = p("DELETE FROM post_likes USING TIMESTAMP ? WHERE post_id=? AND user_id=?")
        self._liked = p("SELECT user_id FROM post_likes WHERE post_id=? AND user_id=?")
        self._bump = p("UPDATE post_counters SET likes = likes + ? WHERE post_id=?")
        self._likes = p("SELECT likes FROM post_counters WHERE post_id=?")
        self._features = p("SELECT features FROM posts WHERE post_id=?")
        self._set_features = p("UPDATE posts USING TIMESTAMP ? SET features = features + ? WHERE post_id=?")
        self._set_score = p("UPDATE posts SET score=? WHERE post_id=?")

    async def _exec(self, stmt: PreparedStatement, params: Sequence[Any]) -> list[Any]:
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(None, self._session.execute, stmt, params)
        return list(result)

    async def _has_like(self, post_id: int, user_id: int) -> bool:
        return bool(await self._exec(self._liked, (post_id, user_id)))

    async def set_like(self, post_id: int, user_id: int, liked: bool, lsn: int) -> int:
        """Write the like copy (LWW by LSN); returns the counter delta of the transition."""
        before = await self._has_like(post_id, user_id)
        if liked:
            await self._exec(self._like, (post_id, user_id, lsn))
        else:
            await self._exec(self._unlike, (lsn, post_id, user_id))
        after = await self._has_like(post_id, user_id)
        return int(after) - int(before)

    async def bump_likes(self, post_id: int, delta: int) -> None:
        await self._exec(self._bump, (delta, post_id))

    async def likes(self, post_id: int) -> int:
        rows = await self._exec(self._likes, (post_id,))
        return int(rows[0].likes or 0) if rows else 0

    async def features(self, post_id: int) -> dict[str, float]:
        rows = await self._exec(self._features, (post_id,))
        return dict(rows[0].features or {}) if rows else {}

    async def merge_features(self, post_id: int, features: dict[str, float], timestamp_us: int) -> None:
        await self._exec(self._set_features, (timestamp_us, features, post_id))

    async def set_score(self, post_id: int, score: float) -> None:
        await self._exec(self._set_score, (score, post_id))
