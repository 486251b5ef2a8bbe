"""Ranking snapshots: the version a first page creates and the packed list it stores.

One first-page request merges the top of the reader's sources once and stores the
result in ``feed_snapshots`` (Cassandra, TTL = ``Settings.feed_snapshot_ttl_s``); later
pages read it back by ``(reader_id, feed_version)``. The list is packed as fixed-width
records (rank key float64, post_id int64, author_id int64: 24 bytes each, so 800 entries
are 19 KB) behind a format tag and a flags byte (``MORE``: the sources had more rows
below the last entry, so a walk that reaches the end extends the snapshot). ``PackedEntries`` reads records in place, so a next page
bisects and decodes only the ~10 records of its search and the window it returns, not
the whole list. ``SnapshotCache`` keeps recent blobs in the process (a snapshot never
changes once written; Cassandra stays the copy every process reads). Pure, no I/O.
"""
from __future__ import annotations

import os
import random
import struct
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Iterable, Sequence, overload

from services.common.ranking import Ranked

FORMAT_V2 = 2
_HEADER = 2
# Flags: the sources held rows below the last entry (a walk may extend the snapshot);
# the entries are in latest order (keys are creation times, candidates.latest_key).
MORE = 1
LATEST = 2
_RECORD = struct.Struct("<dqq")
_new = tuple.__new__
# Length of a feed version: "v-YYYYMMDD-HHMMSS-" + 8 hex characters of randomness, so
# two snapshots of one reader in the same second never collide.
_VERSION_RANDOM_BYTES = 4
MAX_VERSION_CHARS = 40
_SUFFIX = random.Random(os.urandom(16))
os.register_at_fork(after_in_child=lambda: _SUFFIX.seed(os.urandom(16)))


@dataclass(frozen=True)
class Snapshot:
    """A stored ranking: ``entries`` in feed order, built at ``generated_at``."""

    reader_id: int
    feed_version: str
    generated_at: datetime
    entries: list[Ranked]


_stamp_of_second: tuple[int, str] = (-1, "")


def new_feed_version(now: datetime) -> str:
    """``v-20260815-020001-1a2b3c4d``: readable in logs, unique per reader and request.

    The suffix only separates two snapshots of one reader made in the same second (the
    cursor that names a version is signed, so nobody can guess their way into one): a
    seeded PRNG is enough, and ``secrets`` costs a syscall per first page. The stamp is
    formatted once per second."""
    global _stamp_of_second
    second = int(now.timestamp())
    if _stamp_of_second[0] != second:
        _stamp_of_second = (second, now.astimezone(timezone.utc).strftime("%Y%m%d-%H%M%S"))
    return f"v-{_stamp_of_second[1]}-{_SUFFIX.getrandbits(_VERSION_RANDOM_BYTES * 8):08x}"


def _records(entries: Iterable[tuple[float, int, int | None]]) -> bytes:
    """Records for ``entries``, packed by one ``struct`` call (a call per record cost
    twice as much on a first page)."""
    flat: list[float | int] = []
    for row in entries:
        flat += row
    if None in flat[2::3]:
        flat[2::3] = [a or 0 for a in flat[2::3]]
    return struct.pack(f"<{len(flat) // 3 * 'dqq'}", *flat)


def pack_tuples(entries: Iterable[tuple[float, int, int | None]], more: bool = False,
                latest: bool = False) -> bytes:
    """The ``ranked`` blob for ``(rank_key, post_id, author_id)`` tuples in feed order."""
    return bytes([FORMAT_V2, (MORE if more else 0) | (LATEST if latest else 0)]) + _records(entries)


def extend(blob: bytes, entries: Iterable[tuple[float, int, int | None]], more: bool) -> bytes:
    """``blob`` with ``entries`` appended (they sort after its last entry) and new flags."""
    return bytes([FORMAT_V2, (MORE if more else 0) | (blob[1] & LATEST)]) + blob[_HEADER:] + _records(entries)


class PackedEntries(Sequence[Ranked]):
    """A v2 blob as a read-only sequence of ``Ranked``, decoded one record at a time."""

    __slots__ = ("_view", "_count", "more", "latest")

    def __init__(self, blob: bytes) -> None:
        if len(blob) < _HEADER or blob[0] != FORMAT_V2 or (len(blob) - _HEADER) % _RECORD.size:
            raise ValueError("not a v2 snapshot blob")
        self.more = bool(blob[1] & MORE)
        self.latest = bool(blob[1] & LATEST)
        self._view = memoryview(blob)[_HEADER:]
        self._count = len(self._view) // _RECORD.size

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> Ranked: ...
    @overload
    def __getitem__(self, index: slice) -> list[Ranked]: ...

    def __getitem__(self, index: int | slice) -> Ranked | list[Ranked]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._count)
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            size = _RECORD.size
            out = [_new(Ranked, t) for t in _RECORD.iter_unpack(self._view[start * size:max(start, stop) * size])]
            if any(not e[2] for e in out):  # author 0 is stored for "unknown"
                out = [Ranked(r, p, a or None) for r, p, a in out]
            return out
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError(index)
        rank, post_id, author_id = _RECORD.unpack_from(self._view, index * _RECORD.size)
        return Ranked(rank, post_id, author_id or None)


@dataclass(frozen=True)
class CachedSnapshot:
    blob: bytes
    generated_at: datetime
    expires_at: datetime


class SnapshotCache:
    """The newest ``capacity`` snapshots of this process, each until its TTL runs out.

    An entry expires at ``generated_at + ttl``, never later than the Cassandra row (whose
    TTL starts when it is written, after ``generated_at``), so a cached snapshot is never
    served after the stored one has gone: expiry looks the same in every process.
    """

    def __init__(self, capacity: int, ttl_s: float) -> None:
        self._capacity = max(0, capacity)
        self._ttl = timedelta(seconds=ttl_s)
        self._items: OrderedDict[tuple[int, str], CachedSnapshot] = OrderedDict()

    def put(self, reader_id: int, feed_version: str, blob: bytes, generated_at: datetime) -> None:
        if self._capacity == 0:
            return
        key = (reader_id, feed_version)
        self._items[key] = CachedSnapshot(blob, generated_at, generated_at + self._ttl)
        self._items.move_to_end(key)
        while len(self._items) > self._capacity:
            self._items.popitem(last=False)

    def get(self, reader_id: int, feed_version: str, now: datetime) -> CachedSnapshot | None:
        key = (reader_id, feed_version)
        hit = self._items.get(key)
        if hit is None:
            return None
        if now >= hit.expires_at:
            del self._items[key]
            return None
        self._items.move_to_end(key)
        return hit
