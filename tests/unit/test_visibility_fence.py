"""The visibility log folded (recent_changes.py) and read single-flight (fence.py)."""
from __future__ import annotations

import asyncio
import socket
import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.api.visibility.eligibility import PostState, ReaderGraph, Verdict, judge, judge_authored
from services.api.visibility.fence import WINDOW, FenceUnavailable, VisibilityFence
from services.api.visibility.recent_changes import (ACCOUNT, BLOCK, FOLLOW, MUTE, NOTHING, POST, ReaderChanges,
                                                    RecentChanges, VisibilityChange)
from services.api.visibility.visibility_log import LogRead
from services.api.visibility.window_check import WINDOW_SQL, window_changes

READER, AUTHOR, OTHER = 1, 2, 3


def change(seq: int, kind: str, subject: int, obj: int, hidden: bool,
           since_ms: int | None = None) -> VisibilityChange:
    return VisibilityChange(seq, kind, subject, obj, hidden, since_ms)


def folded(*changes: VisibilityChange) -> RecentChanges:
    recent = RecentChanges()
    recent.apply(changes)
    return recent


def test_a_quiet_log_hides_nothing_and_costs_no_view() -> None:
    assert RecentChanges().for_reader(READER) is NOTHING


def test_a_deleted_post_is_hidden_from_everyone_until_restored() -> None:
    recent = folded(change(1, POST, 10, AUTHOR, True))
    assert recent.for_reader(READER).hides(10, AUTHOR, 5)
    assert recent.for_reader(OTHER).hides(10, AUTHOR, 5)
    recent.apply([change(2, POST, 10, AUTHOR, False)])
    assert not recent.for_reader(READER).hides(10, AUTHOR, 5)


def test_a_block_hides_the_pair_both_ways_until_both_sides_lift_it() -> None:
    recent = folded(change(1, BLOCK, READER, AUTHOR, True), change(2, BLOCK, AUTHOR, READER, True))
    assert recent.for_reader(READER).hides(10, AUTHOR, 5)
    assert recent.for_reader(AUTHOR).hides(11, READER, 5)
    recent.apply([change(3, BLOCK, READER, AUTHOR, False)])
    assert recent.for_reader(READER).hides(10, AUTHOR, 5)  # the author's block stands
    recent.apply([change(4, BLOCK, AUTHOR, READER, False)])
    assert not recent.for_reader(READER).hides(10, AUTHOR, 5)
    assert not recent.for_reader(OTHER).hides(10, AUTHOR, 5)


def test_a_mute_hides_the_author_from_the_muter_only_until_unmuted() -> None:
    recent = folded(change(1, MUTE, READER, AUTHOR, True))
    assert recent.for_reader(READER).hides(10, AUTHOR, 5)
    assert not recent.for_reader(AUTHOR).hides(11, READER, 5)  # one way
    assert not recent.for_reader(OTHER).hides(10, AUTHOR, 5)
    assert not recent.for_reader(READER).hides(12, OTHER, 5)
    recent.apply([change(2, MUTE, READER, AUTHOR, False)])
    assert recent.for_reader(READER).hides(10, AUTHOR, 5) is False


def test_a_mute_and_a_block_of_the_same_author_are_lifted_each_on_its_own() -> None:
    recent = folded(change(1, MUTE, READER, AUTHOR, True), change(2, BLOCK, READER, AUTHOR, True))
    recent.apply([change(3, MUTE, READER, AUTHOR, False)])
    assert recent.for_reader(READER).hides(10, AUTHOR, 5)  # the block stands
    recent.apply([change(4, MUTE, READER, AUTHOR, True), change(5, BLOCK, READER, AUTHOR, False)])
    assert recent.for_reader(READER).hides(10, AUTHOR, 5)  # the mute stands
    assert not recent.for_reader(AUTHOR).hides(11, READER, 5)
    recent.apply([change(6, MUTE, READER, AUTHOR, False)])
    assert not recent.for_reader(READER).hides(10, AUTHOR, 5)


