"""The read path's in-process caches and the packed snapshot: pure behaviour, no I/O."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from services.api.feed import paging, snapshot
from services.api.feed.bodies import ScoreCache
from services.common.ranking import Ranked

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_score_is_trusted_only_while_fresh() -> None:
    clock = Clock()
    cache = ScoreCache(10, max_age_s=5.0, monotonic=clock)
    cache.put(1, 2.5)
    cache.put(2, None)
    assert cache.fresh()(1) == (100.0, 2.5)
    assert cache.fresh()(2) == (100.0, None)  # "no score yet" is a cached answer too
    assert cache.fresh()(3) is None
    clock.now += 5.0
    assert cache.fresh()(1) is None  # past its age: the copy is read again


def test_score_cache_evicts_the_oldest_read_and_can_be_off() -> None:
    clock = Clock()
    cache = ScoreCache(2, max_age_s=60.0, monotonic=clock)
    for post_id in (1, 2, 1, 3):  # 1 is re-read, so 2 is the oldest
        cache.put(post_id, float(post_id))
    lookup = cache.fresh()
    assert lookup(2) is None and lookup(1) == (100.0, 1.0) and lookup(3) == (100.0, 3.0)
    off = ScoreCache(100, max_age_s=0.0, monotonic=clock)
    off.put(1, 1.0)
    assert off.fresh()(1) is None


def test_cached_snapshot_expires_with_its_ttl() -> None:
    cache = snapshot.SnapshotCache(capacity=2, ttl_s=900)
    blob = snapshot.pack([Ranked(1.0, 10, 1)])
    cache.put(7, "v-a", blob, T0)
    assert cache.get(7, "v-a", T0 + timedelta(seconds=899)).blob == blob  # type: ignore[union-attr]
    assert cache.get(8, "v-a", T0) is None  # another reader's key
    assert cache.get(7, "v-a", T0 + timedelta(seconds=900)) is None
    assert cache.get(7, "v-a", T0) is None  # an expired entry is dropped


def test_snapshot_cache_keeps_the_newest_entries() -> None:
    cache = snapshot.SnapshotCache(capacity=2, ttl_s=900)
    blob = snapshot.pack([])
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
    unpacked = snapshot.unpack(blob)
    assert list(packed) == unpacked == [Ranked(r, p, a or None) for r, p, a in ordered]
    assert paging.start_after(packed, (rank, post_id)) == paging.start_after(unpacked, (rank, post_id))
    start = len(unpacked) // 3
    assert paging.window(packed, start, 5, 0.5) == paging.window(unpacked, start, 5, 0.5)
    assert snapshot.pack(unpacked) == blob
