"""The fan-out tier policy: which authors' posts are written into follower inboxes. Pure.

An author is a *celebrity* when writing one post into every follower's inbox would take
too large a share of the freshness target (commit to visible, 1.5 s):

    cost_s = followers / capacity_rows_per_s
    promote when cost_s > promote_share * freshness_target_s
    demote  when cost_s < demote_share  * freshness_target_s   (demote_share < promote_share)

and never sooner than ``min_dwell_s`` after the author's previous change. The gap between
the two shares and the dwell time are the hysteresis: an author whose follower count or
the measured capacity wobbles around the line does not flap between tiers.

``capacity_rows_per_s`` is what the worker measures (``CapacityEstimate``: an EWMA of the
rows/s its fan-outs achieve), so the boundary follows the store's real speed instead of a
follower constant. The configured floor is what is assumed before anything is measured
and how far an overload alone may cut the estimate; a store measured slower than the
floor moves the boundary below it. See docs/fanout.md for how a change of tier
keeps every post in every reader's feed exactly once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from enum import Enum


class Tier(str, Enum):
    ORDINARY = "ordinary"
    CELEBRITY = "celebrity"


@dataclass(frozen=True)
class TierPolicy:
    freshness_target_s: float = 1.5
    promote_share: float = 0.5
    demote_share: float = 0.25
    min_dwell_s: float = 600.0

    def __post_init__(self) -> None:
        if not 0 < self.demote_share < self.promote_share:
            raise ValueError("hysteresis needs 0 < demote_share < promote_share")
        if self.freshness_target_s <= 0 or self.min_dwell_s < 0:
            raise ValueError("freshness target must be > 0 and dwell >= 0")

    @property
    def promote_above_s(self) -> float:
        return self.promote_share * self.freshness_target_s

    @property
    def demote_below_s(self) -> float:
        return self.demote_share * self.freshness_target_s


@dataclass(frozen=True)
class TierState:
    """What ``author_tiers`` holds for an author; no row means ordinary, never changed."""

    tier: Tier = Tier.ORDINARY
    changed_at: datetime | None = None


@dataclass(frozen=True)
class TierDecision:
    tier: Tier
    changed: bool
    cost_s: float
    reason: str


def fanout_cost_s(followers: int, capacity_rows_per_s: float) -> float:
    """Seconds one post's fan-out takes at the measured capacity."""
    if capacity_rows_per_s <= 0:
        raise ValueError("capacity must be positive")
    return max(0, followers) / capacity_rows_per_s


def decide_tier(state: TierState, followers: int, capacity_rows_per_s: float,
                now: datetime, policy: TierPolicy) -> TierDecision:
    """The author's tier for a post published ``now``, and whether that is a change."""
    cost = fanout_cost_s(followers, capacity_rows_per_s)
    dwelt = (state.changed_at is None
             or (now - state.changed_at).total_seconds() >= policy.min_dwell_s)
    if state.tier is Tier.ORDINARY and cost > policy.promote_above_s:
        if dwelt:
            return TierDecision(Tier.CELEBRITY, True, cost, "cost above promote threshold")
        return TierDecision(state.tier, False, cost, "promotion held by dwell time")
    if state.tier is Tier.CELEBRITY and cost < policy.demote_below_s:
        if dwelt:
            return TierDecision(Tier.ORDINARY, True, cost, "cost below demote threshold")
        return TierDecision(state.tier, False, cost, "demotion held by dwell time")
    return TierDecision(state.tier, False, cost, "within hysteresis band")


