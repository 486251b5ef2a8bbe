"""A worker's pressure on the store: adaptive statements in flight and a retry budget.

``AdaptivePermits`` is the gate every statement of a ``CqlRunner`` passes (FIFO): at most
``AimdLimit.permits`` statements are outstanding, and each completion moves that limit
(services/shared/domain/concurrency_limit.py). ``RetryGate`` is what a retry of a
transient store error waits on: a token of a ``RetryBudget``
(services/shared/domain/retry_budget.py), so that under overload a worker sends less,
not more; it waits for a token, it never gives up on a message. ``StorePressure`` is
one of each per worker process, built from the settings, with its Prometheus gauges.
"""
from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass
from typing import Awaitable, Callable

from cassandra import OperationTimedOut, ReadTimeout, Unavailable, WriteTimeout
from cassandra.cluster import NoHostAvailable
from cassandra.protocol import OverloadedErrorMessage
from prometheus_client import Counter, Gauge

from services.shared.domain.concurrency_limit import AimdLimit, Change
from services.shared.domain.retry_budget import RetryBudget
from services.shared.settings import WorkerProcess

LIMIT = Gauge("feed_store_concurrency_limit",
              "Statements this worker may keep in flight to Cassandra (adaptive, AIMD)")
IN_FLIGHT = Gauge("feed_store_in_flight", "Statements this worker has in flight to Cassandra")
WAITING = Gauge("feed_store_waiting", "Statements waiting for a permit (the limit is reached)")
LIMIT_CHANGES = Counter("feed_store_limit_decreases_total",
                        "Cuts of the in-flight limit, by cause (overload: a timeout or "
                        "overload answer; latency: answers slower than the unloaded latency allows)",
                        ["cause"])
for _cause in (Change.SHRANK_ON_OVERLOAD, Change.SHRANK_ON_LATENCY):  # 0 from the start
    LIMIT_CHANGES.labels(_cause.value)
BUDGET = Gauge("feed_store_retry_budget_tokens",
               "Retries of transient store errors this worker may send now (token bucket)")
RETRIES = Counter("feed_store_retries_total",
                  "Retries of transient store errors: sent at once, or after waiting for "
                  "the retry budget to refill", ["outcome"])
for _outcome in ("sent", "waited"):
    RETRIES.labels(_outcome)

# Answers that say the store has more work than it can do in time: the limit halves.
# Other errors (a bad query, a dropped connection to a killed node) say nothing of load.
OVERLOAD_ERRORS: tuple[type[BaseException], ...] = (
    OperationTimedOut, ReadTimeout, WriteTimeout, Unavailable, NoHostAvailable,
    OverloadedErrorMessage,
)


def is_overload(exc: BaseException) -> bool:
    return isinstance(exc, OVERLOAD_ERRORS)


class AdaptivePermits:
    """An asyncio gate of ``limit.permits`` statements in flight, first come first
    served; ``acquire`` returns the start time that ``release`` reports back."""

    def __init__(self, limit: AimdLimit, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self._clock = clock
        self.in_flight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    async def acquire(self) -> float:
        if self.in_flight < self.limit.permits and not self._waiters:
            self.in_flight += 1
            return self._clock()
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # the releaser counted this statement in flight for us
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.in_flight -= 1  # handed a permit, but cancelled before using it
                self._wake()
            elif waiter in self._waiters:  # a release may have dropped it already
                self._waiters.remove(waiter)
            raise
        return self._clock()

    def release(self, started: float, error: BaseException | None = None, *,
                sample: bool = True) -> Change:
        """The statement sent at ``started`` is done; ``error`` is what it raised.
        ``sample=False`` (a cancelled caller) frees the permit without judging latency."""
        change = Change.UNCHANGED
        if sample:
            change = self.limit.on_completion(started, self._clock(), self.in_flight,
                                              error is not None and is_overload(error))
            if change in (Change.SHRANK_ON_OVERLOAD, Change.SHRANK_ON_LATENCY):
                LIMIT_CHANGES.labels(change.value).inc()
        self.in_flight -= 1
        self._wake()
        return change

    def _wake(self) -> None:
        while self._waiters and self.in_flight < self.limit.permits:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.in_flight += 1
                waiter.set_result(None)


class RetryGate:
    """Retries spend a ``RetryBudget`` token; with none left, ``before_retry`` waits
    (the message stays unacked: at-least-once holds) until time or successes earn one."""

    def __init__(self, budget: RetryBudget, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.budget = budget
        self._clock = clock
        self._sleep = sleep

    def succeeded(self) -> None:
        self.budget.on_success()

    async def before_retry(self) -> bool:
        """Take a token for one retry, waiting while there is none; True if it waited."""
        waited = False
        while not self.budget.try_withdraw(self._clock()):
            waited = True
            # Re-checked at least every second: successes of other keys may refill it
            # sooner than the time-based trickle does.
            await self._sleep(min(1.0, max(0.01, self.budget.seconds_until_token(self._clock()))))
        RETRIES.labels("waited" if waited else "sent").inc()
        return waited


def adaptive_permits(min_limit: int, max_limit: int) -> AdaptivePermits:
    return AdaptivePermits(AimdLimit(min_limit, max_limit))


@dataclass
class StorePressure:
    """One worker process's permits and retry gate, shared by all its stores."""

    permits: AdaptivePermits
    retries: RetryGate

    @classmethod
    def from_settings(cls, settings: WorkerProcess) -> StorePressure:
        return cls(adaptive_permits(settings.store_min_in_flight, settings.store_max_in_flight),
                   RetryGate(RetryBudget(settings.store_retry_budget_per_success,
                                         settings.store_retry_budget_per_s,
                                         settings.store_retry_budget_max)))

    def export_metrics(self) -> None:
        """Point this process's gauges at these objects (one ``StorePressure`` per worker)."""
        LIMIT.set_function(lambda: self.permits.limit.limit)
        IN_FLIGHT.set_function(lambda: self.permits.in_flight)
        WAITING.set_function(lambda: self.permits.waiting)
        BUDGET.set_function(lambda: self.retries.budget.available(time.monotonic()))
