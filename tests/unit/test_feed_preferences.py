"""The preference cache of first pages: stored orders, defaults, refresh, failures."""
from __future__ import annotations

import asyncio

import pytest

from services.api.feed.preferences import Preferences
from tests.support.memory_stores import InMemoryFeedStore


class _Store(InMemoryFeedStore):
    """The in-memory store (held to FeedStore by its contract suite; not from memory, as
    a store without the serving cache, or with it standing aside), counting preference
    reads, each of which yields once (a read in flight), with a failure switch."""

    def __init__(self) -> None:
        super().__init__()
        self.orders = self.tables.preferences  # reader -> stored order
        self.reads = 0
        self.fail = False

    async def feed_order(self, reader_id: int) -> str | None:
        self.reads += 1
        await asyncio.sleep(0)
        if self.fail:
            raise TimeoutError("node down")
        return await super().feed_order(reader_id)

    async def save_feed_order(self, reader_id: int, order: str) -> None:
        if self.fail:
            raise TimeoutError("node down")
        await super().save_feed_order(reader_id, order)


def test_a_kept_order_answers_at_once_and_is_refreshed_behind_the_page() -> None:
    async def scenario() -> None:
        store, clock = _Store(), [0.0]
        prefs = Preferences(store, ttl_s=5, stale_s=60, monotonic=lambda: clock[0])
        assert await prefs.feed_order(1) == "ranked" and store.reads == 1  # never seen: read
        store.orders[1] = "latest"  # written through another process
        assert await prefs.feed_order(1) == "ranked" and store.reads == 1  # fresh: kept
        clock[0] = 5.1
        assert await prefs.feed_order(1) == "ranked"  # stale: used once more, refreshed behind
        assert await prefs.feed_order(1) == "ranked"  # one refresh in flight, not two
        await asyncio.sleep(0.01)
        assert store.reads == 2
        assert await prefs.feed_order(1) == "latest"
        clock[0] = 5.1 + 5 + 60.1  # too old to use: the page waits for the read
        store.orders[1] = "ranked"
        assert await prefs.feed_order(1) == "ranked" and store.reads == 3

    asyncio.run(scenario())


def test_a_change_through_this_process_is_used_at_once_and_failures_raise() -> None:
    async def scenario() -> None:
        store, clock = _Store(), [0.0]
        prefs = Preferences(store, ttl_s=60, capacity=2, monotonic=lambda: clock[0])
        assert await prefs.feed_order(1) == "ranked"
        await prefs.set_feed_order(1, "latest")
        assert await prefs.feed_order(1) == "latest" and store.orders == {1: "latest"}
        store.fail = True
        with pytest.raises(TimeoutError):
            await prefs.feed_order(2)  # nothing kept: the failure is the caller's to handle
        with pytest.raises(TimeoutError):
            await prefs.set_feed_order(1, "ranked")
        assert await prefs.feed_order(1) == "latest"  # a failed write changes nothing
        clock[0] = 61
        assert await prefs.feed_order(1) == "latest"  # stale and the refresh fails: kept
        await asyncio.sleep(0.01)
        assert await prefs.feed_order(1) == "latest"

    asyncio.run(scenario())
