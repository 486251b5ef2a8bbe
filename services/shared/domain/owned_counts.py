"""Counts with one writer each, ordered by the owner's topic offsets instead of Paxos. Pure.

Every change of a counted edge (a follow, a like) is re-published to a count topic keyed
by the counted entity (``<prefix>.follow-counts`` by author, ``<prefix>.like-counts`` by
post: a repartition topic, as Kafka Streams makes one). So all changes of one count sit
in ONE partition, and the consumer that owns the partition applies them one key at a
time: a plain read of the edges and the count, then ONE single-partition batch, written
unconditionally ``USING TIMESTAMP write_time(generation, offset)``, where ``offset`` is
the last offset of the changes the batch applies (services/shared/stores/counted_edges.py).

Why that is exact without a Paxos round. Every batch written at time ``t`` holds the
state after every change of that count at an offset <= ``t``:

* an owner reads before it writes, and what it reads holds every change before its
  first offset (the earlier owner acknowledged them before committing; this owner
  applied the rest itself, one batch after the other, each acknowledged by a quorum);
* whatever newer it may read (another owner ahead of it) shows those changes' edges as
  applied, so ``edge_step`` skips them: the LSN of each edge stays its own order;
* two writers of the same offset (an owner and a stale one, a write and its retry)
  compute the same cells, so a tie between them is no tie.

Each cell keeps its newest write, so it holds the state after the largest offset any
writer reached: a stale owner's write, or a timed-out batch that lands late, loses to
every later offset and agrees with the same one; a replay reads its own edges back and
writes nothing. ``tests/unit/test_owned_counts.py`` plays this against a model of the
cells, with owners that overlap, run ahead of each other, time out and replay.

The offsets are the topic's, not the LSN: one count's changes reach its owner in
publish order, which is not LSN order (they come from different CDC partitions).
Offsets order one partition only, so a key must never change partition: the count
topics' partition counts are fixed, and if a count topic is ever recreated or
repartitioned, ``counts_generation`` must be raised first (docs/fanout.md, "Counts").

Write times sit above 2^62 µs (year 146,000), beyond any wall-clock write time, so the
first owned write of a partition beats the cells its conditional (Paxos) predecessor
wrote, and carries on from their values.
"""
from __future__ import annotations

# Layout of an owned write time: 2^62 + (generation << OFFSET_BITS) + offset + 1.
BASE = 1 << 62
OFFSET_BITS = 44          # 1.7e13 offsets per partition: 55 years at 10,000 a second
MAX_GENERATION = (1 << (62 - OFFSET_BITS)) - 1


def write_time(generation: int, offset: int) -> int:
    """The write time of a batch whose last change is at ``offset`` of its partition."""
    if not 0 <= generation <= MAX_GENERATION or not 0 <= offset < (1 << OFFSET_BITS) - 1:
        raise ValueError(f"generation {generation} or offset {offset} out of range")
    return BASE + (generation << OFFSET_BITS) + offset + 1
