"""Likes on a page: each item's like count, and whether the reader liked it.

Two reads per page at most, one per kind, made for the whole window at once and
concurrently with the window's other reads (``FeedReader._fill``); never one per item.

* **Counts** (``LikeCounts``) come from the count's copy in Cassandra (``like_edges``'
  static count, written by the ranker's count owner, services/shared/stores/
  counted_edges.py) in ``IN`` reads of ``CHUNK`` posts, issued together. Counts are
  kept per process for ``ttl_s`` (``FEED_LIKE_COUNT_CACHE_S``): a page whose posts were
  all counted within that time reads nothing. A count shown is at most the pipeline's
  lag (the like's commit to the ranker's write) plus ``ttl_s`` old. No notice drops a
  count: it changes with every like, a page of a hot post would re-read it each time.
* **Liked** (``PageLikes``) is read from the truth, Postgres ``likes``, for the reader
  and the window's posts in one query (``liked_among``, on the API's pool:
  ``pool_liked_reader``): a like or unlike the API
  answered 2xx has committed there, so the reader's next page, through any API process,
  shows it. The copy (``like_edges``' per-user row) would lag by the pipeline, and an
  overlay of this process's own writes would not reach the other processes.

A failed read is not a reason to fail a page: its fields are null and the page says
``likes_unavailable``.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Sequence

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from .bodies import CHUNK
from .store import FeedPort

log = logging.getLogger(__name__)

# Posts whose count is kept (~100 B each).
CAPACITY = 100_000

# (reader_id, post_ids) -> the posts among them the reader likes (Postgres ``likes``).
LikedReader = Callable[[int, Sequence[int]], Awaitable[set[int]]]

# The primary key (post_id, user_id) answers it: one index probe per post asked.
LIKED_SQL = "SELECT post_id FROM likes WHERE user_id = %s AND post_id = ANY(%s)"


async def liked_among(conn: AsyncConnection, user_id: int, post_ids: Sequence[int]) -> set[int]:
    """Which of ``post_ids`` the user likes (Postgres, the truth), in one query."""
    cur = await conn.execute(LIKED_SQL, (user_id, list(post_ids)), prepare=True)
    return {int(row[0]) for row in await cur.fetchall()}


def pool_liked_reader(pool: AsyncConnectionPool[Any]) -> LikedReader:
    """``liked_among`` on the API's Postgres pool: what ``PageLikes`` reads."""
    async def read(user_id: int, post_ids: Sequence[int]) -> set[int]:
        async with pool.connection() as conn:
            return await liked_among(conn, user_id, post_ids)
    return read


class LikeCounts:
    """Like counts from the store, kept ``ttl_s`` per process (LRU of ``capacity`` posts)."""

    def __init__(self, store: FeedPort, ttl_s: float, capacity: int = CAPACITY,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._ttl_s = ttl_s
        self._capacity = max(0, capacity)
        self._monotonic = monotonic
        self._counts: OrderedDict[int, tuple[float, int]] = OrderedDict()  # post -> (expires, count)
        self.hits = 0
        self.misses = 0

    async def counts(self, post_ids: Sequence[int]) -> dict[int, int]:
        """Every post's count (0 when never liked); raises when a read fails."""
        now = self._monotonic()
        out: dict[int, int] = {}
        missing: list[int] = []
        for post_id in dict.fromkeys(post_ids):
            held = self._counts.get(post_id)
            if held is not None and held[0] > now:
                out[post_id] = held[1]
            else:
                missing.append(post_id)
        self.hits += len(out)
        if not missing:
            return out
        self.misses += len(missing)
        chunks = [missing[i:i + CHUNK] for i in range(0, len(missing), CHUNK)]
        if len(chunks) == 1:
            found = [await self._store.like_counts(chunks[0])]
        else:
            found = await asyncio.gather(*(self._store.like_counts(c) for c in chunks))
        read: dict[int, int] = {}
        for part in found:
            read.update(part)
        expires = now + self._ttl_s
        for post_id in missing:
            count = read.get(post_id, 0)
            out[post_id] = count
            if self._ttl_s > 0 and self._capacity:
                self._counts[post_id] = (expires, count)
                self._counts.move_to_end(post_id)
        while len(self._counts) > self._capacity:
            self._counts.popitem(last=False)
        return out


@dataclass
class LikesRead:
    """What the reads of a page's likes found. A post missing from ``counts`` has no
    count known, one missing from ``known`` no ``liked`` known (a read failed:
    ``failed``); both then show as null."""

    counts: dict[int, int] = field(default_factory=dict)
    liked: set[int] = field(default_factory=set)    # posts the reader likes
    known: set[int] = field(default_factory=set)    # posts whose ``liked`` was read
    failed: bool = False
    asked: set[int] = field(default_factory=set)    # posts a read was started for

    def merge(self, other: "LikesRead") -> None:
        self.counts.update(other.counts)
        self.liked |= other.liked
        self.known |= other.known
        self.failed = self.failed or other.failed

    def count_of(self, post_id: int) -> int | None:
        return self.counts.get(post_id)

    def liked_of(self, post_id: int) -> bool | None:
        return (post_id in self.liked) if post_id in self.known else None


class PageLikes:
    """Counts and the reader's likes of a window's posts: both reads at once."""

    def __init__(self, counts: LikeCounts, liked: LikedReader) -> None:
        self.counts = counts
        self._liked = liked

    async def read(self, reader_id: int, post_ids: Sequence[int]) -> LikesRead:
        """Never raises: a failed read is logged and marked ``failed``."""
        out = LikesRead()
        if not post_ids:
            return out
        counts, liked = await asyncio.gather(self.counts.counts(post_ids),
                                             self._liked(reader_id, post_ids),
                                             return_exceptions=True)
        if isinstance(counts, BaseException):
            log.warning("like counts of %d posts could not be read: %r", len(post_ids), counts)
            out.failed = True
        else:
            out.counts = counts
        if isinstance(liked, BaseException):
            log.warning("likes of reader %d could not be read: %r", reader_id, liked)
            out.failed = True
        else:
            out.liked = set(liked)
            out.known = set(post_ids)
        return out
