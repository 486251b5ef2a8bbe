"""Push rounds (services/fanout/push_rounds.py): a batch's pushes leave together, grouped by
reader, once every change being applied has pushed or finished; each push resumes when
its rows are stored, with the round's error if it failed; nothing waits forever."""
from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from typing import Any, Sequence

import pytest
from cassandra import OperationTimedOut

from services.fanout.audience import Follower, PostCopy
from services.fanout.inbox import InboxRow
from services.fanout.post_events import PostFanout
from services.fanout.push_rounds import PushRounds
from services.fanout.tiering import CapacityEstimate, Tier, TierDecision, TierState
from services.shared.contracts.envelope import ChangeRecord
from services.shared.stores.cql_async import StoreRetry
from tests.support.fakes import RecordingPublisher
from tests.support.memory_stores import InMemoryInboxStore


class _Inbox(InMemoryInboxStore):
    """Records each ``push_many`` (a round) and ``push``; may fail the first rounds."""

    def __init__(self, fail_rounds: int = 0) -> None:
        super().__init__()
        self.rounds: list[list[tuple[list[int], int]]] = []
        self.single: list[int] = []
        self.fail_rounds = fail_rounds
        self.error = OperationTimedOut("node overloaded")

    async def push_many(self, pushes: Sequence[tuple[Sequence[int], InboxRow]]) -> int:
        self.rounds.append([(list(readers), row.post_id) for readers, row in pushes])
        await asyncio.sleep(0.001)
        if len(self.rounds) <= self.fail_rounds:
            raise self.error
        return await super().push_many(pushes)

    async def push(self, reader_ids: Any, post_id: int, author_id: int, rank_key: float,
                   key_ts: int, ttl_s: int = 600) -> int:
        self.single.append(post_id)
        return await super().push(reader_ids, post_id, author_id, rank_key, key_ts, ttl_s)


def _row(post: int, ttl_s: int = 600) -> InboxRow:
    return InboxRow(post, 7, float(post), 1_000, ttl_s)


async def _change(rounds: PushRounds, delay: float, pushes: list[tuple[list[int], InboxRow]],
                  log: list[Any]) -> None:
    with rounds.applying():
        await asyncio.sleep(delay)
        for readers, row in pushes:
            log.append((row.post_id, await rounds.push(readers, row)))


def test_a_round_leaves_once_every_change_being_applied_has_pushed_or_finished():
    inbox, log = _Inbox(), []

    async def run() -> PushRounds:
        rounds = PushRounds(inbox)
        await asyncio.gather(_change(rounds, 0.0, [([1, 2], _row(10))], log),
                             _change(rounds, 0.02, [([2, 3], _row(11))], log),
                             _change(rounds, 0.04, [], log),                       # pushes nothing
                             _change(rounds, 0.01, [([4], _row(12, ttl_s=0))], log))  # too old
        return rounds
    rounds = asyncio.run(run())
    assert rounds.rounds == 1 and len(inbox.rounds) == 1   # one round, after the last change ended
    assert sorted(inbox.rounds[0]) == [([1, 2], 10), ([2, 3], 11), ([4], 12)]
    assert sorted(log) == [(10, 2), (11, 2), (12, 0)]      # each resumed with its own rows
    assert {r: [p for _k, p, _a in inbox.tables.inbox_of(r).rows()] for r in (1, 2, 3, 4)} == \
        {1: [10], 2: [11, 10], 3: [11], 4: []}


def test_a_lone_post_waits_for_nothing_and_a_push_outside_a_change_goes_alone():
    inbox, log = _Inbox(), []

    async def run() -> None:
        rounds = PushRounds(inbox, max_wait_s=5.0)
        started = asyncio.get_running_loop().time()
        await _change(rounds, 0.0, [([1], _row(10)), ([2], _row(11))], log)   # two pages
        assert asyncio.get_running_loop().time() - started < 1.0
        assert await rounds.push([3], _row(12)) == 1
    asyncio.run(run())
    assert [len(r) for r in inbox.rounds] == [1, 1, 1]


