"""``CountedEdges``: edges and their partition's count, written by the count's one owner
with plain batches ordered by topic offsets (0006_counted_edges.cql; the decisions are in
edge_transitions.py, why it is exact in docs/fanout.md, "Counts").

Why not a counter: a Cassandra counter cannot share a batch with other cells and is not
idempotent (a timed-out increment may or may not have applied), so no order of "write
the edge's state" and "bump the counter" keeps a crash or a retry between them from
losing or doubling the increment. Here the count is a plain ``bigint`` static column of
the edges' partition, and an edge's state, its LSN and the new count go in ONE
single-partition batch: all of it is applied or none of it.

Why not Paxos (what this module did before): a conditional batch is four round trips to
a quorum, plus a SERIAL read whenever another writer got there first; on three replicas
it was the dearest statement the pipeline sent, and the first to collapse under a
backlog. Now every change of a count reaches one consumer (a count topic keyed by the
counted entity, contracts/edge_counts.py), which applies a batch of them per count:
one read of the changed edges and the count, then one plain batch ``USING TIMESTAMP
write_time(generation, last offset)``. A replay reads its edges' LSNs back and writes
nothing; a stale owner's or a timed-out write loses to every later offset and agrees
with the same one.

Every write of these tables carries an owned write time (above any wall clock): a
write without one would lose to them all, silently.

This module owns both tables (``FOLLOW_EDGES``, ``LIKE_EDGES``): their statements are
built here from an ``EdgeTable``. ``CountedEdges`` is the count's owner (the only
writer); ``CountReads`` is what everyone else reads (a count, counts as one coalesced
``IN`` read, one edge's state).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from cassandra.cluster import Session
from cassandra.query import BatchStatement, BatchType
from prometheus_client import Counter

from services.shared.domain.edge_transitions import EdgeChange, EdgeState, plan_round
from services.shared.domain.owned_counts import write_time

from .cql_async import CqlRunner

# Changes per batch: 64 edge rows stay under the node's 5 KiB batch warning. A hot post's
# 300 likes of one consumer batch take 5 batches, one after the other.
MAX_CHANGES_PER_BATCH = 64
# The partition's count row: an edge id no user has (ids are positive), written with the
# count. A static column comes back with every row a query returns, so reading the
# changed edges together with this row gets their states and the count in ONE request
# (without it, a partition's first change of an edge, the usual case, matches no row).
COUNT_ROW = -1

BATCHES = Counter("feed_counted_edge_batches_total", "Batches of edges and counts written by their owner",
                  ["table"])
CHANGES = Counter("feed_counted_edge_changes_total", "Edge changes applied by count owners", ["table"])
REPLAYS = Counter("feed_counted_edge_replays_total",
                  "Edge changes read back as already applied or overtaken (a replay, a duplicate)",
                  ["table"])


@dataclass(frozen=True)
class EdgeTable:
    """Where one kind of edge and its count live."""

    name: str        # follow_edges, like_edges
    partition: str   # partition key column: followed_id, post_id
    edge: str        # clustering column: follower_id, user_id
    state: str       # the edge's boolean state: following, liked
    count: str       # the partition's static count: followers, likes

    def count_cql(self) -> str:
        """partition -> (count,): the count row's static column, one row."""
        return f"SELECT {self.count} FROM {self.name} WHERE {self.partition}=? LIMIT 1"

    def counts_in_cql(self) -> str:
        """[partition] -> (partition, count) (services/shared/stores/read_coalescer.py)."""
        return (f"SELECT {self.partition}, {self.count} FROM {self.name} "
                f"WHERE {self.partition} IN ? PER PARTITION LIMIT 1")

    def edge_state_cql(self) -> str:
        """(partition, edge) -> (state,): None, or whether the edge counts."""
        return f"SELECT {self.state} FROM {self.name} WHERE {self.partition}=? AND {self.edge}=?"

    def all_counts_cql(self) -> str:
        """Every partition's (partition, count): a scan, for an operator's check."""
        return f"SELECT DISTINCT {self.partition}, {self.count} FROM {self.name}"


# A follow and its author's follower count; a like and its post's like count.
FOLLOW_EDGES = EdgeTable("follow_edges", partition="followed_id", edge="follower_id",
                         state="following", count="followers")
