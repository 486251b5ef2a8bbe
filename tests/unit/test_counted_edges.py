"""Counted edges: the round a partition's changes make (edge_transitions.plan_round). No services.

The store is modelled as what Cassandra gives a conditional single-partition batch: all
of it applies, or none of it when a condition fails. Against that model, any crash
point, replay, duplicate, reordering or second writer leaves each count equal to the
number of edges whose newest change is active.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.shared.domain.edge_transitions import (CountedRound, EdgeChange, EdgeState, EdgeStep,
                                                     EdgeWrite, plan_round)


@pytest.mark.parametrize("stored,count,changes,steps,writes,new_count,moves", [
    # first follow of a partition: edge and count written, the count expected absent
    ({}, None, [EdgeChange(7, True, 10)], [EdgeStep(1, True, True)],
     [EdgeWrite(7, EdgeState(True, 10), None)], 1, True),
    # replay of the change that set the edge: nothing to write, nothing counted
    ({7: EdgeState(True, 10)}, 1, [EdgeChange(7, True, 10)], [EdgeStep(0, True, False)], [], 1, False),
    # an older change arriving late: overtaken, nothing written
    ({7: EdgeState(False, 20)}, 0, [EdgeChange(7, True, 10)], [EdgeStep(0, False, False)], [], 0, False),
    # unfollow: the edge flips and the count goes down, expecting both stored values
    ({7: EdgeState(True, 10)}, 3, [EdgeChange(7, False, 20)], [EdgeStep(-1, True, True)],
     [EdgeWrite(7, EdgeState(False, 20), EdgeState(True, 10))], 2, True),
    # unfollow of an edge never seen: the edge is recorded, the count is not touched
    ({}, None, [EdgeChange(7, False, 20)], [EdgeStep(0, True, True)],
     [EdgeWrite(7, EdgeState(False, 20), None)], 0, False),
    # a newer follow of a followed edge (a snapshot row): rewritten, not counted
    ({7: EdgeState(True, 10)}, 1, [EdgeChange(7, True, 30)], [EdgeStep(0, True, True)],
     [EdgeWrite(7, EdgeState(True, 30), EdgeState(True, 10))], 1, False),
])
def test_one_change_moves_the_count_only_on_a_newer_transition(stored, count, changes, steps, writes,
                                                               new_count, moves):
    plan = plan_round(stored, count, changes)
    assert list(plan.steps) == steps and list(plan.writes) == writes
    assert plan.count == count and plan.new_count == new_count and plan.moves_count is moves


def test_a_hot_partitions_changes_share_one_batch_and_one_count_write():
    changes = [EdgeChange(u, True, 100 + u) for u in range(50)] + [EdgeChange(3, True, 103)]  # a duplicate
    plan = plan_round({1: EdgeState(True, 5)}, 40, changes)
    assert [s.delta for s in plan.steps] == [1, 0] + [1] * 48 + [0]   # user 1 already liked; dup moves nothing
    assert len(plan.writes) == 50 and plan.count == 40 and plan.new_count == 89


def test_two_changes_of_one_edge_in_a_round_apply_in_order_and_write_once():
    plan = plan_round({}, 2, [EdgeChange(7, True, 10), EdgeChange(7, False, 20), EdgeChange(7, True, 15)])
    assert [s.delta for s in plan.steps] == [1, -1, 0]              # the late follow (15 < 20) loses
    assert plan.writes == (EdgeWrite(7, EdgeState(False, 20), None),)
    assert plan.new_count == 2 and not plan.moves_count


# -- the model: a partition written only by conditional batches ---------------------------

@dataclass
class Partition:
    edges: dict[int, EdgeState] = field(default_factory=dict)
    count: int | None = None

    def apply(self, plan: CountedRound) -> bool:
        """A conditional batch: every condition holds and all of it applies, or nothing."""
        if any(self.edges.get(w.edge) != w.expected for w in plan.writes):
            return False
        if plan.moves_count and self.count != plan.count:
            return False
        for w in plan.writes:
            self.edges[w.edge] = w.state
        if plan.moves_count:
            self.count = plan.new_count
        return True


def run_round(store: Partition, changes: list[EdgeChange]) -> None:
    """What CountedEdges does for one round: read, plan, conditional batch, and on a lost
    condition read again and plan again."""
    while not store.apply(plan_round(dict(store.edges), store.count, changes)):
        pass


def true_count(changes: list[EdgeChange]) -> int:
    newest: dict[int, EdgeChange] = {}
    for c in changes:
        if c.edge not in newest or c.lsn > newest[c.edge].lsn:
            newest[c.edge] = c
    return sum(c.active for c in newest.values())


# Each edge's changes carry distinct LSNs (one WAL position per change); a duplicate is
# the same change delivered again.
changes_strategy = st.lists(
    st.tuples(st.integers(0, 5), st.booleans(), st.integers(1, 40)), min_size=1, max_size=30,
    unique_by=lambda c: (c[0], c[2]),
).map(lambda raw: [EdgeChange(e, a, lsn * 10 + e) for e, a, lsn in raw])


@settings(max_examples=300, deadline=None)
@given(changes=changes_strategy, crash_after=st.integers(0, 30), round_size=st.integers(1, 8),
       duplicate=st.integers(0, 29))
def test_a_crash_at_any_round_then_a_replay_counts_every_edge_once(changes, crash_after, round_size, duplicate):
    delivered = changes + [changes[duplicate % len(changes)]]   # at-least-once: a duplicate
    store = Partition()
    rounds = [delivered[i:i + round_size] for i in range(0, len(delivered), round_size)]
    for r in rounds[:crash_after]:                                # applied before the crash
        run_round(store, r)
    for r in rounds:                                              # the whole batch replayed
        run_round(store, r)
    assert (store.count or 0) == true_count(delivered)
    assert (store.count or 0) == sum(s.active for s in store.edges.values())


@settings(max_examples=300, deadline=None)
@given(changes=changes_strategy, split=st.integers(0, 30), order=st.permutations(range(4)))
def test_a_second_writer_between_read_and_batch_makes_the_round_plan_again(changes, split, order):
    """Two workers share the partition (each change goes to one of them, in any order):
    a batch planned from a read another writer has since overtaken does not apply."""
    store = Partition()
    mine, theirs = changes[:split], changes[split:]
    parts = [mine[:len(mine) // 2], mine[len(mine) // 2:], theirs[:len(theirs) // 2], theirs[len(theirs) // 2:]]
    stale_plans = [plan_round(dict(store.edges), store.count, parts[i]) for i in order]  # all read first
    applied = [store.apply(plan) for plan in stale_plans]
    for i, ok in zip(order, applied):
        if not ok:
            run_round(store, parts[i])                            # planned again from a fresh read
    assert (store.count or 0) == true_count(changes)
