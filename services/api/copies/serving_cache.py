"""The serving cache: the copies a page reads, kept in the API process, dropped on notice.

A feed page reads, besides the reader's inbox top, copies that change rarely compared
with how often they are read (~1,000 reads per post written): post states and bodies, the
reader's follows and blocks, the top rows of author-timeline partitions (followed
celebrities, the fan-out-behind fallback), the top of the reader's inbox, and the
reader's stored preferences (which a first page without ``order`` reads).
``CachedFeedStore`` answers those reads from this process's memory and reads Cassandra
only on a miss, so a warm page reads nothing (the snapshot is written behind it,
snapshots/snapshot_writer.py), instead of six to ten requests.

Correctness rests on three rules:

* **Dropped on notice.** Every worker write of a cached copy is followed, after
  Cassandra acknowledged it, by a ``serving-changes`` notice
  (services/shared/contracts/serving_changes.py) that this process's consumer applies:
  the entry is dropped, and the next read sees the new state. A change therefore reaches
  pages as soon as its notice arrives (milliseconds after the copy is written; the copy
  itself lags the Postgres commit by the pipeline's freshness, as before).
* **No stale fill.** A read that started before a notice naming its key (or a clear)
  is not stored: every fill carries the ``epoch`` it started in, and the cache remembers
  what the last ``RECENT_NOTICES`` notices named.
* **Stand aside when notices may be late.** The cache answers only while its consumer
  is positioned, has heard from every partition within ``max_silence_s`` and is not
  behind; otherwise every read goes to Cassandra and nothing is stored. A (re)started
  consumer starts at the end and clears the cache first. Entries also expire after
  ``ttl_s``: a bound on what a notice lost to a bug could cost.

One exception, for errors only (stale-if-error, RFC 5861's idea): when the cache stands
aside, the post states it held are kept apart for ``stale_if_error_s``. A page whose
post-state read fails (Cassandra overloaded by every page reading it at once, as when a
broker cut off the network silences a notice partition) shows the last state this
process knew instead of failing, and says so (``stale_post_states``); a read that works
never sees them. Notices that still arrive drop them too; a clear drops them all.

What is cached is exactly what Cassandra returned (rows as ``FeedStore`` gives them), so
the read path above (eligibility, ``PostView.holds_row``, the merge) is unchanged.
"""
from __future__ import annotations

import asyncio
import bisect
import struct
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Generic, Iterable, Mapping, Sequence, TypeAlias, TypeVar

from services.shared.contracts.serving_changes import ServingChange
from services.shared.domain import ids

from .store import Blocks, FeedPort, SourceRow

if TYPE_CHECKING:
    from .post_view import PostView

# Notices remembered for fills that overlapped them (a fill takes a few ms; at a few
# hundred notices a second, this covers seconds).
RECENT_NOTICES = 4096

K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class Graph:
    """A reader's complete follow list, blocks and mutes, as read at one point."""

    following: dict[int, int]       # author -> following_since (Unix ms)
    authors: list[int]              # sorted keys of ``following`` (for slices)
    blocks: Blocks                  # NO_BLOCKS (shared) for a reader with none

    @property
    def size(self) -> int:
        return len(self.following) + len(self.blocks.blocked) + len(self.blocks.muted) + 1


@dataclass(frozen=True, slots=True)
class Partition:
    """The top ``limit`` rows of one (author, day bucket) timeline partition."""

    limit: int
    rows: tuple[SourceRow, ...]

    def top(self, wanted: int) -> tuple[SourceRow, ...] | None:
        """The top ``wanted`` rows, or None when this entry cannot say."""
        if wanted <= self.limit or len(self.rows) < self.limit:
            return self.rows[:wanted]
        return None


_ROW = struct.Struct("<dqq")


@dataclass(frozen=True, slots=True)
class InboxTop:
    """The top ``limit`` rows of a reader's inbox, packed (24 bytes a row, not ~150 as
    tuples): a cached reader costs ~2.4 KB at the default depth."""

    limit: int
    packed: bytes

    @classmethod
    def of(cls, limit: int, rows: Sequence[SourceRow]) -> "InboxTop":
        return cls(limit, b"".join([_ROW.pack(k, p, a) for k, p, a in rows]))

    def top(self, wanted: int) -> list[SourceRow] | None:
        count = len(self.packed) // _ROW.size
        if wanted > self.limit and count >= self.limit:
            return None
        return list(_ROW.iter_unpack(self.packed[:min(wanted, count) * _ROW.size]))


