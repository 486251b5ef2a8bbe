"""Counter transitions decided from one read: the edge's stored state and its LSN. Pure.

An edge (a follow, a like) keeps a state cell written ``USING TIMESTAMP <lsn>`` with the
edge's state as its value (``follow_state``, ``like_state``, 0004_edge_state.cql). The
fan-out (follower counts) and the ranker (like counts) both decide with ``edge_step``. Reading it before applying a
change tells, without writing and reading back, what last-write-wins will make of it:

* a change newer than the stored one sets the state; the counter moves by the
  difference (a follow of an edge already followed moves nothing);
* the change that set the stored state (a replay) or an older one moves nothing;
  a replay is still the edge's newest change, so its other effects (a backfill) are
  redone, which is idempotent; an older one's are not (a newer change owns them).

The copy rows and the state go in one single-partition batch, after the read: a state
carrying a change's LSN proves its copies are written, so they are skipped on replay.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EdgeState:
    """What the state cell holds: the edge's state and the LSN that set it."""

    active: bool
    lsn: int


@dataclass(frozen=True)
class EdgeStep:
    delta: int     # counter movement: +1, -1 or 0
    newest: bool   # no newer change is applied: this change's effects stand
    write: bool    # copies and state need writing (the change is newer than the stored one)


def edge_step(stored: EdgeState | None, active: bool, lsn: int) -> EdgeStep:
    """What applying a change (``active`` at ``lsn``) to the stored edge state does."""
    if stored is None:
        return EdgeStep(int(active), True, True)
    if lsn > stored.lsn:
        return EdgeStep(int(active) - int(stored.active), True, True)
    return EdgeStep(0, lsn == stored.lsn, False)
