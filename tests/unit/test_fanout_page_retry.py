"""A large fan-out whose store times out mid-way: the page is retried alone, the post is
not redone from its first follower, and each timeout halves the capacity estimate."""
from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone

from cassandra import OperationTimedOut

from services.fanout.audience import Follower, PostCopy
from services.fanout.post_events import PostFanout
from services.fanout.tiering import CapacityEstimate, Tier, TierDecision, TierState
from services.shared.contracts.envelope import ChangeRecord
from services.shared.domain.rules import INBOX_TTL_S
from services.shared.stores.cql_async import StoreRetry
from tests.support.fakes import RecordingPublisher
from tests.support.memory_stores import InMemoryInboxStore

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
AUTHOR, POST, PAGE, PAGES = 7, 1_000_001, 500, 6


class _Copies:
    def __init__(self) -> None:
        self.pages_read = 0
        self.fanned_out: list[bool] = []
        self.timeline: list[int] = []
        self.counts_read = 0

    async def write_post(self, post, lsn): ...
    async def add_author_post(self, author_id, post_id, rank_key, key_ts):
        self.timeline.append(post_id)
    async def set_rank_key(self, post_id, rank_key, key_ts):
        self.key = (rank_key, key_ts)
    async def mark_fanned_out(self, post_id, fanned_out, lsn):
        self.fanned_out.append(fanned_out)

    async def read_post(self, post_id):
        return PostCopy(post_id, AUTHOR, T0, 1, False, 10, None)

    async def followers_count(self, author_id):
        self.counts_read += 1
        return PAGE * PAGES

    async def blocked_set(self, author_id):
        return frozenset()

    async def follower_pages(self, author_id, expected=None):
        for p in range(PAGES):
            self.pages_read += 1
            yield [Follower(100 + p * PAGE + i, T0 - timedelta(days=1)) for i in range(PAGE)]


class _Inbox(InMemoryInboxStore):
    """The in-memory inbox (held to InboxStore by its contract suite) that times out on
    the third page's first two attempts."""

    def __init__(self) -> None:
        super().__init__()
        self.pushes: list[int] = []  # first reader of each attempted page

    async def push(self, reader_ids, post_id, author_id, rank_key, key_ts, ttl_s=INBOX_TTL_S):
        readers = list(reader_ids)
        assert 0 < ttl_s <= INBOX_TTL_S
        assert key_ts == int(T0.timestamp() * 1_000_000)  # a first push: at the post's time
        self.pushes.append(readers[0])
        if readers[0] == 100 + 2 * PAGE and self.pushes.count(readers[0]) <= 2:
            raise OperationTimedOut("node overloaded")
        return await super().push(readers, post_id, author_id, rank_key, key_ts, ttl_s)

    def holding(self, post_id: int) -> set[int]:
        """The readers whose inbox has a row of ``post_id``."""
        return {reader for reader, partition in self.tables.inbox.items()
                if any(row[1] == post_id for row in partition.rows())}


class _Tiers:
    def __init__(self) -> None:
        self.capacity = CapacityEstimate(floor_rows_per_s=1000)
        self.capacity.observe(16_000, 1.0)
        self.decided = 0

    async def state(self, author_id):
        return TierState()

    async def tier_for_post(self, author_id, followers, current=None):
        self.decided += 1
        return TierDecision(Tier.ORDINARY, False, 0.0, "test")


CHANGE = ChangeRecord(op="c", table="posts", lsn=10, before=None,
                      after={"post_id": POST, "author_id": AUTHOR, "created_at": T0.isoformat(),
                             "text": "hi", "media_ids": "[]", "visibility": 1, "deleted_at": None})


async def _no_sleep(_s: float) -> None:
    return None


def _fanout(copies, inbox, tiers, publisher, now: datetime) -> PostFanout:
    return PostFanout(copies, inbox, tiers, publisher, "t",  # type: ignore[arg-type]
                      retry=StoreRetry(attempts=3, base_s=0.01, sleep=_no_sleep),
                      wall_clock_ms=lambda: int(now.timestamp() * 1000),
                      monotonic=lambda: 0.0)  # no time passes: no capacity sample, only halvings


def test_a_timed_out_page_is_retried_alone_and_lowers_the_capacity_estimate():
    copies, inbox, tiers, publisher = _Copies(), _Inbox(), _Tiers(), RecordingPublisher()
    asyncio.run(_fanout(copies, inbox, tiers, publisher, T0 + timedelta(minutes=1)).on_post_changed(CHANGE))

    assert len(inbox.holding(POST)) == PAGE * PAGES   # every follower got the post once
    assert copies.pages_read == PAGES                  # followers were read once, not again
    assert len(inbox.pushes) == PAGES + 2              # only the failing page was redone
    assert tiers.capacity.rows_per_s == 4_000          # halved twice: 16,000 -> 4,000
    # One announcement for the post, after every row (not one per row, as before 2026-12-04).
    assert [(topic, key) for topic, key, _v, _h in publisher.sent] == [("t.author-events",
                                                                        f'"{AUTHOR}"'.encode())]


