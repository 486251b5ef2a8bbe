"""Counted edges: what a change does to an edge's state and its partition's count. Pure.

An edge (a follow, a like) is a row of ``follow_edges`` / ``like_edges``
(0006_counted_edges.cql): its state (following / liked, kept as a value, not a
tombstone) and the LSN of the change that set it. The partition's count (an author's
followers, a post's likes) is a static column of the same partition, so an edge's new
state, its LSN and the count it moves are written by ONE batch of the count's owner
(services/shared/stores/counted_edges.py): they are stored together or not at all, and a
replay that reads its own LSN back moves nothing. ``edge_step`` is what one change does
to one stored edge:

* a change newer than the stored one sets the state; the count moves by the
  difference (a follow of an edge already followed moves nothing);
* the change that set the stored state (a replay) or an older one moves nothing;
  a replay is still the edge's newest change, so its other effects (a backfill) are
  redone, which is idempotent; an older one's are not (a newer change owns them).

``plan_round`` is what several changes of one partition do together: one batch writes
every edge they change and the count once (each write names the stored value it was
planned from, ``expected``: what the batch overwrites).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence


@dataclass(frozen=True)
class EdgeState:
    """What an edge row holds: the edge's state and the LSN of the change that set it."""

    active: bool
    lsn: int


@dataclass(frozen=True)
class EdgeStep:
    delta: int     # count movement: +1, -1 or 0
    newest: bool   # no newer change is applied: this change's effects stand
    write: bool    # the edge needs writing (the change is newer than the stored one)


def edge_step(stored: EdgeState | None, active: bool, lsn: int) -> EdgeStep:
    """What applying a change (``active`` at ``lsn``) to the stored edge state does."""
    if stored is None:
        return EdgeStep(int(active), True, True)
    if lsn > stored.lsn:
        return EdgeStep(int(active) - int(stored.active), True, True)
    return EdgeStep(0, lsn == stored.lsn, False)


@dataclass(frozen=True)
class EdgeChange:
    """A change of one edge of a partition: ``edge`` (follower / user id) set to
    ``active`` by the change at ``lsn``."""

    edge: int
    active: bool
    lsn: int


@dataclass(frozen=True)
class EdgeWrite:
    """An edge row a round writes, and what the row must still hold for the write to
    apply (its condition: None = no row yet)."""

    edge: int
    state: EdgeState
    expected: EdgeState | None


@dataclass(frozen=True)
class CountedRound:
    """One conditional batch: the edges to write and the count, with their conditions."""

    steps: tuple[EdgeStep, ...]   # one per change, in the order given
    writes: tuple[EdgeWrite, ...]
    count: int | None             # the stored count the batch expects (None: never written)
    new_count: int


def plan_round(stored: Mapping[int, EdgeState], count: int | None,
               changes: Sequence[EdgeChange]) -> CountedRound:
    """What ``changes`` (of one partition, in order) do to the stored edges and count.

    Each change is decided by ``edge_step`` against the state the previous changes of
    the round left, so two changes of one edge in a round (a redelivery racing its
    original) are applied in order and the edge is written once, with its last state.
    """
    current: dict[int, EdgeState] = {}
    steps: list[EdgeStep] = []
    delta = 0
    for change in changes:
        before = current.get(change.edge, stored.get(change.edge))
        step = edge_step(before, change.active, change.lsn)
        steps.append(step)
        if step.write:
            current[change.edge] = EdgeState(change.active, change.lsn)
            delta += step.delta
    writes = tuple(EdgeWrite(edge, state, stored.get(edge)) for edge, state in current.items())
    return CountedRound(tuple(steps), writes, count, (count or 0) + delta)
