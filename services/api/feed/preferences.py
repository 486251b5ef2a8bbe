"""A reader's stored feed preferences (``GET|PUT /v1/me/preferences``), read on first pages.

Today one preference: the feed order a first page uses when the request names none
(``ranked`` by default, or ``latest``). It lives in Cassandra (``reader_preferences``,
0007_reader_preferences.cql) and is kept in the process for ``ttl_s``, so a first page
costs no extra read for a reader seen recently; a change made through this process is
used at once, one made through another process within ``ttl_s``. A failed read is not a
reason to fail a page: the page uses the default order and says so in its warnings.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from typing import Callable

from services.common.cursor import RANKED

from .store import FeedStore

# Readers whose preference is kept (~100 B each).
CAPACITY = 100_000


class Preferences:
    def __init__(self, store: FeedStore, ttl_s: float,
                 monotonic: Callable[[], float] = time.monotonic, capacity: int = CAPACITY) -> None:
        self._store = store
        self._ttl_s = ttl_s
        self._monotonic = monotonic
        self._capacity = capacity
        self._orders: OrderedDict[int, tuple[float, str]] = OrderedDict()

    async def feed_order(self, reader_id: int) -> str:
        """The reader's feed order (the default when none is stored); raises when the
        store cannot be read."""
        now = self._monotonic()
        hit = self._orders.get(reader_id)
        if hit is not None and hit[0] > now:
            return hit[1]
        order = await self._store.feed_order(reader_id) or RANKED
        self._remember(reader_id, order, now)
        return order

    async def set_feed_order(self, reader_id: int, order: str) -> None:
        await self._store.save_feed_order(reader_id, order)
        self._remember(reader_id, order, self._monotonic())

    def _remember(self, reader_id: int, order: str, now: float) -> None:
        self._orders[reader_id] = (now + self._ttl_s, order)
        self._orders.move_to_end(reader_id)
        while len(self._orders) > self._capacity:
            self._orders.popitem(last=False)
