"""Snapshots stored behind the page, a slot per batch and a row per snapshot
(services/api/snapshots/snapshot_writer.py, the slot format and parts in snapshot.py)."""
from __future__ import annotations

import asyncio
import re
from datetime import datetime, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.api.snapshots import snapshot
from services.api.snapshots.snapshot_writer import PendingSnapshot, SlotRow, SnapshotWriter

AT = datetime(2026, 11, 30, tzinfo=timezone.utc)


def placed(writer: SnapshotWriter, i: int, size: int = 100) -> PendingSnapshot:
    """A first page's snapshot: its version placed by the writer, then submitted."""
    item = PendingSnapshot(i, writer.place(AT, size), bytes([i % 256]) * size, AT, 900)
    writer.submit(item)
    return item


def payloads(row: SlotRow) -> list[bytes]:
    return [payload for _part, payload in row.parts]


def readers(row: SlotRow) -> list[int]:
    return [r for r in range(64) if any(
        snapshot.find_in_slot(payloads(row), r, f"v-20261130-000000-{row.slot}-{i:x}")
        for i in range(16))]


def test_snapshots_placed_together_are_stored_as_bounded_slot_rows():
    stored: list[SlotRow] = []

    async def save(row, timeout_s):
        stored.append(row)

    async def scenario():
        writer = SnapshotWriter(save, lambda n: None, delay_s=0.01, max_batch=3, max_bytes=250,
                                prefix="a" * 10)
        items = [placed(writer, i) for i in range(7)]
        assert stored == []  # nothing on the page's path
        await writer.close()
        return writer, items

    writer, items = asyncio.run(scenario())
    # 3 per slot by count, but 250 bytes hold only 2 snapshots of 100.
    assert [readers(r) for r in stored] == [[0, 1], [2, 3], [4, 5], [6]] and writer.batches == 4
    assert [r.count for r in stored] == [2, 2, 2, 1]
    assert [[part for part, _ in r.parts] for r in stored] == [
        [snapshot.part_of(0), snapshot.part_of(1)]] * 3 + [[snapshot.part_of(0)]]
    for item in items:  # each found by its version alone, in the rows its version names
        [row] = [r for r in stored if r.slot == snapshot.slot_of(item.feed_version)]
        low, high = snapshot.parts_of(item.feed_version)
        own = [payload for part, payload in row.parts if low <= part < high]
        assert len(own) == 1
        assert snapshot.find_in_slot(own, item.reader_id, item.feed_version) == (
            item.blob, int(AT.timestamp() * 1000))
        assert snapshot.find_in_slot(own, item.reader_id + 1, item.feed_version) is None


def test_a_slot_fills_for_a_whole_delay_however_quickly_the_last_write_returned():
    """What arrives while a slot is being written stays open for a whole delay after the
    write returns, with what comes next, instead of leaving at once in a small write."""
    stored: list[SlotRow] = []
    gate = asyncio.Event()

    async def save(row, timeout_s):
        stored.append(row)
        if len(stored) == 1:
            await gate.wait()  # the first slot's write is out until the gate opens

    async def scenario():
        # A long delay: the 10 ms below stay inside it on a loaded machine too.
        writer = SnapshotWriter(save, lambda n: None, delay_s=0.5, max_batch=64, prefix="c" * 10)
        for i in range(5):
            placed(writer, i)
        while not stored:
            await asyncio.sleep(0.001)
        for i in range(5, 8):  # while the first slot is written
            placed(writer, i)
        gate.set()
        await asyncio.sleep(0.01)  # the write has returned; the delay has not passed
        for i in range(8, 12):
            placed(writer, i)
        await writer.close()
        return writer

    writer = asyncio.run(scenario())
    assert [r.count for r in stored] == [5, 7] and writer.in_flight == 0


def test_a_snapshot_stored_again_is_a_part_of_its_slot_and_the_longer_copy_wins():
    stored: list[SlotRow] = []

    async def save(row, timeout_s):
        stored.append(row)

    async def scenario():
        writer = SnapshotWriter(save, lambda n: None, delay_s=0, prefix="b" * 10)
        first = placed(writer, 1)
        await writer.close()
        longer = PendingSnapshot(1, first.feed_version, first.blob + b"more", AT, 600)
        writer.submit(longer)  # its slot was stored already: a part of its own
        await writer.close()
        return first, longer

    first, longer = asyncio.run(scenario())
    [(base, _)], [(copy, _)] = stored[0].parts, stored[1].parts
    low, high = snapshot.parts_of(first.feed_version)
    assert base == low and low < copy < high  # a copy of its own, in the version's range
    assert stored[0].slot == stored[1].slot == snapshot.slot_of(first.feed_version)
    assert stored[1].ttl_s == 600
    found = [p for r in reversed(stored) for p in payloads(r)]  # whatever order they come back in
    assert snapshot.find_in_slot(found, 1, first.feed_version)[0] == longer.blob


