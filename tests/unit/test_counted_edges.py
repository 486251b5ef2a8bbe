"""Counted edges: what one batch of a count's changes does (edge_transitions.plan_round). No services.

How batches written by overlapping owners, late and replayed, stay exact is
tests/unit/test_owned_counts.py.
"""
from __future__ import annotations

import pytest

from services.shared.domain.edge_transitions import EdgeChange, EdgeState, EdgeStep, EdgeWrite, plan_round


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
    assert plan.count == count and plan.new_count == new_count
    assert (plan.new_count != (plan.count or 0)) is moves   # the count moved


def test_a_hot_partitions_changes_share_one_batch_and_one_count_write():
    changes = [EdgeChange(u, True, 100 + u) for u in range(50)] + [EdgeChange(3, True, 103)]  # a duplicate
    plan = plan_round({1: EdgeState(True, 5)}, 40, changes)
    assert [s.delta for s in plan.steps] == [1, 0] + [1] * 48 + [0]   # user 1 already liked; dup moves nothing
    assert len(plan.writes) == 50 and plan.count == 40 and plan.new_count == 89


def test_two_changes_of_one_edge_in_a_round_apply_in_order_and_write_once():
    plan = plan_round({}, 2, [EdgeChange(7, True, 10), EdgeChange(7, False, 20), EdgeChange(7, True, 15)])
    assert [s.delta for s in plan.steps] == [1, -1, 0]              # the late follow (15 < 20) loses
    assert plan.writes == (EdgeWrite(7, EdgeState(False, 20), None),)
    assert plan.new_count == 2 == plan.count                       # the count did not move
