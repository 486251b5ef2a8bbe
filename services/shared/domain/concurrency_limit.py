"""How many statements a worker keeps in flight to the store: an AIMD limit. Pure.

A fixed cap fits one cluster speed only (docs/fanout.md, "Statements in flight follow the
cluster"). ``AimdLimit`` follows what the store answers instead, the way TCP follows a
network (and Netflix's concurrency-limits its servers):

* an overload answer (a timeout, Unavailable, the node saying it is overloaded) halves
  the limit: a multiplicative decrease, the only kind that drains a queue quickly;
* a latency well above the store's unloaded latency (``slow_rtt_s``) takes a tenth off:
  the queue is growing before anything times out;
* otherwise a completion that found the limit in use (at least half of it in flight)
  adds ``1 / limit``: one more statement per round of ``limit`` completions, an
  additive increase that probes slowly for spare capacity.

A decrease is made at most once per round trip: a completion of a statement sent before
the last decrease reports the congestion that decrease already answered (TCP's rule),
so a burst of 200 timeouts halves the limit once, not 200 times. The limit stays inside
``[min_limit, max_limit]``; the clock is the caller's (``started`` and ``now`` are
seconds of any monotonic clock).
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass

# Halving on an overload answer: TCP's decrease. A smaller cut leaves most of a queue
# that already made statements time out; a larger one idles the nodes after a blip.
OVERLOAD_BACKOFF = 0.5
# A tenth off on a slow answer: latency is an earlier, noisier signal than a timeout,
# so it may cut often, but each cut is small.
LATENCY_BACKOFF = 0.9
# Slow = the recent latency above this multiple of the unloaded latency: twice the
# unloaded round trip means statements wait in a queue as long as they run.
LATENCY_TOLERANCE = 2.0
# ... and above this many seconds. The store's healthy statements take 1-20 ms on one
# node and tens of ms for a conditional batch on three replicas, and one limit serves
# both kinds (a mix of fast reads and slow batches), so the unloaded latency is the
# reads' and this floor is what decides in practice. A mean of 250 ms is an eighth of
# the node's 2 s write timeout: its tail still answers before the node drops requests
# ("timeout expired before reaching the network"), while a lower floor held a cluster
# whose conditional batches are merely slow (not queued) at a limit it could exceed.
SLOW_FLOOR_S = 0.25
# Weight of one completion in the recent latency (an EWMA over ~10 completions: it
# follows a queue that builds within a round trip, and smooths one slow statement).
RECENT_WEIGHT = 0.1
# The unloaded latency follows a faster answer at once and a slower one over about
# this many seconds: it is the store's latency without a queue (BBR's minimum RTT),
# which a minute of congestion must not redefine, but a lasting change (a third node,
# conditional batches instead of plain writes) does.
BASELINE_RISE_S = 60.0
# The first limit, as a share of the largest: a worker restarted into a backlog on a
# slow cluster must not open with the burst that collapsed it; at one node's rates the
# additive increase reaches the cap within seconds.
START_SHARE = 1 / 8


class Change(enum.Enum):
    """What one completion did to the limit."""

    GREW = "grew"
    SHRANK_ON_OVERLOAD = "overload"
    SHRANK_ON_LATENCY = "latency"
    UNCHANGED = "unchanged"


@dataclass
class AimdLimit:
    """The limit of statements in flight, moved by each completion (``on_completion``)."""

    min_limit: int
    max_limit: int
    limit: float = 0.0  # 0: start at START_SHARE of max_limit
    recent_rtt_s: float | None = None
    baseline_rtt_s: float | None = None
    last_decrease_at: float = -math.inf
    last_sample_at: float | None = None

    def __post_init__(self) -> None:
        self.min_limit = max(1, self.min_limit)
        self.max_limit = max(self.min_limit, self.max_limit)
        if self.limit <= 0:
            self.limit = self.max_limit * START_SHARE
        self.limit = self._bounded(self.limit)

    @property
    def permits(self) -> int:
        """Statements that may be in flight now (the limit rounded down)."""
        return int(self.limit)

    @property
    def slow_rtt_s(self) -> float:
        """Latency above which a completion counts as slow."""
        baseline = self.baseline_rtt_s if self.baseline_rtt_s is not None else 0.0
        return max(SLOW_FLOOR_S, LATENCY_TOLERANCE * baseline)

    def on_completion(self, started: float, now: float, in_flight: int, overloaded: bool) -> Change:
        """A statement sent at ``started`` finished at ``now`` while ``in_flight``
        statements (itself included) were outstanding; ``overloaded``: the store
        answered with a timeout or an overload error (its latency then means nothing)."""
        if not overloaded:
            self._observe_latency(now - started, now)
        if started < self.last_decrease_at:
            return Change.UNCHANGED  # sent under the old limit: already answered
        if overloaded:
            return self._decrease(now, OVERLOAD_BACKOFF, Change.SHRANK_ON_OVERLOAD)
        assert self.recent_rtt_s is not None  # set by _observe_latency
        if self.recent_rtt_s > self.slow_rtt_s:
            return self._decrease(now, LATENCY_BACKOFF, Change.SHRANK_ON_LATENCY)
        if in_flight * 2 < self.limit or self.limit >= self.max_limit:
            return Change.UNCHANGED  # not using the limit: no evidence more would help
        self.limit = self._bounded(self.limit + 1 / self.limit)
        return Change.GREW

    def _decrease(self, now: float, factor: float, change: Change) -> Change:
        self.last_decrease_at = now
        before = self.limit
        self.limit = self._bounded(self.limit * factor)
        return change if self.limit < before else Change.UNCHANGED

    def _observe_latency(self, rtt_s: float, now: float) -> None:
        rtt_s = max(0.0, rtt_s)
        if self.recent_rtt_s is None or self.baseline_rtt_s is None or self.last_sample_at is None:
            self.recent_rtt_s = self.baseline_rtt_s = rtt_s
        else:
            self.recent_rtt_s += RECENT_WEIGHT * (rtt_s - self.recent_rtt_s)
            if rtt_s <= self.baseline_rtt_s:
                self.baseline_rtt_s = rtt_s
            else:
                elapsed = max(0.0, now - self.last_sample_at)
                weight = 1 - math.exp(-elapsed / BASELINE_RISE_S)
                self.baseline_rtt_s += weight * (rtt_s - self.baseline_rtt_s)
        self.last_sample_at = now

    def _bounded(self, value: float) -> float:
        return min(float(self.max_limit), max(float(self.min_limit), value))
