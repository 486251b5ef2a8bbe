"""Snapshots stored behind the page: coalesced into batches, off the response's path.

A first page used to wait for its snapshot's insert, one Cassandra request per page: the
request's fixed cost (~0.5 ms of the API's CPU and about as much of Cassandra's, read
grid 2026-11-30) was a quarter of a warm first page. ``SnapshotWriter`` queues the blob
(the process already keeps it in its ``SnapshotCache``, which serves the next pages of
a reader that stays on this process) and stores queued snapshots every ``delay_s`` as
unlogged batches of up to ``max_batch`` rows and ``max_bytes`` (one request each, under
Cassandra's batch size thresholds, deploy/stack/cassandra.py).

What that changes, and why it is safe: a next page that reaches *another* process within
the delay may not find the snapshot yet, so ``FeedReader`` looks again once after
``RETRY_AFTER_S`` (longer than the delay and a batch's write); a snapshot lost to a
crash or a failed batch (logged, counted in ``feed_snapshot_save_failures_total``) makes
the next page a fresh first page with the ``snapshot_expired`` warning, the documented
answer to a snapshot that is gone. Nothing shown is ever wrong; at worst a walk restarts.

A batch has its own timeout (``Settings.feed_snapshot_write_timeout_s``, 2 s), not the read
path's 250 ms: under load the driver answers late, not never, and at 250 ms a third of
the snapshots were lost. What is queued or in flight is bounded (``max_pending``): over
it a snapshot is not stored and is counted, so a node slower than the first-page rate
costs bounded memory. ``feed_snapshot_write_seconds`` shows the write times.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Awaitable, Callable, Sequence

log = logging.getLogger(__name__)

# How long a next page on another process waits before its one re-read of a snapshot it
# did not find: longer than the coalescing delay plus a batch's write on a busy node.
RETRY_AFTER_S = 0.05


@dataclass(frozen=True, slots=True)
class PendingSnapshot:
    reader_id: int
    feed_version: str
    blob: bytes
    created_at: datetime
    ttl_s: int


class SnapshotWriter:
    """``save_batch(items, timeout_s)`` stores one batch; ``on_failure(n)`` counts
    snapshots not stored (a failed batch, or refused over ``max_pending``);
    ``on_written(seconds)`` observes each stored batch's write time."""

    def __init__(self, save_batch: Callable[[Sequence[PendingSnapshot], float], Awaitable[None]],
                 on_failure: Callable[[int], None], *, delay_s: float = 0.005,
                 timeout_s: float = 2.0, max_pending: int = 4096,
                 max_batch: int = 16, max_bytes: int = 40_000,
                 on_written: Callable[[float], None] = lambda _s: None) -> None:
        self._save_batch = save_batch
        self._on_failure = on_failure
        self._on_written = on_written
        self._delay_s = delay_s
        self._timeout_s = timeout_s
        self._max_pending = max_pending
        self._max_batch = max_batch
        self._max_bytes = max_bytes
        self._pending: list[PendingSnapshot] = []
        self._task: asyncio.Task[None] | None = None
        self.in_flight = 0  # snapshots queued or being written
        self.batches = 0

    def submit(self, item: PendingSnapshot) -> None:
        """Queue ``item``; a flush is scheduled if none is (needs a running loop). Over
        ``max_pending`` the snapshot is not stored (counted as a failure)."""
        if self.in_flight >= self._max_pending:
            self._on_failure(1)
            return
        self.in_flight += 1
        self._pending.append(item)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._flush_soon())

    async def _flush_soon(self) -> None:
        await asyncio.sleep(self._delay_s)
        await self.flush()

    async def flush(self) -> None:
        """Store everything queued (also what arrives meanwhile), in concurrent batches."""
        while self._pending:
            pending, self._pending = self._pending, []
            await asyncio.gather(*(self._store(b) for b in self._batches(pending)))

    def _batches(self, items: list[PendingSnapshot]) -> list[list[PendingSnapshot]]:
        out: list[list[PendingSnapshot]] = []
        size = 0
        for item in items:
            if not out or len(out[-1]) >= self._max_batch or size + len(item.blob) > self._max_bytes:
                out.append([])
                size = 0
            out[-1].append(item)
            size += len(item.blob)
        return out

    async def _store(self, batch: list[PendingSnapshot]) -> None:
        started = time.monotonic()
        try:
            await self._save_batch(batch, self._timeout_s)
            self.batches += 1
            self._on_written(time.monotonic() - started)
        except Exception as exc:  # noqa: BLE001 - pages were right; a later walk restarts
            # One line, no traceback: under overload every batch fails alike, and a
            # traceback per batch is CPU and cyclic garbage the loop can least afford.
            log.warning("snapshot batch of %d failed: %r", len(batch), exc)
            self._on_failure(len(batch))
        finally:
            self.in_flight -= len(batch)

    async def close(self) -> None:
        """Flush what is queued (the app's shutdown)."""
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        await self.flush()
