"""In-memory stores for unit tests, held to the real ones by contract suites.

``InMemoryActivityStore`` implements ``services.shared.stores.activity.ActivityPort`` the way
``ActivityStore`` does on Cassandra; tests/integration/test_activity_store_contract.py
runs one suite against both, so a unit test's store cannot drift from the real one.
TTLs are not modelled (nothing in the contract depends on expiry).

``InMemoryFeedStore`` (``services.api.copies.store.FeedPort``, the read path's store) and
``InMemoryInboxStore`` (``services.fanout.inbox.InboxPort``, the fan-out's inboxes) work
on one set of ``ServingTables``; their contract suites are in tests/support/contracts/,
run against these in tests/unit and against Cassandra in tests/integration.
"""
from __future__ import annotations

import calendar
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, AsyncIterator, Iterable, Literal, Sequence, overload

from services.api.copies.store import NO_BLOCKS, Blocks, CelebrityRow, PostRow, PostTextRow, SourceRow
from services.api.snapshots import snapshot
from services.api.snapshots.snapshot_writer import SlotRow
from services.fanout.audience import should_check_cap, trim_boundary
from services.fanout.cleanup import rows_to_purge
from services.fanout.inbox import InboxRow, StoredRow
from services.shared.contracts.serving_changes import NO_NOTICES, ChangeSink, ServingChange
from services.shared.domain import ids
from services.shared.domain.rules import INBOX_TTL_S, REMOVED
from services.shared.stores.activity import ACTIVE, SWEEP_NAME, Activity

if TYPE_CHECKING:
    from services.api.copies.store import FeedPort
    from services.fanout.inbox import InboxPort


class InMemoryActivityStore:
    def __init__(self) -> None:
        self.last: dict[int, int] = {}
        self.state: dict[int, str] = {}
        self.state_at: dict[int, int] = {}
        self.index: dict[int, set[int]] = defaultdict(set)
        self.follows: dict[int, list[int]] = defaultdict(list)
        self.flags: set[tuple[int, int]] = set()  # (author, reader)
        self.progress: dict[str, int] = {}

    def follow(self, reader_id: int, author_id: int) -> None:
        """Seed a follow (the real store reads the ``following`` copy the fan-out wrote)."""
        if author_id not in self.follows[reader_id]:
            self.follows[reader_id].append(author_id)

    async def record_read(self, reader_id: int, period: int, ttl_s: int) -> None:
        self.last[reader_id] = period
        self.index[period].add(reader_id)

    async def record_reads(self, reads: Sequence[tuple[int, int]], ttl_s: int,
                           in_flight: int = 64) -> None:
        for reader_id, period in reads:
            await self.record_read(reader_id, period, ttl_s)

    async def activity(self, reader_id: int) -> Activity:
        if reader_id not in self.last and reader_id not in self.state:
            return Activity(None, ACTIVE, None)
        return Activity(self.last.get(reader_id), self.state.get(reader_id, ACTIVE),
                        self.state_at.get(reader_id))

    async def set_state(self, reader_id: int, state: str) -> None:
        self.state[reader_id] = state
        self.state_at[reader_id] = int(time.time() * 1000)

    async def following(self, reader_id: int) -> list[int]:
        return sorted(self.follows.get(reader_id, []))

    async def flag(self, reader_id: int, authors: Sequence[int]) -> None:
        self.flags |= {(a, reader_id) for a in authors}

    async def unflag(self, reader_id: int, authors: Sequence[int]) -> None:
        self.flags -= {(a, reader_id) for a in authors}

    async def inactive_followers(self, author_id: int) -> frozenset[int]:
        return frozenset(r for a, r in self.flags if a == author_id)

    async def readers_in(self, period: int) -> AsyncIterator[list[int]]:
        readers = sorted(self.index.get(period, ()))
        if readers:
            yield readers

    async def swept_through(self, name: str = SWEEP_NAME) -> int | None:
        return self.progress.get(name)

    async def save_progress(self, period: int, name: str = SWEEP_NAME) -> None:
        self.progress[name] = period


# -- the serving tables: the read path's store and the fan-out's inbox store -------------------

def to_ms(at: datetime) -> int:
    """A ``timestamp`` cell as Cassandra stores it (Unix ms; the driver's conversion: a
    naive datetime is UTC, microseconds below a millisecond are dropped)."""
    return calendar.timegm(at.utctimetuple()) * 1000 + at.microsecond // 1000


