"""``CountedEdges``: edges and their partition's count, changed together by one
conditional batch (0006_counted_edges.cql; the decisions are in edge_transitions.py).

Why one conditional (Paxos) batch: a Cassandra counter cannot share a batch with other
cells, cannot be conditional and is not idempotent (a timed-out increment may or may
not have applied), so no order of "write the edge's state" and "bump the counter" keeps
a crash or a retry between them from losing or doubling the increment. Here the count is
a plain ``bigint`` static column of the edges' partition, and an edge's state, its LSN
and the new count go in ONE single-partition batch whose conditions are the stored LSN
of every edge it writes and the stored count: all of it is applied or none of it; a
replay reads its own LSN back and writes nothing; a batch that times out either applied
(the retry reads its LSN) or did not (the retry applies it). A concurrent writer of the
partition (another worker for a moment during a rebalance, or another worker's follows
of the same author) makes the batch fail its conditions; the round is then planned
again from a linearizable (SERIAL) read of what that writer stored.

Cost: a Paxos round per batch (several times a plain write's work on the node). So the
changes of one partition are combined: at most one round per partition is in flight in
this process, and every change of that partition arriving meanwhile joins the next one
(up to ``MAX_CHANGES_PER_ROUND``). A hot post's likes of one batch take a few rounds,
not one each, and one process's rounds never contend with each other.

Every write of these tables is conditional (plain and Paxos writes of one cell do not
mix linearizably); the cells carry the ballot's write time, so the LSN is a value.
"""
from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from typing import Awaitable, Callable, Sequence

from cassandra import ConsistencyLevel
from cassandra.cluster import Session
from cassandra.query import BatchStatement, BatchType
from prometheus_client import Counter

from services.shared.domain.edge_transitions import (CountedRound, EdgeChange, EdgeState, EdgeStep,
                                                     plan_round)

from .cql_async import CqlRunner, WriteContended

# Changes per conditional batch: 64 edge rows are well under the node's 5 KiB batch
# warning, and a batch of 64 costs the node about twice one of 1 (measured: ~6 ms
# against ~3 ms), so a hot post's 300 likes of one consumer batch take 5 rounds, not 300.
MAX_CHANGES_PER_ROUND = 64
# Lost conditions before a round gives up with ``WriteContended`` (transient: the
# message is retried with backoff). Rounds of one process never contend, so this only
# counts other workers' rounds on the same partition.
MAX_CONFLICTS = 8
# Upper bound (s) of the random pause after a lost condition: two workers retrying one
# partition in step would collide again.
CONFLICT_JITTER_S = 0.02
# The partition's count row: an edge id no user has (ids are positive), written with the
# count. A static column comes back with every row a query returns, so reading the
# changed edges together with this row gets their states and the count in ONE request
# (without it, a partition's first change of an edge, the usual case, matches no row).
COUNT_ROW = -1

ROUNDS = Counter("feed_counted_edge_rounds_total", "Conditional batches of edges and counts", ["table"])
CHANGES = Counter("feed_counted_edge_changes_total", "Edge changes applied through rounds", ["table"])
CONFLICTS = Counter("feed_counted_edge_conflicts_total",
                    "Rounds planned again after another writer changed the partition", ["table"])


@dataclass(frozen=True)
class EdgeTable:
    """Where one kind of edge and its count live."""

    name: str        # follow_edges, like_edges
    partition: str   # partition key column: followed_id, post_id
    edge: str        # clustering column: follower_id, user_id
    state: str       # the edge's boolean state: following, liked
    count: str       # the partition's static count: followers, likes


@dataclass
class _Pending:
    change: EdgeChange
    done: asyncio.Future[EdgeStep]


