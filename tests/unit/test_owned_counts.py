"""Counts with one writer each, ordered by topic offsets (services/shared/domain/owned_counts.py),
played against a model of Cassandra's cells.

The model: every cell keeps the write with the highest write time, and two writes with
the same write time must carry the same value (Cassandra would keep the larger value:
a tie between different values is the bug this checks for); a single-partition batch
lands whole and at once (partition-level atomicity and isolation); a read sees what has
landed. A write may time out for its writer and land later, or never.

An owner applies one count's changes in topic order, a few at a time (one batch per
group: ``plan_round`` over a read of the edges and the count), retries a timed-out batch
(read again, plan again, same write time) before the next group, and commits its
offset only past acknowledged groups. The first owner is revoked at some point and may
keep running (a zombie, ahead of or behind its successor), its writes in flight landing
whenever they land; the second starts from the committed offset; then a third replays
the whole topic and must write nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.shared.domain.edge_transitions import EdgeChange, EdgeState, plan_round
from services.shared.domain.owned_counts import BASE, MAX_GENERATION, OFFSET_BITS, write_time

COUNT = "count"
GENERATION = 1


@dataclass
class Cells:
    """One partition of edges and its count, as its replicas would settle it."""

    cells: dict[object, tuple[int, object]] = field(default_factory=dict)

    def read(self) -> tuple[dict[int, EdgeState], int | None]:
        edges = {k: v[1] for k, v in self.cells.items() if k != COUNT}
        count = self.cells.get(COUNT)
        return edges, None if count is None else count[1]  # type: ignore[return-value]

    def land(self, batch: dict[object, object], ts: int) -> None:
        for key, value in batch.items():
            current = self.cells.get(key)
            if current is not None and current[0] == ts:
                assert current[1] == value, f"two values at one write time: {current[1]} and {value}"
            if current is None or ts > current[0]:
                self.cells[key] = (ts, value)


@st.composite
def topics(draw: st.DrawFn) -> list[EdgeChange]:
    """One count's changes in a publish order: each edge's changes in LSN order (one
    source key), edges interleaved at random, some changes published twice (a producer
    that replays its source after a crash publishes them again, later)."""
    per_edge = draw(st.lists(st.lists(st.booleans(), min_size=1, max_size=4), min_size=1, max_size=4))
    lsn = 0
    queues: list[list[EdgeChange]] = []
    for edge, states in enumerate(per_edge):
        queue = []
        for active in states:
            lsn += draw(st.integers(1, 3))
            queue.append(EdgeChange(edge, active, lsn))
        queues.append(queue)
    order: list[EdgeChange] = []
    while any(queues):
        queue = draw(st.sampled_from([q for q in queues if q]))
        order.append(queue.pop(0))
        if draw(st.integers(0, 5)) == 0:
            order.insert(draw(st.integers(len(order) - 1, len(order))), order[-1])
    return order


class Owner:
    """A consumer of the count's partition from offset ``start``."""

    def __init__(self, topic: list[EdgeChange], start: int, cells: Cells,
                 in_flight: list[tuple[dict[object, object], int]], data: st.DataObject) -> None:
        self.topic, self.offset, self.committed = topic, start, start
        self.cells, self.in_flight, self.data = cells, in_flight, data
        self.writes = 0

    @property
    def done(self) -> bool:
        return self.offset >= len(self.topic)

    def land_some(self) -> None:
        """Writes in flight (any owner's) that land now."""
        for pending in list(self.in_flight):
            if self.data.draw(st.booleans()):
                self.in_flight.remove(pending)
                self.cells.land(*pending)

    def step(self, may_time_out: bool) -> None:
        """One attempt at the next group of changes (1 to 3 of them, as a batch would)."""
        size = self.data.draw(st.integers(1, 3))
        group = self.topic[self.offset:self.offset + size]
        self.land_some()
        stored, count = self.cells.read()
        self.land_some()  # between the read and the write
        plan = plan_round(stored, count, group)
        if plan.writes:
            batch: dict[object, object] = {w.edge: w.state for w in plan.writes}
            batch[COUNT] = plan.new_count
            ts = write_time(GENERATION, self.offset + len(group) - 1)
            self.writes += 1
            if may_time_out and self.data.draw(st.integers(0, 2)) == 2:
                self.in_flight.append((batch, ts))  # timed out: lands later, or never;
                return                              # the next attempt retries the group
            self.cells.land(batch, ts)
        self.offset += len(group)
        if self.data.draw(st.booleans()):
            self.committed = self.offset


def _true_state(topic: list[EdgeChange]) -> tuple[dict[int, EdgeState], int]:
    last: dict[int, EdgeChange] = {}
    for change in topic:
        if change.edge not in last or change.lsn > last[change.edge].lsn:
            last[change.edge] = change
    states = {e: EdgeState(c.active, c.lsn) for e, c in last.items()}
    return states, sum(s.active for s in states.values())


@settings(max_examples=600, deadline=None)
@given(topic=topics(), data=st.data())
def test_overlapping_owners_late_writes_and_a_replay_never_move_a_count_from_the_truth(
        topic: list[EdgeChange], data: st.DataObject) -> None:
    cells, in_flight = Cells(), []  # type: ignore[var-annotated]
    first = Owner(topic, 0, cells, in_flight, data)
    revoke_at = data.draw(st.integers(0, len(topic)))
    while first.offset < revoke_at and not first.done:
        first.step(may_time_out=True)
    second = Owner(topic, first.committed, cells, in_flight, data)
    zombie_steps = data.draw(st.integers(0, 2 * len(topic)))  # the first keeps going a while
    while not second.done:
        if zombie_steps and not first.done and data.draw(st.booleans()):
            zombie_steps -= 1
            first.step(may_time_out=True)
        else:
            second.step(may_time_out=True)
    for pending in list(in_flight):  # attempts that timed out land late, or never
        if data.draw(st.booleans()):
            cells.land(*pending)
    in_flight.clear()

    states, count = _true_state(topic)
    stored, stored_count = cells.read()
    assert (stored_count or 0) == count
    assert stored == states

    replay = Owner(topic, 0, cells, in_flight, data)
    while not replay.done:
        replay.step(may_time_out=False)
    assert replay.writes == 0  # a replay reads every change back and writes nothing


def test_write_times_follow_offsets_then_generations_and_beat_any_wall_clock():
    times = [write_time(1, o) for o in range(1000)]
    assert times == sorted(set(times))
    assert write_time(2, 0) > write_time(1, (1 << OFFSET_BITS) - 2)
    assert write_time(0, 0) > 2 ** 61 > 10 ** 18  # µs since 1970: ~1.8e15 in 2026
    assert write_time(0, 0) >= BASE
    assert write_time(MAX_GENERATION, (1 << OFFSET_BITS) - 2) < 2 ** 63
    for bad in ((-1, 0), (MAX_GENERATION + 1, 0), (1, -1), (1, (1 << OFFSET_BITS) - 1)):
        with pytest.raises(ValueError):
            write_time(*bad)
