"""Snapshots stored behind the page: coalesced into slots, off the response's path.

A first page used to wait for its snapshot's insert, one Cassandra request per page: the
request's fixed cost (~0.5 ms of the API's CPU and about as much of Cassandra's, read
grid 2026-11-30) was a quarter of a warm first page. ``SnapshotWriter`` queues the blob
(the process already keeps it in its ``SnapshotCache``, which serves the next pages of
a reader that stays on this process) and stores what was queued every ``delay_s``.

What one process places within that delay is one **slot**: the first page asks the
writer for its version (``place``), which names the open slot and the snapshot's index
in it, and the slot is stored by one request: a row per snapshot in the slot's
partition (``part`` = ``snapshot.part_of(index)``), as one single-partition unlogged
batch, at most ``max_batch`` snapshots and ``max_bytes``. What costs the node is the
request, not its bytes: 1,100 snapshots a second of 2.4 KB cost it ~0.5 cores in
requests of 5 or 16 and ~0.19 in requests of 64, whether one row or a row per snapshot
(``python -m bench.read.snapshot_writes``, 2026-12-07). A row per snapshot lets a next
page read its snapshot's rows only, not the slot's. A snapshot stored again (a walk
extended it, or a reused one is kept again) goes into the slot its version names, as a
copy of its own (``part_of(index, copy)``); a lookup takes the longest copy
(snapshot.find_in_slot).

What that changes, and why it is safe: a next page that reaches *another* process within
the delay may not find the snapshot yet, so ``FeedReader`` looks again once after
``RETRY_AFTER_S`` (longer than the delay and a slot's write); a snapshot lost to a
crash or a failed write (logged, counted in ``feed_snapshot_save_failures_total``) makes
the next page a fresh first page with the ``snapshot_expired`` warning, the documented
answer to a snapshot that is gone. Nothing shown is ever wrong; at worst a walk restarts.

A write has its own timeout (``Settings.snapshot_write_timeout_s``, 2 s), not the
read path's 250 ms: under load the driver answers late, not never, and at 250 ms a third
of the snapshots were lost. What is queued or in flight is bounded (``max_pending``):
over it a snapshot is not stored and is counted, so a node slower than the first-page
rate costs bounded memory. ``feed_snapshot_write_seconds`` shows the write times.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import os
import random
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Awaitable, Callable, Sequence

from . import snapshot

log = logging.getLogger(__name__)

# How long a next page on another process waits before its one re-read of a snapshot it
# did not find: longer than the coalescing delay (Settings.snapshot_write_delay_s, 50 ms)
# plus a slot's write on a busy node.
RETRY_AFTER_S = 0.2


@dataclass(frozen=True, slots=True)
class PendingSnapshot:
    reader_id: int
    feed_version: str
    blob: bytes
    created_at: datetime
    ttl_s: int


@dataclass(frozen=True, slots=True)
class SlotRow:
    """Rows of one slot of ``feed_snapshot_slots``, stored by one request: ``parts`` are
    ``(part, payload)``, each payload a ``snapshot.pack_slot`` of its snapshots (the
    writer puts one in each)."""

    slot: str
    parts: tuple[tuple[int, bytes], ...]
    ttl_s: int
    count: int  # snapshots in them


class SnapshotWriter:
    """``save(row, timeout_s)`` stores one ``SlotRow``; ``on_failure(n)`` counts snapshots
    not stored (a failed write, or refused over ``max_pending``); ``on_written(seconds)``
    observes each stored row's write time."""

    def __init__(self, save: Callable[[SlotRow, float], Awaitable[None]],
                 on_failure: Callable[[int], None], *, delay_s: float = 0.05,
                 timeout_s: float = 2.0, max_pending: int = 4096,
                 max_batch: int = 64, max_bytes: int = 400_000,
                 on_written: Callable[[float], None] = lambda _s: None,
                 prefix: str | None = None) -> None:
        self._save = save
        self._on_failure = on_failure
        self._on_written = on_written
        self._delay_s = delay_s
        self._timeout_s = timeout_s
        self._max_pending = max_pending
        self._max_batch = max_batch
        self._max_bytes = max_bytes
        # Slots are named by a random process prefix (40 bits) and a counter: unique
        # across processes and restarts with odds of about 2**-40 per pair.
        self._prefix = prefix if prefix is not None else os.urandom(5).hex()
        self._slots = itertools.count()
        self._open = ""         # the slot that versions are placed in now
        self._placed = 0        # versions placed in it
        self._placed_bytes = 0  # and their blobs' size
        self._batch: list[PendingSnapshot] = []  # submitted into the open slot
        self._rows: list[SlotRow] = []            # ready to store
        self._task: asyncio.Task[None] | None = None
        self.in_flight = 0  # snapshots queued or being written
        self.batches = 0    # rows stored
        self._open_slot()

    def place(self, now: datetime, size: int) -> str:
        """A new snapshot's version, in the open slot (a full one is closed first)."""
        if self._placed >= self._max_batch or (self._placed and self._placed_bytes + size > self._max_bytes):
            self._close_slot()
        version = snapshot.slot_version(now, self._open, self._placed)
        self._placed += 1
        self._placed_bytes += size
        return version

    def submit(self, item: PendingSnapshot) -> None:
        """Queue ``item``; a flush is scheduled if none is (needs a running loop). Over
        ``max_pending`` the snapshot is not stored (counted as a failure)."""
        if self.in_flight >= self._max_pending:
            self._on_failure(1)
            return
        slot = snapshot.slot_of(item.feed_version)
        if slot is None:
            raise ValueError(f"{item.feed_version!r} was not placed by a writer")
        self.in_flight += 1
        if slot == self._open:
            self._batch.append(item)
        else:  # placed in a slot already stored: a copy of its own
            # Copy numbers only need to differ from 0 and from each other: random's
            # module generator (reseeded in a forked child) is enough.
            copy = random.getrandbits(snapshot.COPY_BITS) or 1
            self._rows.append(self._row(slot, [item], copy))
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._flush_soon())

    def _open_slot(self) -> None:
        self._open = f"{self._prefix}{next(self._slots):x}"
        self._placed = self._placed_bytes = 0

    def _close_slot(self) -> None:
        if self._batch:
            self._rows.append(self._row(self._open, self._batch))
            self._batch = []
        self._open_slot()

    @staticmethod
    def _row(slot: str, items: Sequence[PendingSnapshot], copy: int = 0) -> SlotRow:
        """Each item a row of its own, at its index's part (``copy`` of it)."""
        parts = tuple((snapshot.part_of(snapshot.index_of(i.feed_version) or 0, copy),
                       snapshot.pack_slot([(i.reader_id, i.feed_version,
                                            int(i.created_at.timestamp() * 1000), i.blob)]))
                      for i in items)
        return SlotRow(slot, parts, max(i.ttl_s for i in items), len(items))

    async def _flush_soon(self) -> None:
        """Every ``delay_s`` while anything is queued: the open slot is stored, and the
        next one fills for a whole delay (or to ``max_batch``) however long the write took.
        Closing the next slot as soon as a write returned made a slot of what arrived
        during one write (~20 ms: 28 snapshots at 900 first pages a second)."""
        while True:
            await asyncio.sleep(self._delay_s)
            await self.flush()
            if not self._batch and not self._rows:
                return

    async def flush(self) -> None:
        """Store the open slot and every closed one (also those closed meanwhile, as a
        slot fills), rows concurrently."""
        self._close_slot()
        while self._rows:
            rows, self._rows = self._rows, []
            await asyncio.gather(*(self._store(r) for r in rows))

    async def _store(self, row: SlotRow) -> None:
        started = time.monotonic()
        try:
            await self._save(row, self._timeout_s)
            self.batches += 1
            self._on_written(time.monotonic() - started)
        except Exception as exc:  # noqa: BLE001 - pages were right; a later walk restarts
            # One line, no traceback: under overload every write fails alike, and a
            # traceback per write is CPU and cyclic garbage the loop can least afford.
            log.warning("snapshot slot of %d failed: %r", row.count, exc)
            self._on_failure(row.count)
        finally:
            self.in_flight -= row.count

    async def close(self) -> None:
        """Flush what is queued (the app's shutdown)."""
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        await self.flush()
