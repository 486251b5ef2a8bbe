"""The contract of ``FeedPort`` (services/api/copies/store.py), the read path's store: what
``FeedStore`` answers on Cassandra and ``InMemoryFeedStore`` (tests/support/
memory_stores.py) answers in memory, asserted by the same tests.

``FeedStoreContract``'s tests take a ``FeedSubject``: the store, the inbox store whose
rows it reads, and a ``FeedWriter`` that puts every other row where the store reads it
(on Cassandra through the fan-out's own writers: ``CopyStore``, ``TierStore``). Run by
tests/unit/test_feed_store_contract.py (in memory) and tests/integration/
test_feed_store_contract.py (Cassandra).
"""
from __future__ import annotations

import secrets
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol, Sequence

from services.api.copies.store import Blocks, FeedPort, SourceRow
from services.api.snapshots import snapshot
from services.api.snapshots.snapshot_writer import SlotRow
from services.fanout.inbox import InboxPort
from services.shared.domain import ids
from services.shared.domain.rules import REMOVED, VISIBLE
from tests.support.contracts.common import BASE, DAY, Run, new_post_id, new_user_id, us
from tests.support.memory_stores import to_ms


class FeedWriter(Protocol):
    """Rows put where ``FeedPort`` reads them, as the fan-out writes them."""

    def follow(self, reader_id: int, author_id: int, since: datetime) -> None: ...
    def unfollow(self, reader_id: int, author_id: int) -> None: ...
    def block(self, blocker_id: int, blocked_id: int) -> None: ...
    def mute(self, muter_id: int, muted_id: int) -> None: ...
    def write_post(self, post_id: int, author_id: int, created_at: datetime, text: str,
                   visibility: int = VISIBLE, deleted: bool = False,
                   media: Sequence[str] = ()) -> None: ...
    def like(self, post_id: int, user_id: int, liked: bool = True) -> None: ...
    def set_rank_key(self, post_id: int, rank_key: float, key_ts: int) -> None: ...
    def set_rank_key_next(self, post_id: int, rank_key: float, key_ts: int) -> None: ...
    def add_author_post(self, author_id: int, post_id: int, rank_key: float, key_ts: int) -> None: ...
    def remove_author_post(self, author_id: int, post_id: int, rank_key: float, ts: int) -> None: ...
    def promote(self, author_id: int, at: datetime) -> None: ...
    def demote(self, author_id: int, at: datetime) -> None: ...


@dataclass
class FeedSubject:
    store: FeedPort
    inbox: InboxPort      # writes the feed_inbox rows ``store`` reads
    writer: FeedWriter    # writes the other tables ``store`` reads
    run: Run


def _by_partition(rows: list[SourceRow]) -> dict[tuple[int, int], list[SourceRow]]:
    """Rows of several timeline partitions, grouped by (author, day bucket), in order."""
    out: dict[tuple[int, int], list[SourceRow]] = defaultdict(list)
    for row in rows:
        out[(row[2], ids.day_bucket(row[1]))].append(row)
    return dict(out)


