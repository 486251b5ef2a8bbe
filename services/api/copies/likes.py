"""Likes on a page: each item's like count, and whether the reader liked it.

Two reads per page at most, one per kind, made together for the page's items once
eligibility has chosen them (``FeedReader._dressed``); never one per item, and none
when the process keeps them all.

* **Counts** (``LikeCounts``) come from the count's copy in Cassandra (``like_edges``'
  static count, written by the ranker's count owner, services/shared/stores/
  counted_edges.py) in ``IN`` reads of ``CHUNK`` posts, issued together. Counts are
  kept per process for ``ttl_s`` (``FEED_LIKE_COUNT_CACHE_S``): a page whose posts were
  all counted within that time reads nothing. A count shown is at most the pipeline's
  lag (the like's commit to the ranker's write) plus ``ttl_s`` old. No notice drops a
  count: it changes with every like, a page of a hot post would re-read it each time.
* **Liked** (``ReaderLikes``) comes from the truth, Postgres ``likes``: every post a
  reader liked within ``horizon_s`` (the feed's reach), read in one query
  (``recent_likes``, on the ``likes_by_user`` index) and kept per process for ``ttl_s``
  (``FEED_LIKED_CACHE_S``). A like or unlike the API answered 2xx drops the reader's set
  in the answering process before the answer, and in every other API process when its
  ``likers`` notice (serving-changes) arrives, which the like routes publish before they
  answer: the next page through the same process shows it; through another, once that
  process has consumed the notice (milliseconds while its consumer keeps up; at most
  ``ttl_s`` if notices are lost). Posts older than the set's horizon, and readers with
  more than ``READER_CAP`` recent likes, are asked per page (``liked_among``, one query
  for the window). The copy (``like_edges``' per-user row) would lag by the pipeline.

A failed read is not a reason to fail a page: its fields are null and the page says
``likes_unavailable``.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterable, Sequence

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from services.shared.domain import ids

from .bodies import CHUNK
from .drops import Drops
from .store import FeedPort

log = logging.getLogger(__name__)

# Posts whose count is kept (~100 B each).
CAPACITY = 100_000

# (reader_id, post_ids) -> the posts among them the reader likes (Postgres ``likes``).
LikedReader = Callable[[int, Sequence[int]], Awaitable[set[int]]]

# The primary key (post_id, user_id) answers it: one index probe per post asked.
LIKED_SQL = "SELECT post_id FROM likes WHERE user_id = %s AND post_id = ANY(%s)"
# ``likes_by_user (user_id, created_at DESC)`` answers it: a like is made after its post,
# so the likes made since T cover every post created since T.
RECENT_SQL = ("SELECT post_id FROM likes WHERE user_id = %s AND created_at >= to_timestamp(%s) "
              "LIMIT %s")
# Readers whose recent likes are kept as one set; one who liked more is asked per page.
READER_CAP = 5_000
# Readers whose sets are kept (~100 B + ~60 B a like).
READERS_KEPT = 20_000

# (reader_id, since Unix s, limit) -> the posts the reader liked since then (at most limit).
RecentReader = Callable[[int, float, int], Awaitable[list[int]]]


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


async def recent_likes(conn: AsyncConnection, user_id: int, since_s: float, limit: int) -> list[int]:
    """The posts ``user_id`` liked since ``since_s`` (Unix s), at most ``limit``."""
    cur = await conn.execute(RECENT_SQL, (user_id, since_s, limit), prepare=True)
    return [int(row[0]) for row in await cur.fetchall()]


def pool_recent_reader(pool: AsyncConnectionPool[Any]) -> RecentReader:
    """``recent_likes`` on the API's Postgres pool: what ``ReaderLikes`` loads."""
    async def read(user_id: int, since_s: float, limit: int) -> list[int]:
        async with pool.connection() as conn:
            return await recent_likes(conn, user_id, since_s, limit)
    return read


@dataclass(frozen=True)
class _Held:
    expires: float           # monotonic
    floor_ms: int            # posts created at or after it (Unix ms) are covered
    liked: frozenset[int]


