"""The Cassandra copies against Postgres's truth: compare, and repair what differs.

One module for both users, so they cannot drift: the visibility verifier (verifier.py,
the copies one visibility-log entry covers) and the operator's repair command
(jobs/repair.py, a reader's follows, blocks and mutes, an author's posts and timeline).

What is compared (``Key``: the kind, a subject and an object, as in ``visibility_changes``):

- ``post`` (post, author): is the post hidden in Postgres (deleted, removed, or no row)
  and in the ``posts`` copy (deleted, not visible, or no usable copy)? Only that is
  compared: a missing copy of a hidden post is right.
- ``follow`` (follower, followed): the ``following`` and ``followers`` copies (a row, and
  its following_since to the millisecond, as Cassandra keeps it) and the edge's state in
  ``follow_edges`` (whether the follower count counts it).
- ``block`` (blocker, blocked): the two ``blocks`` rows, ``(blocker, blocked, 'out')`` and
  ``(blocked, blocker, 'in')``.
- ``mute`` (muter, muted): the one ``blocks`` row ``(muter, muted, 'mute')``.
- ``account`` (user, 0): is the account hidden (a row of ``account_states``: suspended
  or deleted) in Postgres and in the ``account_states`` copy (a row)?
- ``timeline`` (post, author; the repair command only): a visible post has its row in
  the author's ``author_timeline``.

How a repair is written. The copies are written ``USING TIMESTAMP <LSN>`` by the pipeline
(the change's WAL position as an integer, as the relay sends it), so a repair is written
at the WAL position Postgres is at when the truth is read: above every change the truth
includes, below every change made after it. A transaction that had already written WAL
but not yet committed would break the second half (its change sits below that position
but is not in the truth), so ``repair_position`` waits for every transaction of the
database that held a transaction id when the position was read, and only then is the
truth read. The copies are read again before writing (the pipeline may have caught up)
and after (a repair that did not take: a copy written above the WAL position, which
only a Postgres rebuilt from scratch would cause, is reported, not taken as fixed).
The follower count is its owner's (services/shared/stores/counted_edges.py): the repair
publishes the edge's true state to ``<prefix>.follow-counts`` at that position, as the
follows handler does; the owner applies it only if it is newer than what the edge holds,
and a record applied twice counts once, so this is safe and idempotent.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Awaitable, Callable, Iterable, Mapping, NamedTuple, Sequence

import psycopg
from cassandra.cluster import Session

from services.shared.contracts import edge_counts
from services.shared.contracts.edge_counts import EdgeCounted
from services.shared.contracts.topics import follow_counts_topic
from services.shared.domain.ranking import rank_key
from services.shared.domain.rules import VISIBLE, as_utc
from services.shared.stores.blocks import IN, OUT, BlockRow, DirectionRow, FanoutBlocks
from services.shared.stores.blocks import MUTE as MUTE_ROW
from services.shared.stores.counted_edges import FOLLOW_EDGES, CountReads
from services.shared.stores.cql_async import CqlRunner
from services.shared.stores.follows import FanoutFollows, FollowedAuthors, SinceRow, followed_by
from services.shared.worker.event_publisher import EventPublisher, delivered

from .account_events import AccountCopy
from .audience import PostCopy, PostFields, backfill_window, key_write_ts
from .copies import CopyStore

POST, FOLLOW, BLOCK, MUTE, TIMELINE, ACCOUNT = "post", "follow", "block", "mute", "timeline", "account"
# Parts of a follow's copies, each compared (and reported) on its own.
FOLLOWING, FOLLOWERS, FOLLOW_COUNT = "following", "followers", "follow_count"
BLOCK_OUT, BLOCK_IN = "block_out", "block_in"

# Keys whose copies are read (or repaired) at once.
KEYS_IN_FLIGHT = 32
# How long ``repair_position`` waits for the transactions that were writing, and how often
# it looks.
WRITERS_WAIT_S = 5.0
_WRITERS_POLL_S = 0.01

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MS = timedelta(milliseconds=1)


class Key(NamedTuple):
    """What one comparison covers: ``post`` and ``timeline`` (post_id, author_id),
    ``follow`` (follower_id, followed_id), ``block`` (blocker_id, blocked_id), ``mute``
    (muter_id, muted_id)."""

    kind: str
    subject_id: int
    object_id: int

    @property
    def pair(self) -> tuple[int, int]:
        return self.subject_id, self.object_id


@dataclass(frozen=True)
class PostRow:
    """A ``posts`` row of Postgres."""

    post_id: int
    author_id: int
    created_at: datetime
    text: str
    media_ids: list[str]
    visibility: int
    deleted: bool

    @property
    def hidden(self) -> bool:
        return self.deleted or self.visibility != VISIBLE

    def fields(self) -> PostFields:
        return PostFields(self.post_id, self.author_id, self.created_at, self.text,
                          self.media_ids, self.visibility, self.deleted)


@dataclass(frozen=True)
class Truth:
    """Postgres's rows for a set of keys: what is absent here is absent there."""

    posts: Mapping[int, PostRow]
    follows: Mapping[tuple[int, int], datetime]   # (follower, followed) -> following_since
    blocks: frozenset[tuple[int, int]]            # (blocker, blocked)
    mutes: frozenset[tuple[int, int]] = frozenset()   # (muter, muted)
    accounts: Mapping[int, str] = field(default_factory=dict)   # hidden account -> state


