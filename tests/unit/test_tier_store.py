"""TierStore around the pure policy (services/fanout/tier_store.py): concurrent posts of
one author read its tier together, so all of them see the state before a change; the
change is decided, written and counted once, and each post is routed only once its
rows are written. A failed write is decided again by the next post. And the measured
capacity outlives the process: saved in the background at most every interval, taken by
a new store when fresh, the floor otherwise."""
from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

from prometheus_client import REGISTRY

from services.fanout.tier_store import CapacitySaving, TierStore
from services.fanout.tiering import CapacityEstimate, Tier, TierPolicy, TierState

T0 = datetime(2026, 12, 7, 12, 0, tzinfo=timezone.utc)


class _Session:
    def prepare(self, text: str) -> SimpleNamespace:
        return SimpleNamespace(text=text, fetch_size=None)


class _Runner:
    """Records each statement; every write takes a turn of the loop, as a request would."""

    def __init__(self, fail_writes: int = 0) -> None:
        self.writes: list[str] = []
        self.fail_writes = fail_writes

    async def execute(self, statement: SimpleNamespace, params: Any = None) -> list[Any]:
        await asyncio.sleep(0)
        if self.fail_writes:
            self.fail_writes -= 1
            raise TimeoutError("write timed out")
        self.writes.append(statement.text.split(" (")[0])
        return []


def _store(runner: _Runner, clock: list[datetime]) -> TierStore:
    return TierStore(_Session(), runner, TierPolicy(), CapacityEstimate(floor_rows_per_s=2000),  # type: ignore[arg-type]
                     lambda: clock[0])


def _promotions() -> float:
    value = REGISTRY.get_sample_value("feed_fanout_tier_changes_total", {"to": Tier.CELEBRITY.value})
    assert value is not None  # services/fanout/metrics.py makes both labels at import
    return value


def test_concurrent_posts_of_one_author_promote_it_once() -> None:
    runner, clock = _Runner(), [T0]
    store = _store(runner, clock)
    before = _promotions()

    async def posts() -> list[Any]:
        # Each read the state before any change (a coalesced read): ordinary.
        return list(await asyncio.gather(*(store.tier_for_post(7, 100_000, TierState()) for _ in range(5))))

    decisions = asyncio.run(posts())
    assert [d.tier for d in decisions] == [Tier.CELEBRITY] * 5
    assert sum(d.changed for d in decisions) == 1
    assert _promotions() - before == 1
    assert runner.writes == ["INSERT INTO celebrities", "INSERT INTO author_tiers"]

    # A later post whose read still predates the change keeps the tier, unchanged.
    clock[0] = T0 + timedelta(seconds=30)
    later = asyncio.run(store.tier_for_post(7, 100_000, TierState()))
    assert (later.tier, later.changed) == (Tier.CELEBRITY, False)
    assert len(runner.writes) == 2


def test_a_change_whose_writes_failed_is_decided_again() -> None:
    runner, clock = _Runner(fail_writes=1), [T0]
    store = _store(runner, clock)

    async def posts() -> list[Any]:
        return list(await asyncio.gather(*(store.tier_for_post(7, 100_000, TierState()) for _ in range(3)),
                                         return_exceptions=True))

    outcomes = asyncio.run(posts())
    # None of them was routed as a celebrity without the rows: all three fail (retried).
    assert all(isinstance(o, TimeoutError) for o in outcomes)
    retried = asyncio.run(store.tier_for_post(7, 100_000, TierState()))
    assert (retried.tier, retried.changed) == (Tier.CELEBRITY, True)
    assert runner.writes == ["INSERT INTO celebrities", "INSERT INTO author_tiers"]


def test_a_newer_change_read_from_the_store_wins_over_this_process_memory() -> None:
    runner, clock = _Runner(), [T0]
    store = _store(runner, clock)
    assert asyncio.run(store.tier_for_post(7, 100_000, TierState())).changed
    # Past the dwell time, another worker demoted the author: the read says so.
    clock[0] = T0 + timedelta(seconds=700)
    read = TierState(Tier.ORDINARY, T0 + timedelta(seconds=650))
    decision = asyncio.run(store.tier_for_post(7, 100, read))
    assert (decision.tier, decision.changed) == (Tier.ORDINARY, False)


