"""A counting fake of ``FeedStore`` and the serving cache over it
(services/api/feed/serving_cache.py): what the serving cache's and the snapshot reuse's
unit tests read through, with the ids its rows hold."""
from __future__ import annotations

import asyncio

from services.api.feed.serving_cache import CachedFeedStore, ServingCache
from services.common import ids

READER, AUTHOR, OTHER = 11, 22, 33
POST = ids.compose(1_795_000_000_000, 1, 1)
BUCKET = ids.day_bucket(POST)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class FakeStore:
    """The FeedStore calls the cache wraps, answering from dicts and counting calls."""

    def __init__(self) -> None:
        self.follows = {READER: {AUTHOR: 5, OTHER: 6}}
        self.blocks: dict[int, frozenset[int]] = {}
        self.posts_rows = {POST: (POST, AUTHOR, 7, 1, False, 1.5, None, 9, "hi")}
        self.timeline = {(AUTHOR, BUCKET): [(2.0, POST, AUTHOR), (1.0, POST - 1, AUTHOR)]}
        self.inbox = {READER: [(3.5, POST, AUTHOR), (1.25, POST - 5, OTHER)]}
        self.orders: dict[int, str] = {}
        self.calls: list[str] = []
        self.gate: asyncio.Event | None = None

    async def following(self, reader_id: int, limit: int) -> dict[int, int]:
        self.calls.append("following")
        if self.gate is not None:
            await self.gate.wait()
        return dict(list(self.follows.get(reader_id, {}).items())[:limit])

    async def blocked(self, reader_id: int) -> frozenset[int]:
        self.calls.append("blocked")
        return self.blocks.get(reader_id, frozenset())

    async def following_among(self, reader_id, authors):
        self.calls.append("following_among")
        f = self.follows.get(reader_id, {})
        return {a: f[a] for a in authors if a in f}

    async def posts(self, post_ids, *, with_text):
        self.calls.append(f"posts:{with_text}")
        rows = [self.posts_rows[p] for p in post_ids if p in self.posts_rows]
        return rows if with_text else [r[:8] for r in rows]

    async def authors_top(self, authors, buckets, per_partition, after=None):
        self.calls.append("authors_top" if after is None else "authors_after")
        return [r for a in authors for b in buckets for r in self.timeline.get((a, b), [])[:per_partition]]

    async def inbox_top(self, reader_id, limit, after=None):
        self.calls.append("inbox_top" if after is None else "inbox_after")
        return self.inbox.get(reader_id, [])[:limit]

    async def feed_order(self, reader_id):
        self.calls.append("feed_order")
        order = self.orders.get(reader_id)  # what the read sees, when it reaches the node
        if self.gate is not None:
            await self.gate.wait()
        return order

    async def save_feed_order(self, reader_id, order):
        self.calls.append("save_feed_order")
        self.orders[reader_id] = order

    async def load_snapshot(self, reader_id, version):
        self.calls.append("load_snapshot")
        return None


def make(*, live: bool = True, max_following: int = 100, follows: int = 1000):
    clock = Clock()
    cache = ServingCache(posts=100, follows=follows, timelines=100, inboxes=100, ttl_s=60, max_silence_s=2,
                         preferences=100, monotonic=clock)
    if live:
        cache.go_live({0: 0})
    store = FakeStore()
    return CachedFeedStore(store, cache, max_following), store, cache, clock  # type: ignore[arg-type]


def run(coro):
    return asyncio.run(coro)