@dataclass(frozen=True)
class FollowCopies:
    following: datetime | None   # the reader-side row's following_since; None: no row
    followers: datetime | None   # the author-side row's
    counted: bool | None         # follow_edges' state; None: the edge was never counted


@dataclass(frozen=True)
class BlockCopies:
    out: bool     # (blocker, blocked, 'out') exists
    inward: bool  # (blocked, blocker, 'in') exists


@dataclass(frozen=True)
class Copies:
    """The Cassandra side for a set of keys."""

    posts: Mapping[int, PostCopy]
    follows: Mapping[tuple[int, int], FollowCopies]
    blocks: Mapping[tuple[int, int], BlockCopies]
    timelines: Mapping[int, frozenset[int]]   # author -> post ids in the window's buckets
    mutes: Mapping[tuple[int, int], bool] = field(default_factory=dict)   # the 'mute' row exists
    accounts: Mapping[int, str | None] = field(default_factory=dict)   # the copy's state (None: no row)


@dataclass(frozen=True)
class Difference:
    """One part of a key's copies that differs from Postgres (for reports and logs)."""

    part: str
    truth: str
    copy: str


Differences = Mapping[Key, tuple[Difference, ...]]


@dataclass(frozen=True)
class RepairOutcome:
    repaired: Differences   # what was written (from the truth read at ``lsn``)
    stuck: Differences      # still differing after the write (not taken)
    lsn: int


# -- the comparisons: pure ---------------------------------------------------------------
def post_hidden(copy: PostCopy | None) -> bool:
    """What the read path makes of a copy: hidden unless visible, not deleted and whole."""
    return copy is None or not copy.alive


def post_differences(truth: PostRow | None, copy: PostCopy | None) -> tuple[Difference, ...]:
    """The post's hidden-ness in Postgres against its copy's (no row: hidden)."""
    hidden = truth is None or truth.hidden
    if hidden == post_hidden(copy):
        return ()
    return (Difference(POST, _post_state(truth), _copy_state(copy)),)


def follow_differences(since: datetime | None, copies: FollowCopies) -> tuple[Difference, ...]:
    """A follow (``since``: Postgres's following_since; None: no row) against its copies."""
    out = [Difference(part, _since_text(since), _since_text(value))
           for part, value in ((FOLLOWING, copies.following), (FOLLOWERS, copies.followers))
           if _ms(since) != _ms(value)]
    if (since is not None) != bool(copies.counted):
        out.append(Difference(FOLLOW_COUNT, "following" if since is not None else "not following",
                              "never counted" if copies.counted is None
                              else "following" if copies.counted else "not following"))
    return tuple(out)


def block_differences(blocked: bool, copies: BlockCopies) -> tuple[Difference, ...]:
    want = "blocked" if blocked else "not blocked"
    return tuple(Difference(part, want, "row" if present else "no row")
                 for part, present in ((BLOCK_OUT, copies.out), (BLOCK_IN, copies.inward))
                 if present != blocked)


def mute_differences(muted: bool, present: bool) -> tuple[Difference, ...]:
    if present == muted:
        return ()
    return (Difference(MUTE, "muted" if muted else "not muted", "row" if present else "no row"),)


def account_differences(state: str | None, copied: str | None) -> tuple[Difference, ...]:
    """An account's state (None: not hidden) against its copy's; only hidden-ness
    counts for the read path, but a suspended copy of a deleted account is repaired too."""
    if state == copied:
        return ()
    return (Difference(ACCOUNT, state or "active", copied or "no row"),)