def test_separate_authors_each_change() -> None:
    runner, clock = _Runner(), [T0]
    store = _store(runner, clock)

    async def posts() -> list[Any]:
        return list(await asyncio.gather(*(store.tier_for_post(a, 100_000, TierState()) for a in (1, 2))))

    assert [d.changed for d in asyncio.run(posts())] == [True, True]
    assert len(runner.writes) == 4


class _CapacityRunner(_Runner):
    """Answers the capacity read with ``saved`` (a row or none); records saves' values."""

    def __init__(self, saved: tuple[float, datetime] | None = None, fail_read: bool = False) -> None:
        super().__init__()
        self.saved = saved
        self.fail_read = fail_read
        self.saves: list[tuple[str, float, datetime, int]] = []

    async def execute(self, statement: SimpleNamespace, params: Any = None) -> list[Any]:
        await asyncio.sleep(0)
        if statement.text.startswith("SELECT rows_per_s"):
            if self.fail_read:
                raise TimeoutError("read timed out")
            return [] if self.saved is None else [(self.saved[0], self.saved[1].replace(tzinfo=None))]
        if statement.text.startswith("INSERT INTO fanout_capacity"):
            self.saves.append(params)
        return []


def _saving_store(runner: _Runner, clock: list[datetime], max_age_s: float = 3600.0) -> TierStore:
    return TierStore(_Session(), runner, TierPolicy(), CapacityEstimate(floor_rows_per_s=2000),  # type: ignore[arg-type]
                     lambda: clock[0], saving=CapacitySaving("g.fanout", every_s=30.0, max_age_s=max_age_s))


def test_a_restarted_store_starts_from_the_saved_capacity() -> None:
    runner, clock = _CapacityRunner(saved=(20_000.0, T0 - timedelta(seconds=600))), [T0]
    store = _saving_store(runner, clock)
    assert asyncio.run(store.restore_capacity()) == 20_000.0
    assert store.capacity.rows_per_s == 20_000.0
    # An author of 1,649 followers stays ordinary (at the floor it would be promoted).
    decision = asyncio.run(store.tier_for_post(7, 1_649, TierState()))
    assert (decision.tier, decision.changed) == (Tier.ORDINARY, False)


def test_a_stale_missing_or_unreadable_saved_capacity_leaves_the_floor() -> None:
    clock = [T0]
    for runner in (_CapacityRunner(saved=(20_000.0, T0 - timedelta(seconds=3601))),
                   _CapacityRunner(saved=None), _CapacityRunner(fail_read=True)):
        store = _saving_store(runner, clock)
        assert asyncio.run(store.restore_capacity()) is None
        assert store.capacity.rows_per_s == 2000
    # No saving configured: nothing read at all.
    plain = _CapacityRunner(fail_read=True)
    assert asyncio.run(_store(plain, clock).restore_capacity()) is None


def test_samples_are_saved_at_most_every_interval_in_the_background() -> None:
    runner, clock = _CapacityRunner(), [T0]
    store = _saving_store(runner, clock)

    async def sample(rows: int) -> None:
        store.capacity.observe(rows, 1.0)
        store.capacity_sampled()
        await asyncio.sleep(0.01)  # the background save's turn

    async def run() -> None:
        store.capacity_sampled()  # nothing measured yet: nothing to save
        await sample(10_000)
        clock[0] = T0 + timedelta(seconds=10)
        await sample(20_000)  # within the interval: not saved
        clock[0] = T0 + timedelta(seconds=31)
        await sample(20_000)

    asyncio.run(run())
    assert [(name, round(value), at, ttl) for name, value, at, ttl in runner.saves] == [
        ("g.fanout", 10_000, T0, 3600), ("g.fanout", 13_600, T0 + timedelta(seconds=31), 3600)]


def test_a_failed_save_is_retried_by_the_next_sample() -> None:
    runner, clock = _Runner(fail_writes=1), [T0]
    store = _saving_store(runner, clock)

    async def run() -> None:
        for _ in range(2):
            store.capacity.observe(10_000, 1.0)
            store.capacity_sampled()
            await asyncio.sleep(0.01)

    asyncio.run(run())
    assert runner.writes == ["INSERT INTO fanout_capacity"]