class RankedRows:
    """One ``feed_inbox`` or ``author_timeline`` partition: rows clustered by
    ``(rank_key, post_id)`` descending, each written at a timestamp (µs) and, as in
    Cassandra, shadowed by a row tombstone or a range tombstone (``rank_key < boundary``:
    a trim) at the same or a later timestamp. A write is the row's only cell
    (``author_id``): the newest write wins, a greater value on a tie."""

    def __init__(self) -> None:
        self._written: dict[tuple[float, int], tuple[int, int]] = {}  # key -> (ts, author)
        self._deleted: dict[tuple[float, int], int] = {}              # key -> tombstone ts
        self._trims: list[tuple[float, int]] = []                     # (boundary, ts)

    def write(self, rank_key: float, post_id: int, author_id: int, ts: int) -> None:
        key = (rank_key, post_id)
        old = self._written.get(key)
        if old is None or (ts, author_id) > old:
            self._written[key] = (ts, author_id)

    def delete(self, rank_key: float, post_id: int, ts: int) -> None:
        key = (rank_key, post_id)
        self._deleted[key] = max(ts, self._deleted.get(key, ts))

    def delete_below(self, boundary: float, ts: int) -> None:
        self._trims.append((boundary, ts))

    def _live(self, key: tuple[float, int], ts: int) -> bool:
        shadows = [self._deleted.get(key, -1)] + [t for b, t in self._trims if key[0] < b]
        return ts > max(shadows)

    def rows(self) -> list[SourceRow]:
        """The live rows, ``(rank_key, post_id, author_id)`` in clustering order."""
        live = [(k, p, a) for (k, p), (ts, a) in self._written.items() if self._live((k, p), ts)]
        return sorted(live, reverse=True)


@dataclass
class PostCells:
    """One ``posts`` row: the cells the read path selects (None: never written)."""

    author_id: int | None = None
    created_at_ms: int | None = None
    text: str | None = None
    visibility: int | None = None
    deleted: bool | None = None
    rank_key: float | None = None
    rank_key_next: float | None = None
    key_ts: int | None = None          # WRITETIME(rank_key), µs
    key_next_ts: int | None = None
    media: list[str] | None = None     # ``media``: the post's media ids


@dataclass
class ServingTables:
    """The serving tables in memory. ``InMemoryFeedStore`` reads them and
    ``InMemoryInboxStore`` writes ``inbox``: give both the same tables, as both
    Cassandra stores share a keyspace, and what the inbox store pushes is what the feed
    store reads."""

    following: dict[int, dict[int, int]] = field(default_factory=dict)  # follower -> author -> since ms
    blocks: dict[int, set[tuple[int, str]]] = field(default_factory=dict)  # user -> (other, direction)
    posts: dict[int, PostCells] = field(default_factory=dict)
    inbox: dict[int, RankedRows] = field(default_factory=dict)             # reader ->
    timelines: dict[tuple[int, int], RankedRows] = field(default_factory=dict)  # (author, bucket) ->
    celebrities: dict[int, int | None] = field(default_factory=dict)       # author -> until ms
    preferences: dict[int, str] = field(default_factory=dict)
    slots: dict[str, dict[int, bytes]] = field(default_factory=dict)       # slot -> part -> payload
    likes: dict[int, dict[int, bool]] = field(default_factory=dict)        # like_edges: post -> user -> liked

    def inbox_of(self, reader_id: int) -> RankedRows:
        return self.inbox.setdefault(reader_id, RankedRows())

    def timeline_of(self, author_id: int, bucket: int) -> RankedRows:
        return self.timelines.setdefault((author_id, bucket), RankedRows())


def _positive(limit: int) -> int:
    if limit <= 0:  # as Cassandra refuses LIMIT 0 and PER PARTITION LIMIT 0
        raise ValueError(f"LIMIT must be strictly positive, not {limit}")
    return limit


