"""The adaptive in-flight limit (services/shared/domain/concurrency_limit.py)."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from services.shared.domain.concurrency_limit import SLOW_FLOOR_S, AimdLimit, Change

FAST_S = 0.005  # a healthy statement


def _fast_round(limit: AimdLimit, now: float, completions: int) -> float:
    """``completions`` fast answers, each with the whole limit in flight; returns the time."""
    for _ in range(completions):
        limit.on_completion(now, now + FAST_S, limit.permits, overloaded=False)
        now += FAST_S
    return now


def test_timeouts_shrink_the_limit_down_to_its_minimum_and_never_below():
    limit = AimdLimit(min_limit=8, max_limit=256, limit=256)
    now = 0.0
    seen = []
    for _ in range(20):  # each round: statements sent after the last cut time out
        now += 1.0
        limit.on_completion(now - 0.5, now, limit.permits, overloaded=True)
        seen.append(limit.permits)
    assert seen[:3] == [128, 64, 32]
    assert min(seen) == 8 and seen[-1] == 8


def test_a_burst_of_timeouts_from_one_round_halves_the_limit_once():
    limit = AimdLimit(min_limit=8, max_limit=256, limit=200)
    changes = [limit.on_completion(0.0, 6.0 + i * 0.001, 200, overloaded=True) for i in range(200)]
    assert changes.count(Change.SHRANK_ON_OVERLOAD) == 1
    assert limit.permits == 100


def test_fast_answers_with_the_limit_in_use_grow_it_up_to_the_maximum():
    limit = AimdLimit(min_limit=8, max_limit=64, limit=8)
    now = _fast_round(limit, 0.0, 50)
    assert limit.permits > 8
    _fast_round(limit, now, 20_000)
    assert limit.permits == 64


def test_an_idle_worker_does_not_grow_its_limit():
    limit = AimdLimit(min_limit=8, max_limit=256, limit=32)
    now = 0.0
    for _ in range(1000):  # one statement at a time: the limit is not what holds it back
        assert limit.on_completion(now, now + FAST_S, 1, overloaded=False) is Change.UNCHANGED
        now += FAST_S
    assert limit.permits == 32


def test_answers_slowing_far_past_the_unloaded_latency_shrink_the_limit():
    limit = AimdLimit(min_limit=8, max_limit=256, limit=128)
    now = _fast_round(limit, 0.0, 200)
    before = limit.permits
    changes = []
    for _ in range(200):  # a queue builds: each answer takes a second
        changes.append(limit.on_completion(now, now + 1.0, limit.permits, overloaded=False))
        now += 0.05
    assert Change.SHRANK_ON_LATENCY in changes
    assert limit.permits < before
    first_cut = changes.index(Change.SHRANK_ON_LATENCY)  # once the recent latency passed the floor
    assert Change.GREW not in changes[first_cut:]


def test_latency_under_the_floor_is_never_a_reason_to_shrink():
    limit = AimdLimit(min_limit=8, max_limit=256, limit=64)
    now = 0.0
    for i in range(2000):  # 1 ms, then 20x slower but still under the floor
        rtt = 0.001 if i < 1000 else SLOW_FLOOR_S * 0.9
        change = limit.on_completion(now, now + rtt, limit.permits, overloaded=False)
        assert change is not Change.SHRANK_ON_LATENCY
        now += rtt
    assert limit.permits > 64


def test_the_limit_recovers_after_the_store_does():
    limit = AimdLimit(min_limit=8, max_limit=128, limit=128)
    now = 0.0
    for _ in range(10):
        now += 1.0
        limit.on_completion(now - 0.5, now, limit.permits, overloaded=True)
    assert limit.permits == 8
    _fast_round(limit, now + 1.0, 20_000)
    assert limit.permits == 128


def test_a_new_limit_starts_well_below_its_maximum():
    assert AimdLimit(min_limit=8, max_limit=256).permits == 32
    assert AimdLimit(min_limit=8, max_limit=16).permits == 8


samples = st.lists(st.tuples(st.floats(0, 10), st.floats(0, 10), st.integers(0, 400), st.booleans()),
                   max_size=300)


@given(bounds=st.tuples(st.integers(1, 64), st.integers(1, 512)), events=samples)
def test_the_limit_always_stays_between_its_bounds(bounds: tuple[int, int], events: list[
        tuple[float, float, int, bool]]):
    low, high = bounds
    limit = AimdLimit(min_limit=low, max_limit=high)
    now = 0.0
    for wait, rtt, in_flight, overloaded in events:
        now += wait
        limit.on_completion(now, now + rtt, in_flight, overloaded)
        assert max(1, low) <= limit.permits <= max(low, high)
        now += rtt
