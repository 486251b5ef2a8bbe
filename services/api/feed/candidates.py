"""Which posts a first page may rank: inbox ∪ followed celebrity partitions ∪ fallback.

* the reader's inbox, head of the partition (newest ``inbox_limit`` rows);
* the newest posts of every followed author in ``celebrities`` (current, or demoted
  less than ``MERGE_DEMOTED_MS`` ago: their celebrity-period posts were never fanned
  out), from the current and previous day buckets;
* the fan-out-behind fallback (seed section 7): the newest bucket of a bounded, rotating
  set of followed ordinary authors, so a post whose fan-out is late still reaches the
  feed. A reader following at most ``fallback_authors`` ordinary authors is fully
  covered on every first page; a larger list is covered over successive first pages.

Author partitions are read ``AUTHORS_PER_READ`` authors at a time (one multi-partition
read with a per-partition limit). Every such read is independent: one that fails or
times out is logged and counted (``failed_sources``) and the page is built from the
rest. Selection is pure; ``gather`` and ``CelebrityList`` do the I/O.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from services.common import ids

from .store import FeedStore

log = logging.getLogger(__name__)

# Inbox rows live 7 days (0001_serving.cql) and a demoted author's celebrities row lives
# 8 (tier_store.DEMOTED_MERGE_TTL_S); merge a demoted author for as long as the row is
# there, the bound below only guards against a row written without a TTL.
MERGE_DEMOTED_MS = 8 * 24 * 3600 * 1000
# Day buckets read per merged author: today and yesterday. Older posts have lost 8+ units
# of rank to decay (ranking.HALF_LIFE_S = 6 h) and would not reach the first pages.
BUCKETS_PER_AUTHOR = 2
# Authors per multi-partition read (``author_id IN ? AND bucket IN ? PER PARTITION
# LIMIT ?``). Measured for 20 celebrities x 2 buckets + 16 fallback authors: one read per
# partition 11.9 ms and 7.8 ms of client CPU; 8-10 authors per read 3.6 ms and 1.3 ms.
# Small enough that a failed read loses a few authors, not the whole source.
AUTHORS_PER_READ = 8


class CelebrityList:
    """The ``celebrities`` partition, re-read at most every ``max_age_s`` (monotonic clock)."""

    def __init__(self, store: FeedStore, max_age_s: float,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._max_age_s = max_age_s
        self._monotonic = monotonic
        self._value: list[tuple[int, int | None]] | None = None
        self._read_at = 0.0

    async def get(self) -> list[tuple[int, int | None]]:
        if self._value is not None and self._monotonic() - self._read_at < self._max_age_s:
            return self._value
        try:
            self._value = await self._store.celebrities()
            self._read_at = self._monotonic()
        except Exception:  # noqa: BLE001 - a stale list (or none) beats no feed
            if self._value is None:
                raise
            log.warning("celebrity list read failed; using the previous one", exc_info=True)
        return self._value


@dataclass(frozen=True)
class Limits:
    inbox: int
    per_celebrity: int
    max_celebrities: int
    fallback_authors: int
    per_fallback_author: int
    max_candidates: int


@dataclass
class Gathered:
    """Candidates as ``post_id -> author_id`` (deduplicated) and the sources that failed."""

    authors_by_post: dict[int, int] = field(default_factory=dict)
    failed_sources: list[str] = field(default_factory=list)


def merged_celebrities(following: Mapping[int, int], celebrities: Sequence[tuple[int, int | None]],
                       now_ms: int, limit: int) -> list[int]:
    """Followed authors whose partitions are merged: current ones first, then demoted."""
    current, demoted = [], []
    for author, until in celebrities:
        if author not in following:
            continue
        if until is None:
            current.append(author)
        elif now_ms - until < MERGE_DEMOTED_MS:
            demoted.append(author)
    return (sorted(current) + sorted(demoted))[:max(0, limit)]


def fallback_authors(following: Mapping[int, int], merged: Sequence[int], limit: int,
                     rotation: int) -> list[int]:
    """Up to ``limit`` followed ordinary authors, a window rotating with ``rotation``."""
    skip = set(merged)
    ordinary = sorted(a for a in following if a not in skip)
    if limit <= 0 or not ordinary:
        return []
    if len(ordinary) <= limit:
        return ordinary
    start = rotation % len(ordinary)
    return [ordinary[(start + i) % len(ordinary)] for i in range(limit)]


def day_buckets(now_ms: int, count: int) -> list[int]:
    """The current day bucket (as ``author_posts`` numbers them) and the ``count - 1`` before."""
    today = ids.day_bucket(ids.lowest_id_at(now_ms))
    return [today - i for i in range(count) if today - i >= 0]


def keep_newest(authors_by_post: dict[int, int], limit: int) -> dict[int, int]:
    """Bound the candidate set by recency (post ids are time-ordered)."""
    if len(authors_by_post) <= limit:
        return authors_by_post
    newest = sorted(authors_by_post, reverse=True)[:limit]
    return {p: authors_by_post[p] for p in newest}


def _chunks(authors: Sequence[int], size: int) -> list[list[int]]:
    return [list(authors[i:i + size]) for i in range(0, len(authors), size)]


async def gather(store: FeedStore, reader_id: int, following: Mapping[int, int],
                 blocked: frozenset[int], inbox_rows: Sequence[tuple[int, int]] | None,
                 celebrities: Sequence[tuple[int, int | None]], now_ms: int, limits: Limits,
                 ) -> Gathered:
    """Read the author partitions and merge them with the (already read) inbox head.

    ``inbox_rows`` is None when the inbox read failed. Candidates from unfollowed or
    blocked authors are dropped here already (the page-time check repeats it).
    """
    out = Gathered()
    if inbox_rows is None:
        out.failed_sources.append("inbox")
        inbox_rows = []
    celebs = merged_celebrities(following, celebrities, now_ms, limits.max_celebrities)
    fallback = fallback_authors(following, celebs, limits.fallback_authors, now_ms // 1000)
    reads: list[tuple[str, list[int], list[int], int]] = []
    buckets = day_buckets(now_ms, BUCKETS_PER_AUTHOR)
    reads += [("celebrity", chunk, buckets, limits.per_celebrity)
              for chunk in _chunks(celebs, AUTHORS_PER_READ)]
    newest = day_buckets(now_ms, 1)
    reads += [("fallback", chunk, newest, limits.per_fallback_author)
              for chunk in _chunks(fallback, AUTHORS_PER_READ)]
    results = await asyncio.gather(*(store.author_buckets(a, b, n) for _, a, b, n in reads),
                                   return_exceptions=True)
    merged: dict[int, int] = {}
    for post_id, author_id in inbox_rows:
        merged[post_id] = author_id
    for (source, authors, bucket_list, _), rows in zip(reads, results):
        if isinstance(rows, BaseException):
            log.warning("%s partition read failed (authors %s, buckets %s): %r",
                        source, authors, bucket_list, rows)
            out.failed_sources.append(source)
            continue
        for author, post_id in rows:
            merged.setdefault(post_id, author)
    visible = {p: a for p, a in merged.items() if a in following and a not in blocked}
    out.authors_by_post = keep_newest(visible, limits.max_candidates)
    return out