def timeline_differences(truth: PostRow | None, in_timeline: bool) -> tuple[Difference, ...]:
    """A visible post without its author-timeline row (a hidden one's row is harmless:
    the read path checks the copy)."""
    if truth is None or truth.hidden or in_timeline:
        return ()
    return (Difference(TIMELINE, "visible", "no timeline row"),)


def differences(key: Key, truth: Truth, copies: Copies) -> tuple[Difference, ...]:
    if key.kind == POST:
        return post_differences(truth.posts.get(key.subject_id), copies.posts.get(key.subject_id))
    if key.kind == FOLLOW:
        return follow_differences(truth.follows.get(key.pair), copies.follows[key.pair])
    if key.kind == BLOCK:
        return block_differences(key.pair in truth.blocks, copies.blocks[key.pair])
    if key.kind == MUTE:
        return mute_differences(key.pair in truth.mutes, copies.mutes[key.pair])
    if key.kind == ACCOUNT:
        return account_differences(truth.accounts.get(key.subject_id), copies.accounts[key.subject_id])
    if key.kind == TIMELINE:
        return timeline_differences(truth.posts.get(key.subject_id),
                                    key.subject_id in copies.timelines.get(key.object_id, frozenset()))
    raise ValueError(f"unknown kind {key.kind!r}")


def _ms(ts: datetime | None) -> int | None:
    """Milliseconds since the epoch, floored (what Cassandra keeps of a timestamp)."""
    if ts is None:
        return None
    aware = as_utc(ts)
    return (aware - _EPOCH) // _MS


def _since_text(ts: datetime | None) -> str:
    return "no row" if ts is None else f"since {ts.isoformat()}"


def _post_state(row: PostRow | None) -> str:
    if row is None:
        return "no row"
    return "deleted" if row.deleted else "removed" if row.visibility != VISIBLE else "visible"


def _copy_state(copy: PostCopy | None) -> str:
    if copy is None:
        return "no copy"
    if copy.deleted:
        return "deleted"
    if copy.visibility != VISIBLE:
        return "removed"
    return "visible" if copy.alive else "incomplete copy"


# -- Postgres ------------------------------------------------------------------------------
AsyncConn = psycopg.AsyncConnection[Any]


async def read_truth(conn: AsyncConn, keys: Iterable[Key]) -> Truth:
    """Postgres's rows for ``keys`` (one statement per table that any key needs)."""
    keys = list(keys)
    post_ids = sorted({k.subject_id for k in keys if k.kind in (POST, TIMELINE)})
    follows = sorted({k.pair for k in keys if k.kind == FOLLOW})
    blocks = sorted({k.pair for k in keys if k.kind == BLOCK})
    mutes = sorted({k.pair for k in keys if k.kind == MUTE})
    posts: dict[int, PostRow] = {}
    if post_ids:
        cur = await conn.execute(
            "SELECT post_id, author_id, created_at, text, media_ids, visibility, deleted_at IS NOT NULL"
            " FROM posts WHERE post_id = ANY(%s)", (post_ids,))
        for r in await cur.fetchall():
            media = r[4] if isinstance(r[4], list) else []
            posts[r[0]] = PostRow(r[0], r[1], r[2], r[3], [str(m) for m in media], r[5], r[6])
    follow_rows: dict[tuple[int, int], datetime] = {}
    if follows:
        cur = await conn.execute(
            "SELECT f.follower_id, f.followed_id, f.following_since FROM follows f"
            " JOIN unnest(%s::bigint[], %s::bigint[]) AS k(a, b)"
            " ON f.follower_id = k.a AND f.followed_id = k.b",
            ([a for a, _ in follows], [b for _, b in follows]))
        follow_rows = {(r[0], r[1]): r[2] for r in await cur.fetchall()}
    block_rows: frozenset[tuple[int, int]] = frozenset()
    if blocks:
        cur = await conn.execute(
            "SELECT b.blocker_id, b.blocked_id FROM blocks b"
            " JOIN unnest(%s::bigint[], %s::bigint[]) AS k(a, b)"
            " ON b.blocker_id = k.a AND b.blocked_id = k.b",
            ([a for a, _ in blocks], [b for _, b in blocks]))
        block_rows = frozenset((r[0], r[1]) for r in await cur.fetchall())
    mute_rows: frozenset[tuple[int, int]] = frozenset()
    if mutes:
        cur = await conn.execute(
            "SELECT m.muter_id, m.muted_id FROM mutes m"
            " JOIN unnest(%s::bigint[], %s::bigint[]) AS k(a, b)"
            " ON m.muter_id = k.a AND m.muted_id = k.b",
            ([a for a, _ in mutes], [b for _, b in mutes]))
        mute_rows = frozenset((r[0], r[1]) for r in await cur.fetchall())
    accounts = sorted({k.subject_id for k in keys if k.kind == ACCOUNT})
    account_rows: dict[int, str] = {}
    if accounts:
        cur = await conn.execute("SELECT user_id, state FROM account_states WHERE user_id = ANY(%s)",
                                 (accounts,))
        account_rows = {r[0]: r[1] for r in await cur.fetchall()}
    return Truth(posts, follow_rows, block_rows, mute_rows, account_rows)


