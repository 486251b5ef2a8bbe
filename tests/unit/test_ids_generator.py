"""Snowflake generation with an injected clock: layout, exhaustion and the drift levels."""
from __future__ import annotations

import math
import threading

import pytest

from services.api.write.idgen import ClockMovedBackwards, LeaseLost, SnowflakeGenerator
from services.shared.domain import ids

START_MS = ids.EPOCH_MS + 1_000_000


class FakeClock:
    """A millisecond clock that only moves when told to, or when someone sleeps."""

    def __init__(self, ms: int = START_MS) -> None:
        self.ms = ms
        self.sleeps: list[float] = []

    def __call__(self) -> int:
        return self.ms

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.ms += max(1, math.ceil(seconds * 1000))


def _generator(clock: FakeClock, node: int = 7, **kwargs) -> SnowflakeGenerator:
    return SnowflakeGenerator(node, clock=clock, sleep=clock.sleep, **kwargs)


def test_compose_and_parse_round_trip_the_specified_layout() -> None:
    snowflake = ids.compose(START_MS, 1023, 4095)
    parsed = ids.parse(snowflake)
    assert (parsed.timestamp_ms, parsed.node, parsed.sequence) == (START_MS, 1023, 4095)
    assert snowflake == ((START_MS - ids.EPOCH_MS) << 22) | (1023 << 12) | 4095
    assert 0 < snowflake < 2 ** 63


def test_epoch_is_2026_and_first_id_is_zero_time() -> None:
    assert ids.parse(ids.compose(ids.EPOCH_MS, 0, 0)).created_at.isoformat() == \
        "2026-01-01T00:00:00+00:00"


@pytest.mark.parametrize("node,sequence", [(-1, 0), (1024, 0), (0, -1), (0, 4096)])
def test_compose_refuses_fields_outside_their_bits(node: int, sequence: int) -> None:
    with pytest.raises(ValueError):
        ids.compose(START_MS, node, sequence)


@pytest.mark.parametrize("behind,expected", [
    (-10, ids.Drift.NONE), (0, ids.Drift.NONE), (1, ids.Drift.WAIT), (5, ids.Drift.WAIT),
    (6, ids.Drift.CONTINUE_ON_LAST), (1000, ids.Drift.CONTINUE_ON_LAST),
    (1001, ids.Drift.REFUSE)])
def test_classify_drift_levels(behind: int, expected: ids.Drift) -> None:
    assert ids.classify_drift(START_MS, START_MS - behind) is expected


def test_ids_in_one_millisecond_count_the_sequence() -> None:
    clock = FakeClock()
    gen = _generator(clock)
    issued = [ids.parse(gen.next_id()) for _ in range(3)]
    assert [p.sequence for p in issued] == [0, 1, 2]
    assert {p.timestamp_ms for p in issued} == {START_MS}
    assert {p.node for p in issued} == {7}


def test_exhausted_millisecond_waits_for_the_next_one() -> None:
    clock = FakeClock()
    gen = _generator(clock)
    batch = [gen.next_id() for _ in range(4096)]
    assert ids.parse(batch[-1]).sequence == 4095 and not clock.sleeps
    following = ids.parse(gen.next_id())
    assert clock.sleeps, "the generator must wait instead of reusing a sequence"
    assert following.timestamp_ms == START_MS + 1 and following.sequence == 0
    assert len(set(batch)) == 4096


def test_level_1_small_backwards_step_waits_for_the_clock() -> None:
    clock = FakeClock()
    gen = _generator(clock)
    before = gen.next_id()
    clock.ms -= 3
    after = gen.next_id()
    assert clock.sleeps and clock.sleeps[0] == pytest.approx(0.003)
    assert after > before
    assert ids.parse(after).timestamp_ms >= START_MS


def test_level_2_medium_backwards_step_continues_on_the_last_timestamp() -> None:
    clock = FakeClock()
    gen = _generator(clock)
    before = gen.next_id()
    clock.ms -= 500
    after = [gen.next_id() for _ in range(10)]
    assert not clock.sleeps
    assert all(ids.parse(a).timestamp_ms == START_MS for a in after)
    assert after == sorted(after) and after[0] > before


def test_level_2_exhausted_millisecond_waits_for_the_clock_to_pass_it() -> None:
    clock = FakeClock()
    gen = _generator(clock)
    gen.next_id()
    clock.ms -= 10
    issued = [gen.next_id() for _ in range(4095)]
    assert ids.parse(issued[-1]).sequence == 4095 and not clock.sleeps
    following = ids.parse(gen.next_id())
    assert following.timestamp_ms == START_MS + 1 and following.sequence == 0
    assert clock.ms == START_MS + 1


def test_level_3_large_backwards_step_refuses() -> None:
    clock = FakeClock()
    gen = _generator(clock)
    gen.next_id()
    clock.ms -= 1001
    with pytest.raises(ClockMovedBackwards) as refused:
        gen.next_id()
    assert refused.value.behind_ms == 1001
    clock.ms += 1001
    assert ids.parse(gen.next_id()).timestamp_ms == START_MS


def test_lost_lease_stops_issuing() -> None:
    class Lease:
        held = True

        def is_held(self) -> bool:
            return self.held

    lease = Lease()
    gen = _generator(FakeClock(), lease=lease)
    gen.next_id()
    lease.held = False
    with pytest.raises(LeaseLost):
        gen.next_id()


def test_threads_sharing_a_generator_never_get_the_same_id() -> None:
    gen = SnowflakeGenerator(3)
    per_thread: list[list[int]] = [[] for _ in range(8)]

    def work(out: list[int]) -> None:
        for _ in range(20_000):
            out.append(gen.next_id())

    threads = [threading.Thread(target=work, args=(out,)) for out in per_thread]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = [i for out in per_thread for i in out]
    assert len(set(everything)) == len(everything) == 160_000
    assert all(out == sorted(out) for out in per_thread)