def test_a_mute_is_kept_apart_from_blocks_so_an_authors_own_list_still_shows_them() -> None:
    recent = folded(change(1, MUTE, READER, AUTHOR, True), change(2, BLOCK, OTHER, READER, True))
    view = recent.for_reader(READER)
    assert (view.blocked, view.muted) == (frozenset({OTHER}), frozenset({AUTHOR}))
    assert view.hides(10, AUTHOR, 5) and view.hides(11, OTHER, 5)   # the home feed: both
    assert not view.hides_post(10, AUTHOR)                            # the author's timeline
    assert view.hides_post(11, OTHER)                                 # a block hides there too
    post = PostState(10, AUTHOR, 100, 1, False)
    assert judge_authored(post, AUTHOR, frozenset(), view) is Verdict.ELIGIBLE
    assert judge(post, ReaderGraph(READER, {AUTHOR: 0}, frozenset()), view) is Verdict.FENCED
    # Muted and blocked: lifting the block leaves the mute, which hides in the feed only.
    recent.apply([change(3, BLOCK, READER, AUTHOR, True), change(4, BLOCK, READER, AUTHOR, False)])
    view = recent.for_reader(READER)
    assert view.hides(10, AUTHOR, 5) and not view.hides_post(10, AUTHOR)
    # The muted author's view holds nothing of the mute.
    assert recent.for_reader(AUTHOR).muted == frozenset() and AUTHOR not in recent.for_reader(AUTHOR).blocked
    assert NOTHING.muted == frozenset()


def test_a_released_mute_is_forgotten_unless_a_later_entry_replaced_it() -> None:
    recent = folded(change(1, MUTE, READER, AUTHOR, True), change(2, MUTE, READER, OTHER, True),
                    change(3, MUTE, READER, OTHER, False), change(4, MUTE, READER, OTHER, True))
    assert recent.forget_through(3) == 3
    view = recent.for_reader(READER)
    assert not view.hides(10, AUTHOR, 5)  # released: the copies decide
    assert view.hides(11, OTHER, 5)       # its latest entry (4) is still held
    assert recent.forget_through(4) == 1
    assert recent.for_reader(READER) is NOTHING


def test_judge_hides_a_muted_author_the_copies_still_show() -> None:
    graph = ReaderGraph(READER, {AUTHOR: 0}, frozenset())
    post = PostState(10, AUTHOR, 100, 1, False)
    assert judge(post, graph, folded(change(1, MUTE, READER, AUTHOR, True)).for_reader(READER)) is Verdict.FENCED
    # The copy of the mute (a row in the reader's blocks partition) hides it on its own.
    assert judge(post, ReaderGraph(READER, {AUTHOR: 0}, frozenset({AUTHOR}))) is Verdict.BLOCKED


def test_the_window_check_answers_blocks_and_mutes_apart() -> None:
    changes = window_changes([AUTHOR, OTHER, 4], [("p", 10, None), ("f", AUTHOR, 7), ("b", OTHER, None),
                                                  ("m", AUTHOR, None), ("m", 4, None)])
    assert (changes.blocked, changes.muted) == (frozenset({OTHER}), frozenset({AUTHOR, 4}))
    assert changes.follows == {AUTHOR: 7, OTHER: None, 4: None}
    assert changes.hides(11, AUTHOR, 100) and not changes.hides_post(11, AUTHOR)
    assert changes.hides_post(10, AUTHOR) and changes.hides_post(12, OTHER)
    assert "'m', muted_id" in WINDOW_SQL and "'b', muted_id" not in WINDOW_SQL


