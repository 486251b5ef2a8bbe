"""The ranker's Cassandra rows: like copies, like counters, and the post copy's rank key.

Statements go out through the shared ``CqlRunner`` (services/common/cql_async.py: the
driver's async API bridged to asyncio, no thread per call), at most ``max_in_flight`` at
once across every key of a batch. Like counts move only on a transition decided from one
read of ``like_state`` (0004_edge_state.cql) with the same rule as follows
(services/common/edge_transitions.py): the cell holds the like's state, written
``USING TIMESTAMP <lsn>`` in one single-partition batch with the ``post_likes`` copy, so
a replay reads its own LSN back and counts nothing.
"""
from __future__ import annotations

from dataclasses import dataclass

from cassandra.cluster import Session
from cassandra.query import BatchStatement, BatchType

from services.common.cql_async import DEFAULT_MAX_IN_FLIGHT, CqlRunner
from services.common.edge_transitions import EdgeState, edge_step

# The like's state cell: liked or not (``active``), and the LSN of the change that set it.
LikeState = EdgeState


@dataclass(frozen=True)
class KeyState:
    """The post copy as a rank move sees it (keys and their write time, µs)."""

    author_id: int
    created_at_ms: int
    alive: bool
    rank_key: float
    rank_key_next: float | None
    key_ts: int

    @property
    def row_keys(self) -> tuple[float, ...]:
        return tuple(k for k in dict.fromkeys((self.rank_key, self.rank_key_next)) if k is not None)


@dataclass(frozen=True)
class LikeStep:
    delta: int    # like counter movement: +1, -1 or 0
    write: bool   # the change is newer than the stored state: write copy and state


def like_step(stored: LikeState | None, liked: bool, lsn: int) -> LikeStep:
    """What a like change does to the stored state: ``edge_step``, of which a like needs
    only the counter movement and whether to write (it has no backfill). Pure."""
    step = edge_step(stored, liked, lsn)
    return LikeStep(step.delta, step.write)


class RankStore:
    def __init__(self, session: Session, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT) -> None:
        self._run = CqlRunner(session, max_in_flight)
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
        self._key_state = p("SELECT author_id, toUnixTimestamp(created_at), visibility, deleted, "
                            "rank_key, rank_key_next, WRITETIME(rank_key) FROM posts WHERE post_id=?")
        self._set_key_next = p("UPDATE posts USING TIMESTAMP ? SET rank_key_next=? WHERE post_id=?")

    async def like_state(self, post_id: int, user_id: int) -> LikeState | None:
        rows = await self._run.execute(self._read_state, (post_id, user_id))
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
        await self._run.execute(batch)

    async def set_like(self, post_id: int, user_id: int, liked: bool, lsn: int) -> int:
        """Apply a like change (one read, then copy and state unless already applied);
        returns the counter delta of the transition, to bump only after this returned."""
        step = like_step(await self.like_state(post_id, user_id), liked, lsn)
        if step.write:
            await self.write_like(post_id, user_id, liked, lsn)
        return step.delta

    async def bump_likes(self, post_id: int, delta: int) -> None:
        await self._run.execute(self._bump, (delta, post_id))

    async def likes(self, post_id: int) -> int:
        rows = await self._run.execute(self._likes, (post_id,))
        return int(rows[0][0] or 0) if rows else 0

    async def features(self, post_id: int) -> dict[str, float]:
        rows = await self._run.execute(self._features, (post_id,))
        return dict(rows[0][0] or {}) if rows else {}

    async def merge_features(self, post_id: int, features: dict[str, float], timestamp_us: int) -> None:
        await self._run.execute(self._set_features, (timestamp_us, features, post_id))

    async def set_score(self, post_id: int, score: float) -> None:
        await self._run.execute(self._set_score, (score, post_id))

    async def key_state(self, post_id: int) -> KeyState | None:
        """What a rank move needs of the copy; None when the post has no rows yet."""
        rows = await self._run.execute(self._key_state, (post_id,))
        if not rows:
            return None
        author, created_ms, visibility, deleted, key, key_next, key_ts = rows[0]
        if author is None or created_ms is None or key is None:
            return None  # not materialized yet: the fan-out keys it by the current score
        return KeyState(author, created_ms, visibility == 1 and not deleted,
                        key, key_next, key_ts or 0)

    async def set_rank_key_next(self, post_id: int, key: float, key_ts: int) -> None:
        await self._run.execute(self._set_key_next, (key_ts, key, post_id))
