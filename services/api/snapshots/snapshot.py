"""Ranking snapshots: the version a first page creates and the packed list it stores.

One first-page request merges the top of the reader's sources once and stores the
result in ``feed_snapshot_slots`` (Cassandra, TTL = ``Settings.snapshot_ttl_s``): what
one process queued within its coalescing delay is one slot, a partition written by one
request, a row per snapshot (``pack_slot``, snapshot_writer.py). The ``feed_version``
names its slot and its index in it (``slot_version``, ``slot_of``, ``parts_of``), so a
later page reads back only that snapshot's rows (``find_in_slot``).
The list is packed as fixed-width records (rank key float64, post_id int64, author_id
int64: 24 bytes each, so 800 entries are 19 KB) behind a format tag and a flags byte
(``MORE``: the sources had more rows below the last entry, so a walk that reaches the
end extends the snapshot). ``PackedEntries`` reads records in place, so a next page
bisects and decodes only the ~10 records of its search and the window it returns, not
the whole list. ``SnapshotCache`` keeps recent blobs in the process (a snapshot never
changes once written; Cassandra stays the copy every process reads). Pure, no I/O.
"""
from __future__ import annotations

import struct
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Iterable, Sequence, overload

from services.shared.domain.ranking import Ranked

FORMAT_V2 = 2
_HEADER = 2
# Flags: the sources held rows below the last entry (a walk may extend the snapshot);
# the entries are in latest order (keys are creation times, candidates.latest_key).
MORE = 1
LATEST = 2
_RECORD = struct.Struct("<dqq")
_new = tuple.__new__
# A feed version is "v-YYYYMMDD-HHMMSS-<slot>-<index>" (slot_version): readable in logs,
# unique per reader and request (a slot is one process's, its index one snapshot's), and
# of the characters and length the stream's feed_version parameter takes (routes/
# stream.py). The writer's slots are 10 hex characters of process prefix and a hex
# counter: 38 characters until a process has stored 16**8 slots.
MAX_VERSION_CHARS = 40
_STAMP_CHARS = len("v-YYYYMMDD-HHMMSS-")
# A slot row: format byte and count, then per snapshot its reader, creation time (Unix
# ms), version and blob.
SLOT_FORMAT = 1
# A slot's rows: one snapshot each, its part the snapshot's index in the slot shifted
# past the bits of a copy's number (part_of).
COPY_BITS = 40
_SLOT_HEAD = struct.Struct("<BH")
_SLOT_ITEM = struct.Struct("<qqBI")


@dataclass(frozen=True)
class Snapshot:
    """A stored ranking: ``entries`` in feed order, built at ``generated_at``."""

    reader_id: int
    feed_version: str
    generated_at: datetime
    entries: list[Ranked]


_stamp_of_second: tuple[int, str] = (-1, "")


def slot_version(now: datetime, slot: str, index: int) -> str:
    """``v-20261201-221100-<slot>-<index>``: the ``index``-th version placed in ``slot``."""
    global _stamp_of_second
    second = int(now.timestamp())
    if _stamp_of_second[0] != second:
        _stamp_of_second = (second, now.astimezone(timezone.utc).strftime("%Y%m%d-%H%M%S"))
    return f"v-{_stamp_of_second[1]}-{slot}-{index:x}"


def slot_of(feed_version: str) -> str | None:
    """The slot a version was placed in; None for any other string."""
    slot, dash, index = feed_version[_STAMP_CHARS:].rpartition("-")
    if (not dash or not slot or not index or len(feed_version) > MAX_VERSION_CHARS
            or not feed_version.startswith("v-")):
        return None
    return slot


def index_of(feed_version: str) -> int | None:
    """The index a version was placed at in its slot; None for any other string."""
    if slot_of(feed_version) is None:
        return None
    try:
        return int(feed_version.rpartition("-")[2], 16)
    except ValueError:
        return None


def part_of(index: int, copy: int = 0) -> int:
    """The clustering ``part`` of a slot's ``index``-th snapshot: ``copy`` 0 is the one
    stored with its slot, any other (under ``COPY_BITS``) a copy stored again later.
    Every copy of one snapshot lies in ``parts_of``'s range."""
    return (index << COPY_BITS) | copy


def parts_of(feed_version: str) -> tuple[int, int] | None:
    """``[low, high)`` of the parts that can hold the version's snapshot, or None (also
    for an index past what a bigint part holds: no writer placed it)."""
    index = index_of(feed_version)
    if index is None or part_of(index + 1) >= 2**63:
        return None
    return part_of(index), part_of(index + 1)


def pack_slot(items: Iterable[tuple[int, str, int, bytes]]) -> bytes:
    """One slot row's payload for ``(reader_id, feed_version, created_at_ms, blob)`` items."""
    items = list(items)
    parts = [_SLOT_HEAD.pack(SLOT_FORMAT, len(items))]
    for reader_id, version, created_ms, blob in items:
        raw = version.encode("ascii")
        parts += [_SLOT_ITEM.pack(reader_id, created_ms, len(raw), len(blob)), raw, blob]
    return b"".join(parts)


def find_in_slot(payloads: Iterable[bytes], reader_id: int, feed_version: str) -> tuple[bytes, int] | None:
    """``(blob, created_at_ms)`` of the reader's snapshot in a slot's rows: its longest
    copy (an extension only ever appends, so the longest is the newest). Rows of another
    format are skipped; a truncated row raises ``ValueError``."""
    wanted = feed_version.encode("ascii")
    best: tuple[bytes, int] | None = None
    for payload in payloads:
        view = memoryview(payload)
        if len(view) < _SLOT_HEAD.size:
            raise ValueError("slot row too short")
        fmt, count = _SLOT_HEAD.unpack_from(view, 0)
        if fmt != SLOT_FORMAT:
            continue
        at = _SLOT_HEAD.size
        for _ in range(count):
            owner, created_ms, vlen, blen = _SLOT_ITEM.unpack_from(view, at)
            at += _SLOT_ITEM.size
            end = at + vlen + blen
            if end > len(view):
                raise ValueError("slot row truncated")
            if owner == reader_id and view[at:at + vlen] == wanted:
                if best is None or blen > len(best[0]):
                    best = (bytes(view[at + vlen:end]), created_ms)
            at = end
    return best


def _records(entries: Iterable[tuple[float, int, int | None]]) -> bytes:
    """Records for ``entries``, packed by one ``struct`` call (a call per record cost
    twice as much on a first page)."""
    flat: list[float | int | None] = []
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