class WritersStillOpen(RuntimeError):
    """Transactions that were writing when the WAL position was read have not ended."""


async def repair_position(conn: AsyncConn, wait_s: float = WRITERS_WAIT_S) -> int:
    """The WAL position to write repairs at (``pg_current_wal_lsn()`` as the relay's
    integer), once every transaction of this database that held a transaction id when it
    was read has ended: its changes (below the position) are then in any truth read
    after this returns, and every later change is above it. Raises ``WritersStillOpen``
    after ``wait_s`` (a transaction left open: the repair waits for the next round)."""
    cur = await conn.execute("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint")
    row = await cur.fetchone()
    assert row is not None
    lsn = int(row[0])
    cur = await conn.execute(
        "SELECT pid, backend_xid::text FROM pg_stat_activity WHERE datname = current_database()"
        " AND backend_xid IS NOT NULL AND pid <> pg_backend_pid()")
    writers = await cur.fetchall()
    deadline = time.monotonic() + wait_s
    while writers:
        # pg_stat_activity is read once per transaction unless this snapshot is dropped.
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        cur = await conn.execute(
            "SELECT a.pid, a.backend_xid::text FROM pg_stat_activity a"
            " JOIN unnest(%s::int[], %s::text[]) AS w(pid, xid)"
            " ON a.pid = w.pid AND a.backend_xid::text = w.xid",
            ([w[0] for w in writers], [w[1] for w in writers]))
        writers = await cur.fetchall()
        if not writers:
            break
        if time.monotonic() >= deadline:
            raise WritersStillOpen(f"transactions still open after {wait_s:g} s "
                                   f"(pid, xid): {sorted(map(tuple, writers))}")
        await asyncio.sleep(_WRITERS_POLL_S)
    return lsn


# -- Cassandra -----------------------------------------------------------------------------
CountSink = Callable[[EdgeCounted], Awaitable[None]]


def count_sink(publisher: EventPublisher, topic_prefix: str) -> CountSink:
    """Hands an edge's state to its count's owner, as the follows handler does
    (relation_events.py), and waits for the broker's acknowledgement."""
    topic = follow_counts_topic(topic_prefix)

    async def count(change: EdgeCounted) -> None:
        await delivered([await publisher.send(topic, *edge_counts.encode(change))])
    return count


