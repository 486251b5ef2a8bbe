"""The read path's Cassandra calls: the tables' owners' statements, each with a timeout. Thin I/O.

Statements run through the driver's own event loop (``execute_async``) and resolve an
asyncio future, so a request never blocks the API's loop or a thread pool. Rows come
back as plain tuples (a ``tuple_factory`` execution profile: the default named-tuple
factory builds a class per result, which costs more than the query on this path).
Every call carries ``timeout``; the caller decides what a failure means (the candidate
reads log, count and carry on; the snapshot and post-state reads fail the request).
Timestamps are selected as ``toUnixTimestamp(...)`` (Unix ms, a bigint): the driver then
builds no ``datetime`` per row, and the read path works in milliseconds anyway.
"""
from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timezone
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Literal, Mapping, Protocol, Sequence, overload

from cassandra.cluster import ExecutionProfile, Session
from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy
from cassandra.pool import Host
from cassandra.query import BatchStatement, BatchType, PreparedStatement, tuple_factory

from services.shared.domain.rules import CELEBRITY_SHARD
from services.shared.clients.cql import CONSISTENCY, SERIAL_CONSISTENCY
from services.shared.stores.blocks import ReadPathBlocks, is_block
from services.shared.stores.counted_edges import LIKE_EDGES, CountReads
from services.shared.stores.cql_async import release
from services.shared.stores.follows import ReadPathFollows
from services.shared.stores.inbox import ReadPathInbox
from services.shared.stores.inbox import SourceRow as SourceRow
from services.shared.stores.posts import PostRow as PostRow
from services.shared.stores.posts import PostTextRow as PostTextRow
from services.shared.stores.posts import ReadPathPosts
from services.shared.stores.preferences import FeedOrderRow, PreferenceStatements
from services.shared.stores.snapshot_slots import PayloadRow, SnapshotSlotStatements
from services.shared.stores.tiers import CelebrityRow as CelebrityRow
from services.shared.stores.tiers import ReadPathCelebrities
from services.shared.stores.timelines import ReadPathTimelines

from ..snapshots import snapshot
from ..snapshots.snapshot_writer import SlotRow

log = logging.getLogger(__name__)

# Rows as the driver hands them over (``tuple_factory``, above): plain tuples, read in
# bulk and merged, sorted and packed as they are (tuple order is the feed order), so they
# stay tuples. A NamedTuple per row is a Python-level call each: 1.3 µs a row on the
# 2-core machine, more for a 500-row inbox than pooling and sorting it. Their shapes are
# named by the tables' owners (services/shared/stores), next to the statements that
# select them, and the modules that read them use these names: SourceRow (a feed_inbox
# or author_timeline row), PostRow and PostTextRow (a post copy's state, with its text),
# CelebrityRow.

PROFILE = "feed_read"
# Hedged reads (FeedStore._rows): the extra reads are at most this share of all reads,
# with bursts of up to HEDGE_BURST hedges (a node dying under a quiet load).
HEDGE_SHARE = 0.5
HEDGE_BURST = 50.0
# Extra time the asyncio side waits past the driver's own timeout before giving up:
# the driver normally fails the future first; this only guards a lost callback.
_GUARD_S = 0.05
# No driver-side speculative execution: cassandra-driver 3.30 sets a ResponseFuture's
# connection in _query but its stream id only after _query returns, so a speculative
# execution fired in between (a starved event loop, a short delay) leaves the two
# mismatched, and a client timeout then pops another request's callback: reads answered
# with other requests' rows (docs/reliability.md, third session).


def install_profile(session: Session, timeout: float) -> None:
    """Register the read path's execution profile (tuples, token-aware, ``timeout``)."""
    profile = ExecutionProfile(load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy()),
                               request_timeout=timeout, row_factory=tuple_factory,
                               consistency_level=CONSISTENCY,
                               serial_consistency_level=SERIAL_CONSISTENCY)
    if PROFILE not in session.cluster.profile_manager.profiles:
        session.cluster.add_execution_profile(PROFILE, profile)