def test_an_account_entry_hides_the_authors_posts_from_every_reader_until_unsuspended() -> None:
    recent = folded(change(1, ACCOUNT, AUTHOR, 0, True))
    for reader in (READER, OTHER, 77):   # no entry of their own: the one entry is global
        view = recent.for_reader(reader)
        assert view.hides(10, AUTHOR, 5) and view.hides_post(11, AUTHOR)
        assert not view.hides(12, OTHER, 5)
    graph = ReaderGraph(READER, {AUTHOR: 0}, frozenset())
    assert judge(PostState(10, AUTHOR, 100, 1, False), graph, recent.for_reader(READER)) \
        is Verdict.ACCOUNT_HIDDEN
    recent.apply([change(2, ACCOUNT, AUTHOR, 0, False)])   # unsuspended
    assert not recent.for_reader(READER).hides(10, AUTHOR, 5)
    assert judge(PostState(10, AUTHOR, 100, 1, False), graph, recent.for_reader(READER)) \
        is Verdict.ELIGIBLE


def test_a_released_account_entry_is_forgotten_and_the_copy_decides() -> None:
    recent = folded(change(1, ACCOUNT, AUTHOR, 0, True), change(2, ACCOUNT, OTHER, 0, True),
                    change(3, ACCOUNT, OTHER, 0, False), change(4, ACCOUNT, OTHER, 0, True))
    recent.forget_through(2)   # OTHER's seq 2 was replaced: still hidden by seq 4
    assert not recent.for_reader(READER).hides(10, AUTHOR, 5)
    assert recent.for_reader(READER).hides(10, OTHER, 5)
    # The account copy's hidden authors hide as the entry did (hiding_authors).
    view = NOTHING.hiding_authors(frozenset({AUTHOR}))
    assert view.hides(10, AUTHOR, 5) and not view.hides(10, OTHER, 5)
    assert NOTHING.hiding_authors(frozenset()) is NOTHING


def test_an_unfollow_hides_the_author_and_a_follow_again_only_what_came_before_it() -> None:
    recent = folded(change(1, FOLLOW, READER, AUTHOR, True))
    assert recent.for_reader(READER).hides(10, AUTHOR, 10**12)
    assert not recent.for_reader(OTHER).hides(10, AUTHOR, 10**12)  # other readers unaffected
    recent.apply([change(2, FOLLOW, READER, AUTHOR, False, since_ms=5_000)])
    view = recent.for_reader(READER)
    assert view.hides(10, AUTHOR, 4_999) and not view.hides(11, AUTHOR, 5_000)


def test_entries_already_applied_are_ignored() -> None:
    recent = folded(change(1, POST, 10, AUTHOR, True), change(2, POST, 10, AUTHOR, False))
    recent.apply([change(1, POST, 10, AUTHOR, True)])  # a re-read of an old entry
    assert not recent.for_reader(READER).hides(10, AUTHOR, 5)
    assert recent.last_seq == 2


def test_forgetting_drops_released_entries_but_never_one_a_later_entry_replaced() -> None:
    recent = folded(change(1, POST, 10, AUTHOR, True),
                    change(2, FOLLOW, READER, AUTHOR, True),
                    change(3, BLOCK, READER, OTHER, True),
                    change(4, FOLLOW, READER, AUTHOR, False, since_ms=7))
    assert recent.forget_through(3) == 3
    view = recent.for_reader(READER)
    assert not view.hides(10, AUTHOR, 100)        # the delete's entry is gone
    assert view.hides(11, AUTHOR, 6)              # the follow-again entry stayed
    assert not view.hides(12, OTHER, 100)
    assert len(recent) == 1
    assert recent.forget_through(3) == 0          # nothing twice
    assert recent.forget_through(4) == 1 and recent.for_reader(READER) is NOTHING


def test_forgetting_a_long_front_compacts_and_keeps_the_rest_exact() -> None:
    recent = folded(*(change(i, POST, 1000 + i, AUTHOR, True) for i in range(1, 20_001)))
    assert recent.forget_through(15_000) == 15_000 and len(recent) == 5_000
    view = recent.for_reader(READER)
    assert not view.hides(1000 + 15_000, AUTHOR, 0) and view.hides(1000 + 15_001, AUTHOR, 0)
    recent.apply([change(20_001, POST, 7, AUTHOR, True)])
    assert recent.forget_through(20_000) == 5_000 and len(recent) == 1
    assert recent.for_reader(READER).hides(7, AUTHOR, 0)


