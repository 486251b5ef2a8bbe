"""What a snapshot is built from: the top of each source, in rank-key order, merged.

Sources (all clustered by the time-invariant rank key, 0005_rank_keys.cql):

* the reader's inbox (``feed_inbox``): its top ``depth`` rows;
* every followed author in ``celebrities`` (current, or demoted less than
  ``rules.DEMOTED_MERGE`` ago: their celebrity-period posts were never fanned out): the top
  ``per_celebrity`` rows of today's and yesterday's ``author_timeline`` partitions;
* the fan-out-behind fallback (docs/read-path.md, "Failures"): today's top
  ``per_fallback_author`` rows of a slice of ``fallback_authors`` followed ordinary
  authors, the slice starting at a point of the follow list that rotates every second (a reader following at most that
  many authors is fully covered on every first page), so a post whose fan-out is late
  still reaches the feed.

A returning inactive reader (``regenerating=True``: their inbox is being rebuilt,
activity.py) gets the fallback widened to ``regenerating_authors`` followed authors and
today's and yesterday's partitions: a full first page at once, never an empty feed.

Latest order (``latest=True``) reads the same sources deeper, since they are clustered
by rank key and not by time: the whole inbox (at most ``inbox_cap`` rows: the fan-out
trims it) and the top ``latest_per_partition`` rows of each author partition, re-keys
every row by its post's creation time (``latest_key``) and keeps the newest. Its cost is
bounded by the inbox cap and the partitions read, never by history; the snapshot then
holds every candidate, so it is never extended.

The merge keeps the ``depth`` highest rows (one per post): a first page's reads are
bounded by ``depth`` and by the number of followed celebrities, never by history. Which
follows matter is read with the sources (``followed_id IN`` the celebrity list, and the
fallback's slice), never the whole follow list. ``after`` reads the same sources strictly
below a boundary, to extend a snapshot that a walk has reached the end of.

Author partitions are read ``AUTHORS_PER_READ`` authors at a time. Every source read is
independent: one that fails or times out is logged and counted (``failed_sources``) and
the snapshot is built from the rest. The selection and the merge are pure.
"""
from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from itertools import chain
from operator import itemgetter
from typing import Awaitable, Callable, Iterable, Mapping, Sequence

from services.shared.domain import ids
from services.shared.domain.rules import DEMOTED_MERGE_S

from ..copies.store import Blocks, CelebrityRow, FeedPort, SourceRow

from .awaiting import settled
from .graph import GraphUnavailable

log = logging.getLogger(__name__)

# A demoted author's celebrities row lives ``DEMOTED_MERGE`` (tier_store.py); merge a
# demoted author for as long as the row is there, the bound below only guards against a
# row written without a TTL.
MERGE_DEMOTED_MS = DEMOTED_MERGE_S * 1000
# Day buckets read per merged author: today and yesterday. Older posts have lost 8+ units
# of rank to decay (ranking.HALF_LIFE_S = 6 h) and would not reach the first pages.
BUCKETS_PER_AUTHOR = 2
# Authors per multi-partition read (``author_id IN ? AND bucket IN ? PER PARTITION
# LIMIT ?``). Measured for 20 celebrities x 2 buckets + 16 fallback authors: one read per
# partition 11.9 ms and 7.8 ms of client CPU; 8-10 authors per read 3.6 ms and 1.3 ms.
# Under load the driver's per-request CPU dominates (py-spy: ~45 % of the API's samples
# are the driver's request path and I/O thread), so the 16 fallback authors are one read;
# a failed read still loses only the authors of one source.
AUTHORS_PER_READ = 16
# Extension reads that may each find only rows left out (newer than the snapshot, or in
# it) before one returns rows or reaches the end of every source.
MAX_CUT_STEPS = 8
# Celebrity ids per ``followed_id IN ?`` read of the reader's follow partition: one
# request for any realistic celebrity list, under Cassandra's IN-size warnings.
CELEBRITIES_PER_FOLLOW_READ = 100
# The fallback's slice start moves through the id space every second.
_MIX = 0x9E3779B97F4A7C15
_ID_SPACE = 1 << 63