LIKE_EDGES = EdgeTable("like_edges", partition="post_id", edge="user_id", state="liked", count="likes")


def count_of(rows: Sequence[Any]) -> int:
    """The count a ``CountReads.count`` read returned (0 when nothing was ever counted)."""
    return int(rows[0][0] or 0) if rows else 0


class CountReads:
    """Reads of one table's counts and edges for everyone but its owner (the fan-out's
    tier decisions, the ranker, the copy audit)."""

    def __init__(self, session: Session, table: EdgeTable) -> None:
        self.table = table
        self.count = session.prepare(table.count_cql())
        self.counts_in = session.prepare(table.counts_in_cql())
        self.edge_state = session.prepare(table.edge_state_cql())


@dataclass(frozen=True)
class OwnedChange:
    """An edge change as its count's owner took it: ``offset`` in the count topic's
    partition (the same for every consumer of it)."""

    change: EdgeChange
    offset: int


class CountedEdges:
    """One table of counted edges (``EdgeTable``). ``apply`` is the only writer; call it
    for one count at a time (its owner serialises them), with ``generation`` the count
    topics' generation (``Settings.counts_generation``)."""

    def __init__(self, session: Session, runner: CqlRunner, table: EdgeTable, generation: int, *,
                 max_changes_per_batch: int = MAX_CHANGES_PER_BATCH) -> None:
        t = table
        self.table = table
        self._run = runner
        self._generation = generation
        self._max_changes = max(1, max_changes_per_batch)
        p = session.prepare
        self._read_edges = p(f"SELECT {t.edge}, {t.state}, lsn, {t.count} FROM {t.name} "
                             f"WHERE {t.partition}=? AND {t.edge} IN ?")
        self._read_count = p(t.count_cql())
        self._write_edge = p(f"UPDATE {t.name} USING TIMESTAMP ? SET {t.state}=?, lsn=? "
                             f"WHERE {t.partition}=? AND {t.edge}=?")
        # The count (static) and the count row's one cell (lsn 0: it is no edge).
        self._write_count = p(f"UPDATE {t.name} USING TIMESTAMP ? SET {t.count}=?, lsn=0 "
                              f"WHERE {t.partition}=? AND {t.edge}={COUNT_ROW}")

    async def apply(self, partition: int, changes: Sequence[OwnedChange]) -> int:
        """Apply one count's changes, in offset order, ``MAX_CHANGES_PER_BATCH`` per
        batch; returns how far the count moved (0 for a replay)."""
        moved = 0
        for i in range(0, len(changes), self._max_changes):
            moved += await self._apply_batch(partition, changes[i:i + self._max_changes])
        return moved

    async def count(self, partition: int) -> int:
        """The partition's count (0 when nothing was ever counted)."""
        return count_of(await self._run.execute(self._read_count, (partition,)))

    async def _apply_batch(self, partition: int, changes: Sequence[OwnedChange]) -> int:
        t = self.table
        edges = list(dict.fromkeys(c.change.edge for c in changes))
        rows = await self._run.execute(self._read_edges, (partition, [COUNT_ROW, *edges]))
        stored = {int(r[0]): EdgeState(bool(r[1]), int(r[2])) for r in rows
                  if r[0] != COUNT_ROW and r[1] is not None and r[2] is not None}
        count = rows[0][3] if rows else None  # static: the same on every row
        plan = plan_round(stored, None if count is None else int(count), [c.change for c in changes])
        REPLAYS.labels(t.name).inc(sum(not s.write for s in plan.steps))
        if not plan.writes:
            return 0
        at = write_time(self._generation, max(c.offset for c in changes))
        batch = BatchStatement(batch_type=BatchType.UNLOGGED)
        for w in plan.writes:
            batch.add(self._write_edge, (at, w.state.active, w.state.lsn, partition, w.edge))
        # Always the count, even unmoved: the count cell then holds the newest offset's
        # state whatever order other owners' batches land in (owned_counts.py).
        batch.add(self._write_count, (at, plan.new_count, partition))
        BATCHES.labels(t.name).inc()
        await self._run.execute(batch)
        CHANGES.labels(t.name).inc(len(changes))
        return plan.new_count - (plan.count or 0)

