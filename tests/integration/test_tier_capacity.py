"""The fan-out's measured capacity outlives its process (services/fanout/tier_store.py,
``fanout_capacity``), on the session's Cassandra keyspace: a store that took samples
saves the estimate; a new store of the same consumer group starts from it instead of the
floor, so an author of 1,649 followers stays ordinary after a restart; an estimate past
its age, or another group's, is not taken."""
from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from cassandra.cluster import Session

from services.fanout.tier_store import CapacitySaving, TierStore
from services.fanout.tiering import CapacityEstimate, Tier, TierPolicy, TierState
from services.shared.stores.cql_async import CqlRunner

pytestmark = pytest.mark.integration


def _store(session: Session, name: str, clock: list[datetime], max_age_s: float = 3600.0) -> TierStore:
    return TierStore(session, CqlRunner(session), TierPolicy(), CapacityEstimate(floor_rows_per_s=2000),
                     lambda: clock[0], saving=CapacitySaving(name, every_s=30.0, max_age_s=max_age_s))


async def _sampled(store: TierStore, rows: int) -> None:
    store.capacity.observe(rows, 1.0)
    store.capacity_sampled()
    for _ in range(200):  # the save runs in the background
        if store._save is not None and store._save.done():  # noqa: SLF001 - the test waits on it
            return
        await asyncio.sleep(0.01)


def test_a_new_process_starts_from_the_saved_capacity(cassandra: Session) -> None:
    name = f"g-{uuid.uuid4().hex[:8]}.fanout"
    author = 9_000_000_000 + uuid.uuid4().int % 1_000_000_000  # the celebrities list is shared
    clock = [datetime.now(timezone.utc)]
    first = _store(cassandra, name, clock)
    asyncio.run(_sampled(first, 18_000))

    clock[0] += timedelta(seconds=120)
    restarted = _store(cassandra, name, clock)
    assert asyncio.run(restarted.restore_capacity()) == pytest.approx(18_000)
    decision = asyncio.run(restarted.tier_for_post(author, 1_649, TierState()))
    assert (decision.tier, decision.changed) == (Tier.ORDINARY, False)

    # The row carries the age limit as its TTL: Cassandra drops it when it is too old.
    ttl = cassandra.execute("SELECT TTL(rows_per_s) FROM fanout_capacity WHERE name=%s", (name,)).one()[0]
    assert 3000 < ttl <= 3600

    # Another group, or a process past the age limit, keeps the floor.
    other = _store(cassandra, f"other-{name}", clock)
    assert asyncio.run(other.restore_capacity()) is None
    clock[0] += timedelta(seconds=3600)
    late = _store(cassandra, name, clock)
    assert asyncio.run(late.restore_capacity()) is None
    assert late.capacity.rows_per_s == 2000
    floor = asyncio.run(late.tier_for_post(author + 1, 1_649, TierState()))
    assert floor.tier is Tier.CELEBRITY