class CelebrityList:
    """The ``celebrities`` partition, re-read at most every ``max_age_s`` (monotonic clock)."""

    def __init__(self, store: FeedPort, max_age_s: float,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._max_age_s = max_age_s
        self._monotonic = monotonic
        self._value: list[CelebrityRow] | None = None
        self._read_at = 0.0

    async def get(self) -> list[CelebrityRow]:
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
    depth: int
    per_celebrity: int
    max_celebrities: int
    fallback_authors: int
    per_fallback_author: int
    latest_inbox: int = 500           # the inbox cap: a latest snapshot reads it all
    latest_per_partition: int = 200   # rows of one author-day partition for latest order
    latest_depth: int = 800           # entries a latest snapshot keeps
    regenerating_authors: int = 200   # the fallback's slice while an inbox is regenerated


def latest_key(post_id: int) -> float:
    """A row's key in latest order: its post's creation time (Unix ms; exact in a
    float). Equal keys are ordered by post id, so the order is newest first by post id."""
    return float(ids.timestamp_ms(post_id))


def latest_rows(sources: Iterable[Sequence[SourceRow]]) -> list[list[SourceRow]]:
    """``sources`` re-keyed for latest order. Rows of one post under different rank keys
    (a move's old row not yet deleted) become one row, so no copy read is needed."""
    return [[(latest_key(post_id), post_id, author) for _key, post_id, author in rows]
            for rows in sources]


@dataclass
class Sources:
    """The merged top rows and what was learned about the reader on the way."""

    rows: list[SourceRow] = field(default_factory=list)
    more: bool = False                      # rows remain below the last one kept
    failed_sources: list[str] = field(default_factory=list)
    following: dict[int, int] = field(default_factory=dict)  # follows read (author -> since ms)
    asked: set[int] = field(default_factory=set)  # authors whose follow status is known
    # What a first page's rows are a function of, besides the inbox and the graph (for
    # reuse.py): the timeline partitions read, the fallback slice's start (None: the
    # slice is the whole follow list, whatever the start), and whether nothing else went
    # in (no failed read, no copy read for rows in doubt, no demoted celebrity merged for
    # a time that runs out).
    partitions: list[tuple[int, int]] = field(default_factory=list)
    slice_start: int | None = None
    pure: bool = False


def merged_celebrities(following: Mapping[int, int], celebrities: Sequence[CelebrityRow],
                       now_ms: int, limit: int) -> tuple[list[int], bool]:
    """Followed authors whose partitions are merged: current ones first, then demoted;
    and whether a demoted one is among them (merged for a time that runs out)."""
    current, demoted = [], []
    for author, until in celebrities:
        if author not in following:
            continue
        if until is None:
            current.append(author)
        elif now_ms - until < MERGE_DEMOTED_MS:
            demoted.append(author)
    merged = (sorted(current) + sorted(demoted))[:max(0, limit)]
    return merged, len(merged) > len(current)


def fallback_start(now_ms: int) -> int:
    """Where the fallback's slice of the follow list starts: a point of the id space
    that moves every second (Fibonacci hashing spreads consecutive seconds evenly)."""
    return ((now_ms // 1000) * _MIX) % _ID_SPACE


def fallback_slice(from_start: Mapping[int, int], from_zero: Mapping[int, int],
                   skip: Iterable[int], limit: int) -> dict[int, int]:
    """Up to ``limit`` follows from the slice start on, wrapping to the list's start."""
    skipped = set(skip)
    out: dict[int, int] = {}
    for part in (from_start, from_zero):
        for author in sorted(part):
            if len(out) >= limit:
                return out
            if author not in skipped:
                out.setdefault(author, part[author])
    return out


def day_buckets(now_ms: int, count: int) -> list[int]:
    """The current day bucket (as ``author_timeline`` numbers them) and the ``count - 1`` before."""
    today = ids.day_bucket(ids.lowest_id_at(now_ms))
    return [today - i for i in range(count) if today - i >= 0]


def pooled(sources: Iterable[Sequence[SourceRow]]) -> tuple[list[SourceRow], set[int], bool]:
    """Every row of the sources once, highest first; the posts in doubt: those with rows
    under more than one key (all but one were left behind by a race, a move's tombstone
    lost or overtaken, and only the post's copy says which); and whether any post has two
    rows at all (in doubt, or one key under two author ids: never written, but a merge
    must still give one row per post).

    Equal rows (a post in the inbox and in its author's partition under one key) are one
    row; sort and dedupe are C, and the doubt check is one set of post ids unless some
    post has two rows. The sort comes first: each source is already in order, so it
    merges runs, and ``dict.fromkeys`` keeps that order while it drops the equal rows
    (sorting a set's scrambled order instead cost 87 µs against 54 for a 600-row first
    page, ~10 % of a first page built with reuse off, py-spy 2026-12-06). A first page
    pools its sources once for both uses (twice cost ~4 % of the API's CPU, py-spy
    2026-12-01)."""
    rows = list(dict.fromkeys(sorted(chain.from_iterable(sources), reverse=True)))
    if len({row[1] for row in rows}) == len(rows):
        return rows, set(), False
    keys: dict[int, float] = {}
    doubt: set[int] = set()
    for key, post_id, _author in rows:
        if keys.setdefault(post_id, key) != key:
            doubt.add(post_id)
    return rows, doubt, True


def merge_top(sources: Iterable[Sequence[SourceRow]], depth: int, blocked: frozenset[int] = frozenset(),
              exclude: Callable[[int], bool] | None = None,
              live: Callable[[SourceRow], bool] | None = None) -> tuple[list[SourceRow], bool]:
    """The ``depth`` highest rows of all sources, one per post (its highest ``live`` row),
    minus blocked authors and excluded posts; and whether any row was left below them."""
    rows, _doubt, doubled = pooled(sources)
    return top_of(rows, doubled, depth, blocked, exclude, live)


def top_of(rows: list[SourceRow], doubled: bool, depth: int, blocked: frozenset[int] = frozenset(),
           exclude: Callable[[int], bool] | None = None,
           live: Callable[[SourceRow], bool] | None = None) -> tuple[list[SourceRow], bool]:
    """``merge_top`` over pooled ``rows`` (``doubled``: some post has two of them). When
    every row is a different post and nothing is excluded (a first page, nearly always)
    that is a slice; otherwise a walk from the top stops at the first accepted row past
    ``depth``."""
    if blocked:
        rows = [row for row in rows if row[2] not in blocked]
    if exclude is None and live is None and not doubled:
        return rows[:depth], len(rows) > depth
    out: list[SourceRow] = []
    taken: set[int] = set()
    for row in rows:
        post_id = row[1]
        if post_id in taken:
            continue
        if exclude is not None and exclude(post_id):
            continue
        if live is not None and not live(row):
            continue
        if len(out) == depth:
            return out, True
        taken.add(post_id)
        out.append(row)
    return out, False


def _chunks(items: Sequence[int], size: int) -> list[list[int]]:
    return [list(items[i:i + size]) for i in range(0, len(items), size)]


async def _settled(reads: Sequence[Awaitable[list[SourceRow]]],
                   in_turn: bool) -> list[list[SourceRow] | BaseException]:
    return await settled(reads, in_turn)


async def followed_celebrities(store: FeedPort, reader_id: int,
                               celebrities: Sequence[CelebrityRow]) -> dict[int, int]:
    """Which of the listed celebrities the reader follows (author -> since ms)."""
    authors = [a for a, _ in celebrities]
    parts = await settled([store.following_among(reader_id, c)
                           for c in _chunks(authors, CELEBRITIES_PER_FOLLOW_READ)], store.from_memory)
    out: dict[int, int] = {}
    for part in parts:
        if isinstance(part, BaseException):
            raise part
        out.update(part)
    return out


class SourceReader:
    """Reads and merges the sources of one reader's snapshot."""

    def __init__(self, store: FeedPort, limits: Limits) -> None:
        self._store = store
        self._limits = limits

    async def first(self, reader_id: int, celebrities: Sequence[CelebrityRow],
                    blocks: Awaitable[Blocks], inbox: Awaitable[list[SourceRow]],
                    now_ms: int, *, latest: bool = False,
                    regenerating: bool = False) -> tuple[Sources, frozenset[int]]:
        """The snapshot's rows for a first page, and the authors hidden from the reader
        (``Blocks.hidden``: blocked either way, or muted). ``inbox`` and
        ``blocks`` are reads the caller already started (they go out with the follow
        reads: ``depth`` rows, or ``latest_inbox`` for latest order); a failure of ``blocks`` raises
        ``GraphUnavailable`` (a correctness input). ``latest``, ``regenerating``: see the
        module docstring."""
        lim, store = self._limits, self._store
        per_celebrity = lim.latest_per_partition if latest else lim.per_celebrity
        fallback_authors = lim.regenerating_authors if regenerating else lim.fallback_authors
        fallback_buckets = BUCKETS_PER_AUTHOR if regenerating else 1
        start = fallback_start(now_ms)
        in_turn = store.from_memory
        follows = await settled([
            followed_celebrities(store, reader_id, celebrities),
            store.following_from(reader_id, start, fallback_authors),
            store.following_from(reader_id, 0, fallback_authors)], in_turn)
        out = Sources()
        celeb_follows, from_start, from_zero = follows
        if isinstance(celeb_follows, BaseException):
            out.failed_sources.append("celebrity")
            celeb_follows = {}
        celebs, timed = merged_celebrities(celeb_follows, celebrities, now_ms, lim.max_celebrities)
        if isinstance(from_start, BaseException) or isinstance(from_zero, BaseException):
            out.failed_sources.append("fallback")
            fallback: dict[int, int] = {}
        else:
            fallback = fallback_slice(from_start, from_zero, celeb_follows, fallback_authors)
        out.following = {**fallback, **celeb_follows}
        out.slice_start = (None if not isinstance(from_zero, BaseException)
                           and len(from_zero) < fallback_authors else start)
        out.asked = set(out.following) | (set() if "celebrity" in out.failed_sources
                                          else {a for a, _ in celebrities})
        celeb_chunks = _chunks(celebs, AUTHORS_PER_READ)
        fallback_chunks = _chunks(sorted(fallback), AUTHORS_PER_READ)
        labels = ["celebrity"] * len(celeb_chunks) + ["fallback"] * len(fallback_chunks)
        celeb_days = day_buckets(now_ms, BUCKETS_PER_AUTHOR)
        fallback_days = day_buckets(now_ms, fallback_buckets)
        reads = [store.authors_top(c, celeb_days, per_celebrity) for c in celeb_chunks]
        reads += [store.authors_top(c, fallback_days, lim.per_fallback_author) for c in fallback_chunks]
        results = await _settled([inbox, *reads], in_turn)
        out.partitions = ([(a, b) for a in celebs for b in celeb_days]
                          + [(a, b) for a in fallback for b in fallback_days])
        try:
            blocked = (await blocks).hidden
        except Exception as exc:  # noqa: BLE001 - a timeout or an unreachable node
            raise GraphUnavailable("the reader's blocks could not be read") from exc
        if latest:
            out.rows, _ = merge_top(latest_rows(self._usable(["inbox", *labels], results, out)),
                                    lim.latest_depth, blocked)
            out.pure = not out.failed_sources and not timed
            return out, blocked  # every candidate is in: nothing to extend
        pool, doubt, doubled = pooled(self._usable(["inbox", *labels], results, out))
        out.pure = not out.failed_sources and not timed and not doubt
        rows, more = top_of(pool, doubled, lim.depth, blocked, live=await self._live(doubt))
        out.rows, cut = read_through(rows, results[0], lim.depth,
                                     results[1:1 + len(celeb_chunks)], lim.per_celebrity, blocked)
        out.more = more or cut is not None
        return out, blocked

    async def after(self, reader_id: int, celebrities: Sequence[CelebrityRow],
                    blocked: frozenset[int], boundary: tuple[float, int], newest_id: int,
                    exclude: Callable[[int], bool], now_ms: int) -> Sources:
        """The next ``depth`` rows strictly below ``boundary`` (inbox and celebrities; the
        fallback only ever covers today's newest), without posts newer than the snapshot
        (``post_id > newest_id``: they arrive through the stream) or already in it."""
        lim, store = self._limits, self._store
        out = Sources()
        try:
            celeb_follows = await followed_celebrities(store, reader_id, celebrities)
        except Exception:  # noqa: BLE001 - the snapshot ends early; the stream still works
            out.failed_sources.append("celebrity")
            celeb_follows = {}
        celebs, _ = merged_celebrities(celeb_follows, celebrities, now_ms, lim.max_celebrities)
        chunks = _chunks(celebs, AUTHORS_PER_READ)
        labels = ["inbox"] + ["celebrity"] * len(chunks)
        buckets = day_buckets(now_ms, BUCKETS_PER_AUTHOR)
        for _ in range(MAX_CUT_STEPS):
            reads = [store.inbox_top(reader_id, lim.depth, boundary)]
            reads += [store.authors_top(c, buckets, lim.per_celebrity, boundary) for c in chunks]
            results = await _settled(reads, store.from_memory)
            pool, doubt, doubled = pooled(self._usable(labels, results, out))
            rows, more = top_of(pool, doubled, lim.depth, blocked,
                                lambda p: p > newest_id or exclude(p), await self._live(doubt))
            out.rows, cut = read_through(rows, results[0], lim.depth, results[1:],
                                         lim.per_celebrity, blocked)
            out.more = more or cut is not None
            if out.rows or cut is None:
                break
            # Every row down to the cut was read and left out (newer than the snapshot, or
            # in it already): the walk goes on below, it does not end here.
            boundary = cut
        return out

    async def _live(self, doubt: set[int]) -> Callable[[SourceRow], bool] | None:
        """Which rows of the posts in ``doubt`` (rows under two keys) are the live ones
        (one read, only when there are any; if it fails, the highest row is kept as
        usual). None: every row is."""
        if not doubt:
            return None
        try:
            copies = await self._store.posts(sorted(doubt), with_text=False)
        except Exception:  # noqa: BLE001 - the page-time check still hides a stale row
            log.warning("copies of %d posts in doubt could not be read", len(doubt), exc_info=True)
            return None
        keys = {post_id: (key, key_next)
                for post_id, _author, _created, _visibility, _deleted, key, key_next, *_ in copies}
        return lambda row: row[1] not in doubt or row[0] in keys.get(row[1], ())

    @staticmethod
    def _usable(labels: list[str], results: list[list[SourceRow] | BaseException],
                out: Sources) -> list[list[SourceRow]]:
        usable: list[list[SourceRow]] = []
        for label, rows in zip(labels, results):
            if isinstance(rows, BaseException):
                log.warning("%s source read failed: %r", label, rows)
                out.failed_sources.append(label)
            else:
                usable.append(rows)
        return usable


_AUTHOR = itemgetter(2)


def read_through(rows: list[SourceRow], inbox: list[SourceRow] | BaseException, depth: int,
                 partitions: Sequence[list[SourceRow] | BaseException], per_partition: int,
                 blocked: frozenset[int] = frozenset()) -> tuple[list[SourceRow], tuple[float, int] | None]:
    """``rows`` (merged, highest first) cut where every source is known, and the cut.

    A read that came back full (the inbox's ``depth`` rows, a celebrity partition's
    ``per_partition``) may hold more rows below its last one, and any of those may rank
    above merged rows of the other sources. A snapshot that kept such rows would skip the
    unread ones for good: its extension starts strictly below its last entry. So rows
    below the highest of the full reads' last rows wait for the extension, which reads
    on from there (None: no read was full, nothing is cut). Not counted: partitions of
    blocked authors (none of their rows are kept), and the fallback's (its posts are in
    the inbox once fanned out, and it covers only the newest)."""
    # A source's rows are distinct (key, post) pairs, so the lowest row is a C ``min``.
    ends: list[tuple[float, int]] = []
    if not isinstance(inbox, BaseException) and len(inbox) >= depth:
        ends.append(min(inbox)[:2])
    for result in partitions:
        if isinstance(result, BaseException):
            continue
        # Only an author with ``per_partition`` rows in the read can have a full
        # partition, so only those authors' rows are split by day bucket (counting is C;
        # splitting every row of every read cost ~3 % of the API's CPU, py-spy 2026-12-01).
        full = {a for a, n in Counter(map(_AUTHOR, result)).items()
                if n >= per_partition and a not in blocked}
        if not full:
            continue
        per: dict[tuple[int, int], list[SourceRow]] = {}
        for row in result:
            if row[2] in full:
                per.setdefault((row[2], ids.day_bucket(row[1])), []).append(row)
        ends += [min(part)[:2] for part in per.values() if len(part) >= per_partition]
    if not ends:
        return rows, None
    cut = max(ends)
    keep = len(rows)
    while keep and rows[keep - 1][:2] < cut:  # highest first: what the cut drops is a tail
        keep -= 1
    return (rows if keep == len(rows) else rows[:keep]), cut
