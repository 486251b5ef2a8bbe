"""Inactive readers, on real Cassandra and the real API over HTTP: the sweeper flags a
reader who stopped reading, the fan-out skips them and counts it, and their return is
served at once from the author partitions while the inbox is regenerated."""
from __future__ import annotations

import time
from datetime import timedelta

import pytest

from services.fanout.inactive import InactiveSweeper
from services.fanout.jobs.rebuild import rebuild_inbox
from services.fanout.metrics import INACTIVE_ROWS_SKIPPED
from services.fanout.post_events import PostFanout
from services.fanout.tier_store import TierStore
from services.fanout.tiering import CapacityEstimate, TierPolicy
from services.shared.contracts.envelope import ChangeRecord
from services.shared.settings import Settings
from services.shared.stores.activity import ACTIVE, ActivityStore, Window
from services.shared.stores.cql_async import CqlRunner
from tests.support.api_server import RunningApi, new_user_id
from tests.support.feed_world import FeedWorld, Post, feed_ids, utc_now
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


def _created(post: Post) -> ChangeRecord:
    """The CDC create of ``post``, as the fan-out receives it."""
    return ChangeRecord(op="c", table="posts", lsn=time.time_ns() // 1000, before=None,
                        after={"post_id": post.post_id, "author_id": post.author_id,
                               "created_at": post.created_at.isoformat(), "text": post.text,
                               "media_ids": "[]", "visibility": 1, "deleted_at": None})


def _inbox(world: FeedWorld, reader: int) -> set[int]:
    return {p for _k, p, _a in world.inbox_rows(reader)}


def _skipped() -> float:
    return INACTIVE_ROWS_SKIPPED._value.get()  # type: ignore[attr-defined]


def test_an_inactive_reader_is_skipped_and_comes_back_to_a_full_feed(
        settings: Settings, api_server: RunningApi, world: FeedWorld) -> None:
    idle, active, author, other = (new_user_id() for _ in range(4))
    now = utc_now()
    world.follow(idle, author, since=now - timedelta(days=60))
    world.follow(idle, other, since=now - timedelta(days=60))
    world.follow(active, author, since=now - timedelta(days=60))
    runner = CqlRunner(world.session)
    store = ActivityStore(world.session, runner)
    window = Window(settings.inactive_after, settings.activity_resolution)
    current = window.period(int(time.time() * 1000))
    # Last read 17 days ago, and today.
    world.run(store.record_read(idle, current - window.periods - 3, window.index_ttl_s))
    world.run(store.record_read(active, current, window.index_ttl_s))

    async def rebuild(reader_id: int, authors: list[int]) -> None:
        await rebuild_inbox(reader_id, world.copies, world.inbox, authors, 500, utc_now)

    report = world.run(InactiveSweeper(store, window, rebuild, name=f"test-{idle}").sweep())
    assert idle in report.flagged and active not in report.flagged
    assert world.run(store.inactive_followers(author)) == {idle}
    assert world.run(store.inactive_followers(other)) == {idle}

    tiers = TierStore(world.session, runner, TierPolicy(min_dwell_s=0.0),
                      CapacityEstimate(1e6, pinned_rows_per_s=1e6), utc_now)
    fanout = PostFanout(world.copies, world.inbox, tiers, world.publisher,
                        settings.topic_prefix, inactive=store.inactive_followers)
    skipped = _skipped()
    posts = [world.write(author, at=now - timedelta(hours=20)),
             world.write(other, at=now - timedelta(minutes=5))]
    for post in posts:
        world.run(fanout.on_post_changed(_created(post)))
    world._settled()
    assert _inbox(world, active) == {posts[0].post_id}
    assert _inbox(world, idle) == set(), "the fan-out wrote for an inactive reader"
    assert _skipped() - skipped == 2  # one row per post saved

    with api_server.client(idle) as client:
        first = client.get("/v1/feed").json()
        # Served at once from the author partitions (yesterday's and today's), not empty.
        assert "regenerating" in first.get("warnings", [])
        assert set(feed_ids(first)) == {p.post_id for p in posts}
        wait_until(lambda: "regenerating" not in
                   client.get("/v1/feed").json().get("warnings", []),
                   timeout=30, message="the returning reader's inbox to be regenerated")
        assert set(feed_ids(client.get("/v1/feed").json())) == {p.post_id for p in posts}
    assert _inbox(world, idle) == {p.post_id for p in posts}
    assert world.run(store.inactive_followers(author)) == frozenset()
    assert world.run(store.activity(idle)).state == ACTIVE
    assert world.run(store.activity(idle)).last_period == current

    # Fanned out to again from now on.
    later = world.write(author)
    world.run(fanout.on_post_changed(_created(later)))
    assert later.post_id in _inbox(world, idle)


def test_a_reader_who_read_since_is_not_flagged(settings: Settings, api_server: RunningApi,
                                                world: FeedWorld) -> None:
    reader, author = new_user_id(), new_user_id()
    world.follow(reader, author)
    runner = CqlRunner(world.session)
    store = ActivityStore(world.session, runner)
    window = Window(settings.inactive_after, settings.activity_resolution)
    current = window.period(int(time.time() * 1000))
    world.run(store.record_read(reader, current - window.periods - 3, window.index_ttl_s))
    with api_server.client(reader) as client:  # the API records today's read
        assert client.get("/v1/feed").json().get("warnings", []) == []
    assert world.run(store.activity(reader)).last_period == current

    async def rebuild(reader_id: int, authors: list[int]) -> None:
        raise AssertionError("nothing to rebuild")

    # The sweep finds the reader under the old period, and their later read.
    report = world.run(InactiveSweeper(store, window, rebuild, name=f"test-{reader}").sweep())
    assert report.judged >= 1 and reader not in report.flagged
    assert world.run(store.inactive_followers(author)) == frozenset()