class _Lru(Generic[K, V]):
    """``key -> (expires_at, value)`` bounded by the sum of ``weight(value)``, evicting
    the oldest fill first. Not a true LRU: a hit does not move the entry (``move_to_end``
    on every lookup was ~5 % of a warm first page's CPU); entries live ``ttl_s`` at most
    anyway, and a hot entry evicted early is one read to fill again."""

    def __init__(self, kind: str, capacity: int, weight: Callable[[V], int] = lambda _v: 1) -> None:
        self.kind = kind
        self.capacity = max(0, capacity)
        self._weight = weight
        self._items: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self.load = 0

    def get(self, key: K, now: float) -> V | None:
        item = self._items.get(key)
        if item is None:
            return None
        if item[0] <= now:
            self.pop(key)
            return None
        return item[1]

    def get_all(self, keys: Iterable[K], now: float) -> dict[K, V] | None:
        """Every key's value if all are held and fresh, else None (nothing dropped)."""
        items = self._items
        out: dict[K, V] = {}
        for key in keys:
            item = items.get(key)
            if item is None or item[0] <= now:
                return None
            out[key] = item[1]
        return out

    def put(self, key: K, value: V, expires_at: float) -> None:
        weight = self._weight(value)
        if weight > self.capacity:
            return
        self.pop(key)
        self._items[key] = (expires_at, value)
        self.load += weight
        while self.load > self.capacity:
            _, (_, old) = self._items.popitem(last=False)
            self.load -= self._weight(old)

    def pop(self, key: K) -> None:
        item = self._items.pop(key, None)
        if item is not None:
            self.load -= self._weight(item[1])

    def clear(self) -> None:
        self._items.clear()
        self.load = 0

    def __len__(self) -> int:
        return len(self._items)


# An entry's name (one of the cache's lrus and a key in it), and an entry as ``pin``
# returns it (its expiry and value).
CacheName: TypeAlias = tuple[_Lru[Any, Any], Any]
Pinned: TypeAlias = tuple[float, Any]