@dataclass
class CapacityEstimate:
    """Measured fan-out capacity: an EWMA of achieved rows/s.

    Only fan-outs of at least ``min_sample_rows`` rows are samples: a small fan-out is
    bound by one round trip's latency, not by throughput, and would underestimate.

    ``floor_rows_per_s`` is an assumption, never a bound on what is measured: it is the
    estimate until the first sample (unless ``restore`` took an earlier process's), the
    point a first sample below it starts from (one slow fan-out moves the estimate a
    fifth of the way down, as any later one does), and the least an overload signal
    alone cuts the estimate to. Samples below it are followed: a store that takes fewer
    rows a second than the floor says moves the tier boundary down with it, so the
    largest authors go to the read-time merge instead of fan-outs that overrun the
    freshness target. (Until 2026-12 the floor clamped the
    estimate: a store measured at 300 rows/s was still planned at 2,000, and an author
    with 1,000 followers kept a 3.3 s fan-out per post.)
    """

    floor_rows_per_s: float
    pinned_rows_per_s: float = 0.0
    # 0.2: a new sample moves the estimate a fifth of the way, so one slow fan-out (a GC
    # pause, a compaction) cannot promote a crowd of authors by itself.
    alpha: float = 0.2
    # 200 rows at 64 in flight is several round trips deep: throughput-bound.
    min_sample_rows: int = 200
    ewma_rows_per_s: float | None = None
    # A sample was taken, or an earlier process's estimate restored: the estimate is a
    # measurement (an overload's cut alone leaves it the floor's assumption).
    sampled: bool = False

    # On an overload signal (a store timeout during a fan-out) the estimate drops by this
    # factor at once: the tier policy then sheds the largest audiences within a batch,
    # instead of waiting for slow samples to pull the average down.
    overload_factor: float = 0.5

    def overloaded(self) -> None:
        """The store timed out under fan-out load: assume half the capacity. A guess, so
        it stops at the floor; an estimate samples already took below the floor stays
        where they put it (later samples move it either way)."""
        current = self.ewma_rows_per_s if self.ewma_rows_per_s is not None else self.floor_rows_per_s
        self.ewma_rows_per_s = max(min(current, self.floor_rows_per_s), current * self.overload_factor)

    def observe(self, rows: int, seconds: float) -> None:
        if rows < self.min_sample_rows or seconds <= 0:
            return
        sample = rows / seconds
        self.sampled = True
        if self.ewma_rows_per_s is None:
            # The first sample: taken whole when the store is at least as fast as the
            # floor assumes; a slower one moves the assumption a fifth of the way down.
            start = self.floor_rows_per_s
            self.ewma_rows_per_s = sample if sample >= start else start + self.alpha * (sample - start)
        else:
            self.ewma_rows_per_s += self.alpha * (sample - self.ewma_rows_per_s)

    def restore(self, rows_per_s: float) -> bool:
        """Start from an estimate an earlier process measured (``fanout_capacity``)
        instead of the floor; taken only before this process's own first sample, and
        only if positive and finite. Later samples move it as they would a measured one."""
        if self.sampled or not (0 < rows_per_s < math.inf):
            return False
        self.ewma_rows_per_s = rows_per_s
        self.sampled = True
        return True

    @property
    def measured(self) -> float | None:
        """The estimate if something measured it (a sample, or one restored): what a
        restarted process may start from. ``None`` while it is the floor's assumption."""
        return self.ewma_rows_per_s if self.sampled else None

    @property
    def rows_per_s(self) -> float:
        if self.pinned_rows_per_s > 0:
            return self.pinned_rows_per_s
        if self.ewma_rows_per_s is None:
            return self.floor_rows_per_s
        return self.ewma_rows_per_s


@dataclass
class OverlapMeter:
    """Rows/s of fan-outs that run at the same time (a batch's posts run concurrently).

    Rows are counted when they are written (``wrote``, a page at a time), and time only
    while at least one metered fan-out is running (``started`` / ``finished``); a sample
    is the rows written over that busy time, taken once it holds ``min_rows`` rows and
    ``min_busy_s`` seconds. Counting rows as they land, not when a fan-out ends, keeps a
    long fan-out that began before the previous sample from crediting all its rows to a
    short window (that over-estimated capacity about threefold under a burst of large
    audiences). Callers meter only fan-outs big enough to be throughput-bound
    (``CapacityEstimate.min_sample_rows``).
    """

    min_rows: int = 200
    # A window shorter than a few round trips measures latency, not throughput.
    min_busy_s: float = 0.2
    running: int = 0
    _busy_since: float = 0.0
    _busy_s: float = 0.0
    _rows: int = 0

    def started(self, now: float) -> None:
        if self.running == 0:
            self._busy_since = now
        self.running += 1

    def wrote(self, now: float, rows: int) -> tuple[int, float] | None:
        """Rows a running fan-out just wrote; returns a ``(rows, seconds)`` sample when due."""
        self._rows += rows
        busy = self._busy_s + (now - self._busy_since if self.running else 0.0)
        if self._rows < self.min_rows or busy < self.min_busy_s:
            return None
        sample = (self._rows, busy)
        self._rows, self._busy_s, self._busy_since = 0, 0.0, now
        return sample

    def finished(self, now: float) -> None:
        """A metered fan-out ended (done or failed); idle time after it is not counted."""
        self.running -= 1
        if self.running == 0:
            self._busy_s += now - self._busy_since
            self._busy_since = now
