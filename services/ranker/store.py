"""The ranker's Cassandra rows: like copies, like counters, and the post copy's rank key.

Statements go out with the driver's async API bridged to asyncio (no thread per call),
at most ``max_in_flight`` at once across every key of a batch. Like counts move only on
a transition decided from one read of ``like_state`` (0004_edge_state.cql): the cell
holds the like's state, written ``USING TIMESTAMP <lsn>`` in one single-partition batch
with the ``post_likes`` copy, so a replay reads its own LSN back and counts nothing.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Sequence

from cassandra.cluster import EXEC_PROFILE_DEFAULT, Session
from cassandra.query import BatchStatement, BatchType, PreparedStatement, tuple_factory

# Statements in flight per ranker process: see Settings.store_max_in_flight.
DEFAULT_MAX_IN_FLIGHT = 256


@dataclass(frozen=True)
class LikeState:
    """The like's state cell: liked or not, and the LSN of the change that set it."""

    liked: bool
    lsn: int


@dataclass(frozen=True)
class LikeStep:
    delta: int    # like counter movement: +1, -1 or 0
    write: bool   # the change is newer than the stored state: write copy and state


def like_step(stored: LikeState | None, liked: bool, lsn: int) -> LikeStep:
    """What a like change does to the stored state (last write wins by LSN). Pure.
    Same rule as the fan-out's follow transitions (services/fanout/transitions.py)."""
    if stored is None:
        return LikeStep(int(liked), True)
    if lsn > stored.lsn:
        return LikeStep(int(liked) - int(stored.liked), True)
    return LikeStep(0, False)  # a replay (same LSN) or an overtaken change


def use_plain_tuples(session: Session) -> None:
    """Rows as plain tuples for this process's session: the driver's default defines a
    namedtuple class per response, a large share of a busy worker's CPU. RankStore reads
    columns by position, so it works with either."""
    session.cluster.profile_manager.profiles[EXEC_PROFILE_DEFAULT].row_factory = tuple_factory


class RankStore:
    def __init__(self, session: Session, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT) -> None:
        self._session = session
        self._max_in_flight = max(1, max_in_flight)
        self._permits: asyncio.Semaphore | None = None
        p = session.prepare
        self._like = p("INSERT INTO post_likes (post_id, user_id) VALUES (?,?) USING TIMESTAMP ?")
        self._unlike = p("DELETE FROM post_likes USING TIMESTAMP ? WHERE post_id=? AND user_id=?")
        self._read_state = p("SELECT liked, WRITETIME(liked) AS lsn FROM like_state WHERE post_id=? AND user_id=?")
        self._write_state = p("UPDATE like_state USING TIMESTAMP ? SET liked=? WHERE post_id=? AND user_id=?")
        self._bump = p("UPDATE post_counters SET likes = likes + ? WHERE post_id=?")
        self._likes = p("SELECT likes FROM post_counters WHERE post_id=?")
        self._features = p("SELECT features FROM posts WHERE post_id=?")
        self._set_features = p("UPDATE posts USING TIMESTAMP ? SET features = features + ? WHERE post_id=?")
        self._set_score = p("UPDATE posts SET score=? WHERE post_id=?")

    async def _exec(self, stmt: PreparedStatement | BatchStatement, params: Sequence[Any] = ()) -> list[Any]:
        if self._permits is None:
            self._permits = asyncio.Semaphore(self._max_in_flight)
        async with self._permits:
            loop = asyncio.get_running_loop()
            done: asyncio.Future[list[Any]] = loop.create_future()

            def settle(rows: Any = None, exc: BaseException | None = None) -> None:
                if not done.done():
                    done.set_exception(exc) if exc is not None else done.set_result(list(rows or []))

            response = self._session.execute_async(stmt, params)
            response.add_callbacks(lambda rows: loop.call_soon_threadsafe(settle, rows),
                                   lambda exc: loop.call_soon_threadsafe(settle, None, exc))
            return await done

    async def like_state(self, post_id: int, user_id: int) -> LikeState | None:
        rows = await self._exec(self._read_state, (post_id, user_id))
        if not rows or rows[0][0] is None:
            return None
        return LikeState(bool(rows[0][0]), int(rows[0][1]))

    async def write_like(self, post_id: int, user_id: int, liked: bool, lsn: int) -> None:
        """The like copy and its state cell: one partition (post_id), one batch."""
        batch = BatchStatement(batch_type=BatchType.UNLOGGED)
        if liked:
            batch.add(self._like, (post_id, user_id, lsn))
        else:
            batch.add(self._unlike, (lsn, post_id, user_id))
        batch.add(self._write_state, (lsn, liked, post_id, user_id))
        await self._exec(batch)

    async def set_like(self, post_id: int, user_id: int, liked: bool, lsn: int) -> int:
        """Apply a like change (one read, then copy and state unless already applied);
        returns the counter delta of the transition, to bump only after this returned."""
        step = like_step(await self.like_state(post_id, user_id), liked, lsn)
        if step.write:
            await self.write_like(post_id, user_id, liked, lsn)
        return step.delta

    async def bump_likes(self, post_id: int, delta: int) -> None:
        await self._exec(self._bump, (delta, post_id))

    async def likes(self, post_id: int) -> int:
        rows = await self._exec(self._likes, (post_id,))
        return int(rows[0][0] or 0) if rows else 0

    async def features(self, post_id: int) -> dict[str, float]:
        rows = await self._exec(self._features, (post_id,))
        return dict(rows[0][0] or {}) if rows else {}

    async def merge_features(self, post_id: int, features: dict[str, float], timestamp_us: int) -> None:
        await self._exec(self._set_features, (timestamp_us, features, post_id))

    async def set_score(self, post_id: int, score: float) -> None:
        await self._exec(self._set_score, (score, post_id))