@dataclass(frozen=True, slots=True)
class Blocks:
    """A reader's ``blocks`` partition as two sets (a user may be in both): ``blocked``,
    everyone blocked either way with the reader (their timeline and lists answer 404,
    as an unknown user's); ``muted``, everyone the reader mutes (hidden from the home
    feed and the stream only). Nearly every reader mutes nobody: ``muted`` is then the
    one empty frozenset and ``hidden`` is ``blocked`` itself."""

    blocked: frozenset[int]
    muted: frozenset[int] = frozenset()

    @property
    def hidden(self) -> frozenset[int]:
        """Whoever the home feed and the stream hide from the reader: both sets."""
        return self.blocked | self.muted if self.muted else self.blocked

    @classmethod
    def of_rows(cls, rows: Iterable[tuple[int, str]]) -> Blocks:
        """The sets of a partition's ``(other_id, direction)`` rows."""
        blocked: set[int] = set()
        muted: set[int] = set()
        for other, direction in rows:
            (blocked if is_block(direction) else muted).add(other)
        return cls(frozenset(blocked), frozenset(muted) if muted else NO_ONE)


NO_ONE: frozenset[int] = frozenset()
NO_BLOCKS = Blocks(NO_ONE, NO_ONE)


class FeedPort(Protocol):
    """What the read path (``FeedReader``, ``SourceReader``, ``PageGraph``, ``PostCopies``,
    ``Preferences``, the stream's ``EligibilityGate``) needs of the serving store, and
    what ``CachedFeedStore`` wraps. ``FeedStore`` is the Cassandra one, ``CachedFeedStore``
    (serving_cache.py) answers some reads from memory; the tests' in-memory one
    (tests/support/memory_stores.py) passes the same contract suite as ``FeedStore``
    (tests/support/contracts/feed_store_contract.py), so it cannot drift."""

    @property
    def from_memory(self) -> bool:
        """Whether reads are answered from memory: await them in turn (feed/awaiting.py)."""
        ...

    def held_graph(self, reader_id: int) -> tuple[Mapping[int, int], Blocks] | None:
        """The reader's whole follow list (author -> following_since) and blocks, when held
        in memory with the same freshness as ``following_among`` and ``blocks`` answer;
        else None (then ask those). Never reads."""
        ...

    # -- the reader's graph
    async def following(self, reader_id: int, limit: int) -> dict[int, int]: ...
    async def following_among(self, reader_id: int, authors: Sequence[int]) -> dict[int, int]: ...
    async def following_from(self, reader_id: int, start: int, limit: int) -> dict[int, int]: ...
    async def following_since(self, reader_id: int, author_id: int) -> int | None: ...
    async def blocks(self, reader_id: int) -> Blocks: ...
    async def hidden_between(self, reader_id: int, other_id: int) -> bool: ...
    async def celebrities(self) -> list[CelebrityRow]: ...

    # -- sources, in rank-key order
    async def inbox_top(self, reader_id: int, limit: int,
                        after: tuple[float, int] | None = None) -> list[SourceRow]: ...
    async def authors_top(self, authors: Sequence[int], buckets: Sequence[int], per_partition: int,
                          after: tuple[float, int] | None = None) -> list[SourceRow]: ...

    # -- post copies
    @overload
    async def posts(self, post_ids: Sequence[int], *, with_text: Literal[False]) -> list[PostRow]: ...
    @overload
    async def posts(self, post_ids: Sequence[int], *, with_text: Literal[True]) -> list[PostTextRow]: ...
    @overload
    async def posts(self, post_ids: Sequence[int], *,
                    with_text: bool) -> list[PostRow] | list[PostTextRow]: ...

    # -- like counts (like_edges' static count): post -> count, posts never liked absent
    async def like_counts(self, post_ids: Sequence[int]) -> dict[int, int]: ...

    # -- preferences and snapshots
    async def feed_order(self, reader_id: int) -> str | None: ...
    async def save_feed_order(self, reader_id: int, order: str) -> None: ...
    async def save_snapshot_slot(self, row: SlotRow, timeout_s: float) -> None: ...
    async def load_snapshot(self, reader_id: int, feed_version: str) -> tuple[bytes, datetime] | None: ...


class StatementRunner(Protocol):
    """A statement prepared by another read-path module, run on the read path's profile
    and timeout (``FeedStore.run``; ``CachedFeedStore`` passes it through): the stream's
    leases. Not part of ``FeedPort``: a store without Cassandra has nothing to run."""

    async def run(self, statement: PreparedStatement, params: Sequence[Any],
                  hedge: bool = False, timeout: float | None = None) -> list[tuple[Any, ...]]: ...


