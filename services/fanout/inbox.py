"""Reader inboxes in Cassandra (``feed_inbox``, rows in rank-key order): push, move,
unpush, purge an author, trim the tail. The statements and row types are the table's
owner's (services/shared/stores/inbox.py); this store batches and sends them.

A row is ``(reader_id, rank_key, post_id) -> author_id``: the post's time-invariant rank
key (``rank_key`` of services/shared/domain/ranking.py) in the clustering order, so a
first page reads the top of the partition. Writes carry ``USING TIMESTAMP`` in microseconds (0005_rank_keys.cql):
a post's rows the write time of its key, removals the time they are decided. Trimming
deletes everything below the cap boundary with ONE range tombstone at the tail (the
lowest keys), so a first page, read from the head, never walks it.

A post's rows go to many readers' partitions. They are sent as unlogged batches of rows
that share the same replicas (the Spark Cassandra connector's ``replica_set`` grouping):
the coordinator is a replica of every row, so a batch costs the node what its rows cost
one by one, and the worker's per-request cost (measured with py-spy: the driver's
``execute_async`` was 40 % of the fan-out's CPU) is paid once per batch instead of per
row. A move sends each reader's delete and insert in one batch (one partition: applied
together, so no reader ever holds both keys or neither). Batches in flight are bounded
per process (``push_batches_in_flight``), so a burst of large audiences queues in the
worker, not on the node.
"""
from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol, Sequence

from cassandra.cluster import Session
from cassandra.query import BatchStatement, BatchType, PreparedStatement

from services.shared.contracts.serving_changes import NO_NOTICES, ChangeSink, ServingChange
from services.shared.domain.rules import INBOX_TTL_S
from services.shared.stores.cql_async import CqlRunner, replica_group
from services.shared.stores.inbox import FanoutInbox
from services.shared.stores.inbox import InboxEntry as StoredRow
from services.shared.stores.read_coalescer import PartitionReads
from services.shared.stores.write_coalescer import WriteCoalescer

from .audience import should_check_cap, trim_boundary
from .cleanup import rows_to_purge

if TYPE_CHECKING:
    from cassandra.pool import Host


# Rows per batch (one partition, or one replica set) where no other size is given; the
# worker passes fanout_batch_rows (200, ~8 KB of inbox rows). The stack's batch size and
# unlogged-batch partition warning thresholds are set above it (deploy/stack/cassandra.py).
PUSH_BATCH_ROWS = 50
_BIGINT = struct.Struct(">q")
_READER = itemgetter(0)  # of a (reader, row values) pair


@dataclass(frozen=True, slots=True)
class InboxRow:
    """One post for one reader's inbox: where it sorts, its write time and TTL left."""

    post_id: int
    author_id: int
    rank_key: float
    key_ts: int
    ttl_s: int


class InboxPort(Protocol):
    """What the fan-out (``PostFanout``, ``RelationChanges``, ``RankMoves``) and the inbox
    rebuild need of reader inboxes. ``InboxStore`` is the Cassandra one; the tests'
    in-memory one (tests/support/memory_stores.py) passes the same contract suite
    (tests/support/contracts/inbox_store_contract.py), so it cannot drift. Every method
    returns how many readers (or rows, for ``push_posts`` and ``purge_author``) it wrote,
    and tells its ``ChangeSink`` which readers' rows changed."""

    async def push(self, reader_ids: Iterable[int], post_id: int, author_id: int,
                   rank_key: float, key_ts: int, ttl_s: int = INBOX_TTL_S) -> int: ...
    async def push_many(self, pushes: Sequence[tuple[Sequence[int], InboxRow]]) -> int: ...
    async def move(self, reader_ids: Iterable[int], post_id: int, author_id: int,
                   old_keys: Sequence[float], new_key: float, key_ts: int, ttl_s: int) -> int: ...
    async def push_posts(self, reader_id: int, rows: Sequence[InboxRow]) -> int: ...
    async def unpush(self, reader_ids: Iterable[int], post_id: int, keys: Sequence[float],
                     ts: int) -> int: ...
    async def purge_author(self, reader_id: int, author_id: int, ts: int,
                           in_flight: Iterable[tuple[float, int]] = ()) -> int: ...
    async def enforce_cap(self, reader_ids: Iterable[int], post_id: int, ts: int) -> int: ...


