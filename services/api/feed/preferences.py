"""A reader's stored feed preferences (``GET|PUT /v1/me/preferences``), read on first pages.

Today one preference: the feed order a first page uses when the request names none
(``ranked`` by default, or ``latest``). It lives in Cassandra (``reader_preferences``,
0007_reader_preferences.cql) and is kept in the process, so a first page of a reader
seen before waits for no read: a value younger than ``ttl_s`` is used as is; an older
one (up to ``stale_s`` more) is used once more while one background read refreshes it
(stale-while-revalidate); only a reader not seen for that long, or never, waits for the
read. A change made through this process is used at once; one made through another
process from the first page after ``ttl_s`` has passed plus that refresh. A failed read
is not a reason to fail a page: the caller uses the default order and says so.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from typing import Callable

from services.api.feed.cursor import RANKED

from .store import FeedStore

log = logging.getLogger(__name__)

# Readers whose preference is kept (~100 B each).
CAPACITY = 100_000
# How long past ``ttl_s`` a kept value may still answer while it is being refreshed.
STALE_S = 600.0


class Preferences:
    def __init__(self, store: FeedStore, ttl_s: float,
                 monotonic: Callable[[], float] = time.monotonic, capacity: int = CAPACITY,
                 stale_s: float = STALE_S) -> None:
        self._store = store
        self._ttl_s = ttl_s
        self._stale_s = stale_s
        self._monotonic = monotonic
        self._capacity = capacity
        self._orders: OrderedDict[int, tuple[float, str]] = OrderedDict()  # reader -> (fresh until, order)
        self._refreshing: dict[int, asyncio.Task[None]] = {}

    async def feed_order(self, reader_id: int) -> str:
        """The reader's feed order (the default when none is stored); raises when the
        store cannot be read and nothing usable is kept."""
        now = self._monotonic()
        hit = self._orders.get(reader_id)
        if hit is not None:
            fresh_until, order = hit
            if now < fresh_until:
                return order
            if now < fresh_until + self._stale_s:
                self._refresh_soon(reader_id)
                return order
        return await self._read(reader_id)

    async def set_feed_order(self, reader_id: int, order: str) -> None:
        await self._store.save_feed_order(reader_id, order)
        self._remember(reader_id, order)

    async def _read(self, reader_id: int) -> str:
        order = await self._store.feed_order(reader_id) or RANKED
        self._remember(reader_id, order)
        return order

    def _refresh_soon(self, reader_id: int) -> None:
        if reader_id in self._refreshing:
            return
        task = asyncio.get_running_loop().create_task(self._refresh(reader_id))
        self._refreshing[reader_id] = task

    async def _refresh(self, reader_id: int) -> None:
        try:
            await self._read(reader_id)
        except Exception:  # noqa: BLE001 - the kept value serves until stale_s runs out
            log.debug("preferences of reader %d could not be refreshed", reader_id, exc_info=True)
        finally:
            self._refreshing.pop(reader_id, None)

    def _remember(self, reader_id: int, order: str) -> None:
        self._orders[reader_id] = (self._monotonic() + self._ttl_s, order)
        self._orders.move_to_end(reader_id)
        while len(self._orders) > self._capacity:
            self._orders.popitem(last=False)
