"""The ranker's Cassandra rows: like copies, like counts, and the post copy's rank key.

The statements and row types are their tables' owners' (services/shared/stores:
likes.py, counted_edges.py, posts.py); rows come back as plain tuples (the ranker's
profile, cql_async.use_plain_tuples) and are named with the owners' row types.

Statements go out through the shared ``CqlRunner`` (services/shared/stores/cql_async.py: the
driver's async API bridged to asyncio, no thread per call), at most ``max_in_flight`` at
once across every key of a batch. A like's state and its post's like count live in
``like_edges`` (0006_counted_edges.cql) and change together in one conditional batch,
with the same rule as follows (services/shared/stores/counted_edges.py, edge_transitions.py):
a replay reads its own LSN back and counts nothing, a crash or retry loses nothing, and
the likes of one post in flight share a batch.
"""
from __future__ import annotations

from dataclasses import dataclass

from cassandra.cluster import Session

from services.shared.contracts.serving_changes import NO_NOTICES, ChangeSink, ServingChange
from services.shared.domain.rules import VISIBLE
from services.shared.stores.counted_edges import LIKE_EDGES as LIKE_EDGES
from services.shared.stores.counted_edges import CountReads, count_of
from services.shared.stores.cql_async import DEFAULT_MAX_IN_FLIGHT, CqlRunner
from services.shared.stores.likes import RankerLikes
from services.shared.stores.posts import FeaturesRow, KeyStateRow, RankerPosts


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


class RankStore:
    def __init__(self, session: Session, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
                 runner: CqlRunner | None = None, notices: ChangeSink = NO_NOTICES) -> None:
        self._run = runner or CqlRunner(session, max_in_flight)
        self._notices = notices  # told after rank_key_next changes (serving_changes.py)
        # The owners' statements (services/shared/stores: likes.py, counted_edges.py, posts.py).
        self._likes = RankerLikes(session)
        self._counts = CountReads(session, LIKE_EDGES)
        self._posts = RankerPosts(session)

    async def write_like_copy(self, post_id: int, user_id: int, liked: bool, lsn: int) -> None:
        """The like copy (``post_likes``): a row, or its tombstone; by LSN write time."""
        if liked:
            await self._run.execute(self._likes.add, (post_id, user_id, lsn))
        else:
            await self._run.execute(self._likes.delete, (lsn, post_id, user_id))

    async def likes(self, post_id: int) -> int:
        """The post's like count."""
        return count_of(await self._run.execute(self._counts.count, (post_id,)))

    async def features(self, post_id: int) -> dict[str, float]:
        rows = await self._run.execute(self._posts.features, (post_id,))
        if not rows:
            return {}
        return dict(FeaturesRow._make(rows[0]).features or {})

    async def merge_features(self, post_id: int, features: dict[str, float], timestamp_us: int) -> None:
        await self._run.execute(self._posts.merge_features, (timestamp_us, features, post_id))

    async def set_score(self, post_id: int, score: float) -> None:
        await self._run.execute(self._posts.set_score, (score, post_id))

    async def key_state(self, post_id: int) -> KeyState | None:
        """What a rank move needs of the copy; None when the post has no rows yet."""
        rows = await self._run.execute(self._posts.key_state, (post_id,))
        if not rows:
            return None
        row = KeyStateRow._make(rows[0])
        if row.author_id is None or row.created_at_ms is None or row.rank_key is None:
            return None  # not materialized yet: the fan-out keys it by the current score
        return KeyState(row.author_id, row.created_at_ms,
                        row.visibility == VISIBLE and not row.deleted,
                        row.rank_key, row.rank_key_next, row.key_ts or 0)

    async def set_rank_key_next(self, post_id: int, key: float, key_ts: int) -> None:
        await self._run.execute(self._posts.set_rank_key_next, (key_ts, key, post_id))
        await self._notices.changed(ServingChange(posts=(post_id,)))
