"""Reader inboxes in Cassandra: push rows, unpush rows, purge an author, trim the tail.

Writes use prepared statements, go out concurrently with a bound on rows in flight, and
carry ``USING TIMESTAMP <lsn>``. Trimming deletes everything below the cap boundary with
ONE range tombstone at the tail, so a first page (read from the head) never walks it.

A post's rows go to many readers' partitions. They are sent as unlogged batches of rows
that share the same replicas (the Spark Cassandra connector's ``replica_set`` grouping):
the coordinator is a replica of every row, so a batch costs the node what its rows cost
one by one, and the worker's per-request cost (measured with py-spy: the driver's
``execute_async`` was 40 % of the fan-out's CPU) is paid once per batch instead of per
row. Batches in flight are bounded per process (``push_batches_in_flight``), so a burst
of large audiences queues in the worker, not on the node.
"""
from __future__ import annotations

import asyncio
import struct
from typing import Iterable, Sequence

from cassandra.cluster import Session
from cassandra.query import BatchStatement, BatchType

from services.common.cql_async import CqlRunner

from .audience import INBOX_TTL_S, should_check_cap, trim_boundary
from .cleanup import rows_to_purge


# Rows per batch (one partition, or one replica set): 50 inbox rows are ~2 KB, under
# Cassandra's 5 KB batch warning threshold; the stack's unlogged-batch partition warning
# threshold is set above it (deploy/stack/cassandra.py).
PUSH_BATCH_ROWS = 50
_BIGINT = struct.Struct(">q")


class InboxStore:
    def __init__(self, session: Session, runner: CqlRunner, *, max_in_flight: int,
                 cap: int, trim_every: int, push_batches_in_flight: int = 16) -> None:
        self._run = runner
        self._session = session
        self._max_in_flight = max_in_flight
        self._push_batches_in_flight = max(1, push_batches_in_flight)
        self._push_permits: asyncio.Semaphore | None = None  # made on the worker's loop
        self._cap = cap
        self._trim_every = trim_every
        p = session.prepare
        self._push = p("INSERT INTO inbox (reader_id, post_id, author_id) VALUES (?,?,?) "
                       "USING TTL ? AND TIMESTAMP ?")
        self._unpush = p("DELETE FROM inbox USING TIMESTAMP ? WHERE reader_id=? AND post_id=?")
        self._unpush_many = p("DELETE FROM inbox USING TIMESTAMP ? WHERE reader_id=? AND post_id IN ?")
        self._head = p("SELECT post_id FROM inbox WHERE reader_id=? LIMIT ?")
        self._rows = p("SELECT post_id, author_id FROM inbox WHERE reader_id=?")
        self._rows.fetch_size = 1000
        self._trim = p("DELETE FROM inbox USING TIMESTAMP ? WHERE reader_id=? AND post_id < ?")

    async def push(self, reader_ids: Iterable[int], post_id: int, author_id: int, lsn: int,
                   ttl_s: int = INBOX_TTL_S) -> int:
        """Write the post into each reader's inbox, the rows living ``ttl_s`` (what is left
        of the post's inbox TTL: ``audience.inbox_ttl_s``); returns rows written."""
        if ttl_s <= 0:
            return 0  # too old for any inbox (and TTL 0 would mean "never expires")
        batches = []
        for readers in self._by_replicas(reader_ids):
            for start in range(0, len(readers), PUSH_BATCH_ROWS):
                batch = BatchStatement(batch_type=BatchType.UNLOGGED)
                for reader in readers[start:start + PUSH_BATCH_ROWS]:
                    batch.add(self._push, (reader, post_id, author_id, ttl_s, lsn))
                batches.append(batch)
        if self._push_permits is None:
            self._push_permits = asyncio.Semaphore(self._push_batches_in_flight)
        permits = self._push_permits

        async def send(batch: BatchStatement) -> int:
            async with permits:
                await self._run.execute(batch)
            return len(batch)

        # Every batch is started, at most the process-wide permit count run at once; the
        # first error is raised after the others finish (a retry rewrites them all, the
        # writes are idempotent).
        results = await asyncio.gather(*(send(b) for b in batches), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return sum(results)  # type: ignore[arg-type]

    def _by_replicas(self, reader_ids: Iterable[int]) -> list[list[int]]:
        """Readers grouped by the replicas of their inbox partition (one group on a
        single node, or when every node holds every row)."""
        readers = list(reader_ids)
        metadata = self._session.cluster.metadata
        if len(metadata.all_hosts()) <= 1:
            return [readers] if readers else []
        keyspace = self._session.keyspace
        groups: dict[frozenset, list[int]] = {}
        for reader in readers:
            replicas = frozenset(metadata.get_replicas(keyspace, _BIGINT.pack(reader)))
            groups.setdefault(replicas, []).append(reader)
        return list(groups.values())

    async def push_posts(self, reader_id: int, posts: Sequence[tuple[int, int, int, int]]) -> int:
        """Write ``(post_id, author_id, lsn, ttl_s)`` rows into one reader's inbox: one
        partition, so one unlogged batch per ``PUSH_BATCH_ROWS`` instead of a request per row."""
        posts = [p for p in posts if p[3] > 0]  # TTL 0 would mean "never expires"
        batches = []
        for start in range(0, len(posts), PUSH_BATCH_ROWS):
            batch = BatchStatement(batch_type=BatchType.UNLOGGED)
            for post_id, author_id, lsn, ttl_s in posts[start:start + PUSH_BATCH_ROWS]:
                batch.add(self._push, (reader_id, post_id, author_id, ttl_s, lsn))
            batches.append((batch, ()))
        await self._run.run_bounded(batches, self._max_in_flight)
        return len(posts)

    async def unpush(self, reader_ids: Iterable[int], post_id: int, lsn: int) -> int:
        """Remove the post from each reader's inbox (row tombstones at ``lsn``)."""
        return await self._run.run_bounded(
            ((self._unpush, (lsn, r, post_id)) for r in reader_ids), self._max_in_flight)

    async def purge_author(self, reader_id: int, author_id: int, lsn: int,
                           in_flight: Iterable[int] = ()) -> int:
        """Remove every row of ``author_id`` from one reader's inbox (unfollow, block),
        and tombstone ``in_flight`` posts (ones a concurrent fan-out may still push: the
        tombstone at ``lsn`` shadows their older rows whenever they land)."""
        doomed: set[int] = set(in_flight)
        async for rows in self._run.pages(self._rows, (reader_id,)):
            doomed.update(rows_to_purge(((r.post_id, r.author_id) for r in rows), author_id))
        ordered = sorted(doomed)
        await self._run.run_bounded(
            ((self._unpush_many, (lsn, reader_id, ordered[i:i + PUSH_BATCH_ROWS]))
             for i in range(0, len(ordered), PUSH_BATCH_ROWS)), self._max_in_flight)
        return len(ordered)

    async def enforce_cap(self, reader_ids: Iterable[int], post_id: int, lsn: int) -> int:
        """Trim sampled readers' inboxes to the cap; returns how many were trimmed."""
        sampled = [r for r in reader_ids if should_check_cap(r, post_id, self._trim_every)]
        # At most a page of followers / trim_every readers: a handful of reads at once.
        results = await asyncio.gather(*(self._trim_one(r, lsn) for r in sampled))
        return sum(results)

    async def _trim_one(self, reader_id: int, lsn: int) -> int:
        rows = await self._run.execute(self._head, (reader_id, self._cap + 1))
        boundary = trim_boundary([r.post_id for r in rows], self._cap)
        if boundary is None:
            return 0
        await self._run.execute(self._trim, (lsn, reader_id, boundary))
        return 1