def test_judge_lets_the_log_hide_what_the_copies_still_show() -> None:
    post = PostState(10, AUTHOR, 100, 1, False)
    graph = ReaderGraph(READER, {AUTHOR: 0}, frozenset())
    assert judge(post, graph) is Verdict.ELIGIBLE
    recent = folded(change(1, FOLLOW, READER, AUTHOR, True)).for_reader(READER)
    assert judge(post, graph, recent) is Verdict.FENCED
    # The copies' own verdicts come first: the log never makes anything visible.
    assert judge(PostState(10, AUTHOR, 100, 1, True), graph, recent) is Verdict.DELETED


_kinds = st.sampled_from([POST, FOLLOW, BLOCK, MUTE, ACCOUNT])


@given(st.lists(st.tuples(_kinds, st.sampled_from([READER, AUTHOR]), st.sampled_from([AUTHOR, OTHER]),
                          st.booleans(), st.integers(0, 50)), max_size=30))
def test_the_fold_matches_the_last_entry_of_each_post_and_pair(
        entries: list[tuple[str, int, int, bool, int]]) -> None:
    changes = [change(i + 1, kind, s, 0 if kind == ACCOUNT else o, hidden, since)
               for i, (kind, s, o, hidden, since) in enumerate(entries) if s != o]
    recent = folded(*changes)
    for reader in (READER, AUTHOR):
        for author in (AUTHOR, OTHER):
            if reader == author:
                continue
            view = recent.for_reader(reader)
            for created in (0, 25, 60):
                expected = _last_truth(changes, reader, author, post_id=99, created_ms=created)
                assert view.hides(99, author, created) == expected
            # Blocks and mutes apart: an author's timeline and lists consult blocks only.
            blocked, muted = _last_blocked(changes, reader, author), _last_muted(changes, reader, author)
            assert (author in view.blocked, author in view.muted) == (blocked, muted)
            account = {c.subject_id: c.hidden for c in changes if c.kind == ACCOUNT}.get(author, False)
            assert view.hides_post(99, author) == (blocked or account)


_USERS = st.sampled_from([1, 2, 3, 4])


@given(st.lists(st.tuples(_kinds, _USERS, _USERS, st.booleans(), st.integers(0, 50)), max_size=40),
       st.integers(0, 40))
def test_forgetting_keeps_exactly_the_keys_whose_latest_entry_is_above_the_mark(
        entries: list[tuple[str, int, int, bool, int]], mark: int) -> None:
    changes = [change(i + 1, kind, s if kind != POST else 90 + s, 0 if kind == ACCOUNT else o, hidden, since)
               for i, (kind, s, o, hidden, since) in enumerate(entries)
               if kind in (POST, ACCOUNT) or s != o]
    recent = folded(*changes)
    recent.forget_through(mark)
    latest: dict[tuple[str, int, int], VisibilityChange] = {}
    for c in changes:
        latest[(c.kind, c.subject_id, 0 if c.kind in (POST, ACCOUNT) else c.object_id)] = c
    kept = {k: c for k, c in latest.items() if c.seq > mark}
    for reader in (1, 2, 3, 4):
        view = recent.for_reader(reader)
        for author in (1, 2, 3, 4):
            if author == reader:
                continue
            for post in (91, 92, 93, 94):
                for created in (0, 25, 60):
                    hidden = ((p := kept.get((POST, post, 0))) is not None and p.hidden)
                    blocked = any((b := kept.get((BLOCK, x, y))) is not None and b.hidden
                                  for x, y in ((reader, author), (author, reader)))
                    muted = (m := kept.get((MUTE, reader, author))) is not None and m.hidden
                    account = (a := kept.get((ACCOUNT, author, 0))) is not None and a.hidden
                    assert view.hides_post(post, author) == hidden | blocked | account, (reader, author, post)
                    assert (author in view.blocked, author in view.muted) == (blocked, muted)
                    hidden |= blocked | muted | account
                    f = kept.get((FOLLOW, reader, author))
                    if f is not None:
                        hidden |= f.hidden or created < (f.since_ms or 0)
                    assert view.hides(post, author, created) == hidden, (reader, author, post, created)


