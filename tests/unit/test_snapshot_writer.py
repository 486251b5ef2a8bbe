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

    async def save(batch, timeout_s):
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

    async def save(batch, timeout_s):
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

        async def save(batch, timeout_s):
            stored.extend(s.reader_id for s in batch)
            if batch[0].reader_id == 0:
                writer.submit(snap(9))

        writer = SnapshotWriter(save, lambda n: None, delay_s=0)
        writer.submit(snap(0))
        await asyncio.sleep(0.05)
        assert stored == [0, 9]
        await writer.close()

    asyncio.run(scenario())


def test_batches_get_the_write_timeout_and_their_times_are_observed():
    timeouts: list[float] = []
    times: list[float] = []

    async def save(batch, timeout_s):
        timeouts.append(timeout_s)

    async def scenario():
        writer = SnapshotWriter(save, lambda n: None, delay_s=0, timeout_s=1.5, on_written=times.append)
        writer.submit(snap(0))
        await writer.close()
        return writer

    writer = asyncio.run(scenario())
    assert timeouts == [1.5] and len(times) == 1 and times[0] >= 0 and writer.in_flight == 0


def test_over_the_pending_bound_snapshots_are_refused_and_counted_not_queued():
    failures: list[int] = []
    release = None
    stored: list[int] = []

    async def save(batch, timeout_s):
        await release.wait()
        stored.extend(s.reader_id for s in batch)

    async def scenario():
        nonlocal release
        release = asyncio.Event()
        writer = SnapshotWriter(save, failures.append, delay_s=0, max_pending=3, max_batch=2)
        for i in range(5):
            writer.submit(snap(i))
        await asyncio.sleep(0.01)  # batches of [0, 1] and [2] in flight, 3 and 4 refused
        assert writer.in_flight == 3 and failures == [1, 1]
        release.set()
        await writer.close()
        writer.submit(snap(5))  # room again once written
        await writer.close()
        return writer

    writer = asyncio.run(scenario())
    assert sorted(stored) == [0, 1, 2, 5] and writer.in_flight == 0
