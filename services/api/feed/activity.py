"""Recording reads, and bringing back readers the fan-out stopped writing for.

``ReaderActivity.state(reader)`` is asked on every page. A reader this process has
already seen in the current period (a day) is answered from memory: no write per page.
The first time in a period it writes the read (``ActivityStore.record_read``: the
reader's row and the period's index, which the fan-out's sweeper reads) and then reads
the reader's state: a write and a read per reader, process and day.

A reader the sweeper flagged (``idle``: services/fanout/inactive.py) gets no inbox rows,
and after a week their inbox is empty. On their return this process starts the
regeneration in the background and the page is served at once from the author
partitions (``regenerating``: the reader's followed authors' partitions read as the
fallback reads a slice of them, candidates.py) with the warning ``regenerating``. The
regeneration, in order: the state ``regenerating`` (other processes serve the same way),
the flags deleted (the fan-out writes the reader's rows again from here on), the inbox
rebuilt from the authors' timelines (services/fanout/jobs/rebuild.py: whatever the fan-out
skipped before the flags went is there), then ``active``. One that does not finish
(its process died) is started again by the next page after ``stale_s``.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Awaitable, Callable

from cassandra.cluster import Session

from services.fanout.copies import CopyStore
from services.fanout.inbox import InboxStore
from services.fanout.jobs.rebuild import rebuilder
from services.shared.contracts.serving_changes import ChangeSink
from services.shared.settings import Settings
from services.shared.stores.activity import (ACTIVE, IDLE, REGENERATING, Activity, ActivityPort,
                                             Window)
from services.shared.stores.cql_async import CqlRunner

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
                 rebuild: Callable[[int, list[int]], Awaitable[object]],
                 stale_s: float, timeout_s: float = 0.5, on_returned: Callable[[float], None] = lambda _s: None,
                 on_failure: Callable[[], None] = lambda: None,
                 now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
                 monotonic: Callable[[], float] = time.monotonic,
                 capacity: int = CAPACITY) -> None:
        self._store = store
        self._window = window
        self._rebuild = rebuild
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
                 and now_ms - (stored.state_at_ms or 0) > self._stale_ms)
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
            task = asyncio.get_running_loop().create_task(self._regenerate(reader_id))
            self._running[reader_id] = task

    async def _regenerate(self, reader_id: int) -> None:
        started = self._monotonic()
        try:
            await self._store.set_state(reader_id, REGENERATING)
            authors = await self._store.following(reader_id)
            await self._store.unflag(reader_id, authors)
            await self._rebuild(reader_id, authors)
            await self._store.set_state(reader_id, ACTIVE)
        except Exception:  # noqa: BLE001 - started again by a page after stale_s
            log.warning("regeneration of reader %d's inbox failed", reader_id, exc_info=True)
            self._on_failure()
            self._seen.pop(reader_id, None)
            return
        finally:
            self._running.pop(reader_id, None)
        elapsed = self._monotonic() - started
        self._on_returned(elapsed)
        self._remember(reader_id, self._window.period(self._now_ms()), ACTIVE, float("inf"))
        log.info("reader %d is back: inbox regenerated from %d authors in %.2f s",
                 reader_id, len(authors), elapsed)

    def _remember(self, reader_id: int, period: int, state: str, ask_again_at: float) -> None:
        self._seen[reader_id] = _Seen(period, state, ask_again_at)
        self._seen.move_to_end(reader_id)
        while len(self._seen) > self._capacity:
            self._seen.popitem(last=False)

    async def close(self) -> None:
        for task in list(self._running.values()):
            task.cancel()
        await asyncio.gather(*self._running.values(), return_exceptions=True)


class InboxRebuilder:
    """The fan-out's inbox rebuild (services/fanout/jobs/rebuild.py), run by this process for
    a returning reader. Its statements are prepared at start; its serving-changes notices
    (every API process drops the reader's cached inbox top) go out through ``notices``,
    the process's ``notices.ApiNotices``."""

    def __init__(self, session: Session, settings: Settings, notices: ChangeSink) -> None:
        runner = CqlRunner(session)
        self._rebuild = rebuilder(
            CopyStore(session, runner, settings.fanout_follower_page),
            InboxStore(session, runner, max_in_flight=settings.fanout_max_in_flight,
                       cap=settings.inbox_cap, trim_every=settings.inbox_trim_every,
                       notices=notices),
            settings.inbox_cap)

    async def __call__(self, reader_id: int, authors: list[int]) -> None:
        await self._rebuild(reader_id, authors)