def _last_truth(changes: list[VisibilityChange], reader: int, author: int, post_id: int,
                created_ms: int) -> bool:
    """What the latest entries say, computed the slow way."""
    accounts = {c.subject_id: c.hidden for c in changes if c.kind == ACCOUNT}
    if accounts.get(author):  # a suspended or deleted author: hidden from every reader
        return True
    if _last_blocked(changes, reader, author) or _last_muted(changes, reader, author):
        return True
    follows = [c for c in changes if c.kind == FOLLOW and (c.subject_id, c.object_id) == (reader, author)]
    if follows:
        last = follows[-1]
        return last.hidden or created_ms < (last.since_ms or 0)
    return False


def _last_blocked(changes: list[VisibilityChange], reader: int, author: int) -> bool:
    """Whether the latest entries leave a block either way between the two."""
    blocks = {(c.subject_id, c.object_id): c.hidden for c in changes if c.kind == BLOCK}
    return bool(blocks.get((reader, author)) or blocks.get((author, reader)))


def _last_muted(changes: list[VisibilityChange], reader: int, author: int) -> bool:
    """Whether the latest entries leave ``reader``'s mute of ``author`` (one way: the
    muted author still sees the muter)."""
    mutes = {(c.subject_id, c.object_id): c.hidden for c in changes if c.kind == MUTE}
    return bool(mutes.get((reader, author)))


class _Log:
    """A log source on a socket pair: a read is answered when the test says ``answer``.
    ``head`` (default: the last entry's seq) and ``upto`` are what Postgres would say."""

    def __init__(self, log: list[VisibilityChange]) -> None:
        self.log = log
        self.head: int | None = None
        self.upto = 0
        self.limits: list[int] = []
        self.marks: list[bool] = []
        self.sent: list[int] = []
        self.fail = False
        self.closed = False
        self._ours, self._theirs = socket.socketpair()
        self._ours.setblocking(False)
        self._asked: int | None = None

    def fileno(self) -> int:
        return self._ours.fileno()

    def send(self, seq: int, limit: int, marks: bool = False) -> bool:
        self.sent.append(seq)
        self.limits.append(limit)
        self.marks.append(marks)
        self._asked = seq
        return True

    def flush(self) -> bool:
        return True

    def answer(self) -> None:
        self._theirs.send(b"x")

    def poll(self) -> LogRead | None:
        try:
            self._ours.recv(1)
        except BlockingIOError:
            return None
        if self.fail:
            raise OSError("connection refused")
        assert self._asked is not None
        head = self.head if self.head is not None else max((c.seq for c in self.log), default=0)
        entries = [c for c in self.log if c.seq > self._asked][:self.limits[-1]]
        return LogRead(head, self.upto, entries) if self.marks[-1] else LogRead(-1, -1, entries)

    async def close(self) -> None:
        self.closed = True
        self._ours.close()
        self._theirs.close()


def _fence_on(source: _Log, timeout_s: float = 1.0) -> VisibilityFence:
    """A fence whose every connection is ``source``."""
    async def connect() -> _Log:
        return source

    return VisibilityFence("", timeout_s, open_source=connect, marks_every_s=0)  # type: ignore[arg-type]


async def _turns(n: int = 12) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_callers_share_the_read_on_the_wire_only_if_they_arrived_before_it_went_out() -> None:
    async def scenario() -> None:
        log: list[VisibilityChange] = []
        source = _Log(log)

        fence = _fence_on(source)
        await _turns()
        early = [asyncio.ensure_future(fence.sync()) for _ in range(5)]
        await _turns()
        assert len(source.sent) == 1          # connected, then one read for all five
        # A delete acknowledged after that read went out; a caller arriving now must not
        # be answered by it.
        log.append(change(1, POST, 10, AUTHOR, True))
        late = asyncio.ensure_future(fence.sync())
        await _turns()
        source.answer()
        await asyncio.gather(*early)
        await _turns()
        assert not late.done() and len(source.sent) == 2   # the next read went out at once
        source.answer()
        recent = await late
        assert recent.for_reader(READER).hides(10, AUTHOR, 0)
        assert len(source.sent) == 2

    asyncio.run(scenario())


