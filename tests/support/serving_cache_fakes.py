"""The serving cache (services/api/copies/serving_cache.py) over a counting in-memory
store: what the serving cache's and the snapshot reuse's unit tests read through, with
the ids its rows hold. The store is ``InMemoryFeedStore`` (held to ``FeedStore`` by the
contract suite, tests/support/contracts/feed_store_contract.py), seeded with the rows
below; ``FakeStore`` only counts the calls the cache lets through and can hold reads."""
from __future__ import annotations

import asyncio
from typing import Any, Sequence

from services.api.copies.serving_cache import CachedFeedStore, ServingCache
from services.api.copies.store import Blocks, PostRow, PostTextRow, SourceRow
from services.shared.domain import ids
from services.shared.domain.rules import VISIBLE
from tests.support.memory_stores import InMemoryFeedStore

READER, AUTHOR, OTHER = 11, 22, 33
POST = ids.compose(1_795_000_000_000, 1, 1)
BUCKET = ids.day_bucket(POST)
# The rows the store starts with: AUTHOR's timeline partition of BUCKET, READER's inbox.
TIMELINE: list[SourceRow] = [(2.0, POST, AUTHOR), (1.0, POST - 1, AUTHOR)]
INBOX: list[SourceRow] = [(3.5, POST, AUTHOR), (1.25, POST - 5, OTHER)]


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class FakeStore(InMemoryFeedStore):
    """The in-memory store with READER following AUTHOR (since 5 ms) and OTHER (6 ms),
    POST's copy (by AUTHOR, created at 7 ms, text "hi", key 1.5 written at 9 µs),
    ``TIMELINE`` and ``inbox`` (``INBOX`` by default). ``calls`` names each read the
    cache lets through (``posts:<with_text>``, ``..._after`` below a boundary); while
    ``gate`` is set, ``following`` and ``feed_order`` (after reading) wait for it."""

    def __init__(self, inbox: Sequence[SourceRow] = INBOX) -> None:
        super().__init__()
        self.follow(READER, AUTHOR, 5)
        self.follow(READER, OTHER, 6)
        self.write_post(POST, AUTHOR, 7, "hi", VISIBLE, False)
        self.set_rank_key(POST, 1.5, 9)
        for key, post_id, author_id in TIMELINE:
            self.add_author_post(author_id, post_id, key)
        self.put_inbox(READER, inbox)
        self.calls: list[str] = []
        self.gate: asyncio.Event | None = None

    def set_inbox(self, reader_id: int, rows: Sequence[SourceRow]) -> None:
        """The reader's inbox holds exactly ``rows`` from now on."""
        self.tables.inbox.pop(reader_id, None)
        self.put_inbox(reader_id, rows)

    async def following(self, reader_id: int, limit: int) -> dict[int, int]:
        self.calls.append("following")
        if self.gate is not None:
            await self.gate.wait()
        return await super().following(reader_id, limit)

    async def blocks(self, reader_id: int) -> Blocks:
        self.calls.append("blocks")
        return await super().blocks(reader_id)

    async def following_among(self, reader_id: int, authors: Sequence[int]) -> dict[int, int]:
        self.calls.append("following_among")
        return await super().following_among(reader_id, authors)

    async def posts(self, post_ids: Sequence[int], *,
                    with_text: bool) -> list[PostRow] | list[PostTextRow]:
        self.calls.append(f"posts:{with_text}")
        return await super().posts(post_ids, with_text=with_text)

    async def authors_top(self, authors: Sequence[int], buckets: Sequence[int], per_partition: int,
                          after: tuple[float, int] | None = None) -> list[SourceRow]:
        self.calls.append("authors_top" if after is None else "authors_after")
        return await super().authors_top(authors, buckets, per_partition, after)

    async def inbox_top(self, reader_id: int, limit: int,
                        after: tuple[float, int] | None = None) -> list[SourceRow]:
        self.calls.append("inbox_top" if after is None else "inbox_after")
        return await super().inbox_top(reader_id, limit, after)

    async def feed_order(self, reader_id: int) -> str | None:
        self.calls.append("feed_order")
        order = await super().feed_order(reader_id)  # what the read sees, when it reaches the node
        if self.gate is not None:
            await self.gate.wait()
        return order

    async def save_feed_order(self, reader_id: int, order: str) -> None:
        self.calls.append("save_feed_order")
        await super().save_feed_order(reader_id, order)

    async def load_snapshot(self, reader_id: int, feed_version: str) -> Any:
        self.calls.append("load_snapshot")
        return await super().load_snapshot(reader_id, feed_version)


def make(*, live: bool = True, max_following: int = 100, follows: int = 1000,
         inbox: Sequence[SourceRow] = INBOX) -> tuple[CachedFeedStore, FakeStore, ServingCache, Clock]:
    clock = Clock()
    cache = ServingCache(posts=100, follows=follows, timelines=100, inboxes=100, ttl_s=60, max_silence_s=2,
                         preferences=100, monotonic=clock)
    if live:
        cache.go_live({0: 0})
    store = FakeStore(inbox)
    return CachedFeedStore(store, cache, max_following), store, cache, clock


def run(coro: Any) -> Any:
    return asyncio.run(coro)
