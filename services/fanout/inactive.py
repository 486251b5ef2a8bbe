"""Inactive readers: the sweeper that flags readers who stopped reading.

Mastodon stops pushing to accounts idle for a week, Twitter's 2013 timelines stopped at
30 days: an inbox nobody opens is write load for nothing. Every ``inactive_sweep_every_s``
the fan-out worker that owns partition 0 of the follows topic (app.py) judges the readers of the periods that have just fallen out of the window
(``activity.Window``; the API indexes each reader under the period of their last read)
and, for each whose last read is still that old, writes ``idle`` and one
``inactive_followers`` row per followed author. The fan-out reads those rows with the
author's followers (post_events.py) and skips them; the rows it saves are counted.

Then it reads the reader's last read once more: a reader who came back while being
flagged (the API wrote their read first, then read a state that was not yet ``idle``)
is unflagged again and their inbox refilled here (activity.py explains the race).

The sweep is idempotent and resumable (``activity_sweeps`` keeps the last period judged).
A sweeper stopped for longer than the index keeps (``BACKLOG_PERIODS``) misses some
readers, who then stay active: the safe side (rows written that nobody reads).
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Callable

from services.shared.stores.activity import (BACKLOG_PERIODS, IDLE, SWEEP_NAME,
                                             ActivityPort, Window)

from .metrics import READERS_GONE_IDLE, READERS_UNDONE
from .returning import Rebuild, bring_back

log = logging.getLogger(__name__)

# Readers judged at once.
READERS_IN_FLIGHT = 16


@dataclass
class SweepReport:
    periods: list[int] = field(default_factory=list)
    judged: int = 0
    flagged: list[int] = field(default_factory=list)
    undone: list[int] = field(default_factory=list)


class InactiveSweeper:
    def __init__(self, store: ActivityPort, window: Window,
                 rebuild: Rebuild,
                 now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
                 name: str = SWEEP_NAME) -> None:
        self._store = store
        self._name = name  # whose progress row (tests sweep under their own)
        self._window = window
        self._rebuild = rebuild
        self._now_ms = now_ms

    async def sweep(self) -> SweepReport:
        """Judge every period not judged yet that is now past the window."""
        report = SweepReport()
        through = self._window.idle_through(self._now_ms())
        done = await self._store.swept_through(self._name)
        start = done + 1 if done is not None else through - BACKLOG_PERIODS
        for period in range(start, through + 1):
            async for readers in self._store.readers_in(period):
                for i in range(0, len(readers), READERS_IN_FLIGHT):
                    await asyncio.gather(*(self._judge(r, through, report)
                                           for r in readers[i:i + READERS_IN_FLIGHT]))
            await self._store.save_progress(period, self._name)
            report.periods.append(period)
        if report.flagged or report.undone:
            log.info("inactive readers: %d flagged, %d came back while flagged (periods %s)",
                     len(report.flagged), len(report.undone), report.periods)
        return report

    async def _judge(self, reader_id: int, through: int, report: SweepReport) -> None:
        report.judged += 1
        before = await self._store.activity(reader_id)
        if before.last_period is None or before.last_period > through or before.state == IDLE:
            return  # read since, or already idle
        await self._store.set_state(reader_id, IDLE)
        authors = await self._store.following(reader_id)
        await self._store.flag(reader_id, authors)
        after = await self._store.activity(reader_id)
        if after.last_period is not None and after.last_period > through:
            # Came back while being flagged. If the API saw ``idle`` it is regenerating
            # (and unflags); otherwise it saw the reader active, and this side undoes.
            if after.state == IDLE:
                await bring_back(self._store, self._rebuild, reader_id, authors)
                READERS_UNDONE.inc()
                report.undone.append(reader_id)
            return
        READERS_GONE_IDLE.inc()
        report.flagged.append(reader_id)
