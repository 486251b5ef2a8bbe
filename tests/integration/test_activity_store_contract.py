"""One contract for the activity store, run against Cassandra (``ActivityStore``) and the
in-memory store the unit tests use (tests/support/memory_stores.py): the fake cannot
drift from the real thing (arroyo's pattern)."""
from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable

import pytest

from services.fanout.copies import CopyStore
from services.shared.settings import Settings
from services.shared.clients import cql
from services.shared.stores.activity import ACTIVE, IDLE, REGENERATING, ActivityPort, ActivityStore
from services.shared.stores.cql_async import CqlRunner
from tests.support.api_server import new_user_id
from tests.support.memory_stores import InMemoryActivityStore

pytestmark = pytest.mark.integration


@dataclass
class Subject:
    store: ActivityPort
    follow: Callable[[int, int], None]
    run: Callable[[Any], Any]


@pytest.fixture(params=["memory", "cassandra", "cassandra, coalesced reads"])
def subject(request: pytest.FixtureRequest, settings: Settings) -> Iterator[Subject]:
    loop = asyncio.new_event_loop()
    if request.param == "memory":
        memory = InMemoryActivityStore()
        yield Subject(memory, memory.follow, loop.run_until_complete)
        loop.close()
        return
    session = cql.session(settings)
    runner = CqlRunner(session)
    copies = CopyStore(session, runner, 500)
    lsn = iter(range(10**9, 2 * 10**9))

    def follow(reader_id: int, author_id: int) -> None:
        loop.run_until_complete(copies.write_following_copy(
            reader_id, author_id, datetime.now(timezone.utc), next(lsn)))

    try:
        linger = 0.001 if request.param == "cassandra, coalesced reads" else None
        yield Subject(ActivityStore(session, runner, read_linger_s=linger), follow, loop.run_until_complete)
    finally:
        loop.close()
        session.cluster.shutdown()


def _period() -> int:
    """A period no other test writes (the Cassandra store's tables are shared)."""
    return 10**7 + secrets.randbelow(10**7)


def test_a_reader_never_seen_is_active_with_no_read(subject: Subject) -> None:
    seen = subject.run(subject.store.activity(new_user_id()))
    assert (seen.last_period, seen.state) == (None, ACTIVE)


def test_the_last_read_written_is_the_one_read_back(subject: Subject) -> None:
    reader, period = new_user_id(), _period()
    subject.run(subject.store.record_read(reader, period, 3600))
    subject.run(subject.store.record_read(reader, period + 2, 3600))
    seen = subject.run(subject.store.activity(reader))
    assert (seen.last_period, seen.state) == (period + 2, ACTIVE)


def test_a_state_is_kept_with_its_time_and_apart_from_the_read(subject: Subject) -> None:
    reader, period = new_user_id(), _period()
    subject.run(subject.store.set_state(reader, REGENERATING))
    seen = subject.run(subject.store.activity(reader))
    assert (seen.last_period, seen.state) == (None, REGENERATING)
    assert seen.state_at_ms is not None
    subject.run(subject.store.record_read(reader, period, 3600))
    subject.run(subject.store.set_state(reader, IDLE))
    seen = subject.run(subject.store.activity(reader))
    assert (seen.last_period, seen.state) == (period, IDLE)


def test_a_period_lists_every_reader_who_read_in_it_once(subject: Subject) -> None:
    period = _period()
    readers = [new_user_id() for _ in range(40)]  # over several shards
    subject.run(subject.store.record_reads([(r, period) for r in readers], 3600))
    subject.run(subject.store.record_read(readers[0], period, 3600))  # again: still once
    got = subject.run(_collect(subject.store.readers_in(period)))
    assert sorted(got) == sorted(readers)
    assert subject.run(_collect(subject.store.readers_in(period + 1))) == []


async def _collect(pages: Any) -> list[int]:
    return [r async for page in pages for r in page]


def test_flags_are_per_author_and_undone_per_author(subject: Subject) -> None:
    reader, other, a, b = (new_user_id() for _ in range(4))
    subject.run(subject.store.flag(reader, [a, b]))
    subject.run(subject.store.flag(other, [a]))
    assert subject.run(subject.store.inactive_followers(a)) == {reader, other}
    subject.run(subject.store.unflag(reader, [a]))
    assert subject.run(subject.store.inactive_followers(a)) == {other}
    assert subject.run(subject.store.inactive_followers(b)) == {reader}
    subject.run(subject.store.unflag(reader, [a]))  # idempotent
    assert subject.run(subject.store.inactive_followers(new_user_id())) == frozenset()


def test_following_lists_the_follows_in_author_order(subject: Subject) -> None:
    reader = new_user_id()
    authors = sorted(new_user_id() for _ in range(3))
    for author in reversed(authors):
        subject.follow(reader, author)
    assert subject.run(subject.store.following(reader)) == authors
    assert subject.run(subject.store.following(new_user_id())) == []


def test_sweep_progress_is_kept_per_name(subject: Subject) -> None:
    name, other = f"contract-{secrets.token_hex(4)}", f"contract-{secrets.token_hex(4)}"
    assert subject.run(subject.store.swept_through(name)) is None
    subject.run(subject.store.save_progress(41, name))
    subject.run(subject.store.save_progress(42, name))
    assert subject.run(subject.store.swept_through(name)) == 42
    assert subject.run(subject.store.swept_through(other)) is None