class FeedStore:
    """Every Cassandra statement of the read path."""

    def __init__(self, session: Session, timeout: float, max_following: int,
                 hedge_after_s: float = 0.0,
                 on_hedge: Callable[[str], None] = lambda _outcome: None) -> None:
        install_profile(session, timeout)
        self._session = session
        self._timeout = timeout
        self._hedge_after_s = hedge_after_s
        self._on_hedge = on_hedge  # told each hedge's outcome: hedge, first or failed
        self._next_node = 0
        # Hedge budget: every read earns HEDGE_SHARE of a hedge (up to HEDGE_BURST), a hedge
        # spends one. When everything is slow (an overloaded node or machine, not one dead
        # node) hedging every read would double the load that made it slow; the budget caps
        # the extra reads at HEDGE_SHARE of all reads ("The Tail at Scale").
        self._hedge_tokens = HEDGE_BURST
        # The owners' statements (services/shared/stores): a reader's follows and blocks
        # in slices of max_following rows (one page each), each slice of blocks after the
        # last row of the one before: the whole set, however large.
        self._follows = ReadPathFollows(session, page=max_following)
        self._blocks_page = max_following
        self._blocks = ReadPathBlocks(session, page=max_following)
        self._celebrities = ReadPathCelebrities(session)
        self._inbox = ReadPathInbox(session)
        self._timelines = ReadPathTimelines(session)
        self._posts = ReadPathPosts(session)
        self._like_counts = CountReads(session, LIKE_EDGES)
        self._preferences = PreferenceStatements(session)
        self._slots = SnapshotSlotStatements(session)

    @property
    def from_memory(self) -> bool:
        """Whether reads are answered from memory (``CachedFeedStore``); never here."""
        return False

    def held_graph(self, reader_id: int) -> tuple[Mapping[int, int], Blocks] | None:
        """Nothing is held here (``CachedFeedStore`` holds graphs)."""
        return None

    async def run(self, statement: PreparedStatement, params: Sequence[Any],
                  hedge: bool = False, timeout: float | None = None) -> list[tuple[Any, ...]]:
        """Run a statement prepared by another read-path module (same profile; the
        store's timeout unless ``timeout``, for a read of many rows); ``hedge`` only for
        a statement safe to run twice."""
        return await self._rows(statement, params, hedge=hedge, timeout=timeout)

    def _send(self, statement: Any, params: Sequence[Any] | None, timeout: float,
              host: Host | None = None) -> tuple[asyncio.Future[list[tuple[Any, ...]]], Host | None]:
        """One request; its future (on this loop) and the node it went to."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[list[tuple[Any, ...]]] = loop.create_future()
        response = self._session.execute_async(statement, params, timeout=timeout,
                                               execution_profile=PROFILE, host=host)

        def settle(value: Any, exc: BaseException | None) -> None:
            if not done.done():
                if exc is not None:
                    done.set_exception(exc)
                else:
                    done.set_result(value)

        def deliver(value: Any, exc: BaseException | None) -> None:
            release(response)  # done: no cycle left for the collector (cql_async.release)
            if loop.is_closed():
                return  # the answer a hedge won over, arriving after shutdown: nobody waits
            loop.call_soon_threadsafe(settle, value, exc)

        response.add_callbacks(lambda rows: deliver(list(rows or ()), None),
                               lambda exc: deliver(None, exc))
        return done, getattr(response, "_current_host", None)

    async def _rows(self, statement: Any, params: Sequence[Any] | None,
                    hedge: bool = True, timeout: float | None = None) -> list[tuple[Any, ...]]:
        """The statement's rows within ``timeout`` (the store's by default). A read
        (``hedge``) not answered within ``hedge_after_s``, or failed before it, is sent
        once more to another node, and the first answer wins: a node that died or hangs
        costs a page the hedge delay, not a timeout. Hedges are separate requests (never
        the driver's speculative execution, see above), so each answer belongs to its
        own request."""
        timeout = self._timeout if timeout is None else timeout
        first, coordinator = self._send(statement, params, timeout)
        deadline = asyncio.get_running_loop().time() + timeout + _GUARD_S
        if not hedge or self._hedge_after_s <= 0:
            return await asyncio.wait_for(first, timeout + _GUARD_S)
        self._hedge_tokens = min(HEDGE_BURST, self._hedge_tokens + HEDGE_SHARE)
        await asyncio.wait([first], timeout=self._hedge_after_s)
        if first.done() and first.exception() is None:
            return first.result()
        other = self._other_node(coordinator)
        if other is None or self._hedge_tokens < 1:
            if other is not None:
                self._on_hedge("over_budget")
            return await asyncio.wait_for(first, max(0.0, deadline - asyncio.get_running_loop().time()))
        self._hedge_tokens -= 1
        left = max(0.001, deadline - asyncio.get_running_loop().time() - _GUARD_S)
        second, _ = self._send(statement, params, left, other)
        pending = {first, second}
        while pending:
            done, pending = await asyncio.wait(
                pending, timeout=max(0.0, deadline - asyncio.get_running_loop().time()),
                return_when=asyncio.FIRST_COMPLETED)
            if not done:
                break
            failed = [f for f in done if f.exception() is not None]  # retrieved: no warning
            for fut in done:
                if fut not in failed:
                    self._on_hedge("hedge" if fut is second else "first")
                    for rest in pending:
                        rest.cancel()
                    return fut.result()
        for rest in pending:
            rest.cancel()
        self._on_hedge("failed")
        for fut in (first, second):  # the first request's error says the most
            if fut.done() and not fut.cancelled() and fut.exception() is not None:
                raise fut.exception()  # type: ignore[misc]
        raise asyncio.TimeoutError("no node answered the read in time")

    def _other_node(self, avoid: Host | None) -> Host | None:
        """An up node other than ``avoid`` to hedge on (None with one node)."""
        hosts = [h for h in self._session.cluster.metadata.all_hosts() if h.is_up and h != avoid]
        if not hosts:
            return None
        self._next_node = (self._next_node + 1) % len(hosts)
        return hosts[self._next_node]

    # -- the reader's graph -----------------------------------------------------------------
    async def following(self, reader_id: int, limit: int) -> dict[int, int]:
        """Followed author -> following_since (Unix ms)."""
        rows = await self._rows(self._follows.following, (reader_id, limit))
        return {author: since or 0 for author, since in rows}

    async def following_among(self, reader_id: int, authors: Sequence[int]) -> dict[int, int]:
        """Which of ``authors`` the reader follows, with following_since (Unix ms):
        one single-partition read, for a page that only needs its own items' authors."""
        if not authors:
            return {}
        rows = await self._rows(self._follows.following_among, (reader_id, list(authors)))
        return {author: since or 0 for author, since in rows}

    async def following_since(self, reader_id: int, author_id: int) -> int | None:
        rows = await self._rows(self._follows.following_one, (reader_id, author_id))
        return (rows[0][0] or 0) if rows else None

    async def blocks(self, reader_id: int) -> Blocks:
        """Everyone the reader blocks or is blocked by (both directions share the
        partition), and everyone the reader mutes (one read: the same partition), read
        slice by slice: a set cut at a page would let the posts of the rest through."""
        limit = self._blocks_page
        rows = await self._rows(self._blocks.blocks, (reader_id, limit))
        out = list(rows)
        while len(rows) == limit:  # a full slice: the partition may go on
            last = rows[-1]
            rows = await self._rows(self._blocks.blocks_after, (reader_id, last[0], last[1], limit))
            out += rows
        return Blocks.of_rows(out) if out else NO_BLOCKS

    async def hidden_between(self, reader_id: int, other_id: int) -> bool:
        """Whether ``other_id`` is hidden from the reader's feed and stream: a block
        either way, or the reader's mute of them (a row of the reader's partition)."""
        return bool(await self._rows(self._blocks.between, (reader_id, other_id)))

    async def following_from(self, reader_id: int, start: int, limit: int) -> dict[int, int]:
        """Up to ``limit`` follows from ``followed_id >= start`` on (a slice of the list)."""
        rows = await self._rows(self._follows.following_from, (reader_id, start, limit))
        return {author: since or 0 for author, since in rows}

    async def celebrities(self) -> list[CelebrityRow]:
        """``(author_id, until ms or None)``: current (None) and recently demoted authors."""
        return await self._rows(self._celebrities.celebrities, (CELEBRITY_SHARD,))

    # -- sources, in rank-key order -------------------------------------------------------------
    async def inbox_top(self, reader_id: int, limit: int,
                        after: tuple[float, int] | None = None) -> list[SourceRow]:
        """The reader's ``limit`` highest inbox rows (strictly after ``after``), as
        ``(rank_key, post_id, author_id)`` in feed order."""
        if after is None:
            return await self._rows(self._inbox.top, (reader_id, limit))
        return await self._rows(self._inbox.after, (reader_id, after[0], after[1], limit))

    async def authors_top(self, authors: Sequence[int], buckets: Sequence[int], per_partition: int,
                          after: tuple[float, int] | None = None) -> list[SourceRow]:
        """The ``per_partition`` highest rows of every (author, day bucket) timeline
        partition (strictly after ``after``), as ``(rank_key, post_id, author_id)``: one
        multi-partition read instead of one per partition. Ordered per partition only."""
        if after is None:
            return await self._rows(self._timelines.top_in, (list(authors), list(buckets), per_partition))
        return await self._rows(self._timelines.after_in, (list(authors), list(buckets), after[0],
                                                      after[1], per_partition))

    # -- post copies ------------------------------------------------------------------------
    @overload
    async def posts(self, post_ids: Sequence[int], *, with_text: Literal[False]) -> list[PostRow]: ...
    @overload
    async def posts(self, post_ids: Sequence[int], *, with_text: Literal[True]) -> list[PostTextRow]: ...
    @overload
    async def posts(self, post_ids: Sequence[int], *,
                    with_text: bool) -> list[PostRow] | list[PostTextRow]: ...

    async def posts(self, post_ids: Sequence[int], *,
                    with_text: bool) -> list[PostRow] | list[PostTextRow]:
        """Copies of ``post_ids`` (one IN query; the caller chunks): ``PostRow``s, or
        ``PostTextRow``s ``with_text``."""
        statement = self._posts.texts if with_text else self._posts.states
        return await self._rows(statement, (list(post_ids),))

    # -- like counts ------------------------------------------------------------------------
    async def like_counts(self, post_ids: Sequence[int]) -> dict[int, int]:
        """The like counts of ``post_ids`` (one IN read of the count rows; the caller
        chunks): a post no like ever reached is absent (its count is 0)."""
        if not post_ids:
            return {}
        rows = await self._rows(self._like_counts.counts_in, (list(post_ids),))
        return {int(post): int(count or 0) for post, count in rows}

    # -- preferences ------------------------------------------------------------------------
    async def feed_order(self, reader_id: int) -> str | None:
        """The reader's stored feed order, or None when none is stored."""
        rows = await self._rows(self._preferences.feed_order, (reader_id,))
        return FeedOrderRow._make(rows[0]).feed_order if rows else None

    async def save_feed_order(self, reader_id: int, order: str) -> None:
        await self._rows(self._preferences.save_feed_order, (reader_id, order), hedge=False)

    # -- snapshots ----------------------------------------------------------------------------
    async def save_snapshot_slot(self, row: SlotRow, timeout_s: float) -> None:
        """A slot's rows of snapshots (snapshots/snapshot_writer.py), one request: a single
        insert, or an unlogged batch of one partition (one mutation; Cassandra checks no
        batch size on those). Given ``timeout_s``: written behind the page, not held to
        the read path's timeout."""
        save = self._slots.save
        if len(row.parts) == 1:
            (part, payload), = row.parts
            await self._rows(save, (row.slot, part, payload, row.ttl_s), hedge=False, timeout=timeout_s)
            return
        batch = BatchStatement(batch_type=BatchType.UNLOGGED)
        for part, payload in row.parts:
            batch.add(save, (row.slot, part, payload, row.ttl_s))
        await self._rows(batch, None, hedge=False, timeout=timeout_s)

    async def load_snapshot(self, reader_id: int, feed_version: str) -> tuple[bytes, datetime] | None:
        """The reader's stored snapshot of that version and when it was made; None when
        there is none (expired, never stored, or a version no writer placed)."""
        slot, wanted = snapshot.slot_of(feed_version), snapshot.parts_of(feed_version)
        if slot is None or wanted is None:
            return None
        rows = await self._rows(self._slots.load, (slot, *wanted))
        try:
            parts = (row.payload for row in map(PayloadRow._make, rows) if row.payload is not None)
            found = snapshot.find_in_slot(parts, reader_id, feed_version)
        except ValueError:  # a damaged row: the walk restarts (snapshot_expired), not a 503
            log.warning("snapshot slot %s is damaged", slot)
            return None
        if found is None:
            return None
        blob, created_ms = found
        return blob, datetime.fromtimestamp(created_ms / 1000, tz=timezone.utc)
