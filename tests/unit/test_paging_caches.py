"""The read path's in-process caches and the packed snapshot: pure behaviour, no I/O."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from services.api.snapshots import paging, snapshot
from services.shared.domain.ranking import Ranked

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)


def test_cached_snapshot_expires_with_its_ttl() -> None:
    cache = snapshot.SnapshotCache(capacity=2, ttl_s=900)
    blob = snapshot.pack_tuples([Ranked(1.0, 10, 1)])
    cache.put(7, "v-a", blob, T0)
    assert cache.get(7, "v-a", T0 + timedelta(seconds=899)).blob == blob  # type: ignore[union-attr]
    assert cache.get(8, "v-a", T0) is None  # another reader's key
    assert cache.get(7, "v-a", T0 + timedelta(seconds=900)) is None
    assert cache.get(7, "v-a", T0) is None  # an expired entry is dropped


def test_snapshot_cache_keeps_the_newest_entries() -> None:
    cache = snapshot.SnapshotCache(capacity=2, ttl_s=900)
    blob = snapshot.pack_tuples([])
    for version in ("a", "b", "c"):
        cache.put(1, version, blob, T0)
    assert cache.get(1, "a", T0) is None
    assert cache.get(1, "b", T0) is not None and cache.get(1, "c", T0) is not None
    off = snapshot.SnapshotCache(capacity=0, ttl_s=900)
    off.put(1, "a", blob, T0)
    assert off.get(1, "a", T0) is None


RANKED = st.lists(st.tuples(st.floats(-50, 50), st.integers(1, 2**62), st.integers(0, 2**62)),
                  unique_by=lambda t: t[1], max_size=60)


@given(RANKED, st.floats(-60, 60), st.integers(0, 2**62))
def test_packed_entries_read_like_the_unpacked_list(rows: list, rank: float, post_id: int) -> None:
    ordered = sorted(rows, reverse=True)
    blob = snapshot.pack_tuples(ordered)
    packed = snapshot.PackedEntries(blob)
    unpacked = list(packed)
    assert unpacked == [Ranked(r, p, a or None) for r, p, a in ordered]
    assert paging.start_after(packed, (rank, post_id)) == paging.start_after(unpacked, (rank, post_id))
    start = len(unpacked) // 3
    assert paging.window(packed, start, 5, 0.5) == paging.window(unpacked, start, 5, 0.5)
    assert snapshot.pack_tuples(unpacked) == blob


@given(RANKED, RANKED, st.booleans())
def test_extending_a_snapshot_appends_and_keeps_the_order(first: list, below: list, more: bool) -> None:
    head = sorted(first, reverse=True)
    tail = sorted((r for r in below if not head or (r[0], r[1]) < (head[-1][0], head[-1][1])),
                  reverse=True)
    blob = snapshot.extend(snapshot.pack_tuples(head, more=True), tail, more)
    packed = snapshot.PackedEntries(blob)
    assert [(e.rank, e.post_id) for e in packed] == [(r, p) for r, p, _ in head + tail]
    assert packed.more is more


def test_a_snapshot_of_another_format_is_refused() -> None:
    import pytest
    with pytest.raises(ValueError):
        snapshot.PackedEntries(bytes([1]) + b"\0" * 24)  # the v1 layout (no flags byte)


def test_a_snapshot_says_which_order_it_is_in_and_keeps_it_when_extended() -> None:
    rows = [(3.0, 30, 1), (2.0, 20, 1)]
    assert not snapshot.PackedEntries(snapshot.pack_tuples(rows, more=True)).latest
    latest = snapshot.pack_tuples(rows, latest=True)
    packed = snapshot.PackedEntries(latest)
    assert packed.latest and not packed.more and list(packed) == [Ranked(*r) for r in rows]
    assert snapshot.PackedEntries(snapshot.extend(latest, [(1.0, 10, 1)], False)).latest