def test_a_failed_row_is_counted_and_the_next_ones_still_go():
    failures: list[int] = []
    stored: list[int] = []

    async def save(row, timeout_s):
        if 0 in readers(row):
            raise TimeoutError("node down")
        stored.extend(readers(row))

    async def scenario():
        writer = SnapshotWriter(save, failures.append, delay_s=0, max_batch=2)
        for i in range(4):
            placed(writer, i)
        await writer.close()

    asyncio.run(scenario())
    assert failures == [2] and stored == [2, 3]


def test_what_arrives_during_a_flush_is_stored_by_it():
    stored: list[int] = []

    async def scenario():
        writer: SnapshotWriter

        async def save(row, timeout_s):
            stored.extend(readers(row))
            if 0 in readers(row):
                placed(writer, 9)

        writer = SnapshotWriter(save, lambda n: None, delay_s=0)
        placed(writer, 0)
        await asyncio.sleep(0.05)
        assert stored == [0, 9]
        await writer.close()

    asyncio.run(scenario())


def test_rows_get_the_write_timeout_and_their_times_are_observed():
    timeouts: list[float] = []
    times: list[float] = []

    async def save(row, timeout_s):
        timeouts.append(timeout_s)

    async def scenario():
        writer = SnapshotWriter(save, lambda n: None, delay_s=0, timeout_s=1.5, on_written=times.append)
        placed(writer, 0)
        await writer.close()
        return writer

    writer = asyncio.run(scenario())
    assert timeouts == [1.5] and len(times) == 1 and times[0] >= 0 and writer.in_flight == 0


def test_over_the_pending_bound_snapshots_are_refused_and_counted_not_queued():
    failures: list[int] = []
    release = None
    stored: list[int] = []

    async def save(row, timeout_s):
        await release.wait()
        stored.extend(readers(row))

    async def scenario():
        nonlocal release
        release = asyncio.Event()
        writer = SnapshotWriter(save, failures.append, delay_s=0, max_pending=3, max_batch=2)
        for i in range(5):
            placed(writer, i)
        await asyncio.sleep(0.01)  # rows of [0, 1] and [2] in flight, 3 and 4 refused
        assert writer.in_flight == 3 and failures == [1, 1]
        release.set()
        await writer.close()
        placed(writer, 5)  # room again once written
        await writer.close()
        return writer

    writer = asyncio.run(scenario())
    assert sorted(stored) == [0, 1, 2, 5] and writer.in_flight == 0


def test_versions_are_unique_name_their_slot_and_fit_the_bound():
    async def save(row, timeout_s):
        return None

    async def scenario():
        writer = SnapshotWriter(save, lambda n: None, delay_s=0, max_batch=16)
        versions = [writer.place(AT, 2400) for _ in range(2000)]
        await writer.close()
        return versions

    versions = asyncio.run(scenario())
    assert len(set(versions)) == len(versions)
    assert all(len(v) <= snapshot.MAX_VERSION_CHARS and snapshot.slot_of(v) for v in versions)
    assert all(re.fullmatch(r"[A-Za-z0-9-]+", v) for v in versions)  # what the stream takes
    assert len({snapshot.slot_of(v) for v in versions}) == 2000 // 16  # 16 per slot
    for stray in ("", "v-1", "v-20261130-000000-", "v-20261130-000000-abc", "x-20261130-000000-a-1",
                  "v-20261130-000000-a-" + "1" * 40, "v-20261130-000000-abc-"):
        assert snapshot.slot_of(stray) is None, stray
    with pytest.raises(ValueError):
        SnapshotWriter(save, lambda n: None).submit(PendingSnapshot(1, "v-unplaced", b"", AT, 9))


@given(st.integers(0, 2**20), st.integers(1, 2**snapshot.COPY_BITS - 1))
def test_a_versions_parts_hold_its_copies_and_no_other_index(index: int, copy: int) -> None:
    version = snapshot.slot_version(AT, "d" * 10 + "1", index)
    assert snapshot.index_of(version) == index
    low, high = snapshot.parts_of(version)
    assert low == snapshot.part_of(index) and low < snapshot.part_of(index, copy) < high
    assert high == snapshot.part_of(index + 1) and high < 2**63  # a bigint
    assert not low <= snapshot.part_of(index + 1, copy) < high
    assert snapshot.parts_of("v-unplaced") is None and snapshot.index_of("v-1") is None
    assert snapshot.parts_of(snapshot.slot_version(AT, "d1", 2**23)) is None  # past a bigint


@given(st.lists(st.tuples(st.integers(0, 2**62), st.binary(max_size=300)), max_size=20))
def test_a_slot_payload_gives_back_each_snapshot_it_packed(items: list) -> None:
    packed = [(reader, f"v-20261130-000000-{'c' * 10}0-{i:x}", 1_790_000_000_000 + i, blob)
              for i, (reader, blob) in enumerate(items)]
    payload = snapshot.pack_slot(packed)
    for reader, version, created_ms, blob in packed:
        assert snapshot.find_in_slot([payload], reader, version) == (blob, created_ms)
    with pytest.raises(ValueError):
        if packed:
            snapshot.find_in_slot([payload[:-1] if packed[-1][3] else payload[:-2]], -1, "v")
        else:
            snapshot.find_in_slot([payload[:1]], -1, "v")
