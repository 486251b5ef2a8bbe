"""A reader's stored feed preferences (``GET|PUT /v1/me/preferences``), read on first pages.

Today one preference: the feed order a first page uses when the request names none
(``ranked`` by default, or ``latest``). It lives in Cassandra (``reader_preferences``,
0007_reader_preferences.cql).

While the serving cache is usable (copies/serving_cache.py), it is one of its entries: read once
per reader and kept until a ``serving-changes`` notice names the reader (or
``cache_ttl_s``, the bound on a lost notice). A change is stored, then this process
publishes that notice and waits for the broker's acknowledgement before the PUT answers,
so every process uses the new order from its next first page after the notice, a few
milliseconds later. Before, every process re-read a kept preference once it was older
than ``ttl_s`` (5 s): one Cassandra read behind nearly every first page of a reader who
reads less often than that, and ~3 % of the API's CPU at 16 connections on the read
bench (py-spy, 2026-12-01).

While the cache stands aside (notices may be late), the process keeps what it read
itself: a value younger than ``ttl_s`` is used as is; an older one (up to ``stale_s``
more) is used once more while one background read refreshes it (stale-while-revalidate);
only a reader not seen for that long, or never, waits for the read. A failed read is not
a reason to fail a page: the caller uses the default order and says so.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from typing import Callable

from services.api.snapshots.cursor import RANKED
from services.shared.contracts.serving_changes import NO_NOTICES, ChangeSink, ServingChange

from ..copies.store import FeedPort

log = logging.getLogger(__name__)

# Readers whose preference is kept (~100 B each).
CAPACITY = 100_000
# How long past ``ttl_s`` a kept value may still answer while it is being refreshed.
STALE_S = 600.0


class Preferences:
    def __init__(self, store: FeedPort, ttl_s: float,
                 monotonic: Callable[[], float] = time.monotonic, capacity: int = CAPACITY,
                 stale_s: float = STALE_S, notices: ChangeSink = NO_NOTICES) -> None:
        self._store = store
        self._notices = notices  # where a stored change is announced to every process
        self._ttl_s = ttl_s
        self._stale_s = stale_s
        self._monotonic = monotonic
        self._capacity = capacity
        self._orders: OrderedDict[int, tuple[float, str]] = OrderedDict()  # reader -> (fresh until, order)
        self._refreshing: dict[int, asyncio.Task[None]] = {}

    async def feed_order(self, reader_id: int) -> str:
        """The reader's feed order (the default when none is stored); raises when the
        store cannot be read and nothing usable is kept."""
        if self._store.from_memory:  # the serving cache holds it until a notice
            return await self._store.feed_order(reader_id) or RANKED
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
        """Stored, then announced (raises if either fails: the PUT is retried, and a
        stored change whose notice failed is re-announced by the retry)."""
        await self._store.save_feed_order(reader_id, order)
        self._remember(reader_id, order)
        await self._notices.changed(ServingChange(preferences=(reader_id,)))

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
