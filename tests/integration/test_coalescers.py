"""The fan-out's coalescers on the session's Cassandra.

``WriteCoalescer``: concurrent single-row writes leave as shared batches, every row is
stored with its own write time, a failed batch fails every caller of it, and statements
that cannot share a batch are refused. ``PartitionReads``: concurrent reads of single
partitions leave as few IN reads, each caller gets exactly its own partition's rows
(every page of them, none for a partition with no rows), a key asked twice is read once,
and a failed read fails every caller of it. The fan-out's small audiences
(``CopyStore.follower_pages``) leave as one such read."""
from __future__ import annotations

import asyncio
import itertools
from datetime import datetime

import pytest
from cassandra import InvalidRequest
from cassandra.cluster import Session

from services.fanout.copies import CopyStore
from services.shared.stores.cql_async import CqlRunner
from services.shared.stores.read_coalescer import MAX_KEYS, PartitionReads
from services.shared.stores.write_coalescer import MAX_ROWS, WriteCoalescer

pytestmark = pytest.mark.integration

_READERS = itertools.count(7_300_000_000)
_USERS = itertools.count(7_400_000_000)


def _run(coro):  # type: ignore[no-untyped-def]
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


def test_concurrent_rows_leave_in_shared_batches_and_keep_their_own_write_times(cassandra: Session) -> None:
    push = cassandra.prepare("INSERT INTO feed_inbox (reader_id, rank_key, post_id, author_id) "
                             "VALUES (?,?,?,?) USING TIMESTAMP ?")
    readers = [next(_READERS) for _ in range(120)]

    async def main() -> WriteCoalescer:
        writes = WriteCoalescer(CqlRunner(cassandra), linger_s=0.005)
        # 120 callers, one row each, and one caller of 3 rows of one reader: a caller
        # resumes only once its row is stored.
        await asyncio.gather(*(writes.write(push, (r, 1.0, 11, 5, 1_000 + i)) for i, r in enumerate(readers)),
                             writes.write_all([(push, (readers[0], float(k), 20 + k, 6, 9_000)) for k in range(3)]))
        return writes

    writes = _run(main())
    assert writes.rows == 123
    # Every row in a batch of at most MAX_ROWS, far fewer requests than rows.
    assert writes.batches <= -(-123 // MAX_ROWS) + 1
    rows_of = cassandra.prepare("SELECT reader_id, post_id, WRITETIME(author_id) AS ts FROM feed_inbox "
                                "WHERE reader_id IN ? AND rank_key = 1.0")
    stored = {r.reader_id: r for r in cassandra.execute(rows_of, (readers,))}
    assert sorted(stored) == sorted(readers)
    assert [stored[r].ts for r in readers] == [1_000 + i for i in range(len(readers))]
    head = list(cassandra.execute("SELECT post_id FROM feed_inbox WHERE reader_id=%s", (readers[0],)))
    assert sorted(r.post_id for r in head) == [11, 20, 21, 22]


def test_a_later_write_time_wins_whatever_batch_carries_it(cassandra: Session) -> None:
    """Last-write-wins by USING TIMESTAMP holds inside a batch: a delete stamped later
    than an insert of the same row, in the same batch, removes it; an insert stamped
    before an earlier-applied delete stays shadowed."""
    push = cassandra.prepare("INSERT INTO feed_inbox (reader_id, rank_key, post_id, author_id) "
                             "VALUES (?,?,?,?) USING TIMESTAMP ?")
    unpush = cassandra.prepare("DELETE FROM feed_inbox USING TIMESTAMP ? "
                               "WHERE reader_id=? AND rank_key=? AND post_id=?")
    a, b = next(_READERS), next(_READERS)

    async def main() -> None:
        writes = WriteCoalescer(CqlRunner(cassandra), linger_s=0.005)
        await asyncio.gather(writes.write(push, (a, 2.0, 31, 5, 100)),
                             writes.write(unpush, (200, a, 2.0, 31)))
        await writes.write(unpush, (500, b, 2.0, 32))
        await writes.write(push, (b, 2.0, 32, 5, 400))  # late, older: stays deleted

    _run(main())
    for reader in (a, b):
        assert list(cassandra.execute("SELECT post_id FROM feed_inbox WHERE reader_id=%s", (reader,))) == []


def test_a_failed_batch_fails_every_caller_of_it(cassandra: Session) -> None:
    push = cassandra.prepare("INSERT INTO feed_inbox (reader_id, rank_key, post_id, author_id) "
                             "VALUES (?,?,?,?) USING TTL ? AND TIMESTAMP ?")
    reader = next(_READERS)  # one partition: the two rows share a batch on any ring

    async def main() -> list[object]:
        writes = WriteCoalescer(CqlRunner(cassandra), linger_s=0.005)
        # A negative TTL is refused by the node: the batch carrying it fails as a whole.
        return await asyncio.gather(writes.write(push, (reader, 1.0, 41, 5, 60, 10)),
                                    writes.write(push, (reader, 1.0, 42, 5, -1, 10)),
                                    return_exceptions=True)

    results = _run(main())
    assert all(isinstance(r, InvalidRequest) for r in results), results


def test_conditional_and_counter_writes_are_refused(cassandra: Session) -> None:
    conditional = cassandra.prepare("INSERT INTO author_tiers (author_id, tier) VALUES (?,?) IF NOT EXISTS")

    async def main() -> None:
        await WriteCoalescer(CqlRunner(cassandra)).write(conditional, (1, "ordinary"))

    with pytest.raises(ValueError, match="not batchable"):
        _run(main())


def test_keyed_rows_are_stored_as_if_each_were_bound(cassandra: Session) -> None:
    """``write_keyed``: a post's rows for many readers, the values other than the reader
    serialized once; a statement whose first marker is not its partition key (here the
    write time) takes the bound path and stores the same."""
    push = cassandra.prepare("INSERT INTO feed_inbox (reader_id, rank_key, post_id, author_id) "
                             "VALUES (?,?,?,?) USING TTL ? AND TIMESTAMP ?")
    unpush = cassandra.prepare("DELETE FROM feed_inbox USING TIMESTAMP ? "
                               "WHERE reader_id=? AND rank_key=? AND post_id=?")
    readers = [next(_READERS) for _ in range(130)]

    async def main() -> tuple[int, int]:
        writes = WriteCoalescer(CqlRunner(cassandra), linger_s=0.005)
        pushed = await writes.write_keyed(push, readers, (3.5, 51, 7, 3_600, 77_000))
        # the bound path: the first value is the write time, not the key
        removed = await writes.write_keyed(unpush, [78_000], (readers[0], 3.5, 51))
        return pushed, removed

    assert _run(main()) == (130, 1)
    rows_of = cassandra.prepare("SELECT reader_id, rank_key, post_id, author_id, WRITETIME(author_id) AS ts, "
                                "TTL(author_id) AS ttl FROM feed_inbox WHERE reader_id IN ?")
    stored = {r.reader_id: r for r in cassandra.execute(rows_of, (readers,))}
    assert sorted(stored) == sorted(readers[1:])  # readers[0]'s row deleted at a later time
    assert {(r.rank_key, r.post_id, r.author_id, r.ts) for r in stored.values()} == {(3.5, 51, 7, 77_000)}
    assert all(3_000 < r.ttl <= 3_600 for r in stored.values())


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


def test_small_audiences_leave_as_one_read_and_a_lagging_count_loses_no_follower(cassandra: Session) -> None:
    add = cassandra.prepare("INSERT INTO followers (followed_id, follower_id, following_since) VALUES (?,?,?)")
    authors = [next(_USERS) for _ in range(6)]
    first = next(_READERS)
    for n, author in enumerate(authors):
        for f in range(n * 5):  # 0 to 25 followers, against a page of 10
            cassandra.execute(add, (author, first + f, datetime(2026, 1, 1)))

    async def main() -> tuple[CopyStore, list[list[list[int]]]]:
        copies = CopyStore(cassandra, CqlRunner(cassandra), follower_page=10, read_linger_s=0.005)

        async def audience(author: int) -> list[list[int]]:
            # Every count says 3, as a count that lags its partition would.
            return [[f.reader_id for f in page] async for page in copies.follower_pages(author, 3)]
        return copies, list(await asyncio.gather(*(audience(a) for a in authors)))

    copies, got = _run(main())
    for n, pages in enumerate(got):
        assert sorted(r for page in pages for r in page) == list(range(first, first + n * 5))
        assert all(0 < len(page) <= 10 for page in pages)  # still pages of the configured size
    assert copies._small_audiences is not None and copies._small_audiences.requests == 1