def test_the_next_change_of_a_key_does_not_miss_the_round():
    """A worker leaves one change and enters the next without a wait: the round is
    checked on the next turn of the loop, so that change still joins it."""
    inbox, log = _Inbox(), []

    async def worker(rounds: PushRounds) -> None:
        with rounds.applying():
            await asyncio.sleep(0.01)
        with rounds.applying():          # entered at once: no wait between the two changes
            await asyncio.sleep(0.01)
            log.append(await rounds.push([2], _row(11)))

    async def run() -> None:
        rounds = PushRounds(inbox)
        await asyncio.gather(_change(rounds, 0.0, [([1], _row(10))], log), worker(rounds))
    asyncio.run(run())
    assert [sorted(p for _r, p in r) for r in inbox.rounds] == [[10, 11]]


def test_a_failed_round_fails_every_push_in_it_with_one_error():
    inbox, outcomes = _Inbox(fail_rounds=1), []

    async def change(rounds: PushRounds, readers: list[int], post: int) -> None:
        with rounds.applying():
            try:
                await rounds.push(readers, _row(post))
            except OperationTimedOut as exc:
                outcomes.append(exc)

    async def run() -> None:
        rounds = PushRounds(inbox)
        await asyncio.gather(change(rounds, [1], 10), change(rounds, [2], 11))
    asyncio.run(run())
    assert outcomes == [inbox.error, inbox.error] and outcomes[0] is outcomes[1]


def test_a_round_leaves_after_its_longest_wait_or_at_its_size():
    inbox, log = _Inbox(), []

    async def stuck(rounds: PushRounds, release: asyncio.Event) -> None:
        with rounds.applying():
            await release.wait()          # never pushes while the others wait

    async def run() -> None:
        rounds = PushRounds(inbox, max_wait_s=0.05, max_rows=3)
        release = asyncio.Event()
        held = asyncio.ensure_future(stuck(rounds, release))
        await asyncio.sleep(0)
        loop = asyncio.get_running_loop()
        started = loop.time()
        await _change(rounds, 0.0, [([1], _row(10))], log)
        assert 0.04 <= loop.time() - started < 1.0        # left after max_wait_s
        await _change(rounds, 0.0, [([1, 2, 3], _row(11))], log)  # max_rows: at once
        release.set()
        await held
    asyncio.run(run())
    assert [[p for _r, p in r] for r in inbox.rounds] == [[10], [11]]


# -- in the post fan-out --------------------------------------------------------------------------
T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
FOLLOWERS = {7: [100, 101, 102], 8: [101, 102, 103, 104]}


class _Copies:
    def __init__(self) -> None:
        self.posts: dict[int, PostCopy] = {}

    async def write_post(self, post, lsn):
        self.posts[post.post_id] = PostCopy(post.post_id, post.author_id, post.created_at, 1, False, lsn, None)

    async def read_post(self, post_id):
        return self.posts.get(post_id)

    async def set_rank_key(self, post_id, rank_key, key_ts): ...
    async def add_author_post(self, author_id, post_id, rank_key, key_ts): ...
    async def mark_fanned_out(self, post_id, fanned_out, lsn): ...

    async def followers_count(self, author_id):
        return len(FOLLOWERS[author_id])

    async def blocked_set(self, author_id):
        return frozenset()

    async def follower_pages(self, author_id, expected=None):
        yield [Follower(r, T0 - timedelta(days=1)) for r in FOLLOWERS[author_id]]


class _Tiers:
    capacity = CapacityEstimate(floor_rows_per_s=1000)

    async def state(self, author_id):
        return TierState()

    async def tier_for_post(self, author_id, followers, current=None):
        return TierDecision(Tier.ORDINARY, False, 0.0, "test")


def _created(post: int, author: int) -> ChangeRecord:
    return ChangeRecord(op="c", table="posts", lsn=post, before=None,
                        after={"post_id": post, "author_id": author, "created_at": T0.isoformat(),
                               "text": "hi", "media_ids": "[]", "visibility": 1, "deleted_at": None})


