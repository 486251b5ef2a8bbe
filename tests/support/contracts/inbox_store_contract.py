"""The contract of ``InboxPort`` (services/fanout/inbox.py), the fan-out's reader
inboxes: what ``InboxStore`` does on Cassandra and ``InMemoryInboxStore`` (tests/support/
memory_stores.py) does in memory, asserted by the same tests.

``InboxStoreContract``'s tests take an ``InboxSubject``: a factory of stores (each with a
cap, a cap-check sampling rate and a notice sink) and the store it made with ``CAP``,
``trim_every`` 1 and ``subject.notices``. Rows are read back with the store's own
``rows``. Run by tests/unit/test_inbox_store_contract.py (in memory) and
tests/integration/test_inbox_store_contract.py (Cassandra).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Protocol

from services.fanout.audience import should_check_cap
from services.fanout.inbox import PUSH_BATCH_ROWS, InboxPort, InboxRow, StoredRow
from services.shared.contracts.serving_changes import ChangeSink, ServingChange
from tests.support.contracts.common import BASE, RecordedChanges, Run, new_post_id, new_user_id, us

CAP = 5
T0 = us(BASE)  # the posts' write time (µs); removals are decided after it


class ObservedInbox(InboxPort, Protocol):
    """An inbox store whose rows a test can read back (both stores have ``rows``)."""

    async def rows(self, reader_id: int) -> list[StoredRow]: ...


class InboxFactory(Protocol):
    def __call__(self, *, cap: int, trim_every: int, notices: ChangeSink) -> ObservedInbox: ...


@dataclass
class InboxSubject:
    factory: InboxFactory
    run: Run
    notices: RecordedChanges = field(default_factory=RecordedChanges)

    def __post_init__(self) -> None:
        self.inbox = self.factory(cap=CAP, trim_every=1, notices=self.notices)

    def rows(self, reader_id: int) -> list[tuple[float, int, int]]:
        return [tuple(r) for r in self.run(self.inbox.rows(reader_id))]

    def push(self, readers: list[int], post_id: int, author_id: int, key: float,
             key_ts: int = T0) -> int:
        count: int = self.run(self.inbox.push(readers, post_id, author_id, key, key_ts))
        return count


def _inbox(reader: int) -> ServingChange:
    return ServingChange(inboxes=(reader,))


class InboxStoreContract:
    # -- pushes ---------------------------------------------------------------------------------
    def test_a_push_writes_the_post_into_every_readers_inbox_in_rank_order(
            self, subject: InboxSubject) -> None:
        r1, r2, author = new_user_id(), new_user_id(), new_user_id()
        rows: list[tuple[float, int, int]] = []
        for key in (2.0, 8.0, 5.0, 5.0):  # a tie: the higher post id first
            post = new_post_id(BASE - timedelta(seconds=len(rows)))
            assert subject.push([r1, r2], post, author, key) == 2
            rows.append((key, post, author))
        assert subject.rows(r1) == subject.rows(r2) == sorted(rows, reverse=True)
        assert subject.notices.changes == [ServingChange(inboxes=(r1, r2))] * 4
        assert subject.rows(new_user_id()) == []

    def test_pushing_a_row_again_leaves_one_row(self, subject: InboxSubject) -> None:
        reader, author, post = new_user_id(), new_user_id(), new_post_id()
        assert subject.push([reader], post, author, 3.0) == 1
        assert subject.push([reader], post, author, 3.0) == 1           # a replay
        assert subject.push([reader], post, author, 3.0, T0 + 5) == 1   # a retry, later
        assert subject.rows(reader) == [(3.0, post, author)]

    def test_a_post_with_no_inbox_ttl_left_is_not_written(self, subject: InboxSubject) -> None:
        reader, author = new_user_id(), new_user_id()
        old, fresh = new_post_id(), new_post_id()
        run = subject.run
        assert run(subject.inbox.push([reader], old, author, 3.0, T0, ttl_s=0)) == 0
        assert run(subject.inbox.push([reader], old, author, 3.0, T0, ttl_s=-60)) == 0
        assert subject.rows(reader) == [] and subject.notices.changes == []
        written = run(subject.inbox.push_posts(reader, [InboxRow(old, author, 3.0, T0, 0),
                                                        InboxRow(fresh, author, 2.0, T0, 600)]))
        assert written == 1 and subject.rows(reader) == [(2.0, fresh, author)]
        assert run(subject.inbox.push_posts(reader, [InboxRow(old, author, 3.0, T0, 0)])) == 0
        assert subject.notices.changes == [_inbox(reader)]

    def test_push_many_writes_what_each_push_would_grouped_by_reader(self, subject: InboxSubject) -> None:
        """Several posts' pushes at once (a consumer batch's recent posts): every reader
        gets exactly the rows their pushes would write, a post with no TTL left none, a
        replay changes nothing, and each reader is named once in the notices."""
        readers = [new_user_id() for _ in range(5)]
        authors = [new_user_id() for _ in range(3)]
        posts = [new_post_id(BASE - timedelta(seconds=i)) for i in range(4)]
        pushes = [(readers[:3], InboxRow(posts[0], authors[0], 4.0, T0, 600)),
                  (readers[1:], InboxRow(posts[1], authors[1], 3.0, T0 + 7, 600)),
                  (readers[::2], InboxRow(posts[2], authors[2], 5.0, T0, 0)),    # too old: nothing
                  (readers[2:3], InboxRow(posts[3], authors[0], 2.0, T0, 600))]
        assert subject.run(subject.inbox.push_many(pushes)) == 3 + 4 + 1
        expected: dict[int, list[tuple[float, int, int]]] = {r: [] for r in readers}
        for rs, row in pushes:
            for r in rs if row.ttl_s > 0 else ():
                expected[r].append((row.rank_key, row.post_id, row.author_id))
        assert {r: subject.rows(r) for r in readers} == {r: sorted(v, reverse=True) for r, v in expected.items()}
        assert subject.run(subject.inbox.push_many(pushes)) == 8     # a replay: the same rows
        assert {r: subject.rows(r) for r in readers} == {r: sorted(v, reverse=True) for r, v in expected.items()}
        named = [r for change in subject.notices.changes for r in change.inboxes]
        assert sorted(named) == sorted(readers * 2)
        assert subject.run(subject.inbox.push_many([(readers, InboxRow(posts[2], authors[2], 5.0, T0, 0))])) == 0

    def test_push_posts_writes_a_whole_rebuild_into_one_inbox(self, subject: InboxSubject) -> None:
        reader = new_user_id()
        authors = [new_user_id() for _ in range(3)]
        rows = [InboxRow(new_post_id(BASE - timedelta(seconds=i)), authors[i % 3], i * 0.25,
                         T0 - i, 3600) for i in range(2 * PUSH_BATCH_ROWS + 20)]  # several batches
        assert subject.run(subject.inbox.push_posts(reader, rows)) == len(rows)
        assert subject.rows(reader) == sorted(((r.rank_key, r.post_id, r.author_id) for r in rows),
                                              reverse=True)
        assert subject.notices.changes == [_inbox(reader)]

    # -- removals -------------------------------------------------------------------------------
    def test_an_unpush_removes_the_post_under_every_key_it_was_stored_under(
            self, subject: InboxSubject) -> None:
        r1, r2, r3, author = (new_user_id() for _ in range(4))
        post, kept = new_post_id(), new_post_id()
        subject.push([r1, r2], post, author, 4.0)
        subject.push([r1], post, author, 6.0)  # a stray row under an older key
        subject.push([r1, r2], kept, author, 5.0)
        subject.notices.changes.clear()
        # Every reader asked is counted (r3 never had the post): the removal is written.
        assert subject.run(subject.inbox.unpush([r1, r2, r3], post, [4.0, 6.0, 4.0], T0 + 10)) == 3
        assert subject.rows(r1) == subject.rows(r2) == [(5.0, kept, author)]
        assert subject.rows(r3) == []
        assert subject.notices.changes == [ServingChange(inboxes=(r1, r2, r3))]

    def test_a_removal_shadows_older_writes_of_the_row_whenever_they_land(
            self, subject: InboxSubject) -> None:
        reader, author, post = new_user_id(), new_user_id(), new_post_id()
        subject.push([reader], post, author, 4.0)
        subject.run(subject.inbox.unpush([reader], post, [4.0], T0 + 10))
        subject.push([reader], post, author, 4.0, T0 + 5)    # a late fan-out, decided before
        subject.push([reader], post, author, 4.0, T0 + 10)   # at the removal's time: it wins
        assert subject.rows(reader) == []
        subject.push([reader], post, author, 4.0, T0 + 20)   # written after the removal
        assert subject.rows(reader) == [(4.0, post, author)]

    def test_a_removal_leaves_a_later_write_whatever_order_the_writes_landed_in(
            self, subject: InboxSubject) -> None:
        reader, author, post = new_user_id(), new_user_id(), new_post_id()
        subject.push([reader], post, author, 4.0, T0 + 20)
        subject.push([reader], post, author, 4.0, T0 + 5)    # an older write, landing late
        subject.run(subject.inbox.unpush([reader], post, [4.0], T0 + 10))
        assert subject.rows(reader) == [(4.0, post, author)]  # the write at T0 + 20 stands

    def test_a_move_leaves_the_post_under_its_new_key_only(self, subject: InboxSubject) -> None:
        r1, r2, author = new_user_id(), new_user_id(), new_user_id()
        post, expired = new_post_id(), new_post_id()
        subject.push([r1, r2], post, author, 3.0)
        run = subject.run
        assert run(subject.inbox.move([r1, r2], post, author, [3.0, 7.0], 7.0, T0 + 10, 3600)) == 2
        assert subject.rows(r1) == subject.rows(r2) == [(7.0, post, author)]
        subject.push([r1], post, author, 3.0, T0 + 5)  # a late write of the old key
        assert subject.rows(r1) == [(7.0, post, author)]
        # Past the inbox TTL: the old rows go, no new one is written.
        subject.push([r1], expired, author, 2.0)
        assert run(subject.inbox.move([r1], expired, author, [2.0], 9.0, T0 + 10, 0)) == 1
        assert subject.rows(r1) == [(7.0, post, author)]
        # Nothing to remove (the only old key is the new one) and nothing to write: no reader.
        assert run(subject.inbox.move([r1, r2], expired, author, [9.0], 9.0, T0 + 20, 0)) == 0

    def test_a_purge_removes_one_authors_rows_and_tombstones_the_posts_in_flight(
            self, subject: InboxSubject) -> None:
        reader, other, gone, stays = (new_user_id() for _ in range(4))
        gone_rows = [(k, new_post_id(BASE - timedelta(seconds=k)), gone) for k in (9.0, 4.0, 1.0)]
        stays_rows = [(k, new_post_id(BASE - timedelta(seconds=k)), stays) for k in (5.0, 2.0)]
        for key, post, author in gone_rows + stays_rows:
            subject.push([reader, other], post, author, key)
        in_flight = (6.5, new_post_id())  # a post of ``gone`` a fan-out may still push
        subject.notices.changes.clear()
        run = subject.run
        assert run(subject.inbox.purge_author(reader, gone, T0 + 10, [in_flight])) == 4
        assert subject.rows(reader) == stays_rows
        assert subject.rows(other) == sorted(gone_rows + stays_rows, reverse=True)
        subject.push([reader], in_flight[1], gone, in_flight[0], T0 + 1)  # lands late
        assert subject.rows(reader) == stays_rows
        assert subject.notices.changes[0] == _inbox(reader)
        subject.notices.changes.clear()
        assert run(subject.inbox.purge_author(reader, new_user_id(), T0 + 20)) == 0
        assert subject.notices.changes == []

    # -- the cap --------------------------------------------------------------------------------
    def test_the_cap_trims_the_lowest_keys_and_keeps_rows_tied_with_the_boundary(
            self, subject: InboxSubject) -> None:
        over, at_cap, under, author = (new_user_id() for _ in range(4))
        keys = {over: [9.0, 8.0, 7.0, 6.0, 5.0, 5.0, 4.0, 3.0],  # the 5th is tied with the 6th
                at_cap: [5.0, 4.0, 3.0, 2.0, 1.0], under: [2.0, 1.0]}
        rows: dict[int, list[tuple[float, int, int]]] = {}
        for reader, ks in keys.items():
            rows[reader] = [(k, new_post_id(BASE - timedelta(seconds=i)), author)
                            for i, k in enumerate(ks)]
            for key, post, _ in rows[reader]:
                subject.push([reader], post, author, key)
        subject.notices.changes.clear()
        assert subject.run(subject.inbox.enforce_cap([over, at_cap, under], new_post_id(),
                                                     T0 + 10)) == 1
        assert subject.rows(over) == sorted(rows[over], reverse=True)[:6]
        assert subject.rows(at_cap) == sorted(rows[at_cap], reverse=True)
        assert subject.rows(under) == sorted(rows[under], reverse=True)
        assert subject.notices.changes == [_inbox(over)]
        # The trim shadows rows below the boundary written before it, not after it.
        late, later = new_post_id(), new_post_id()
        subject.push([over], late, author, 1.0, T0 + 5)
        subject.push([over], later, author, 1.0, T0 + 20)
        assert subject.rows(over)[-1] == (1.0, later, author) and len(subject.rows(over)) == 7

    def test_only_the_sampled_readers_are_checked_against_the_cap(
            self, subject: InboxSubject) -> None:
        inbox = subject.factory(cap=2, trim_every=4, notices=RecordedChanges())
        post, author = new_post_id(), new_user_id()
        readers: list[int] = []
        while len({should_check_cap(r, post, 4) for r in readers}) < 2 or len(readers) < 8:
            readers.append(new_user_id())  # some sampled, some not
        for reader in readers:
            for key in (3.0, 2.0, 1.0):
                subject.run(inbox.push([reader], new_post_id(), author, key, T0))
        sampled = {r for r in readers if should_check_cap(r, post, 4)}
        assert subject.run(inbox.enforce_cap(readers, post, T0 + 10)) == len(sampled)
        for reader in readers:
            kept = [r.rank_key for r in subject.run(inbox.rows(reader))]
            assert kept == ([3.0, 2.0] if reader in sampled else [3.0, 2.0, 1.0])
