"""Ranking snapshots: the version a first page creates and the packed list it stores.

One first-page request ranks the reader's candidates once and stores the result in
``feed_snapshots`` (Cassandra, TTL = ``Settings.feed_snapshot_ttl_s``); later pages read
it back by ``(reader_id, feed_version)``. The list is packed as fixed-width records
(rank float64, post_id int64, author_id int64: 24 bytes each, so 800 entries are 19 KB)
behind a one-byte format tag: no JSON parsing on the next-page path. Pure functions.
"""
from __future__ import annotations

import secrets
import struct
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Sequence

from services.common.ranking import Ranked

FORMAT_V1 = 1
_RECORD = struct.Struct("<dqq")
# Length of a feed version: "v-YYYYMMDD-HHMMSS-" + 8 hex characters of randomness, so
# two snapshots of one reader in the same second never collide.
_VERSION_RANDOM_BYTES = 4
MAX_VERSION_CHARS = 40


@dataclass(frozen=True)
class Snapshot:
    """A stored ranking: ``entries`` in feed order, built at ``generated_at``."""

    reader_id: int
    feed_version: str
    generated_at: datetime
    entries: list[Ranked]


def new_feed_version(now: datetime) -> str:
    """``v-20260815-020001-1a2b3c4d``: readable in logs, unique per reader and request."""
    stamp = now.astimezone(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"v-{stamp}-{secrets.token_hex(_VERSION_RANDOM_BYTES)}"


def pack(entries: Sequence[Ranked]) -> bytes:
    """The ``ranked`` blob for ``entries`` (order kept)."""
    out = bytearray([FORMAT_V1])
    for e in entries:
        out += _RECORD.pack(e.rank, e.post_id, e.author_id or 0)
    return bytes(out)


def unpack(blob: bytes) -> list[Ranked]:
    """Inverse of ``pack``; a blob in another format raises ``ValueError``."""
    if not blob or blob[0] != FORMAT_V1 or (len(blob) - 1) % _RECORD.size:
        raise ValueError("not a v1 snapshot blob")
    return [Ranked(rank, post_id, author_id or None)
            for rank, post_id, author_id in _RECORD.iter_unpack(memoryview(blob)[1:])]