class FeedStoreContract:
    # -- the reader's graph -----------------------------------------------------------------
    def test_follows_are_listed_in_author_order_with_their_time_up_to_the_limit(
            self, subject: FeedSubject) -> None:
        reader = new_user_id()
        authors = sorted(new_user_id() for _ in range(5))
        since = {a: BASE - timedelta(hours=i, milliseconds=7) for i, a in enumerate(authors)}
        for a in (authors[3], authors[0], authors[4], authors[1], authors[2]):
            subject.writer.follow(reader, a, since[a])
        got = subject.run(subject.store.following(reader, 10))
        assert list(got.items()) == [(a, to_ms(since[a])) for a in authors]
        assert list(subject.run(subject.store.following(reader, 3))) == authors[:3]
        assert subject.run(subject.store.following(new_user_id(), 10)) == {}

    def test_following_among_and_since_answer_only_for_the_authors_asked(
            self, subject: FeedSubject) -> None:
        reader, a, b, stranger = (new_user_id() for _ in range(4))
        subject.writer.follow(reader, a, BASE - DAY)
        subject.writer.follow(reader, b, BASE)
        store, run = subject.store, subject.run
        assert run(store.following_among(reader, [stranger, b, a, new_user_id()])) == {
            a: to_ms(BASE - DAY), b: to_ms(BASE)}
        assert run(store.following_among(reader, [stranger])) == {}
        assert run(store.following_among(reader, [])) == {}
        assert run(store.following_since(reader, a)) == to_ms(BASE - DAY)
        assert run(store.following_since(reader, stranger)) is None
        assert run(store.following_since(a, reader)) is None  # a follow has a direction

    def test_following_from_is_a_slice_of_the_list_from_an_author_on(
            self, subject: FeedSubject) -> None:
        reader = new_user_id()
        authors = sorted(new_user_id() for _ in range(6))
        for a in authors:
            subject.writer.follow(reader, a, BASE)
        store, run = subject.store, subject.run
        assert list(run(store.following_from(reader, authors[2], 3))) == authors[2:5]  # inclusive
        assert list(run(store.following_from(reader, authors[2] + 1, 10))) == authors[3:]
        assert list(run(store.following_from(reader, 0, 2))) == authors[:2]
        assert run(store.following_from(reader, authors[-1] + 1, 10)) == {}
        assert run(store.following_from(reader, authors[0], 10))[authors[0]] == to_ms(BASE)

    def test_an_unfollow_is_gone_from_every_follow_read(self, subject: FeedSubject) -> None:
        reader, a, b = (new_user_id() for _ in range(3))
        subject.writer.follow(reader, a, BASE)
        subject.writer.follow(reader, b, BASE)
        subject.writer.unfollow(reader, a)
        store, run = subject.store, subject.run
        assert run(store.following(reader, 10)) == {b: to_ms(BASE)}
        assert run(store.following_among(reader, [a, b])) == {b: to_ms(BASE)}
        assert run(store.following_from(reader, 0, 10)) == {b: to_ms(BASE)}
        assert run(store.following_since(reader, a)) is None

    def test_a_block_hides_both_users_from_each_other(self, subject: FeedSubject) -> None:
        x, y, z, w = (new_user_id() for _ in range(4))
        subject.writer.block(x, y)  # x blocks y
        subject.writer.block(z, x)  # z blocks x
        store, run = subject.store, subject.run
        assert run(store.blocks(x)) == Blocks(frozenset({y, z}))
        assert run(store.blocks(y)) == Blocks(frozenset({x}))
        assert run(store.blocks(z)) == Blocks(frozenset({x}))
        assert run(store.blocks(w)) == Blocks(frozenset())
        assert run(store.blocks(x)).hidden == frozenset({y, z})
        assert run(store.hidden_between(x, y)) and run(store.hidden_between(y, x))
        assert run(store.hidden_between(x, z)) and run(store.hidden_between(z, x))
        assert not run(store.hidden_between(y, z)) and not run(store.hidden_between(x, w))

    def test_a_mute_is_one_way_and_kept_apart_from_blocks(self, subject: FeedSubject) -> None:
        x, y, z, w = (new_user_id() for _ in range(4))
        subject.writer.mute(x, y)   # x mutes y
        subject.writer.mute(x, z)   # x mutes z and blocks z: in both sets
        subject.writer.block(x, z)
        subject.writer.block(w, x)  # w blocks x
        store, run = subject.store, subject.run
        blocks = run(store.blocks(x))
        assert (blocks.blocked, blocks.muted) == (frozenset({z, w}), frozenset({y, z}))
        assert blocks.hidden == frozenset({y, z, w})
        assert run(store.blocks(y)) == Blocks(frozenset())   # the muted user holds nothing
        assert run(store.hidden_between(x, y)) and not run(store.hidden_between(y, x))
        assert run(store.hidden_between(x, z)) and run(store.hidden_between(z, x))

    def test_every_block_is_read_however_many(self, subject: FeedSubject) -> None:
        # More than a page of the store's reads (the Cassandra subject reads 50 rows at a
        # time), with pairs blocked both ways (two rows for one user): a block set cut at
        # a page would let the posts of the users past it through.
        reader = new_user_id()
        others = [new_user_id() for _ in range(157)]
        for i, other in enumerate(others):
            subject.writer.block(reader, other)
            if i % 3 == 0:
                subject.writer.block(other, reader)
        store, run = subject.store, subject.run
        assert run(store.blocks(reader)) == Blocks(frozenset(others))
        assert run(store.blocks(others[-1])) == Blocks(frozenset({reader}))

    def test_every_block_and_mute_is_read_in_its_set_however_the_slices_fall(
            self, subject: FeedSubject) -> None:
        # A pair's rows (in, mute, out: the partition's order) cut by a slice's end: a
        # slice after the last id, not the last row, would drop a block behind a mute
        # and show a blocked user's timeline.
        reader = new_user_id()
        others = [new_user_id() for _ in range(157)]
        blocked, muted = set(), set()
        for i, other in enumerate(others):
            if i % 4 != 3:
                subject.writer.block(reader, other)
                blocked.add(other)
            if i % 3 == 0:
                subject.writer.block(other, reader)
                blocked.add(other)
            if i % 2 == 0 or i % 4 == 3:
                subject.writer.mute(reader, other)
                muted.add(other)
        store, run = subject.store, subject.run
        blocks = run(store.blocks(reader))
        assert (blocks.blocked, blocks.muted) == (frozenset(blocked), frozenset(muted))

    def test_celebrities_are_listed_by_author_with_the_time_of_a_demotion(
            self, subject: FeedSubject) -> None:
        current, demoted = sorted(new_user_id() for _ in range(2))
        subject.writer.promote(demoted, BASE - DAY)
        subject.writer.promote(current, BASE - DAY)
        subject.writer.demote(demoted, BASE)
        ours = [row for row in subject.run(subject.store.celebrities())
                if row[0] in (current, demoted)]  # on Cassandra other tests' authors too
        assert ours == [(current, None), (demoted, to_ms(BASE))]

    # -- sources ----------------------------------------------------------------------------------
    def test_the_inbox_is_read_from_the_top_and_page_by_page_below_a_boundary(
            self, subject: FeedSubject) -> None:
        reader, other, author = (new_user_id() for _ in range(3))
        keys = [9.5, 7.0, 7.0, 7.0, 3.25, 1.0, 0.5]  # ties: ordered by post id, descending
        rows: list[SourceRow] = []
        for i, key in enumerate(keys):
            post = new_post_id(BASE - timedelta(minutes=i))
            assert subject.run(subject.inbox.push([reader, other], post, author, key, us(BASE))) == 2
            rows.append((key, post, author))
        expected = sorted(rows, reverse=True)
        store, run = subject.store, subject.run
        assert run(store.inbox_top(reader, 100)) == expected
        assert run(store.inbox_top(reader, 3)) == expected[:3]
        # Two rows a page: a page boundary falls between posts with the same key.
        pages, after = [], None
        for _ in range(len(rows) + 1):  # bounded: a boundary that repeats a row never ends
            page = run(store.inbox_top(reader, 2, after))
            if not page:
                break
            pages.append(page)
            after = (page[-1][0], page[-1][1])
        assert [r for page in pages for r in page] == expected and len(pages) == 4
        assert pages[1] == expected[2:4] and pages[1][0][0] == pages[1][1][0] == 7.0
        assert run(store.inbox_top(reader, 10, (7.0, expected[2][1]))) == expected[3:]
        assert run(store.inbox_top(reader, 10, (0.5, expected[-1][1]))) == []
        assert run(store.inbox_top(new_user_id(), 10)) == []

    def test_author_timelines_give_the_top_rows_of_each_day_partition(
            self, subject: FeedSubject) -> None:
        a, b = new_user_id(), new_user_id()
        today, yesterday = ids.day_bucket(new_post_id(BASE)), ids.day_bucket(new_post_id(BASE - DAY))
        written: dict[tuple[int, int], list[SourceRow]] = defaultdict(list)
        for author, at, key in [(a, BASE, 4.0), (a, BASE, 6.0), (a, BASE, 5.0), (a, BASE, 5.0),
                                (a, BASE - DAY, 1.5), (a, BASE - DAY, 2.5), (b, BASE, 3.0)]:
            post = new_post_id(at - timedelta(seconds=len(written)))
            subject.writer.add_author_post(author, post, key, us(at))
            written[(author, ids.day_bucket(post))].append((key, post, author))
        expected = {part: sorted(rows, reverse=True) for part, rows in written.items()}
        store, run = subject.store, subject.run
        got = run(store.authors_top([a, b], [today, yesterday], 2))
        assert _by_partition(got) == {part: rows[:2] for part, rows in expected.items()}
        assert run(store.authors_top([a], [today], 10)) == expected[(a, today)]
        assert run(store.authors_top([b], [yesterday], 10)) == []
        assert run(store.authors_top([new_user_id()], [today], 10)) == []

    def test_author_timelines_below_a_boundary_and_without_a_removed_row(
            self, subject: FeedSubject) -> None:
        a, b = new_user_id(), new_user_id()
        rows: list[SourceRow] = []
        for author, key in [(a, 9.0), (a, 7.0), (a, 5.0), (a, 3.0), (b, 8.0), (b, 2.0)]:
            post = new_post_id(BASE - timedelta(seconds=len(rows)))
            subject.writer.add_author_post(author, post, key, us(BASE))
            rows.append((key, post, author))
        bucket = ids.day_bucket(rows[0][1])
        boundary = (rows[1][0], rows[1][1])  # a's second row: (7.0, its post)
        store, run = subject.store, subject.run
        got = _by_partition(run(store.authors_top([a, b], [bucket], 10, boundary)))
        assert got == {(a, bucket): [rows[2], rows[3]], (b, bucket): [rows[5]]}
        assert _by_partition(run(store.authors_top([a, b], [bucket], 1, boundary))) == {
            (a, bucket): [rows[2]], (b, bucket): [rows[5]]}
        subject.writer.remove_author_post(a, rows[2][1], rows[2][0], us(BASE) + 10)
        assert run(store.authors_top([a], [bucket], 10)) == [rows[0], rows[1], rows[3]]

    # -- post copies ------------------------------------------------------------------------------
    def test_post_copies_carry_their_state_their_keys_and_on_request_their_text(
            self, subject: FeedSubject) -> None:
        author = new_user_id()
        keyed, moving, deleted, unkeyed, missing = (new_post_id(BASE - timedelta(minutes=i))
                                                    for i in range(5))
        created = {p: ids.parse(p).created_at for p in (keyed, moving, deleted, unkeyed)}
        w = subject.writer
        for post in created:
            w.write_post(post, author, created[post], f"text of {post}", deleted=post == deleted)
        w.set_rank_key(keyed, 4.5, us(BASE) + 1)
        w.set_rank_key(moving, 3.0, us(BASE) + 2)
        w.set_rank_key_next(moving, 5.5, us(BASE) + 3)
        w.set_rank_key(deleted, 2.0, us(BASE) + 4)
        states = {
            keyed: (keyed, author, to_ms(created[keyed]), VISIBLE, False, 4.5, None, us(BASE) + 1),
            moving: (moving, author, to_ms(created[moving]), VISIBLE, False, 3.0, 5.5, us(BASE) + 2),
            deleted: (deleted, author, to_ms(created[deleted]), REMOVED, True, 2.0, None, us(BASE) + 4),
            unkeyed: (unkeyed, author, to_ms(created[unkeyed]), VISIBLE, False, None, None, None),
        }
        asked = [missing, keyed, moving, deleted, unkeyed]
        store, run = subject.store, subject.run
        assert sorted(run(store.posts(asked, with_text=False))) == sorted(states.values())
        with_text = run(store.posts(asked, with_text=True))
        assert sorted(row[:9] for row in with_text) == sorted(
            state + (f"text of {post}",) for post, state in states.items())
        assert all(not row[9] for row in with_text)  # no media: null or empty
        assert run(store.posts([missing], with_text=False)) == []
        assert run(store.posts([keyed], with_text=False)) == [states[keyed]]

    def test_post_copies_carry_their_media_ids_in_order_with_their_text(
            self, subject: FeedSubject) -> None:
        author, post = new_user_id(), new_post_id()
        subject.writer.write_post(post, author, ids.parse(post).created_at, "pics",
                                  media=["m2", "m1", "m3"])
        (row,) = subject.run(subject.store.posts([post], with_text=True))
        assert (row[8], list(row[9] or ())) == ("pics", ["m2", "m1", "m3"])

    # -- like counts ------------------------------------------------------------------------------
    def test_like_counts_count_the_liked_edges_and_leave_out_posts_never_liked(
            self, subject: FeedSubject) -> None:
        a, b, never = new_post_id(), new_post_id(), new_post_id()
        users = [new_user_id() for _ in range(3)]
        for user in users:
            subject.writer.like(a, user)
        subject.writer.like(b, users[0])
        subject.writer.like(b, users[0], liked=False)  # an unlike: the count is back to 0
        store, run = subject.store, subject.run
        assert run(store.like_counts([a, b, never])) == {a: 3, b: 0}
        assert run(store.like_counts([never])) == {}
        assert run(store.like_counts([])) == {}

    def test_a_later_rank_key_replaces_the_earlier_one_and_an_older_one_does_not(
            self, subject: FeedSubject) -> None:
        post, author = new_post_id(), new_user_id()
        subject.writer.write_post(post, author, ids.parse(post).created_at, "hi")
        subject.writer.set_rank_key(post, 4.0, us(BASE) + 10)
        subject.writer.set_rank_key(post, 6.0, us(BASE) + 20)
        subject.writer.set_rank_key(post, 1.0, us(BASE) + 15)  # a late write of an older key
        (row,) = subject.run(subject.store.posts([post], with_text=False))
        assert (row[5], row[7]) == (6.0, us(BASE) + 20)

    # -- preferences and snapshots ---------------------------------------------------------------
    def test_a_feed_order_is_none_until_saved_then_the_last_one_saved(
            self, subject: FeedSubject) -> None:
        reader, other = new_user_id(), new_user_id()
        store, run = subject.store, subject.run
        assert run(store.feed_order(reader)) is None
        run(store.save_feed_order(reader, "latest"))
        assert run(store.feed_order(reader)) == "latest"
        run(store.save_feed_order(reader, "ranked"))
        assert run(store.feed_order(reader)) == "ranked"
        assert run(store.feed_order(other)) is None

    def test_a_snapshot_is_found_by_its_version_and_reader_and_its_longest_copy_wins(
            self, subject: FeedSubject) -> None:
        reader, other = new_user_id(), new_user_id()
        slot = f"t{secrets.token_hex(6)}"
        at = BASE.replace(microsecond=0)
        version, second = snapshot.slot_version(at, slot, 0), snapshot.slot_version(at, slot, 1)
        ms = to_ms(at)
        store, run = subject.store, subject.run
        mine = snapshot.pack_slot([(reader, version, ms, b"\x02\x00short")])
        theirs = snapshot.pack_slot([(other, second, ms, b"\x02\x00other")])
        run(store.save_snapshot_slot(SlotRow(slot, ((snapshot.part_of(0), mine),
                                                    (snapshot.part_of(1), theirs)), 60, 2), 2.0))
        assert run(store.load_snapshot(reader, version)) == (b"\x02\x00short", at)
        longer = snapshot.pack_slot([(reader, version, ms, b"\x02\x00short-and-extended")])
        run(store.save_snapshot_slot(SlotRow(slot, ((snapshot.part_of(0, 99), longer),), 60, 1), 2.0))
        assert run(store.load_snapshot(reader, version)) == (b"\x02\x00short-and-extended", at)
        assert run(store.load_snapshot(other, second)) == (b"\x02\x00other", at)
        assert run(store.load_snapshot(other, version)) is None      # another reader's version
        assert run(store.load_snapshot(reader, "v-not-a-slot")) is None
        unwritten = snapshot.slot_version(at, f"t{secrets.token_hex(6)}", 0)
        assert run(store.load_snapshot(reader, unwritten)) is None   # a slot never written
        # Only the version's own parts are read: its snapshot under another index's part
        # is not found.
        stray = snapshot.slot_version(at, slot, 2)
        run(store.save_snapshot_slot(SlotRow(slot, ((snapshot.part_of(3), snapshot.pack_slot(
            [(reader, stray, ms, b"\x02\x00stray")])),), 60, 1), 2.0))
        assert run(store.load_snapshot(reader, stray)) is None
        damaged = SlotRow(slot, ((snapshot.part_of(0, 5), mine[:-3]),), 60, 1)
        run(store.save_snapshot_slot(damaged, 2.0))
        assert run(store.load_snapshot(reader, version)) is None
        assert run(store.load_snapshot(other, second)) == (b"\x02\x00other", at)  # another part

    def test_the_store_itself_is_not_answered_from_memory(self, subject: FeedSubject) -> None:
        # Callers then send their reads together (awaiting.py); only CachedFeedStore,
        # answering from the serving cache, has them awaited in turn.
        assert subject.store.from_memory is False
