"""The preference cache of first pages: stored orders, defaults, expiry, failures."""
from __future__ import annotations

import asyncio

import pytest

from services.api.feed.preferences import Preferences


class _Store:
    def __init__(self) -> None:
        self.orders: dict[int, str] = {}
        self.reads = 0
        self.fail = False

    async def feed_order(self, reader_id: int) -> str | None:
        self.reads += 1
        if self.fail:
            raise TimeoutError("node down")
        return self.orders.get(reader_id)

    async def save_feed_order(self, reader_id: int, order: str) -> None:
        if self.fail:
            raise TimeoutError("node down")
        self.orders[reader_id] = order


def test_a_reader_without_a_stored_order_gets_ranked_and_a_stored_one_is_kept_ttl_s() -> None:
    store, clock = _Store(), [0.0]
    prefs = Preferences(store, ttl_s=5, monotonic=lambda: clock[0])  # type: ignore[arg-type]
    assert asyncio.run(prefs.feed_order(1)) == "ranked"
    store.orders[1] = "latest"  # written through another process
    assert asyncio.run(prefs.feed_order(1)) == "ranked" and store.reads == 1
    clock[0] = 5.1
    assert asyncio.run(prefs.feed_order(1)) == "latest" and store.reads == 2


def test_a_change_through_this_process_is_used_at_once_and_failures_raise() -> None:
    store = _Store()
    prefs = Preferences(store, ttl_s=60, capacity=2)  # type: ignore[arg-type]
    assert asyncio.run(prefs.feed_order(1)) == "ranked"
    asyncio.run(prefs.set_feed_order(1, "latest"))
    assert asyncio.run(prefs.feed_order(1)) == "latest" and store.orders == {1: "latest"}
    store.fail = True
    with pytest.raises(TimeoutError):
        asyncio.run(prefs.feed_order(2))
    with pytest.raises(TimeoutError):
        asyncio.run(prefs.set_feed_order(1, "ranked"))
    assert asyncio.run(prefs.feed_order(1)) == "latest"  # a failed write changes nothing
