"""Counts with one writer each, fenced by write times (services/shared/domain/owned_counts.py),
played against a model of Cassandra's cells.

The model: every cell keeps the write with the highest write time; a single-partition
batch lands whole and at once (Cassandra's partition-level atomicity and isolation); a
read sees what has landed. A write may time out for its writer and land later, or never.
An owner applies its partition's changes one after another in topic order; a timed-out
batch is retried (read again, planned again, written with a new write time) before the
next change, and the offset is committed only past changes whose batch was acknowledged.
A stale owner (epoch 1) is revoked at any point, with an attempt possibly in flight; the
next owner (epoch 2) starts from the committed offset while the stale owner's attempts
land whenever they land; then a third owner replays the whole topic.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.shared.domain.edge_transitions import EdgeState
from services.shared.domain.owned_counts import (MAX_EPOCH, SEQ_BITS, OwnerClock, owned_step,
                                                 write_time)

COUNT = "count"


@dataclass
class Cells:
    """One partition of edges and its count, as its replicas would settle it."""

    cells: dict[object, tuple[int, object]] = field(default_factory=dict)

    def read(self, edge: int) -> tuple[EdgeState | None, int | None]:
        state = self.cells.get(edge)
        count = self.cells.get(COUNT)
        return (None if state is None else state[1],  # type: ignore[return-value]
                None if count is None else count[1])  # type: ignore[return-value]

    def land(self, batch: dict[object, object], ts: int) -> None:
        for key, value in batch.items():
            current = self.cells.get(key)
            if current is None or ts > current[0]:
                self.cells[key] = (ts, value)


@dataclass(frozen=True)
class Change:
    edge: int
    active: bool
    lsn: int


@st.composite
def topics(draw: st.DrawFn) -> list[Change]:
    """One partition's changes in a publish order: each edge's changes in LSN order (one
    source key), edges interleaved at random, some changes published twice."""
    per_edge = draw(st.lists(st.lists(st.booleans(), min_size=1, max_size=4), min_size=1, max_size=4))
    lsn = 0
    queues: list[list[Change]] = []
    for edge, states in enumerate(per_edge):
        queue = []
        for active in states:
            lsn += draw(st.integers(1, 3))
            queue.append(Change(edge, active, lsn))
        queues.append(queue)
    order: list[Change] = []
    while any(queues):
        queue = draw(st.sampled_from([q for q in queues if q]))
        order.append(queue.pop(0))
        if draw(st.integers(0, 5)) == 0:  # a producer retry: the same change again, later
            order.insert(draw(st.integers(len(order) - 1, len(order))), order[-1])
    return order


class Owner:
    """A consumer that owns the partition from ``start`` with its own epoch."""

    def __init__(self, epoch: int, topic: list[Change], start: int, cells: Cells,
                 in_flight: list[tuple[dict[object, object], int]], data: st.DataObject) -> None:
        self.clock = OwnerClock(epoch)
        self.topic, self.offset, self.committed = topic, start, start
        self.cells, self.in_flight, self.data = cells, in_flight, data
        self.writes = 0

    def land_some(self) -> None:
        """Writes in flight (any owner's) that land now."""
        for pending in list(self.in_flight):
            if self.data.draw(st.booleans()):
                self.in_flight.remove(pending)
                self.cells.land(*pending)

    def apply_next(self, may_time_out: bool, may_be_revoked: bool) -> bool:
        """Apply the change at the offset; False if revoked with a batch unacknowledged."""
        change = self.topic[self.offset]
        attempts = 0
        while True:
            self.land_some()
            stored, count = self.cells.read(change.edge)
            self.land_some()  # between the read and the write
            _, write = owned_step(stored, count, change.edge, change.active, change.lsn)
            if write is None:
                break
            batch: dict[object, object] = {write.edge: write.state, COUNT: write.count}
            ts = self.clock.next()
            self.writes += 1
            attempts += 1
            if may_time_out and attempts < 4 and self.data.draw(st.integers(0, 2)) == 2:
                self.in_flight.append((batch, ts))  # timed out: lands later, or never
                if may_be_revoked and self.data.draw(st.booleans()):
                    return False  # revoked before the retry
                continue
            self.cells.land(batch, ts)
            break
        self.offset += 1
        if self.data.draw(st.booleans()):
            self.committed = self.offset
        return True


def _true_state(topic: list[Change]) -> tuple[dict[int, EdgeState], int]:
    last: dict[int, Change] = {}
    for change in topic:
        if change.edge not in last or change.lsn > last[change.edge].lsn:
            last[change.edge] = change
    states = {e: EdgeState(c.active, c.lsn) for e, c in last.items()}
    return states, sum(s.active for s in states.values())


@settings(max_examples=400, deadline=None)
@given(topic=topics(), data=st.data())
def test_a_stale_owner_late_writes_and_a_replay_never_move_a_count_from_the_truth(
        topic: list[Change], data: st.DataObject) -> None:
    cells, in_flight = Cells(), []  # type: ignore[var-annotated]
    stale = Owner(1, topic, 0, cells, in_flight, data)
    revoke_at = data.draw(st.integers(0, len(topic)))
    while stale.offset < revoke_at and stale.apply_next(may_time_out=True, may_be_revoked=True):
        pass
    owner = Owner(2, topic, stale.committed, cells, in_flight, data)
    while owner.offset < len(topic):
        owner.apply_next(may_time_out=True, may_be_revoked=False)
    for pending in list(in_flight):  # attempts that timed out land late, or never
        if data.draw(st.booleans()):
            cells.land(*pending)
    in_flight.clear()

    states, count = _true_state(topic)
    assert (cells.cells[COUNT][1] if COUNT in cells.cells else 0) == count
    for edge, state in states.items():
        assert cells.read(edge)[0] == state

    replay = Owner(3, topic, 0, cells, in_flight, data)
    while replay.offset < len(topic):
        replay.apply_next(may_time_out=False, may_be_revoked=False)
    assert replay.writes == 0  # a replay reads every change back and writes nothing


def test_write_times_order_epochs_first_then_each_owners_writes():
    stale, new = OwnerClock(7), OwnerClock(8)
    stale_times = [stale.next() for _ in range(1000)]
    assert stale_times == sorted(set(stale_times))
    assert new.next() > stale_times[-1]
    assert write_time(MAX_EPOCH, (1 << SEQ_BITS) - 1) < 2 ** 63
    with pytest.raises(ValueError):
        write_time(0, 1)