class InMemoryFeedStore:
    """``services.api.copies.store.FeedPort`` the way ``FeedStore`` reads Cassandra, over
    ``ServingTables`` (its own unless given). The seeding methods (``follow``, ``block``,
    ``write_post``, ``add_author_post``, ``promote`` ...) put rows where the fan-out's
    writers would; inbox rows come from ``InMemoryInboxStore`` on the same tables, or
    ``put_inbox``. Not modelled: TTLs, and the driver's page size (``FeedStore`` returns
    the first page of a read only: at most ``max_following`` follows or block rows)."""

    def __init__(self, tables: ServingTables | None = None) -> None:
        self.tables = tables if tables is not None else ServingTables()

    # -- seeding, as the fan-out's writers store rows --------------------------------------
    def follow(self, reader_id: int, author_id: int, since_ms: int = 0) -> None:
        self.tables.following.setdefault(reader_id, {})[author_id] = since_ms

    def unfollow(self, reader_id: int, author_id: int) -> None:
        self.tables.following.get(reader_id, {}).pop(author_id, None)

    def block(self, blocker_id: int, blocked_id: int) -> None:
        """Both directions' rows, as ``CopyStore.add_block`` writes them."""
        self.tables.blocks.setdefault(blocker_id, set()).add((blocked_id, "out"))
        self.tables.blocks.setdefault(blocked_id, set()).add((blocker_id, "in"))

    def mute(self, muter_id: int, muted_id: int) -> None:
        """The muter's one row, as ``CopyStore.add_mute`` writes it."""
        self.tables.blocks.setdefault(muter_id, set()).add((muted_id, "mute"))

    def write_post(self, post_id: int, author_id: int, created_at_ms: int, text: str | None,
                   visibility: int, deleted: bool, media: Sequence[str] | None = None) -> None:
        """The copy's columns, as ``CopyStore.write_post`` sets them (the rank keys kept;
        a deleted post is stored ``REMOVED``)."""
        cells = self.tables.posts.setdefault(post_id, PostCells())
        cells.author_id, cells.created_at_ms, cells.deleted = author_id, created_at_ms, deleted
        cells.visibility = REMOVED if deleted else visibility
        if text is not None:
            cells.text = text
        if media is not None:
            cells.media = list(media)

    def like(self, post_id: int, user_id: int, liked: bool = True) -> None:
        """A like's edge and its post's count, as the ranker's count owner writes them
        (``CountedEdges.apply``)."""
        self.tables.likes.setdefault(post_id, {})[user_id] = liked

    def set_rank_key(self, post_id: int, rank_key: float, key_ts: int) -> None:
        cells = self.tables.posts.setdefault(post_id, PostCells())
        if cells.key_ts is None or key_ts >= cells.key_ts:
            cells.rank_key, cells.key_ts = rank_key, key_ts

    def set_rank_key_next(self, post_id: int, rank_key: float, key_ts: int) -> None:
        cells = self.tables.posts.setdefault(post_id, PostCells())
        if cells.key_next_ts is None or key_ts >= cells.key_next_ts:
            cells.rank_key_next, cells.key_next_ts = rank_key, key_ts

    def add_author_post(self, author_id: int, post_id: int, rank_key: float, key_ts: int = 0) -> None:
        """The post's author-timeline row, in its day bucket (``ids.day_bucket``)."""
        self.tables.timeline_of(author_id, ids.day_bucket(post_id)).write(
            rank_key, post_id, author_id, key_ts)

    def remove_author_post(self, author_id: int, post_id: int, rank_key: float, ts: int) -> None:
        self.tables.timeline_of(author_id, ids.day_bucket(post_id)).delete(rank_key, post_id, ts)

    def put_inbox(self, reader_id: int, rows: Sequence[SourceRow], ts: int = 0) -> None:
        """Inbox rows ``(rank_key, post_id, author_id)`` written at ``ts``."""
        partition = self.tables.inbox_of(reader_id)
        for rank_key, post_id, author_id in rows:
            partition.write(rank_key, post_id, author_id, ts)

    def promote(self, author_id: int) -> None:
        """A current celebrity (``until`` null)."""
        self.tables.celebrities[author_id] = None

    def demote(self, author_id: int, until_ms: int) -> None:
        """A demoted celebrity, merged until its row expires."""
        self.tables.celebrities[author_id] = until_ms

    # -- FeedPort ---------------------------------------------------------------------------
    @property
    def from_memory(self) -> bool:
        """False, as for ``FeedStore``: callers run their reads concurrently, the way
        they do against Cassandra (awaiting.py)."""
        return False

    def held_graph(self, reader_id: int) -> tuple[dict[int, int], Blocks] | None:
        """None, as for ``FeedStore``: the graph is read through ``following_among`` and
        ``blocks``."""
        return None

    def _follows(self, reader_id: int) -> list[tuple[int, int]]:
        return sorted(self.tables.following.get(reader_id, {}).items())  # followed_id order

    async def following(self, reader_id: int, limit: int) -> dict[int, int]:
        return dict(self._follows(reader_id)[:_positive(limit)])

    async def following_among(self, reader_id: int, authors: Sequence[int]) -> dict[int, int]:
        wanted = set(authors)
        return {a: since for a, since in self._follows(reader_id) if a in wanted}

    async def following_from(self, reader_id: int, start: int, limit: int) -> dict[int, int]:
        return dict([f for f in self._follows(reader_id) if f[0] >= start][:_positive(limit)])

    async def following_since(self, reader_id: int, author_id: int) -> int | None:
        return self.tables.following.get(reader_id, {}).get(author_id)

    async def blocks(self, reader_id: int) -> Blocks:
        rows = sorted(self.tables.blocks.get(reader_id, ()))
        return Blocks.of_rows(rows) if rows else NO_BLOCKS

    async def hidden_between(self, reader_id: int, other_id: int) -> bool:
        return any(other == other_id for other, _ in self.tables.blocks.get(reader_id, ()))

    async def celebrities(self) -> list[CelebrityRow]:
        return sorted(self.tables.celebrities.items())

    async def inbox_top(self, reader_id: int, limit: int,
                        after: tuple[float, int] | None = None) -> list[SourceRow]:
        partition = self.tables.inbox.get(reader_id)
        return _top(partition.rows() if partition else [], _positive(limit), after)

    async def authors_top(self, authors: Sequence[int], buckets: Sequence[int], per_partition: int,
                          after: tuple[float, int] | None = None) -> list[SourceRow]:
        _positive(per_partition)
        out: list[SourceRow] = []
        for author_id in dict.fromkeys(authors):
            for bucket in dict.fromkeys(buckets):
                partition = self.tables.timelines.get((author_id, bucket))
                if partition is not None:
                    out += _top(partition.rows(), per_partition, after)
        return out

    @overload
    async def posts(self, post_ids: Sequence[int], *, with_text: Literal[False]) -> list[PostRow]: ...
    @overload
    async def posts(self, post_ids: Sequence[int], *, with_text: Literal[True]) -> list[PostTextRow]: ...
    @overload
    async def posts(self, post_ids: Sequence[int], *,
                    with_text: bool) -> list[PostRow] | list[PostTextRow]: ...

    async def posts(self, post_ids: Sequence[int], *,
                    with_text: bool) -> list[PostRow] | list[PostTextRow]:
        found = [(p, self.tables.posts[p]) for p in dict.fromkeys(post_ids) if p in self.tables.posts]
        states: list[PostRow] = [(p, c.author_id, c.created_at_ms, c.visibility, c.deleted,
                                  c.rank_key, c.rank_key_next, c.key_ts) for p, c in found]
        if not with_text:
            return states
        return [state + (c.text, None if c.media is None else list(c.media))
                for state, (_, c) in zip(states, found)]

    async def like_counts(self, post_ids: Sequence[int]) -> dict[int, int]:
        return {p: sum(edges.values()) for p in dict.fromkeys(post_ids)
                if (edges := self.tables.likes.get(p))}

    async def feed_order(self, reader_id: int) -> str | None:
        return self.tables.preferences.get(reader_id)

    async def save_feed_order(self, reader_id: int, order: str) -> None:
        self.tables.preferences[reader_id] = order

    async def save_snapshot_slot(self, row: SlotRow, timeout_s: float) -> None:
        self.tables.slots.setdefault(row.slot, {}).update(row.parts)

    async def load_snapshot(self, reader_id: int, feed_version: str) -> tuple[bytes, datetime] | None:
        slot, wanted = snapshot.slot_of(feed_version), snapshot.parts_of(feed_version)
        if slot is None or wanted is None:
            return None
        parts = self.tables.slots.get(slot, {})
        try:
            found = snapshot.find_in_slot([parts[part] for part in sorted(parts)
                                           if wanted[0] <= part < wanted[1]], reader_id, feed_version)
        except ValueError:  # a damaged row: no snapshot, as FeedStore answers
            return None
        if found is None:
            return None
        blob, created_ms = found
        return blob, datetime.fromtimestamp(created_ms / 1000, tz=timezone.utc)