class CopyAudit:
    """Reads the copies ``CopyStore`` does not read the way a comparison needs, and writes
    repairs through ``CopyStore`` (so its notices tell the API's caches) and ``count``
    (the follow-counts topic)."""

    def __init__(self, session: Session, runner: CqlRunner, copies: CopyStore, count: CountSink,
                 *, accounts: AccountCopy | None = None, keys_in_flight: int = KEYS_IN_FLIGHT, writers_wait_s: float = WRITERS_WAIT_S,
                 now_us: Callable[[], int] = lambda: time.time_ns() // 1000,
                 clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> None:
        self.copies = copies
        self._accounts = accounts   # the account copy (None: a repair that never meets one)
        self._run = runner
        self._count = count
        self._keys_in_flight = max(1, keys_in_flight)
        self._writers_wait_s = writers_wait_s
        self._now_us = now_us
        self._clock = clock
        # The owners' statements (services/shared/stores), partitions read 5000 rows a page.
        self._follows = FanoutFollows(session)
        self._followed = FollowedAuthors(session, page=5000)
        self._blocks = FanoutBlocks(session, page=5000)
        self._counts = CountReads(session, FOLLOW_EDGES)

    # -- reading ---------------------------------------------------------------------------
    async def read_copies(self, keys: Iterable[Key]) -> Copies:
        keys = list(keys)
        post_ids = sorted({k.subject_id for k in keys if k.kind in (POST, TIMELINE)})
        follows = sorted({k.pair for k in keys if k.kind == FOLLOW})
        blocks = sorted({k.pair for k in keys if k.kind == BLOCK})
        mutes = sorted({k.pair for k in keys if k.kind == MUTE})
        authors = sorted({k.object_id for k in keys if k.kind == TIMELINE})
        limit = asyncio.Semaphore(self._keys_in_flight)

        async def bounded(coro: Awaitable[Any]) -> Any:
            async with limit:
                return await coro

        posts = {c.post_id: c for c in await self.copies.read_posts(post_ids)} if post_ids else {}
        accounts = sorted({k.subject_id for k in keys if k.kind == ACCOUNT})
        follow_copies, block_copies, timelines, mute_copies, account_copies = await asyncio.gather(
            asyncio.gather(*(bounded(self._follow_copies(*pair)) for pair in follows)),
            asyncio.gather(*(bounded(self._block_copies(*pair)) for pair in blocks)),
            asyncio.gather(*(bounded(self.timeline_posts(a)) for a in authors)),
            asyncio.gather(*(bounded(self._mute_copy(*pair)) for pair in mutes)),
            asyncio.gather(*(bounded(self._account_copy(a)) for a in accounts)))
        return Copies(posts, dict(zip(follows, follow_copies)), dict(zip(blocks, block_copies)),
                      dict(zip(authors, timelines)), dict(zip(mutes, mute_copies)),
                      dict(zip(accounts, account_copies)))

    async def _account_copy(self, user_id: int) -> str | None:
        if self._accounts is None:
            raise RuntimeError("an account key without the account copy")
        return await self._accounts.state(user_id)

    async def _follow_copies(self, follower: int, followed: int) -> FollowCopies:
        following, followers, edge = await asyncio.gather(
            self._run.execute(self._follows.following_since, (follower, followed)),
            self._run.execute(self._follows.follower_since, (followed, follower)),
            self._run.execute(self._counts.edge_state, (followed, follower)))
        return FollowCopies(_since(following), _since(followers),
                            None if not edge or edge[0][0] is None else bool(edge[0][0]))

    async def _block_copies(self, blocker: int, blocked: int) -> BlockCopies:
        out, inward = await asyncio.gather(self._run.execute(self._blocks.between, (blocker, blocked)),
                                           self._run.execute(self._blocks.between, (blocked, blocker)))
        return BlockCopies(any(DirectionRow._make(r).direction == OUT for r in out),
                           any(DirectionRow._make(r).direction == IN for r in inward))

    async def _mute_copy(self, muter: int, muted: int) -> bool:
        rows = await self._run.execute(self._blocks.between, (muter, muted))
        return any(DirectionRow._make(r).direction == MUTE_ROW for r in rows)

    def timeline_window(self) -> tuple[int, int]:
        """The post ids an author's timeline is compared over: what an inbox keeps."""
        return backfill_window(None, self._clock())

    async def timeline_posts(self, author_id: int) -> frozenset[int]:
        lowest, newest = self.timeline_window()
        return frozenset(await self.copies.author_posts_since(author_id, lowest, newest))

    async def followed_in_copy(self, reader_id: int) -> list[int]:
        """Authors the reader's ``following`` copy lists."""
        return await followed_by(self._run, self._followed, reader_id)

    async def blocks_in_copy(self, user_id: int) -> list[tuple[int, int]]:
        """(blocker, blocked) pairs the user's ``blocks`` partition holds, either way."""
        return await self._pairs_in_copy(user_id, mutes=False)

    async def mutes_in_copy(self, user_id: int) -> list[tuple[int, int]]:
        """(muter, muted) pairs of the user's mutes the ``blocks`` partition holds."""
        return await self._pairs_in_copy(user_id, mutes=True)

    async def _pairs_in_copy(self, user_id: int, mutes: bool) -> list[tuple[int, int]]:
        pairs: list[tuple[int, int]] = []
        async for rows in self._run.pages(self._blocks.with_directions, (user_id,)):
            pairs.extend(row.pair(user_id) for row in map(BlockRow._make, rows)
                         if (row.direction == MUTE_ROW) == mutes)
        return pairs

    async def compare(self, truth: Truth, keys: Iterable[Key]) -> dict[Key, tuple[Difference, ...]]:
        """The keys whose copies differ from ``truth`` (the copies read now)."""
        keys = list(dict.fromkeys(keys))
        copies = await self.read_copies(keys)
        found = {k: differences(k, truth, copies) for k in keys}
        return {k: d for k, d in found.items() if d}

    async def check(self, conn: AsyncConn, keys: Iterable[Key]) -> dict[Key, tuple[Difference, ...]]:
        """Postgres's rows, then the copies: the keys that differ."""
        keys = list(dict.fromkeys(keys))
        return await self.compare(await read_truth(conn, keys), keys) if keys else {}

    # -- repairing -------------------------------------------------------------------------
    async def repair(self, conn: AsyncConn, keys: Iterable[Key]) -> RepairOutcome:
        """Read the truth again at a repair position (one transaction), compare again,
        write what still differs, and read the copies back. Raises ``WritersStillOpen``
        (nothing written) when a transaction writing at the position outlives the wait."""
        keys = list(dict.fromkeys(keys))
        if not keys:
            return RepairOutcome({}, {}, 0)
        async with conn.transaction():
            lsn = await repair_position(conn, self._writers_wait_s)
            truth = await read_truth(conn, keys)
        found = await self.compare(truth, keys)
        limit = asyncio.Semaphore(self._keys_in_flight)

        async def write(key: Key, diffs: tuple[Difference, ...]) -> None:
            async with limit:
                await self._write(key, diffs, truth, lsn)

        await asyncio.gather(*(write(k, d) for k, d in found.items()))
        after = await self.compare(truth, found)
        # The count moves when its owner applies the record: not read back here.
        stuck = {k: s for k, d in after.items() if (s := tuple(x for x in d if x.part != FOLLOW_COUNT))}
        return RepairOutcome({k: d for k, d in found.items() if k not in stuck}, stuck, lsn)

    async def _write(self, key: Key, diffs: Sequence[Difference], truth: Truth, lsn: int) -> None:
        parts = {d.part for d in diffs}
        if key.kind == POST:
            await self._write_post(key, truth.posts.get(key.subject_id), lsn)
        elif key.kind == FOLLOW:
            follower, followed = key.pair
            since = truth.follows.get(key.pair)
            work: list[Awaitable[None]] = []
            if FOLLOWING in parts:
                work.append(self.copies.write_following_copy(follower, followed, since, lsn))
            if FOLLOWERS in parts:
                work.append(self.copies.write_follower_copy(follower, followed, since, lsn))
            if FOLLOW_COUNT in parts:
                work.append(self._count(EdgeCounted(followed, follower, since is not None, lsn)))
            await asyncio.gather(*work)
        elif key.kind == BLOCK:
            if key.pair in truth.blocks:
                await self.copies.add_block(*key.pair, lsn)
            else:
                await self.copies.remove_block(*key.pair, lsn)
        elif key.kind == MUTE:
            if key.pair in truth.mutes:
                await self.copies.add_mute(*key.pair, lsn)
            else:
                await self.copies.remove_mute(*key.pair, lsn)
        elif key.kind == ACCOUNT:
            assert self._accounts is not None
            state = truth.accounts.get(key.subject_id)
            if state is None:
                await self._accounts.delete(key.subject_id, lsn)
            else:
                await self._accounts.write(key.subject_id, state, None, lsn)
        elif key.kind == TIMELINE:
            await self._write_timeline_row(key)

    async def _write_post(self, key: Key, row: PostRow | None, lsn: int) -> None:
        if row is not None:
            await self.copies.write_post(row.fields(), lsn)
            return
        # No row in Postgres: the copy that still shows it is marked deleted.
        copy = await self.copies.read_post(key.subject_id)
        if copy is None:
            return
        await self.copies.write_post(PostFields(key.subject_id, copy.author_id or key.object_id,
                                                copy.created_at, None, None, copy.visibility, True), lsn)

    async def _write_timeline_row(self, key: Key) -> None:
        """The post's author-timeline row under its key, written now (after whatever
        removed it), the copy's key re-written at the same time: what a restore does
        (post_events.py)."""
        copy = await self.copies.read_post(key.subject_id)
        if copy is None or not copy.alive:
            return  # no usable copy (yet): the post repair comes first
        assert copy.created_at is not None
        key_value = copy.rank_key
        if key_value is None:
            key_value = rank_key(copy.score, int(copy.created_at.timestamp() * 1000))
        key_ts = key_write_ts(copy.key_ts, copy.created_at, self._now_us())
        await self.copies.set_rank_key(key.subject_id, key_value, key_ts)
        await self.copies.add_author_post(key.object_id, key.subject_id, key_value, key_ts)


def _since(rows: Sequence[Any]) -> datetime | None:
    """following_since of a follow copy's row (UTC), None with no row."""
    return as_utc(SinceRow._make(rows[0]).following_since) if rows else None
