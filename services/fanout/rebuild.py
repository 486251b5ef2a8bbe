"""Refilling a reader's inbox from their authors' timelines (``rebuild_inbox``).

Used by ``python -m services.fanout.jobs.rebuild_inbox`` (an operator's command), by the
fan-out when an inactive reader comes back (returning.py, on the API's event), and by its
inactive-reader sweeper.

The inbox is an accelerator, not the source of truth: every post also lives in its
author's timeline (``author_timeline``). ``rebuild_inbox`` re-derives a reader's inbox from
the timelines of the authors they follow, with the fan-out's own code: ``CopyStore``
reads the follow, block and post copies, ``audience.backfill_posts`` applies the
no-backfill bound, and ``InboxStore.push_posts`` writes the rows under each post's
current rank key, at the time of the rebuild, exactly like the fan-out's follow
backfill. A rebuild racing a delete may write a row for a deleted post: the read path
shows a row only when the copy is visible and its key matches, so it is never shown, and
it expires with its TTL.

Posts of celebrity-period authors (``fanned_out`` false) stay out: readers merge them
from the author timeline. Only the ``inbox_cap`` highest-ranked posts within the inbox
TTL are written. Safe to run any number of times.

Authors are read ``AUTHORS_IN_FLIGHT`` at a time, each author's posts in ``IN`` reads
(``CopyStore.read_posts``): a returning reader waits for the slowest author, not for
the sum of every read one after the other.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Awaitable, Callable

from services.fanout.audience import backfill_posts, backfill_window, inbox_ttl_s, key_write_ts
from services.fanout.copies import CopyStore
from services.fanout.inbox import InboxPort, InboxRow

# Followed authors whose reads are in flight at once, per rebuild.
AUTHORS_IN_FLIGHT = 16


@dataclass(frozen=True)
class RebuildReport:
    reader_id: int
    authors: int
    rows_written: int


async def rebuild_inbox(reader_id: int, copies: CopyStore, inbox: InboxPort,
                        following: list[int], cap: int, clock: Callable[[], datetime],
                        now_us: Callable[[], int] = lambda: time.time_ns() // 1000) -> RebuildReport:
    """Push the ``cap`` highest-ranked eligible, fanned-out posts of ``following``."""
    now = clock()
    # Written now: after the tombstones of whatever emptied the inbox (a purge, a trim),
    # before any rank move decided from here on (which then shadows these rows).
    at = now_us()
    limit = asyncio.Semaphore(AUTHORS_IN_FLIGHT)

    async def rows_of(author_id: int) -> list[InboxRow]:
        async with limit:
            since, blocked = await asyncio.gather(copies.following_since(reader_id, author_id),
                                                  copies.blocked_either_way(author_id, reader_id))
            if since is None or blocked:
                return []
            lowest, newest = backfill_window(since, now)
            posts = await copies.read_posts(
                backfill_posts(await copies.author_posts_since(author_id, lowest, newest), lowest))
        rows = []
        for copy in posts:
            if not copy.alive or copy.fanned_out is not True:
                continue
            if copy.created_at is None or copy.created_at < since or copy.rank_key is None:
                continue
            ttl_s = inbox_ttl_s(copy.created_at, now)
            if ttl_s > 0:
                rows.append(InboxRow(copy.post_id, author_id, copy.rank_key,
                                     key_write_ts(copy.key_ts, copy.created_at, at), ttl_s))
        return rows

    picked = [row for rows in await asyncio.gather(*(rows_of(a) for a in following)) for row in rows]
    picked.sort(key=lambda r: (r.rank_key, r.post_id), reverse=True)
    written = await inbox.push_posts(reader_id, picked[:cap])
    return RebuildReport(reader_id, len(following), written)


def rebuilder(copies: CopyStore, inbox: InboxPort,
              cap: int) -> Callable[[int, list[int]], Awaitable[RebuildReport]]:
    """``rebuild_inbox`` bound to its stores and cap, on the wall clock: what the sweeper,
    the returning-reader handler and the benchmark call with a reader and the authors
    they follow."""
    async def rebuild(reader_id: int, authors: list[int]) -> RebuildReport:
        return await rebuild_inbox(reader_id, copies, inbox, authors, cap,
                                   lambda: datetime.now(timezone.utc))
    return rebuild