class ServingCache:
    """Post views (``bodies.PostView``), graphs, timeline partitions and inbox tops,
    with the rules above."""

    def __init__(self, *, posts: int, follows: int, timelines: int, inboxes: int, ttl_s: float,
                 max_silence_s: float, preferences: int = 0, stale_if_error_s: float = 0.0,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._ttl_s = ttl_s
        self._max_silence_s = max_silence_s
        self.posts: _Lru[int, PostView] = _Lru("post", posts)
        self._stale_if_error_s = stale_if_error_s
        # The post states held when the cache last stood aside, and when they were last
        # known current (monotonic): served only for reads that failed (``stale_post``).
        self._stale_posts: _Lru[int, PostView] | None = None
        self._stale_as_of = 0.0
        self.stale_served = 0
        self.graphs: _Lru[int, Graph] = _Lru("graph", follows, lambda g: g.size)
        # (author, day bucket) -> its top rows
        self.timelines: _Lru[tuple[int, int], Partition] = _Lru("timeline", timelines)
        self.inboxes: _Lru[int, InboxTop] = _Lru("inbox", inboxes)
        # reader -> (feed_order or None,)
        self.preferences: _Lru[int, tuple[str | None]] = _Lru("preferences", preferences)
        self.epoch = 0
        # What the last RECENT_NOTICES notices dropped, by epoch: a fill that overlapped
        # notices is kept unless one of them named its key. A clear is recorded as None
        # (it names everything).
        self._recent: deque[tuple[int, frozenset[tuple[str, Any]] | None]] = deque(maxlen=RECENT_NOTICES)
        self._heard_at: float | None = None  # None: no positioned consumer
        # partition -> offset after the last notice applied (or the start position):
        # everything a writer saw acknowledged below it is reflected here.
        self.applied: dict[int, int] = {}
        self.hits = {"post": 0, "graph": 0, "timeline": 0, "inbox": 0, "preferences": 0}
        self.misses = {"post": 0, "graph": 0, "timeline": 0, "inbox": 0, "preferences": 0}
        self.stale_fills = 0
        # Called with the users a notice names as having new follows or blocks (the
        # stream hub re-reads their follow lists: stream/hub.py ``follows_changed``).
        self.graph_listeners: list[Callable[[tuple[int, ...]], None]] = []
        # Called with the users a notice names as having new names (``profiles``), and
        # with None when the cache is cleared (names.py ``Names.drop``): names are kept
        # apart from these entries, with their own expiry.
        self.profile_listeners: list[Callable[[tuple[int, ...] | None], None]] = []
        # The same for the users a notice names as having liked or unliked (``likers``):
        # the posts each reader liked are kept apart too (likes.py ``ReaderLikes.drop``).
        self.liker_listeners: list[Callable[[tuple[int, ...] | None], None]] = []
        # ... and for the users whose account copy changed (``accounts``): their account
        # states are kept apart too (accounts.py ``AccountCopies.drop``).
        self.account_listeners: list[Callable[[tuple[int, ...] | None], None]] = []

    # -- the consumer's side -----------------------------------------------------------
    def heard(self) -> None:
        """The notice consumer is positioned, current, and heard from every partition."""
        self._heard_at = self._monotonic()

    def go_live(self, positions: dict[int, int]) -> None:
        """A (re)positioned consumer at the end of the log (``positions``): start empty."""
        self.clear()
        self.applied = dict(positions)
        self.heard()

    def stand_aside(self) -> None:
        """The consumer stopped or failed: answer nothing until it is live again (post
        states are kept apart for reads that fail, ``stale_post``)."""
        heard, kept = self._heard_at, self.posts
        self._heard_at = None
        if heard is not None and self._stale_if_error_s > 0:  # was live: keep its states
            self.posts = _Lru("post", kept.capacity)
            self._stale_posts, self._stale_as_of = kept, heard
        self._drop_entries()

    def stale_post(self, post_id: int) -> Any:
        """The state of ``post_id`` this process knew when the cache stopped answering,
        if that was at most ``stale_if_error_s`` ago (None otherwise): for a read that
        failed. Silent notices (no answer from a partition for ``max_silence_s``) leave
        the entries in place, unused; a stopped consumer has them kept apart."""
        now = self._monotonic()
        heard = self._heard_at
        if heard is not None:  # live but silent: what it holds was current at ``heard``
            if now - heard > self._stale_if_error_s or self._stale_if_error_s <= 0:
                return None
            return self.posts.get(post_id, now)
        stale = self._stale_posts
        if stale is None:
            return None
        if now - self._stale_as_of > self._stale_if_error_s:
            self._stale_posts = None
            return None
        return stale.get(post_id, now)

    def apply(self, change: ServingChange) -> None:
        self.epoch += 1
        self._recent.append((self.epoch, frozenset(
            [("post", p) for p in change.posts] + [("graph", u) for u in change.graphs]
            + [("timeline", t) for t in change.timelines] + [("inbox", r) for r in change.inboxes]
            + [("preferences", r) for r in change.preferences])))
        for post_id in change.posts:
            self.posts.pop(post_id)
            if self._stale_posts is not None:
                self._stale_posts.pop(post_id)
        for user_id in change.graphs:
            self.graphs.pop(user_id)
        if change.graphs:
            for listener in self.graph_listeners:
                listener(change.graphs)
        for key in change.timelines:
            self.timelines.pop(key)
        for reader_id in change.inboxes:
            self.inboxes.pop(reader_id)
        for reader_id in change.preferences:
            self.preferences.pop(reader_id)
        if change.profiles:
            for profile_listener in self.profile_listeners:
                profile_listener(change.profiles)
        if change.likers:
            for liker_listener in self.liker_listeners:
                liker_listener(change.likers)
        if change.accounts:
            for account_listener in self.account_listeners:
                account_listener(change.accounts)

    def clear(self) -> None:
        self._stale_posts = None
        self._drop_entries()

    def _drop_entries(self) -> None:
        self.epoch += 1
        self._recent.append((self.epoch, None))
        self.posts.clear()
        self.graphs.clear()
        self.timelines.clear()
        self.inboxes.clear()
        self.preferences.clear()
        for profile_listener in self.profile_listeners:
            profile_listener(None)
        for liker_listener in self.liker_listeners:
            liker_listener(None)
        for account_listener in self.account_listeners:
            account_listener(None)

    # -- the read path's side ----------------------------------------------------------
    @property
    def usable(self) -> bool:
        heard = self._heard_at
        return heard is not None and self._monotonic() - heard < self._max_silence_s

    def now(self) -> float:
        return self._monotonic()

    def fill(self, lru: _Lru[K, V], epoch: int, key: K, value: V) -> None:
        """Store what a read that started in ``epoch`` returned, unless a notice since
        then named ``key`` (or cleared the cache, or is too old to tell)."""
        if not self.usable or not self._untouched_since(epoch, (lru.kind, key)):
            self.stale_fills += 1
            return
        lru.put(key, value, self._monotonic() + self._ttl_s)

    def pin(self, epoch: int,
            names: Sequence[CacheName]) -> tuple[Pinned, ...] | None:
        """The entries held now under ``names`` (an lru and its key each), if every one
        is held and no notice since ``epoch`` named it: then they are what reads started
        in ``epoch`` returned, or equal to it. None otherwise (feed/reuse.py)."""
        if not self.usable:
            return None
        held = []
        for lru, key in names:
            item = lru._items.get(key)
            if item is None or not self._untouched_since(epoch, (lru.kind, key)):
                return None
            held.append(item)
        return tuple(held)

    def still(self, names: Sequence[CacheName], pinned: Sequence[Pinned]) -> bool:
        """True while every entry ``pin`` returned is held: none was dropped by a notice
        or a clear, evicted, refilled or expired since, and the cache is usable."""
        if not self.usable:
            return False
        now = self._monotonic()
        for (lru, key), item in zip(names, pinned):
            if lru._items.get(key) is not item or item[0] <= now:
                return False
        return True

    def _untouched_since(self, epoch: int, name: tuple[str, Any]) -> bool:
        if epoch == self.epoch:
            return True
        if not self._recent or self._recent[0][0] > epoch + 1:
            return False  # notices since then were forgotten: cannot tell
        for at, dropped in reversed(self._recent):
            if at <= epoch:
                return True
            if dropped is None or name in dropped:
                return False
        return True


class CachedFeedStore:
    """A ``FeedPort`` (``FeedStore`` in the app) with the cached reads answered from
    ``ServingCache`` when usable; itself a ``FeedPort``.

    Uncached calls (reads below a boundary, snapshots, the celebrity list, ``run``) go
    straight to the store; post copies are cached as whole views by ``PostCopies``
    (bodies.py), so ``posts`` (here only the rare reads of rows in doubt) is uncached.
    Every answer has the shape and meaning of ``FeedStore``'s.
    """

    def __init__(self, store: FeedPort, cache: ServingCache, max_following: int) -> None:
        self._store = store
        self.cache = cache
        self._max_following = max_following

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    @property
    def from_memory(self) -> bool:
        """Reads are (mostly) answered here: await them in turn (feed/awaiting.py)."""
        return self.cache.usable

    # -- graph ---------------------------------------------------------------------------
    def held_graph(self, reader_id: int) -> tuple[Mapping[int, int], Blocks] | None:
        """The reader's graph as ``following_among`` and ``blocks`` would answer it from
        the cache, without a coroutine; None when they would read."""
        cache = self.cache
        if not cache.usable:
            return None
        graph = cache.graphs.get(reader_id, cache.now())
        if graph is None:
            return None
        cache.hits["graph"] += 1
        return graph.following, graph.blocks

    async def _graph(self, reader_id: int) -> Graph | None:
        cache = self.cache
        if not cache.usable:
            return None
        graph = cache.graphs.get(reader_id, cache.now())
        if graph is not None:
            cache.hits["graph"] += 1
            return graph
        cache.misses["graph"] += 1
        epoch = cache.epoch
        following, blocks = await asyncio.gather(
            self._store.following(reader_id, self._max_following), self._store.blocks(reader_id))
        if len(following) >= self._max_following:
            return None  # maybe truncated: the exact reads answer for this reader
        graph = Graph(following, sorted(following), blocks)
        cache.fill(cache.graphs, epoch, reader_id, graph)
        return graph

    async def following(self, reader_id: int, limit: int) -> dict[int, int]:
        graph = await self._graph(reader_id)
        if graph is None or limit < len(graph.following):
            return await self._store.following(reader_id, limit)
        return dict(graph.following)

    async def following_among(self, reader_id: int, authors: Sequence[int]) -> dict[int, int]:
        if not authors:
            return {}
        graph = await self._graph(reader_id)
        if graph is None:
            return await self._store.following_among(reader_id, authors)
        follows = graph.following
        return {a: follows[a] for a in authors if a in follows}

    async def following_from(self, reader_id: int, start: int, limit: int) -> dict[int, int]:
        graph = await self._graph(reader_id)
        if graph is None:
            return await self._store.following_from(reader_id, start, limit)
        at = bisect.bisect_left(graph.authors, start)
        return {a: graph.following[a] for a in graph.authors[at:at + limit]}

    async def following_since(self, reader_id: int, author_id: int) -> int | None:
        graph = await self._graph(reader_id)
        if graph is None:
            return await self._store.following_since(reader_id, author_id)
        return graph.following.get(author_id)

    async def blocks(self, reader_id: int) -> Blocks:
        graph = await self._graph(reader_id)
        if graph is None:
            return await self._store.blocks(reader_id)
        return graph.blocks

    async def hidden_between(self, reader_id: int, other_id: int) -> bool:
        graph = await self._graph(reader_id)
        if graph is None:
            return await self._store.hidden_between(reader_id, other_id)
        return other_id in graph.blocks.blocked or other_id in graph.blocks.muted

    # -- inbox tops ----------------------------------------------------------------------
    async def inbox_top(self, reader_id: int, limit: int,
                        after: tuple[float, int] | None = None) -> list[SourceRow]:
        cache = self.cache
        if after is not None or not cache.usable:
            return await self._store.inbox_top(reader_id, limit, after)
        entry = cache.inboxes.get(reader_id, cache.now())
        if entry is not None:
            rows = entry.top(limit)
            if rows is not None:
                cache.hits["inbox"] += 1
                return rows
        cache.misses["inbox"] += 1
        epoch = cache.epoch
        rows = await self._store.inbox_top(reader_id, limit)
        cache.fill(cache.inboxes, epoch, reader_id, InboxTop.of(limit, rows))
        return rows

    # -- author timelines ----------------------------------------------------------------
    async def authors_top(self, authors: Sequence[int], buckets: Sequence[int], per_partition: int,
                          after: tuple[float, int] | None = None) -> list[SourceRow]:
        cache = self.cache
        if after is not None or not cache.usable:
            return await self._store.authors_top(authors, buckets, per_partition, after)
        now = cache.now()
        out: list[SourceRow] = []
        missing: list[int] = []
        for author in authors:
            parts = [cache.timelines.get((author, b), now) for b in buckets]
            tops = [p.top(per_partition) if p is not None else None for p in parts]
            if any(t is None for t in tops):
                missing.append(author)
                continue
            for top in tops:
                out.extend(top)  # type: ignore[arg-type]
        cache.hits["timeline"] += len(authors) - len(missing)
        if missing:
            cache.misses["timeline"] += len(missing)
            epoch = cache.epoch
            rows = await self._store.authors_top(missing, buckets, per_partition)
            grouped: dict[tuple[int, int], list[SourceRow]] = {(a, b): [] for a in missing for b in buckets}
            for row in rows:
                grouped.setdefault((row[2], ids.day_bucket(row[1])), []).append(row)
            for key, part in grouped.items():
                cache.fill(cache.timelines, epoch, key, Partition(per_partition, tuple(part)))
            out += rows
        return out

    # -- like counts: not here (copies/likes.py keeps them, with their own short expiry)
    async def like_counts(self, post_ids: Sequence[int]) -> dict[int, int]:
        return await self._store.like_counts(post_ids)

    # -- preferences ---------------------------------------------------------------------
    async def feed_order(self, reader_id: int) -> str | None:
        cache = self.cache
        if not cache.usable:
            return await self._store.feed_order(reader_id)
        held = cache.preferences.get(reader_id, cache.now())
        if held is not None:
            cache.hits["preferences"] += 1
            return held[0]
        cache.misses["preferences"] += 1
        epoch = cache.epoch
        order = await self._store.feed_order(reader_id)
        cache.fill(cache.preferences, epoch, reader_id, (order,))
        return order

    async def save_feed_order(self, reader_id: int, order: str) -> None:
        """Stored, and this process's entry dropped; the caller's notice drops it in
        every process (``preferences.Preferences.set_feed_order``)."""
        await self._store.save_feed_order(reader_id, order)
        self.cache.preferences.pop(reader_id)
