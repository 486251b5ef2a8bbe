"""Snapshots stored behind the page (services/api/feed/snapshot_writer.py)."""
from __future__ import annotations

import asyncio
from datetime import datetime, timezone

from services.api.feed.snapshot_writer import PendingSnapshot, SnapshotWriter

AT = datetime(2026, 11, 30, tzinfo=timezone.utc)


def snap(i: int, size: int = 100) -> PendingSnapshot:
    return PendingSnapshot(i, f"v-{i}", b"x" * size, AT, 900)


def test_snapshots_queued_together_are_stored_as_bounded_batches():
    stored: list[list[int]] = []

    async def save(batch):
        stored.append([s.reader_id for s in batch])

    async def scenario():
        writer = SnapshotWriter(save, lambda n: None, delay_s=0.01, max_batch=3, max_bytes=250)
        for i in range(7):
            writer.submit(snap(i))
        assert stored == []  # nothing on the page's path
        await writer.close()
        return writer

    writer = asyncio.run(scenario())
    # 3 per batch by count, but 250 bytes hold only 2 snapshots of 100.
    assert stored == [[0, 1], [2, 3], [4, 5], [6]] and writer.batches == 4


def test_a_failed_batch_is_counted_and_the_next_ones_still_go():
    failures: list[int] = []
    stored: list[int] = []

    async def save(batch):
        if batch[0].reader_id == 0:
            raise TimeoutError("node down")
        stored.extend(s.reader_id for s in batch)

    async def scenario():
        writer = SnapshotWriter(save, failures.append, delay_s=0, max_batch=2)
        for i in range(4):
            writer.submit(snap(i))
        await writer.close()

    asyncio.run(scenario())
    assert failures == [2] and stored == [2, 3]


def test_what_arrives_during_a_flush_is_stored_by_it():
    stored: list[int] = []

    async def scenario():
        writer: SnapshotWriter

        async def save(batch):
            stored.extend(s.reader_id for s in batch)
            if batch[0].reader_id == 0:
                writer.submit(snap(9))

        writer = SnapshotWriter(save, lambda n: None, delay_s=0)
        writer.submit(snap(0))
        await asyncio.sleep(0.05)
        assert stored == [0, 9]
        await writer.close()

    asyncio.run(scenario())