def test_one_shared_batch_timing_out_lowers_the_capacity_estimate_once():
    """Coalesced posts share a batch (services/shared/stores/write_coalescer.py): when it
    times out, every post in it gets the same error; that is one overload, not one per
    post."""
    shared = OperationTimedOut("node overloaded")

    class _SharedFailure(_Inbox):
        async def push(self, reader_ids, post_id, author_id, rank_key, key_ts, ttl_s=INBOX_TTL_S):
            readers = list(reader_ids)
            self.pushes.append(readers[0])
            if readers[0] == 100 + 2 * PAGE and self.pushes.count(readers[0]) <= 2:
                raise shared  # both posts' third page, first attempt: one batch
            return await InMemoryInboxStore.push(self, readers, post_id, author_id, rank_key, key_ts, ttl_s)

    copies, inbox, tiers, publisher = _Copies(), _SharedFailure(), _Tiers(), RecordingPublisher()
    fanout = _fanout(copies, inbox, tiers, publisher, T0 + timedelta(minutes=1))
    other = ChangeRecord(op="c", table="posts", lsn=11, before=None, after={**CHANGE.after, "post_id": POST + 1})

    async def both() -> None:
        await asyncio.gather(fanout.on_post_changed(CHANGE), fanout.on_post_changed(other))
    asyncio.run(both())

    assert inbox.pushes.count(100 + 2 * PAGE) == 4    # each post's page retried once
    assert tiers.capacity.rows_per_s == 8_000          # halved once: 16,000 -> 8,000


def test_a_post_older_than_the_inbox_ttl_writes_no_rows():
    copies, inbox, tiers, publisher = _Copies(), _Inbox(), _Tiers(), RecordingPublisher()
    asyncio.run(_fanout(copies, inbox, tiers, publisher, T0 + timedelta(days=8)).on_post_changed(CHANGE))
    assert inbox.pushes == [] and copies.pages_read == 0 and publisher.sent == []
    assert copies.fanned_out == [False]  # nothing in inboxes for clean-up or backfill to find
    assert copies.timeline == [POST]     # in the author's timeline, as every post
    assert copies.counts_read == 0 and tiers.decided == 0  # no audience: no tier to weigh


def test_in_a_batch_the_posts_notices_go_out_before_its_announcement():
    """Notices are merged per batch (services/shared/worker/notices.py); the announcement
    flushes them first, so a stream's reader never reads a page from a cached inbox top
    the post's notice has not dropped yet."""
    from services.shared.worker.notices import Notices, batched_notices

    copies, tiers, publisher = _Copies(), _Tiers(), RecordingPublisher()
    inbox = InMemoryInboxStore(notices=Notices(publisher, "t.serving-changes"))
    fanout = _fanout(copies, inbox, tiers, publisher, T0 + timedelta(minutes=1))

    async def in_a_batch() -> None:
        with batched_notices():
            await fanout.on_post_changed(CHANGE)
    asyncio.run(in_a_batch())
    topics = [topic for topic, _k, _v, _h in publisher.sent]
    assert topics[-1] == "t.author-events"
    assert set(topics[:-1]) == {"t.serving-changes"}
    named = [r for _t, _k, v, _h in publisher.sent[:-1] for r in json.loads(v).get("inboxes", [])]
    assert len(named) == len(set(named)) == PAGE * PAGES  # every follower's inbox, once


def test_inactive_followers_get_no_rows_and_are_counted():
    from services.fanout.metrics import INACTIVE_ROWS_SKIPPED
    copies, inbox, tiers, publisher = _Copies(), _Inbox(), _Tiers(), RecordingPublisher()
    inactive = frozenset(range(100, 100 + PAGE * PAGES, 3))  # every third follower

    async def inactive_of(author_id):
        assert author_id == AUTHOR
        return inactive

    before = INACTIVE_ROWS_SKIPPED._value.get()
    fanout = PostFanout(copies, inbox, tiers, publisher, "t",  # type: ignore[arg-type]
                        retry=StoreRetry(attempts=3, base_s=0.01, sleep=_no_sleep),
                        wall_clock_ms=lambda: int((T0 + timedelta(minutes=1)).timestamp() * 1000),
                        monotonic=lambda: 0.0, inactive=inactive_of)
    asyncio.run(fanout.on_post_changed(CHANGE))
    everyone = set(range(100, 100 + PAGE * PAGES))
    assert inbox.holding(POST) == everyone - inactive
    assert len(publisher.sent) == 1   # the post's one announcement
    assert INACTIVE_ROWS_SKIPPED._value.get() - before == len(inactive)