class CountedEdges:
    """One table of counted edges (``EdgeTable``). ``apply`` is the only writer."""

    def __init__(self, session: Session, runner: CqlRunner, table: EdgeTable, *,
                 max_changes_per_round: int = MAX_CHANGES_PER_ROUND,
                 max_conflicts: int = MAX_CONFLICTS,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        t = table
        self.table = table
        self._run = runner
        self._max_changes = max(1, max_changes_per_round)
        self._max_conflicts = max_conflicts
        self._sleep = sleep
        p = session.prepare
        edges = f"SELECT {t.edge}, {t.state}, lsn, {t.count} FROM {t.name} WHERE {t.partition}=? AND {t.edge} IN ?"
        self._read_edges = p(edges)
        # After a lost condition: a read that finishes any Paxos round in progress, so the
        # next plan starts from what the other writer committed, not a stale replica.
        self._serial_read_edges = p(edges)
        self._serial_read_edges.consistency_level = ConsistencyLevel.SERIAL
        self._read_count = p(f"SELECT {t.count} FROM {t.name} WHERE {t.partition}=? LIMIT 1")
        self._write_edge = p(f"UPDATE {t.name} SET {t.state}=?, lsn=? "
                             f"WHERE {t.partition}=? AND {t.edge}=? IF lsn=?")
        # The count (static) and the count row's one cell (lsn 0: it is no edge).
        self._write_count = p(f"UPDATE {t.name} SET {t.count}=?, lsn=0 "
                              f"WHERE {t.partition}=? AND {t.edge}={COUNT_ROW} IF {t.count}=?")
        self._waiting: dict[int, list[_Pending]] = {}  # per partition with a round running
        self._rounds: set[asyncio.Task[None]] = set()

    async def apply(self, partition: int, change: EdgeChange) -> EdgeStep:
        """Apply one edge change and move the partition's count with it (one conditional
        batch, shared with the partition's other changes in flight); returns the step
        (``delta`` is already stored when this returns)."""
        waiting = self._waiting.get(partition)
        if waiting is not None:  # a round is running: join the next one
            done: asyncio.Future[EdgeStep] = asyncio.get_running_loop().create_future()
            waiting.append(_Pending(change, done))
            return await done
        # No round running: this caller runs its own (the common case of a quiet
        # partition costs no task), and hands what arrived meanwhile to a task of rounds.
        waiting = self._waiting[partition] = []
        try:
            return (await self._round(partition, [change]))[0]
        finally:
            if waiting:
                task = asyncio.ensure_future(self._drain(partition, waiting))
                self._rounds.add(task)  # referenced until done
                task.add_done_callback(self._rounds.discard)
            else:
                del self._waiting[partition]

    async def count(self, partition: int) -> int:
        """The partition's count (0 when nothing was ever counted)."""
        rows = await self._run.execute(self._read_count, (partition,))
        return int(rows[0][0] or 0) if rows else 0

    async def _drain(self, partition: int, waiting: list[_Pending]) -> None:
        """Rounds for the partition until no change waits (a change that arrives during
        a round joins the next one); then the partition has no round running."""
        taken: list[_Pending] = []
        try:
            while waiting:
                taken = [p for p in waiting[:self._max_changes] if not p.done.done()]  # done: cancelled
                del waiting[:self._max_changes]
                if not taken:
                    continue
                try:
                    steps = await self._round(partition, [p.change for p in taken])
                except Exception as exc:  # noqa: BLE001 - each waiter gets the round's error
                    for p in taken:
                        if not p.done.done():
                            p.done.set_exception(exc)
                    continue
                for p, step in zip(taken, steps):
                    if not p.done.done():
                        p.done.set_result(step)
        finally:
            del self._waiting[partition]
            for p in taken + waiting:  # left only when this task is cancelled
                if not p.done.done():
                    p.done.cancel()

    async def _round(self, partition: int, changes: Sequence[EdgeChange]) -> tuple[EdgeStep, ...]:
        edges = list(dict.fromkeys(c.edge for c in changes))
        stored, count = await self._read(partition, edges, serial=False)
        conflicts = 0
        while True:
            plan = plan_round(stored, count, changes)
            if not plan.writes or await self._write(partition, plan):
                CHANGES.labels(self.table.name).inc(len(changes))
                return plan.steps
            CONFLICTS.labels(self.table.name).inc()
            conflicts += 1
            if conflicts > self._max_conflicts:
                raise WriteContended(f"{self.table.name} partition {partition}: "
                                     f"{conflicts} conditional batches lost to other writers")
            await self._sleep(random.uniform(0, CONFLICT_JITTER_S))
            stored, count = await self._read(partition, edges, serial=True)

    async def _read(self, partition: int, edges: list[int],
                    serial: bool) -> tuple[dict[int, EdgeState], int | None]:
        """The stored states of ``edges`` and the partition's count, in one request."""
        statement = self._serial_read_edges if serial else self._read_edges
        rows = await self._run.execute(statement, (partition, [COUNT_ROW, *edges]))
        stored = {int(r[0]): EdgeState(bool(r[1]), int(r[2])) for r in rows
                  if r[0] != COUNT_ROW and r[1] is not None and r[2] is not None}
        count = rows[0][3] if rows else None  # static: the same on every row
        return stored, None if count is None else int(count)

    async def _write(self, partition: int, plan: CountedRound) -> bool:
        """The round's one conditional batch; True when it applied."""
        batch = BatchStatement(batch_type=BatchType.UNLOGGED)
        for w in plan.writes:
            batch.add(self._write_edge, (w.state.active, w.state.lsn, partition, w.edge,
                                         None if w.expected is None else w.expected.lsn))
        if plan.moves_count:
            batch.add(self._write_count, (plan.new_count, partition, plan.count))
        ROUNDS.labels(self.table.name).inc()
        rows = await self._run.execute(batch)
        return bool(rows and rows[0][0])
