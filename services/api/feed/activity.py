"""Recording reads, and announcing the return of readers the fan-out stopped writing for.

``ReaderActivity.state(reader)`` is asked on every page. A reader this process has
already seen in the current period (a day) is answered from memory: no write per page.
The first time in a period it writes the read (``ActivityStore.record_read``: the
reader's row and the period's index, which the fan-out's sweeper reads) and then reads
the reader's state: a write and a read per reader, process and day.

A reader the sweeper flagged (``idle``: services/fanout/inactive.py) gets no inbox rows,
and after a week their inbox is empty. On their return the page is served at once from
the author partitions (``regenerating``: the reader's followed authors' partitions read
as the fallback reads a slice of them, candidates.py) with the warning ``regenerating``,
and in the background this process writes the state ``regenerating`` (other processes
serve the same way) and then announces the return (``reader_returned`` on
``<prefix>.reader-events``, acknowledged by the brokers). The fan-out, which owns every
inbox row, does the rest (services/fanout/returning.py): the flags deleted, the inbox
rebuilt from the authors' timelines, then ``active``. This process asks the state again
every ``RECHECK_REGENERATING_S`` until then. A return that was not announced (the
brokers did not answer) is announced again by the reader's next page; one announced but
not finished after ``stale_s`` (the fan-out down or far behind) is announced again by
the next page after that (the fan-out skips a reader already ``active``).
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Awaitable, Callable

from services.shared.stores.activity import (ACTIVE, IDLE, REGENERATING, Activity, ActivityPort,
                                             Window)

log = logging.getLogger(__name__)

# Readers remembered per process (~150 B each); one forgotten costs a write and a read.
CAPACITY = 200_000
# A state that could not be read is taken as active and asked again after this long.
RETRY_S = 60.0
# A reader seen regenerating is asked again this often (until their inbox is back).
RECHECK_REGENERATING_S = 1.0


@dataclass(frozen=True, slots=True)
class _Seen:
    period: int
    state: str
    ask_again_at: float  # monotonic; inf: not before the period ends


class ReaderActivity:
    def __init__(self, store: ActivityPort, window: Window,
                 announce: Callable[[int], Awaitable[object]],
                 stale_s: float, timeout_s: float = 0.5, on_returned: Callable[[], None] = lambda: None,
                 on_failure: Callable[[], None] = lambda: None,
                 now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
                 monotonic: Callable[[], float] = time.monotonic,
                 capacity: int = CAPACITY) -> None:
        self._store = store
        self._window = window
        self._announce = announce
        self._stale_ms = int(stale_s * 1000)
        # Bounds the write and read a page waits for (as every read-path store call is
        # bounded): past it the page is served as active, and the read recorded later.
        self._timeout_s = timeout_s
        self._on_returned = on_returned
        self._on_failure = on_failure
        self._now_ms = now_ms
        self._monotonic = monotonic
        self._capacity = capacity
        self._seen: OrderedDict[int, _Seen] = OrderedDict()
        self._running: dict[int, asyncio.Task[None]] = {}
        # Readers whose return could not be announced: the next page tries again.
        self._unannounced: set[int] = set()

    def known(self, reader_id: int) -> str | None:
        """The reader's state when this process needs no store call to say it."""
        hit = self._seen.get(reader_id)
        if hit is None or hit.period != self._window.period(self._now_ms()):
            return None
        if self._monotonic() >= hit.ask_again_at:
            return None
        return hit.state

    async def state(self, reader_id: int) -> str:
        """``active`` or ``regenerating``; records the read the first time in a period."""
        known = self.known(reader_id)
        if known is not None:
            return known
        now_ms = self._now_ms()
        period = self._window.period(now_ms)
        try:
            stored = await asyncio.wait_for(self._record(reader_id, period), self._timeout_s)
        except Exception:  # noqa: BLE001 - a page is not failed for this; asked again later
            log.warning("activity of reader %d could not be recorded", reader_id, exc_info=True)
            self._on_failure()
            self._remember(reader_id, period, ACTIVE, self._monotonic() + RETRY_S)
            return ACTIVE
        state = stored.state
        stale = (state == REGENERATING and reader_id not in self._running
                 and (reader_id in self._unannounced
                      or now_ms - (stored.state_at_ms or 0) > self._stale_ms))
        if state == IDLE or stale:
            self._start(reader_id)
        if state != ACTIVE or reader_id in self._running:
            self._remember(reader_id, period, REGENERATING,
                           self._monotonic() + RECHECK_REGENERATING_S)
            return REGENERATING
        self._remember(reader_id, period, ACTIVE, float("inf"))
        return ACTIVE

    async def _record(self, reader_id: int, period: int) -> Activity:
        """The read written, then the state read (in that order: activity.py)."""
        await self._store.record_read(reader_id, period, self._window.index_ttl_s)
        return await self._store.activity(reader_id)

    def _start(self, reader_id: int) -> None:
        if reader_id not in self._running:
            task = asyncio.get_running_loop().create_task(self._announce_return(reader_id))
            self._running[reader_id] = task

    async def _announce_return(self, reader_id: int) -> None:
        try:
            await self._store.set_state(reader_id, REGENERATING)
            await self._announce(reader_id)
        except Exception:  # noqa: BLE001 - announced again by the reader's next page
            log.warning("the return of reader %d could not be announced", reader_id, exc_info=True)
            self._on_failure()
            if len(self._unannounced) < self._capacity:
                self._unannounced.add(reader_id)
            self._seen.pop(reader_id, None)
            return
        finally:
            self._running.pop(reader_id, None)
        self._unannounced.discard(reader_id)
        self._on_returned()
        log.info("reader %d is back: announced to the fan-out, which regenerates their inbox",
                 reader_id)

    def _remember(self, reader_id: int, period: int, state: str, ask_again_at: float) -> None:
        self._seen[reader_id] = _Seen(period, state, ask_again_at)
        self._seen.move_to_end(reader_id)
        while len(self._seen) > self._capacity:
            self._seen.popitem(last=False)

    async def close(self) -> None:
        for task in list(self._running.values()):
            task.cancel()
        await asyncio.gather(*self._running.values(), return_exceptions=True)
