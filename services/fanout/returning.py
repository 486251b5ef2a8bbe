"""Returning readers: the fan-out brings back a reader it stopped writing for.

The API publishes ``reader_returned`` (contracts/reader_events.py) when a reader flagged
idle opens their feed, after writing the state ``regenerating``, and serves that page at
once from the author partitions (services/api/feed/activity.py). Here, in order: the
reader's flags deleted (their followed authors' posts are written to them again from
here on), the inbox rebuilt from those authors' timelines (rebuild.py: whatever
was skipped before the flags went is there), then the state ``active``, which ends the
API's fallback. The fan-out owns every inbox row; this is its rebuild, run on its
workers and its store limits.

Idempotent: a reader already ``active`` is skipped (an event the API announced again,
or one replayed after a crash before its offset was committed); a rebuild that ran
halfway writes the same rows the second time.
"""
from __future__ import annotations

import logging
import time
from datetime import datetime, timezone
from typing import Awaitable, Callable

from services.shared.contracts.reader_events import ReaderReturned
from services.shared.stores.activity import ACTIVE, ActivityPort

from .metrics import READERS_REGENERATED, REGENERATION_SECONDS

log = logging.getLogger(__name__)

Rebuild = Callable[[int, list[int]], Awaitable[object]]


async def bring_back(store: ActivityPort, rebuild: Rebuild, reader_id: int,
                     authors: list[int]) -> None:
    """The reader written for again: flags deleted, inbox rebuilt, then ``active`` (in
    that order: a post fanned out meanwhile either sees no flag or is in the rebuild).
    Also the sweeper's, for a reader who came back while being flagged (inactive.py)."""
    await store.unflag(reader_id, authors)
    await rebuild(reader_id, authors)
    await store.set_state(reader_id, ACTIVE)


class ReturningReaders:
    def __init__(self, store: ActivityPort, rebuild: Rebuild,
                 clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> None:
        self._store = store
        self._rebuild = rebuild
        self._clock = clock

    async def on_reader_returned(self, event: ReaderReturned) -> bool:
        """Regenerate the reader's inbox; False if they were already active."""
        reader_id = event.reader_id
        if (await self._store.activity(reader_id)).state == ACTIVE:
            READERS_REGENERATED.labels("already_active").inc()
            return False
        started = time.monotonic()
        authors = await self._store.following(reader_id)
        await bring_back(self._store, self._rebuild, reader_id, authors)
        READERS_REGENERATED.labels("rebuilt").inc()
        since_return = max(0.0, (self._clock() - event.at).total_seconds())
        REGENERATION_SECONDS.observe(since_return)
        log.info("reader %d is back: inbox regenerated from %d authors in %.2f s "
                 "(%.2f s after the API saw them)", reader_id, len(authors),
                 time.monotonic() - started, since_return)
        return True