class ReaderLikes:
    """The posts each reader liked within ``horizon_s``, kept ``ttl_s`` per process and
    dropped by the reader's own like or unlike (``drop``: in this process at once, in the
    others by the ``likers`` notice)."""

    def __init__(self, recent: RecentReader, among: LikedReader, ttl_s: float, horizon_s: float,
                 *, cap: int = READER_CAP, capacity: int = READERS_KEPT,
                 monotonic: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self._recent = recent
        self._among = among
        self._ttl_s = ttl_s
        self._horizon_s = horizon_s
        self._cap = cap
        self._capacity = max(0, capacity)
        self._monotonic = monotonic
        self._wall = wall
        self._held: OrderedDict[int, _Held] = OrderedDict()
        self._drops = Drops()
        self.hits = 0
        self.loads = 0
        self.asked = 0                       # per-page queries (old posts, heavy likers)

    def drop(self, readers: Iterable[int] | None) -> None:
        """``readers`` liked or unliked (None: forget everyone, a cleared serving cache)."""
        self._drops.named(readers)
        if readers is None:
            self._held.clear()
            return
        for reader_id in readers:
            self._held.pop(reader_id, None)

    def held_among(self, reader_id: int, post_ids: Sequence[int]) -> set[int] | None:
        """``liked_among`` from the kept set alone, or None when it would have to read."""
        held = self._held.get(reader_id)
        if held is None or held.expires <= self._monotonic():
            return None
        # Ids grow with time: a post created before the floor has an id below the floor's.
        if post_ids and min(post_ids) < ids.lowest_id_at(held.floor_ms):
            return None
        self.hits += 1
        liked = held.liked
        return {p for p in post_ids if p in liked}

    async def liked_among(self, reader_id: int, post_ids: Sequence[int]) -> set[int]:
        """Which of ``post_ids`` the reader likes; raises when a read fails."""
        held = self._held.get(reader_id)
        if held is None or held.expires <= self._monotonic():
            held = await self._load(reader_id)
        else:
            self.hits += 1
        if held is None:   # a heavy liker: the window's own query
            self.asked += 1
            return await self._among(reader_id, post_ids)
        out = {p for p in post_ids if p in held.liked}
        older = [p for p in post_ids if ids.timestamp_ms(p) < held.floor_ms]
        if older:
            self.asked += 1
            out |= await self._among(reader_id, older)
        return out

    async def _load(self, reader_id: int) -> _Held | None:
        epoch = self._drops.epoch
        since_s = self._wall() - self._horizon_s
        self.loads += 1
        liked = await self._recent(reader_id, since_s, self._cap + 1)
        if len(liked) > self._cap:
            return None
        held = _Held(self._monotonic() + self._ttl_s, int(since_s * 1000), frozenset(liked))
        if self._ttl_s > 0 and self._capacity and self._drops.untouched(reader_id, epoch):
            self._held[reader_id] = held
            self._held.move_to_end(reader_id)
            while len(self._held) > self._capacity:
                self._held.popitem(last=False)
        return held


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

    def held(self, post_ids: Sequence[int]) -> dict[int, int] | None:
        """Every post's count if all are kept and fresh, else None (nothing to read: a page
        whose counts are all kept needs no task)."""
        now = self._monotonic()
        out: dict[int, int] = {}
        counts = self._counts
        for post_id in post_ids:
            held = counts.get(post_id)
            if held is None or held[0] <= now:
                return None
            out[post_id] = held[1]
        self.hits += len(out)
        return out

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

    def __init__(self, counts: LikeCounts, liked: LikedReader,
                 held_liked: Callable[[int, Sequence[int]], set[int] | None] | None = None) -> None:
        self.counts = counts
        self._liked = liked
        self._held_liked = held_liked

    def held_into(self, reader_id: int, post_ids: Sequence[int], into: LikesRead) -> bool:
        """What ``read`` would answer merged into ``into``, when the process keeps all of
        it (True); else False, ``into`` unchanged."""
        if self._held_liked is None:
            return False
        counts = self.counts.held(post_ids)
        if counts is None:
            return False
        liked = self._held_liked(reader_id, post_ids)
        if liked is None:
            return False
        into.counts.update(counts)
        into.liked |= liked
        into.known.update(post_ids)
        return True

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
