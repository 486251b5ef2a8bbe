"""The gates of a worker's pressure on the store (services/shared/stores/store_pressure.py):
adaptive permits in front of every statement, and retries that wait for the retry budget."""
from __future__ import annotations

import asyncio

from cassandra import OperationTimedOut
from hypothesis import given, settings
from hypothesis import strategies as st

from services.shared.domain.concurrency_limit import AimdLimit
from services.shared.domain.retry_budget import RetryBudget
from services.shared.settings import Settings
from services.shared.stores.store_pressure import AdaptivePermits, RetryGate
from services.shared.worker.faust_app import RawMessage
from services.shared.worker.poison_guard import GuardedProcessing
from tests.support.fakes import RecordingPublisher, TransientError


class FakeClock:
    """A clock that moves only when someone sleeps on it."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


def test_no_more_statements_are_in_flight_than_the_limit_allows():
    async def main() -> tuple[int, int]:
        permits = AdaptivePermits(AimdLimit(min_limit=4, max_limit=4))
        peak = 0

        async def statement() -> None:
            nonlocal peak
            started = await permits.acquire()
            peak = max(peak, permits.in_flight)
            await asyncio.sleep(0)
            permits.release(started)

        await asyncio.gather(*(statement() for _ in range(100)))
        return peak, permits.in_flight

    assert asyncio.run(main()) == (4, 0)


def test_timeouts_shrink_the_gate_and_waiting_statements_follow_the_new_limit():
    async def main() -> tuple[int, int]:
        clock = FakeClock()
        permits = AdaptivePermits(AimdLimit(min_limit=2, max_limit=16, limit=16), clock=clock)
        held = [await permits.acquire() for _ in range(16)]
        waiters = [asyncio.ensure_future(permits.acquire()) for _ in range(10)]
        await asyncio.sleep(0)
        clock.now = 7.0
        for started in held:  # the whole round times out: one halving, to 8
            permits.release(started, OperationTimedOut("timed out"))
        await asyncio.sleep(0)
        admitted = sum(w.done() for w in waiters)
        for w in waiters:
            w.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
        return admitted, permits.limit.permits

    admitted, limit = asyncio.run(main())
    assert limit == 8 and admitted == 8


def test_a_cancelled_waiter_gives_back_the_permit_it_was_handed():
    async def main() -> int:
        permits = AdaptivePermits(AimdLimit(min_limit=1, max_limit=1))
        first = await permits.acquire()
        waiter = asyncio.ensure_future(permits.acquire())
        await asyncio.sleep(0)
        permits.release(first)   # hands the permit to the waiter ...
        waiter.cancel()          # ... which is cancelled before it runs
        await asyncio.gather(waiter, return_exceptions=True)
        return permits.in_flight

    assert asyncio.run(main()) == 0


def test_a_waiter_cancelled_while_queued_leaves_the_gate_consistent():
    async def main() -> tuple[int, int, bool]:
        permits = AdaptivePermits(AimdLimit(min_limit=1, max_limit=1))
        first = await permits.acquire()
        cancelled = asyncio.ensure_future(permits.acquire())
        later = asyncio.ensure_future(permits.acquire())
        await asyncio.sleep(0)
        cancelled.cancel()       # its future is cancelled at once ...
        permits.release(first)   # ... and a release skips it before its task runs
        await asyncio.gather(cancelled, return_exceptions=True)
        started = await later    # the next waiter got the permit
        permits.release(started)
        return permits.in_flight, permits.waiting, cancelled.cancelled()

    assert asyncio.run(main()) == (0, 0, True)


def test_retries_wait_for_the_budget_once_it_is_spent():
    async def main() -> tuple[list[bool], list[float]]:
        clock = FakeClock()
        gate = RetryGate(RetryBudget(per_success=0.1, per_second=2.0, max_tokens=2),
                         clock=clock, sleep=clock.sleep)
        waited = [await gate.before_retry() for _ in range(4)]
        return waited, clock.slept

    waited, slept = asyncio.run(main())
    assert waited == [False, False, True, True]
    assert sum(slept) == 1.0  # two retries at 2 a second


def test_a_message_failing_under_overload_is_retried_after_the_budget_refills_never_dropped():
    clock = FakeClock()
    gate = RetryGate(RetryBudget(per_success=0.1, per_second=1.0, max_tokens=1, tokens=0.0),
                     clock=clock, sleep=clock.sleep)
    settings = Settings(consumer_max_attempts=2, store_retry_attempts=4, store_retry_base_s=0.0)
    publisher = RecordingPublisher()
    guard = GuardedProcessing(settings, publisher, (TransientError,), sleep=clock.sleep, retries=gate)
    calls = 0

    async def handle(msg: RawMessage) -> None:
        nonlocal calls
        calls += 1
        if calls < 4:
            raise TransientError("timed out")

    msg = RawMessage("t.public.follows", 0, 7, b"k", b"v")
    assert asyncio.run(guard.process(msg, handle)) == "ok"
    assert calls == 4 and publisher.sent == []
    assert clock.now >= 3.0  # three retries, each waited for its token (1 a second)
    assert gate.budget.tokens < 1.0  # the success earned a tenth back


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["ok", "timeout", "cancel"]), st.integers(0, 3)),
                min_size=1, max_size=60))
def test_whatever_statements_do_no_permit_is_leaked_and_none_over_the_maximum(
        plan: list[tuple[str, int]]) -> None:
    async def main() -> tuple[int, int, list[tuple[int, int]]]:
        clock = FakeClock()
        permits = AdaptivePermits(AimdLimit(min_limit=1, max_limit=6, limit=6), clock=clock)
        granted: list[tuple[int, int]] = []  # (in flight, permits) at each grant

        async def statement(outcome: str, yields: int) -> None:
            started = await permits.acquire()  # as CqlRunner._call uses the gate
            granted.append((permits.in_flight, permits.limit.permits))
            try:
                for _ in range(yields):
                    await asyncio.sleep(0)
            except asyncio.CancelledError:
                permits.release(started, sample=False)
                raise
            clock.now += 0.01
            permits.release(started, OperationTimedOut("t") if outcome == "timeout" else None)

        tasks = [asyncio.ensure_future(statement(o, y)) for o, y in plan]
        await asyncio.sleep(0)
        for task, (outcome, _) in zip(tasks, plan):
            if outcome == "cancel":
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return permits.in_flight, permits.waiting, granted

    in_flight, waiting, granted = asyncio.run(main())
    assert (in_flight, waiting) == (0, 0)
    assert all(now <= 6 for now, _ in granted)  # never past the largest limit