def test_an_answer_already_there_is_taken_without_waiting() -> None:
    async def scenario() -> None:
        source = _Log([change(1, POST, 10, AUTHOR, True)])

        fence = _fence_on(source)
        first = asyncio.ensure_future(fence.sync())  # connects, sends the first read
        await _turns()
        source.answer()
        await first
        ticket = fence.arrive()
        await _turns()                         # the page awaited its Cassandra reads: the read went out
        source.answer()                        # ... and was answered before the page was done
        loop = asyncio.get_running_loop()
        turns = 0

        def count() -> None:
            nonlocal turns
            turns += 1
        loop.call_soon(count)
        recent = await fence.wait(ticket)
        assert turns == 0 and recent.for_reader(READER).hides(10, AUTHOR, 0)

    asyncio.run(scenario())


def test_a_failed_read_fails_its_callers_and_the_next_caller_reconnects() -> None:
    async def scenario() -> None:
        sources: list[_Log] = []

        async def connect() -> _Log:
            sources.append(_Log([change(1, BLOCK, READER, AUTHOR, True)]))
            return sources[-1]

        fence = VisibilityFence("", 1.0, open_source=connect)
        page = asyncio.ensure_future(fence.sync())
        await _turns()
        sources[0].fail = True
        sources[0].answer()
        with pytest.raises(FenceUnavailable):
            await page
        await _turns()
        assert sources[0].closed
        page = asyncio.ensure_future(fence.sync())
        await _turns()
        sources[1].answer()
        assert (await page).for_reader(READER).hides(1, AUTHOR, 0)

    asyncio.run(scenario())


def test_a_read_slower_than_the_timeout_fails_rather_than_answer_late() -> None:
    async def scenario() -> None:
        source = _Log([])

        fence = _fence_on(source, 0.05)
        with pytest.raises(FenceUnavailable):
            await fence.sync()  # never answered
        await _turns()
        assert source.closed

    asyncio.run(scenario())


def test_postgres_unreachable_fails_the_callers_instead_of_hanging() -> None:
    async def scenario() -> None:
        async def refuse() -> _Log:
            raise OSError("connection refused")

        fence = VisibilityFence("", 1.0, open_source=refuse)
        with pytest.raises(FenceUnavailable):
            await fence.sync()

    asyncio.run(scenario())


def test_the_answer_age_counts_from_when_the_answered_read_went_out() -> None:
    async def scenario() -> None:
        source = _Log([])

        fence = _fence_on(source)
        assert fence.answer_age() == float("inf")   # nothing answered yet
        read = asyncio.ensure_future(fence.sync())
        await _turns()
        await asyncio.sleep(0.05)                   # the read is on the wire this long
        source.answer()
        await read
        assert fence.answer_age() >= 0.05           # not from when the answer came

    asyncio.run(scenario())


class _SlowLog(_Log):
    """Answers every read ``delay_s`` after it went out."""

    def __init__(self, delay_s: float) -> None:
        super().__init__([change(1, POST, 10, AUTHOR, True)])
        self.delay_s = delay_s

    def send(self, seq: int, limit: int, marks: bool = False) -> bool:
        asyncio.get_running_loop().call_later(self.delay_s, self.answer)
        return super().send(seq, limit, marks)


def _gate(delay_s: float, fresh_s: float | None) -> tuple[object, _SlowLog]:
    from services.api.stream.gate import EligibilityGate

    source = _SlowLog(delay_s)
    return EligibilityGate(store=None, fence=_fence_on(source), fresh_s=fresh_s), source  # type: ignore[arg-type]


