"""Counts with one writer each, fenced by write times instead of Paxos. Pure.

NOT WIRED YET: the design of issue 37's first deliverable, whose pipeline part (a
repartition topic keyed by the counted entity, its agents, a table for these cells and
the reconciliation) is still to come. Today's counts are counted_edges.py's Paxos
batches. This module is the part the correctness argument rests on, and its test
(tests/unit/test_owned_counts.py) plays that argument against a model of Cassandra's
cells: stale owners, replays, and writes that time out and land later.

The design: every change of an edge (a follow, a like) reaches the one consumer that owns
its counted entity (an author, a post), and that owner applies it with a plain read of
the edge's state and the count, then ONE single-partition batch that writes the edge's
new state and the count, unconditionally, ``USING TIMESTAMP write_time(epoch, seq)``:

* ``epoch``: a number the owner takes, by one conditional write, when it is assigned
  the partition of the repartition topic (Paxos once per rebalance, not per change);
  each new owner's epoch is larger than every earlier owner's;
* ``seq``: a counter of the owner's writes, strictly increasing.

So a later owner's writes beat a stale owner's on every cell, and an owner's later
writes beat its earlier ones (a timed-out batch that lands after its retry loses).
Every batch writes the count, so the count cell always holds the latest-issued write.
The LSN stays the edge's own order (``edge_step``): a replay of a change reads its LSN
back and writes nothing. The LSN is not the write time because one count's changes reach
its owner in publish order, not LSN order (they come from different CDC partitions).
"""
from __future__ import annotations

from dataclasses import dataclass

from .edge_transitions import EdgeState, EdgeStep, edge_step

# Bits of a write time for the owner's sequence: 2^40 writes per epoch (35 years at
# 1,000 a second), and 2^23 epochs (rebalances) below 2^63, Cassandra's bound.
SEQ_BITS = 40
MAX_EPOCH = (1 << (63 - SEQ_BITS)) - 1


def write_time(epoch: int, seq: int) -> int:
    """The write time of an owner's ``seq``-th write in ``epoch``."""
    if not 0 < epoch <= MAX_EPOCH or not 0 <= seq < (1 << SEQ_BITS):
        raise ValueError(f"epoch {epoch} or seq {seq} out of range")
    return (epoch << SEQ_BITS) | seq


class OwnerClock:
    """Write times of one owner in one epoch, each larger than the last."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self._seq = 0

    def next(self) -> int:
        self._seq += 1
        return write_time(self.epoch, self._seq)


@dataclass(frozen=True)
class OwnedWrite:
    """What the owner writes for one change: the edge's new state and the count."""

    edge: int
    state: EdgeState
    count: int


def owned_step(stored: EdgeState | None, count: int | None, edge: int, active: bool,
               lsn: int) -> tuple[EdgeStep, OwnedWrite | None]:
    """One change against the stored edge and count: its step, and the batch to write
    (None when the change is a replay or older than the stored state)."""
    step = edge_step(stored, active, lsn)
    if not step.write:
        return step, None
    return step, OwnedWrite(edge, EdgeState(active, lsn), (count or 0) + step.delta)
