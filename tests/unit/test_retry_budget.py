"""The retry budget (services/shared/domain/retry_budget.py)."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from services.shared.domain.retry_budget import RetryBudget


def test_sustained_failure_empties_the_budget_and_then_only_time_earns_retries():
    budget = RetryBudget(per_success=0.1, per_second=5.0, max_tokens=100)
    granted = sum(budget.try_withdraw(0.0) for _ in range(500))
    assert granted == 100  # the burst, then nothing at the same instant
    assert not budget.try_withdraw(0.0)
    assert budget.seconds_until_token(0.0) == 0.2
    assert sum(budget.try_withdraw(10.0) for _ in range(500)) == 50  # 10 s at 5 a second


def test_successes_refill_the_budget_a_tenth_of_a_retry_each():
    budget = RetryBudget(per_success=0.1, per_second=0.0, max_tokens=10)
    while budget.try_withdraw(0.0):
        pass
    assert budget.seconds_until_token(0.0) == float("inf")  # no time trickle: only successes
    for _ in range(30):
        budget.on_success()
    assert sum(budget.try_withdraw(0.0) for _ in range(10)) == 3


def test_the_budget_never_holds_more_than_its_size():
    budget = RetryBudget(per_success=1.0, per_second=100.0, max_tokens=5)
    for _ in range(100):
        budget.on_success()
    assert budget.available(1000.0) == 5


def test_a_clock_going_backwards_earns_nothing():
    budget = RetryBudget(per_success=0.1, per_second=5.0, max_tokens=2, tokens=0.0)
    assert budget.available(10.0) == 0.0
    assert budget.available(5.0) == 0.0


@given(st.lists(st.tuples(st.sampled_from(["success", "retry"]), st.floats(0, 5)), max_size=300))
def test_tokens_stay_between_zero_and_the_size_and_retries_never_exceed_what_was_earned(ops):
    budget = RetryBudget(per_success=0.1, per_second=2.0, max_tokens=20)
    now, successes, retries = 0.0, 0, 0
    for op, wait in ops:
        now += wait
        if op == "success":
            budget.on_success()
            successes += 1
        else:
            retries += budget.try_withdraw(now)
        assert 0.0 <= budget.tokens <= 20.0
    assert retries <= 20 + 0.1 * successes + 2.0 * now + 1e-9