def test_an_event_is_judged_only_on_a_read_younger_than_the_commit_wait_bound() -> None:
    from services.api.stream.gate import FRESH_READS, EligibilityGate

    async def scenario() -> None:
        gate, source = _gate(delay_s=0.0, fresh_s=0.2)
        assert isinstance(gate, EligibilityGate)
        assert not await gate.still_allows(READER, 10, AUTHOR)   # the log hides post 10
        assert await gate.still_allows(READER, 11, AUTHOR)
        # Reads slower than the bound: tried FRESH_READS times, then not judged at all
        # (the route sends resync instead of the event).
        slow, source = _gate(delay_s=0.08, fresh_s=0.05)
        assert isinstance(slow, EligibilityGate)
        with pytest.raises(FenceUnavailable):
            await slow.still_allows(READER, 11, AUTHOR)
        assert len(source.sent) == FRESH_READS
        # Commit wait off: any read after the call will do.
        off, source = _gate(delay_s=0.08, fresh_s=None)
        assert isinstance(off, EligibilityGate)
        assert await off.still_allows(READER, 11, AUTHOR)
        assert len(source.sent) == 1

    asyncio.run(scenario())


def test_commit_wait_outlasts_the_stream_bound_by_the_write_margin() -> None:
    from services.api.visibility.commit_wait import WRITE_MARGIN_S, stream_bound

    assert stream_bound(0.2) == pytest.approx(0.2 - WRITE_MARGIN_S)
    assert stream_bound(WRITE_MARGIN_S) is None and stream_bound(0.0) is None


class _AutoLog(_Log):
    """Answers every read as soon as it is sent."""

    def send(self, seq: int, limit: int, marks: bool = False) -> bool:
        asyncio.get_running_loop().call_soon(self.answer)
        return super().send(seq, limit, marks)


def test_entries_below_the_verifiers_mark_are_forgotten_on_the_next_read() -> None:
    async def scenario() -> None:
        source = _AutoLog([change(1, POST, 10, AUTHOR, True), change(2, BLOCK, READER, OTHER, True)])
        fence = _fence_on(source)
        recent = await fence.sync()
        assert isinstance(recent, RecentChanges) and len(recent) == 2
        source.upto = 1   # the verifier released entry 1 (and deleted it from the log)
        del source.log[0]
        recent = await fence.sync()
        assert isinstance(recent, RecentChanges) and len(recent) == 1
        view = recent.for_reader(READER)
        assert not view.hides(10, AUTHOR, 0) and view.hides(11, OTHER, 0)

    asyncio.run(scenario())


def test_a_process_starting_behind_the_mark_reads_only_what_is_above_it() -> None:
    async def scenario() -> None:
        source = _AutoLog([change(i, POST, 100 + i, AUTHOR, True) for i in range(1, 11)])
        source.upto = 7
        fence = VisibilityFence("", 1.0, open_source=_connect(source), chunk=3)  # type: ignore[arg-type]
        recent = await fence.sync()
        assert isinstance(recent, RecentChanges)
        assert sorted(recent.for_reader(READER).hidden_posts) == [108, 109, 110]
        assert fence.ready

    asyncio.run(scenario())


def _connect(source: _Log):  # type: ignore[no-untyped-def]
    async def connect() -> _Log:
        return source
    return connect


def test_a_head_below_the_last_entry_held_makes_the_process_read_the_whole_log_again() -> None:
    async def scenario() -> None:
        source = _AutoLog([change(i, POST, 100 + i, AUTHOR, True) for i in range(1, 6)])
        fence = _fence_on(source)
        await fence.sync()
        assert fence.changes.last_seq == 5
        # A restore (or a reset sequence): the log now holds entries 1-2, new ones, and
        # entry 1's post is another one.
        source.log[:] = [change(1, POST, 900, AUTHOR, True), change(2, BLOCK, READER, OTHER, True)]
        recent = await fence.sync()
        assert isinstance(recent, RecentChanges) and recent.last_seq == 2
        view = recent.for_reader(READER)
        assert view.hides(900, AUTHOR, 0) and view.hides(1, OTHER, 0)
        assert not view.hides(101, AUTHOR, 0)   # the restored database has no such delete

    asyncio.run(scenario())