class InboxStore:
    def __init__(self, session: Session, runner: CqlRunner, *, max_in_flight: int,
                 cap: int, trim_every: int, push_batches_in_flight: int = 16,
                 notices: ChangeSink = NO_NOTICES, writes: WriteCoalescer | None = None,
                 read_linger_s: float | None = None, batch_rows: int = PUSH_BATCH_ROWS) -> None:
        self._run = runner
        self._batch_rows = max(1, batch_rows)
        # A push's rows join those of the other posts being fanned out at once, grouped by
        # replicas (write_coalescer.py): a batch carries rows of several posts, and a
        # reader's rows of several posts are one mutation. None: each push batches its
        # own rows (``_send_grouped``).
        self._writes = writes
        # Told which readers' rows changed after every write (serving_changes.py): the
        # API caches inbox tops.
        self._notices = notices
        self._session = session
        self._max_in_flight = max_in_flight
        self._push_batches_in_flight = max(1, push_batches_in_flight)
        self._push_permits: asyncio.Semaphore | None = None  # made on the worker's loop
        self._cap = cap
        self._trim_every = trim_every
        # The owner's statements (services/shared/stores/inbox.py).
        self._s = statements = FanoutInbox(session)
        # The sampled cap checks of concurrent posts read their heads as one IN read
        # (read_coalescer.py), with a linger.
        self._heads = None if read_linger_s is None else PartitionReads(
            runner, statements.heads_in, extra=(cap + 1,), linger_s=read_linger_s)

    def _permits(self) -> asyncio.Semaphore:
        if self._push_permits is None:
            self._push_permits = asyncio.Semaphore(self._push_batches_in_flight)
        return self._push_permits

    async def _send_grouped(self, reader_ids: Iterable[int],
                            rows_of: Callable[[int], list[tuple[PreparedStatement, tuple[object, ...]]]],
                            ) -> int:
        """Each reader's statements, in unlogged batches of readers sharing replicas (a
        reader's statements never split across batches); returns the readers written."""
        batches: list[tuple[BatchStatement, int]] = []
        for readers in self._by_replicas(reader_ids):
            batch, count, size = BatchStatement(batch_type=BatchType.UNLOGGED), 0, 0
            for reader in readers:
                statements = rows_of(reader)
                if size and size + len(statements) > self._batch_rows:
                    batches.append((batch, count))
                    batch, count, size = BatchStatement(batch_type=BatchType.UNLOGGED), 0, 0
                for statement, params in statements:
                    batch.add(statement, params)
                count, size = count + 1, size + len(statements)
            if size:
                batches.append((batch, count))
        permits = self._permits()

        async def send(batch: BatchStatement, count: int) -> int:
            async with permits:
                await self._run.execute(batch)
            return count

        # Every batch is started, at most the process-wide permit count run at once; the
        # first error is raised after the others finish (a retry rewrites them all, the
        # writes are idempotent).
        results = await asyncio.gather(*(send(b, c) for b, c in batches), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return sum(results)  # type: ignore[arg-type]

    async def push(self, reader_ids: Iterable[int], post_id: int, author_id: int,
                   rank_key: float, key_ts: int, ttl_s: int = INBOX_TTL_S) -> int:
        """Write the post into each reader's inbox under ``rank_key`` at ``key_ts`` (µs),
        the rows living ``ttl_s`` (what is left of the post's inbox TTL:
        ``audience.inbox_ttl_s``); returns rows written."""
        if ttl_s <= 0:
            return 0  # too old for any inbox (and TTL 0 would mean "never expires")
        push = self._s.push
        readers = list(reader_ids)
        if self._writes is not None:
            written = await self._writes.write_keyed(push, readers, (rank_key, post_id, author_id, ttl_s, key_ts))
        else:
            written = await self._send_grouped(
                readers, lambda r: [(push, (r, rank_key, post_id, author_id, ttl_s, key_ts))])
        await self._changed(readers)
        return written

    async def push_many(self, pushes: Sequence[tuple[Sequence[int], InboxRow]]) -> int:
        """Several posts' pushes (each post's readers and row) at once, written grouped by
        reader: a reader's rows of these posts leave in one batch, so the node applies
        them as one partition mutation instead of one per row (a consumer batch's recent
        posts: docs/fanout.md, "The backlog intake"). The same statements and values as
        ``push`` for each; returns rows written."""
        # (reader, the post's row values but the reader), each post's values one tuple
        # that every one of its rows shares; sorted by reader (stable, in C), so a
        # reader's rows of these posts are neighbours. Built once: with an index per row
        # and a second list of the same rows, building a round shaped like the month of
        # history's (233 posts, 100 readers each) took 0.71 µs a row, now 0.37 (timeit).
        rows: list[tuple[int, tuple[float, int, int, int, int]]] = []
        for readers, row in pushes:
            if row.ttl_s > 0:  # TTL 0 would mean "never expires"
                rest = (row.rank_key, row.post_id, row.author_id, row.ttl_s, row.key_ts)
                rows += zip(readers, repeat(rest))
        if not rows:
            return 0
        rows.sort(key=_READER)
        push = self._s.push
        if self._writes is not None:
            written = await self._writes.write_keyed_rows(push, rows)
        else:
            rows_of: dict[int, list[tuple[float, int, int, int, int]]] = {}
            for reader, rest in rows:
                rows_of.setdefault(reader, []).append(rest)
            await self._send_grouped(rows_of, lambda reader: [
                (push, (reader, *rest)) for rest in rows_of[reader]])
            written = len(rows)
        await self._changed(list(dict.fromkeys(map(_READER, rows))))
        return written

    async def _changed(self, readers: Sequence[int]) -> None:
        if readers:
            await self._notices.changed(ServingChange(inboxes=tuple(readers)))

    async def move(self, reader_ids: Iterable[int], post_id: int, author_id: int,
                   old_keys: Sequence[float], new_key: float, key_ts: int, ttl_s: int) -> int:
        """Move the post's row in each reader's inbox from ``old_keys`` to ``new_key``:
        the tombstones and the new row in one single-partition batch, all at ``key_ts``,
        so a late write of an old key (older timestamp) stays shadowed. Returns readers."""
        old = [k for k in dict.fromkeys(old_keys) if k != new_key]
        push, unpush = self._s.push, self._s.unpush
        readers = list(reader_ids)
        if ttl_s <= 0:  # past the inbox TTL: the rows have expired, only make sure
            moved = await self._send_grouped(
                readers, lambda r: [(unpush, (key_ts, r, k, post_id)) for k in old])
        else:
            moved = await self._send_grouped(
                readers, lambda r: [(unpush, (key_ts, r, k, post_id)) for k in old]
                + [(push, (r, new_key, post_id, author_id, ttl_s, key_ts))])
        await self._changed(readers)
        return moved

    def _by_replicas(self, reader_ids: Iterable[int]) -> list[list[int]]:
        """Readers grouped by the replicas of their inbox partition (one group on a
        single node, or when every node holds every row)."""
        readers = list(reader_ids)
        if len(self._session.cluster.metadata.all_hosts()) <= 1:
            return [readers] if readers else []
        groups: dict[frozenset[Host] | None, list[int]] = {}
        for reader in readers:
            groups.setdefault(replica_group(self._session, _BIGINT.pack(reader)), []).append(reader)
        return list(groups.values())

    async def push_posts(self, reader_id: int, rows: Sequence[InboxRow]) -> int:
        """Write several posts into one reader's inbox: one partition, so one unlogged
        batch per ``batch_rows`` rows instead of a request per row."""
        rows = [r for r in rows if r.ttl_s > 0]  # TTL 0 would mean "never expires"
        batches: list[tuple[Any, Sequence[Any]]] = []
        for start in range(0, len(rows), self._batch_rows):
            batch = BatchStatement(batch_type=BatchType.UNLOGGED)
            for r in rows[start:start + self._batch_rows]:
                batch.add(self._s.push, (reader_id, r.rank_key, r.post_id, r.author_id, r.ttl_s, r.key_ts))
            batches.append((batch, ()))
        await self._run.run_bounded(batches, self._max_in_flight)
        await self._changed([reader_id] if rows else [])
        return len(rows)

    async def unpush(self, reader_ids: Iterable[int], post_id: int, keys: Sequence[float],
                     ts: int) -> int:
        """Remove the post (stored under any of ``keys``) from each reader's inbox."""
        unpush = self._s.unpush
        wanted = list(dict.fromkeys(keys))
        readers = list(reader_ids)
        removed = await self._send_grouped(
            readers, lambda r: [(unpush, (ts, r, k, post_id)) for k in wanted])
        await self._changed(readers)
        return removed

    async def rows(self, reader_id: int) -> list[StoredRow]:
        """Every row of one reader's inbox (bounded by the cap and the TTL)."""
        out: list[StoredRow] = []
        async for page in self._run.pages(self._s.rows, (reader_id,)):
            out += [StoredRow(r[0], r[1], r[2]) for r in page]
        return out

    async def purge_author(self, reader_id: int, author_id: int, ts: int,
                           in_flight: Iterable[tuple[float, int]] = ()) -> int:
        """Remove every row of ``author_id`` from one reader's inbox (unfollow, block),
        and tombstone the ``(rank_key, post_id)`` rows in ``in_flight`` (posts a
        concurrent fan-out may still push: the tombstone at ``ts`` shadows their older
        rows whenever they land)."""
        doomed: set[tuple[float, int]] = set(in_flight)
        doomed.update(rows_to_purge(await self.rows(reader_id), author_id))
        ordered = sorted(doomed)
        statements = []
        for i in range(0, len(ordered), self._batch_rows):
            batch = BatchStatement(batch_type=BatchType.UNLOGGED)
            for key, post_id in ordered[i:i + self._batch_rows]:
                batch.add(self._s.unpush, (ts, reader_id, key, post_id))
            statements.append((batch, ()))
        await self._run.run_bounded(statements, self._max_in_flight)
        await self._changed([reader_id] if ordered else [])
        return len(ordered)

    async def enforce_cap(self, reader_ids: Iterable[int], post_id: int, ts: int) -> int:
        """Trim sampled readers' inboxes to the cap; returns how many were trimmed."""
        sampled = [r for r in reader_ids if should_check_cap(r, post_id, self._trim_every)]
        # At most a page of followers / trim_every readers: a handful of reads at once.
        results = await asyncio.gather(*(self._trim_one(r, ts) for r in sampled))
        return sum(results)

    async def _trim_one(self, reader_id: int, ts: int) -> int:
        if self._heads is not None:
            keys = [r[1] for r in await self._heads.rows(reader_id)]
        else:
            keys = [r[0] for r in await self._run.execute(self._s.head, (reader_id, self._cap + 1))]
        boundary = trim_boundary(keys, self._cap)
        if boundary is None:
            return 0
        await self._run.execute(self._s.trim, (ts, reader_id, boundary))
        await self._changed([reader_id])
        return 1