def _top(rows: list[SourceRow], limit: int, after: tuple[float, int] | None) -> list[SourceRow]:
    """The first ``limit`` of ``rows`` (clustering order) strictly below ``after``."""
    if after is not None:
        rows = [r for r in rows if (r[0], r[1]) < after]
    return rows[:limit]


class InMemoryInboxStore:
    """``services.fanout.inbox.InboxPort`` the way ``InboxStore`` writes ``feed_inbox``,
    over ``ServingTables`` (its own unless given; give it an ``InMemoryFeedStore``'s to
    read the rows back as a page does). Write timestamps are kept as Cassandra keeps
    them (a removal shadows rows written at or before its time, whenever they land);
    the cap check and the purge use the fan-out's own decisions (``should_check_cap``,
    ``trim_boundary``, ``rows_to_purge``); every write tells ``notices`` which readers'
    rows changed. TTLs are not modelled, beyond "no TTL left: not written"."""

    def __init__(self, tables: ServingTables | None = None, *, cap: int = 500,
                 trim_every: int = 1, notices: ChangeSink = NO_NOTICES) -> None:
        self.tables = tables if tables is not None else ServingTables()
        self._cap = cap
        self._trim_every = trim_every
        self._notices = notices

    async def _changed(self, readers: Sequence[int]) -> None:
        if readers:
            await self._notices.changed(ServingChange(inboxes=tuple(readers)))

    async def push(self, reader_ids: Iterable[int], post_id: int, author_id: int,
                   rank_key: float, key_ts: int, ttl_s: int = INBOX_TTL_S) -> int:
        if ttl_s <= 0:
            return 0
        readers = list(reader_ids)
        for reader in readers:
            self.tables.inbox_of(reader).write(rank_key, post_id, author_id, key_ts)
        await self._changed(readers)
        return len(readers)

    async def push_many(self, pushes: Sequence[tuple[Sequence[int], InboxRow]]) -> int:
        written: list[int] = []
        for readers, r in pushes:
            if r.ttl_s > 0:
                for reader in readers:
                    self.tables.inbox_of(reader).write(r.rank_key, r.post_id, r.author_id, r.key_ts)
                written += readers
        await self._changed(list(dict.fromkeys(written)))
        return len(written)

    async def move(self, reader_ids: Iterable[int], post_id: int, author_id: int,
                   old_keys: Sequence[float], new_key: float, key_ts: int, ttl_s: int) -> int:
        old = [k for k in dict.fromkeys(old_keys) if k != new_key]
        readers = list(reader_ids)
        for reader in readers:
            partition = self.tables.inbox_of(reader)
            for key in old:
                partition.delete(key, post_id, key_ts)
            if ttl_s > 0:
                partition.write(new_key, post_id, author_id, key_ts)
        await self._changed(readers)
        return len(readers) if old or ttl_s > 0 else 0  # readers sent a statement

    async def push_posts(self, reader_id: int, rows: Sequence[InboxRow]) -> int:
        rows = [r for r in rows if r.ttl_s > 0]
        partition = self.tables.inbox_of(reader_id)
        for r in rows:
            partition.write(r.rank_key, r.post_id, r.author_id, r.key_ts)
        await self._changed([reader_id] if rows else [])
        return len(rows)

    async def unpush(self, reader_ids: Iterable[int], post_id: int, keys: Sequence[float],
                     ts: int) -> int:
        wanted = list(dict.fromkeys(keys))
        readers = list(reader_ids)
        for reader in readers:
            for key in wanted:
                self.tables.inbox_of(reader).delete(key, post_id, ts)
        await self._changed(readers)
        return len(readers) if wanted else 0

    async def rows(self, reader_id: int) -> list[StoredRow]:
        partition = self.tables.inbox.get(reader_id)
        return [StoredRow(*r) for r in partition.rows()] if partition else []

    async def purge_author(self, reader_id: int, author_id: int, ts: int,
                           in_flight: Iterable[tuple[float, int]] = ()) -> int:
        doomed: set[tuple[float, int]] = set(in_flight)
        doomed.update(rows_to_purge(await self.rows(reader_id), author_id))
        for key, post_id in doomed:
            self.tables.inbox_of(reader_id).delete(key, post_id, ts)
        await self._changed([reader_id] if doomed else [])
        return len(doomed)

    async def enforce_cap(self, reader_ids: Iterable[int], post_id: int, ts: int) -> int:
        sampled = [r for r in reader_ids if should_check_cap(r, post_id, self._trim_every)]
        trimmed = 0
        for reader in sampled:
            head = (await self.rows(reader))[:self._cap + 1]
            boundary = trim_boundary([r.rank_key for r in head], self._cap)
            if boundary is None:
                continue
            self.tables.inbox_of(reader).delete_below(boundary, ts)
            await self._changed([reader])
            trimmed += 1
        return trimmed


if TYPE_CHECKING:  # what mypy checks of this module: the fakes have the ports' shape
    def _ports(feed: InMemoryFeedStore, inbox: InMemoryInboxStore) -> tuple[FeedPort, InboxPort]:
        return feed, inbox