def test_each_chunk_of_a_long_read_has_its_own_deadline() -> None:
    class _Chunked(_Log):
        """Each chunk answered 30 ms after it went out: 10 chunks, 0.3 s in all."""

        def send(self, seq: int, limit: int, marks: bool = False) -> bool:
            asyncio.get_running_loop().call_later(0.03, self.answer)
            return super().send(seq, limit, marks)

    async def scenario() -> None:
        source = _Chunked([change(i, POST, 100 + i, AUTHOR, True) for i in range(1, 100)])
        fence = VisibilityFence("", 0.1, open_source=_connect(source), chunk=10)  # type: ignore[arg-type]
        assert not fence.ready
        recent = await fence.sync()   # longer than 0.1 s in all, no chunk longer than 0.1 s
        assert isinstance(recent, RecentChanges) and len(recent) == 99 and fence.ready
        assert len(source.sent) == 10

    asyncio.run(scenario())


def test_past_the_bound_pages_ask_postgres_until_the_log_is_back_under_half() -> None:
    asked: list[tuple[int, list[tuple[int, int]]]] = []

    async def window(reader_id: int, items: list[tuple[int, int]]) -> ReaderChanges:
        asked.append((reader_id, list(items)))
        return ReaderChanges({10: 0}, {AUTHOR: 0}, frozenset())

    async def scenario() -> None:
        source = _AutoLog([change(i, POST, 100 + i, AUTHOR, True) for i in range(1, 11)])
        fence = VisibilityFence("", 1.0, open_source=_connect(source), max_entries=6,  # type: ignore[arg-type]
                                window_check=window, chunk=4)
        view = await fence.sync()
        assert view is WINDOW and view.for_reader(READER) is None and len(fence.changes) == 0
        assert (await fence.window(READER, [(10, AUTHOR)])).hides(10, AUTHOR, 0)
        assert asked == [(READER, [(10, AUTHOR)])]
        # While the log stays over half the bound, pages do not wait for the reads, and
        # the reads ask for no entries.
        assert (await fence.sync()) is WINDOW
        await _turns()
        assert source.limits[-1] == 0
        # The verifier catches up: 3 entries left (under half of 6): the log is read
        # again while pages still ask Postgres; then the fold is back.
        source.upto = 7
        del source.log[:7]
        assert (await fence.sync()) is WINDOW
        await _turns()
        view = await fence.sync()
        assert isinstance(view, RecentChanges) and len(view) == 3
        assert view.for_reader(READER).hides(110, AUTHOR, 0)

    asyncio.run(scenario())


def test_in_window_mode_a_stream_event_is_judged_by_postgres_for_its_post() -> None:
    from services.api.stream.gate import EligibilityGate

    async def window(reader_id: int, items: list[tuple[int, int]]) -> ReaderChanges:
        (post_id, author_id), = items
        return ReaderChanges({10: 0} if post_id == 10 else {}, {author_id: 0}, frozenset())

    async def scenario() -> None:
        source = _AutoLog([change(i, POST, 100 + i, AUTHOR, True) for i in range(1, 4)])
        fence = VisibilityFence("", 1.0, open_source=_connect(source), max_entries=2,  # type: ignore[arg-type]
                                window_check=window)
        assert (await fence.sync()) is WINDOW
        gate = EligibilityGate(store=None, fence=fence, fresh_s=0.2)  # type: ignore[arg-type]
        assert not await gate.still_allows(READER, 10, AUTHOR)
        assert await gate.still_allows(READER, 11, AUTHOR)

    asyncio.run(scenario())


def test_the_head_and_mark_are_asked_for_on_a_new_connection_and_then_at_most_every_interval() -> None:
    async def scenario() -> None:
        source = _AutoLog([change(1, POST, 10, AUTHOR, True)])
        fence = VisibilityFence("", 1.0, open_source=_connect(source), marks_every_s=3600)  # type: ignore[arg-type]
        for _ in range(3):
            await fence.sync()
        assert source.marks == [True, False, False]
        assert fence.head == 1

    asyncio.run(scenario())
