"""A first page that reuses the reader's last snapshot while its sources are unchanged.

Fan-out on write exists so that a read does the least work (a post is read ~1,000 times
for each write). A first page's snapshot is a function of what it read, all of it held
by the serving cache (copies/serving_cache.py): the reader's inbox top and graph
(follows, blocks) and the timeline partitions merged (followed celebrities, the
fallback's slice); and of
the celebrity list, the day (which buckets are read) and the fallback slice's start.
While the cache still holds the very entries a snapshot was built from (none dropped
by a notice, evicted, refilled or expired: ``ServingCache.still``) and those other
inputs are equal, building it again would give the same rows, so the reader's next
first page shows that snapshot again, under its version, instead of reading, merging
and storing a new one. Every page still checks its window against the posts' current
state (a delete or removal hides a post at once, as on a next page).

Not reused (built afresh, as before): a snapshot any read of which failed, that read
copies of rows in doubt, that merged a demoted celebrity (merged for a time that runs
out), of a reader whose inbox is being regenerated, or made more than ``max_age_s`` ago
(its next pages then have at least the snapshot TTL minus that to run). A reader
following more authors than the fallback's slice gets a new slice every second, so
their snapshots are reused within that second only.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Sequence

from ..copies.serving_cache import CacheName, Pinned, ServingCache
from ..copies.store import CelebrityRow

from . import candidates as cand

Celebrities = Sequence[CelebrityRow]


@dataclass(slots=True)
class Reused:
    """A reader's snapshot and what it was built from."""

    version: str
    blob: bytes
    generated_at: datetime
    kept: bool                  # in the snapshot cache and queued for Cassandra
    day: int
    slice_start: int | None
    celebrities: Celebrities
    names: tuple[CacheName, ...]
    pinned: tuple[Pinned, ...]


class SnapshotReuse:
    """The last reusable snapshot of up to ``size`` (reader, order) pairs."""

    def __init__(self, cache: ServingCache, max_age_s: float, size: int) -> None:
        self._cache = cache
        self._max_age_s = max_age_s
        self._size = size
        self._held: OrderedDict[tuple[int, str], Reused] = OrderedDict()

    def __len__(self) -> int:
        return len(self._held)

    @property
    def epoch(self) -> int:
        """Taken before a first page's reads start, and handed to ``remember``."""
        return self._cache.epoch

    def recall(self, reader_id: int, order: str, now: datetime, now_ms: int,
               celebrities: Celebrities) -> Reused | None:
        """The snapshot to show again, or None (then the caller builds one)."""
        key = (reader_id, order)
        held = self._held.get(key)
        if held is None:
            return None
        if ((now - held.generated_at).total_seconds() > self._max_age_s
                or cand.day_buckets(now_ms, 1)[0] != held.day
                or (held.slice_start is not None and held.slice_start != cand.fallback_start(now_ms))
                or (held.celebrities is not celebrities and held.celebrities != celebrities)
                or not self._cache.still(held.names, held.pinned)):
            del self._held[key]
            return None
        return held

    def remember(self, reader_id: int, order: str, epoch: int, sources: cand.Sources,
                 celebrities: Celebrities, now_ms: int, version: str, blob: bytes,
                 generated_at: datetime, kept: bool) -> bool:
        """Holds a snapshot just built from reads started in ``epoch``, if it can be
        reused: built from the cache's entries alone, none of them touched since."""
        if self._size <= 0 or self._max_age_s <= 0 or not sources.pure:
            return False
        cache = self._cache
        names: tuple[CacheName, ...] = ((cache.inboxes, reader_id), (cache.graphs, reader_id),
                                        *[(cache.timelines, p) for p in sources.partitions])
        pinned = cache.pin(epoch, names)
        if pinned is None:
            return False
        key = (reader_id, order)
        self._held.pop(key, None)
        self._held[key] = Reused(version, blob, generated_at, kept, cand.day_buckets(now_ms, 1)[0],
                                 sources.slice_start, celebrities, names, pinned)
        while len(self._held) > self._size:
            self._held.popitem(last=False)
        return True
