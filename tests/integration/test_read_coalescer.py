"""``PartitionReads`` on the session's Cassandra: concurrent reads of single partitions
leave as few IN reads, each caller gets exactly its own partition's rows (every page of
them, none for a partition with no rows), a key asked twice is read once, and a failed
read fails every caller of it."""
from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator

import pytest
from cassandra import InvalidRequest
from cassandra.cluster import Session

from services.shared.settings import Settings
from services.shared.stores import cql
from services.shared.stores.cql_async import CqlRunner
from services.shared.stores.read_coalescer import MAX_KEYS, PartitionReads

pytestmark = pytest.mark.integration

_USERS = itertools.count(7_400_000_000)


@pytest.fixture(scope="module")
def cassandra(settings: Settings) -> Iterator[Session]:
    session = cql.session(settings)
    yield session
    session.cluster.shutdown()


def _run(coro):  # type: ignore[no-untyped-def]
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


def test_each_caller_gets_its_own_partition_from_shared_in_reads(cassandra: Session) -> None:
    add = cassandra.prepare("INSERT INTO blocks (user_id, other_id, direction) VALUES (?,?,?)")
    users = [next(_USERS) for _ in range(80)]
    for i, user in enumerate(users):
        for other in range(i % 4):  # 0-3 rows a partition; a quarter have none
            cassandra.execute(add, (user, 1_000 + other, "out"))
    big = users[1]
    for other in range(2_000, 2_250):  # one partition over several pages
        cassandra.execute(add, (big, other, "in"))
    statement = cassandra.prepare("SELECT user_id, other_id FROM blocks WHERE user_id IN ?")
    statement.fetch_size = 100

    async def main() -> tuple[PartitionReads, list[list[int]], list[int]]:
        reads = PartitionReads(CqlRunner(cassandra), statement, linger_s=0.005)
        results = await asyncio.gather(*(reads.rows(u) for u in users), reads.rows(users[-1]))
        return reads, [sorted(r[1] for r in rows) for rows in results[:-1]], sorted(r[1] for r in results[-1])

    reads, got, again = _run(main())
    want = [sorted(range(1_000, 1_000 + i % 4)) for i in range(len(users))]
    want[1] = sorted([*want[1], *range(2_000, 2_250)])
    assert got == want
    assert again == want[-1]  # the same key twice in one linger: one answer, for both
    assert reads.keys == len(users)
    assert reads.requests <= -(-len(users) // MAX_KEYS) + 1


def test_a_per_partition_limit_is_applied_to_every_partition(cassandra: Session) -> None:
    push = cassandra.prepare("INSERT INTO feed_inbox (reader_id, rank_key, post_id, author_id) VALUES (?,?,?,?)")
    readers = [next(_USERS) for _ in range(3)]
    for n, reader in enumerate(readers):
        for k in range(5 + n):
            cassandra.execute(push, (reader, float(k), k, 1))
    heads = cassandra.prepare("SELECT reader_id, rank_key FROM feed_inbox WHERE reader_id IN ? PER PARTITION LIMIT ?")

    async def main() -> list[list[float]]:
        reads = PartitionReads(CqlRunner(cassandra), heads, extra=(4,))
        return [[r[1] for r in rows] for rows in await asyncio.gather(*(reads.rows(r) for r in readers))]

    tops = _run(main())
    assert [len(t) for t in tops] == [4, 4, 4]
    assert all(t == sorted(t, reverse=True) for t in tops)  # feed_inbox's order: highest key first


def test_a_failed_read_fails_every_caller_of_it(cassandra: Session) -> None:
    # A PER PARTITION LIMIT of 0 is refused by the node.
    heads = cassandra.prepare("SELECT reader_id, rank_key FROM feed_inbox WHERE reader_id IN ? PER PARTITION LIMIT ?")

    async def main() -> list[object]:
        reads = PartitionReads(CqlRunner(cassandra), heads, extra=(0,), linger_s=0.005)
        return await asyncio.gather(*(reads.rows(next(_USERS)) for _ in range(3)), return_exceptions=True)

    results = _run(main())
    assert all(isinstance(r, InvalidRequest) for r in results), results