@pytest.mark.parametrize("rounds", [True, False])
def test_a_batch_of_recent_posts_writes_its_rows_in_one_round_and_announces_after(rounds):
    inbox, publisher = _Inbox(), RecordingPublisher()
    announced_after: list[int] = []

    async def send(topic, key, value, headers=()):
        announced_after.append(len(inbox.rounds) + len(inbox.single))
        return await RecordingPublisher.send(publisher, topic, key, value, headers)
    publisher.send = send  # type: ignore[method-assign]

    async def no_sleep(_s: float) -> None:
        return None
    fanout = PostFanout(_Copies(), inbox, _Tiers(), publisher, "t",  # type: ignore[arg-type]
                        retry=StoreRetry(attempts=3, base_s=0.0, sleep=no_sleep),
                        wall_clock_ms=lambda: int((T0 + timedelta(minutes=5)).timestamp() * 1000),
                        push_rounds=rounds)

    async def batch() -> None:
        await asyncio.gather(*(fanout.on_post_changed(_created(p, a)) for p, a in ((11, 7), (12, 8), (13, 7))))
    asyncio.run(batch())
    holding = {r: sorted(p for _k, p, _a in inbox.tables.inbox_of(r).rows()) for r in range(100, 105)}
    assert holding == {100: [11, 13], 101: [11, 12, 13], 102: [11, 12, 13], 103: [12], 104: [12]}
    if rounds:
        assert len(inbox.rounds) == 1 and inbox.single == []   # the three posts' rows together
        assert announced_after == [1, 1, 1]                    # each announced after its rows
    else:
        assert inbox.rounds == [] and sorted(inbox.single) == [11, 12, 13]


def test_a_failed_round_is_retried_page_by_page_and_halves_capacity_once():
    inbox, tiers = _Inbox(fail_rounds=1), _Tiers()
    tiers.capacity = CapacityEstimate(floor_rows_per_s=1000)
    tiers.capacity.observe(16_000, 1.0)

    async def no_sleep(_s: float) -> None:
        return None
    fanout = PostFanout(_Copies(), inbox, tiers, RecordingPublisher(), "t",  # type: ignore[arg-type]
                        retry=StoreRetry(attempts=3, base_s=0.0, sleep=no_sleep),
                        wall_clock_ms=lambda: int((T0 + timedelta(minutes=5)).timestamp() * 1000),
                        monotonic=lambda: 0.0, push_rounds=True)

    async def batch() -> None:
        await asyncio.gather(fanout.on_post_changed(_created(11, 7)), fanout.on_post_changed(_created(12, 8)))
    asyncio.run(batch())
    assert len(inbox.rounds) >= 2 and sorted(p for r in inbox.rounds[1:] for _x, p in r) == [11, 12]
    assert tiers.capacity.rows_per_s == 8_000       # one shared failure: halved once
    assert sorted(p for _k, p, _a in inbox.tables.inbox_of(102).rows()) == [11, 12]


def test_a_recent_posts_audience_is_read_after_its_mark_and_its_tier_before_it():
    """The steps read together (count with tier state; blocks, inactive readers and the
    first page of followers) keep their side of the mark: an unfollow or block that does
    not see the mark is seen by the audience reads; the tier decides the mark."""
    steps: list[str] = []

    class Copies(_Copies):
        async def mark_fanned_out(self, post_id, fanned_out, lsn):
            await asyncio.sleep(0)
            steps.append("mark")

        async def followers_count(self, author_id):
            steps.append("count")
            return await super().followers_count(author_id)

        async def blocked_set(self, author_id):
            steps.append("blocks")
            return frozenset()

        async def follower_pages(self, author_id, expected=None):
            steps.append("followers")
            async for page in super().follower_pages(author_id, expected):
                yield page

    class Tiers(_Tiers):
        async def state(self, author_id):
            steps.append("tier state")
            return TierState()

        async def tier_for_post(self, author_id, followers, current=None):
            assert current is not None  # read beside the count, not again
            steps.append("tier")
            return await super().tier_for_post(author_id, followers, current)

    async def inactive(author_id: int) -> frozenset[int]:
        steps.append("inactive")
        return frozenset()

    inbox = _Inbox()
    fanout = PostFanout(Copies(), inbox, Tiers(), RecordingPublisher(), "t",  # type: ignore[arg-type]
                        wall_clock_ms=lambda: int((T0 + timedelta(minutes=5)).timestamp() * 1000),
                        monotonic=lambda: 0.0, inactive=inactive)
    asyncio.run(fanout.on_post_changed(_created(11, 7)))
    mark = steps.index("mark")
    assert set(steps[:mark]) == {"count", "tier state", "tier"} and steps.index("tier") == mark - 1
    assert set(steps[mark + 1:]) == {"blocks", "inactive", "followers"}
    assert sorted(p for _k, p, _a in inbox.tables.inbox_of(100).rows()) == [11]
