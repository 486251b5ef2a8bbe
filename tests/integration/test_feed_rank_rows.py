"""The read path over rank-key rows: a walk past the snapshot's depth extends it, and
rows left behind by a racing move are never shown (services/api/feed/reader.py)."""
from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import pytest

from services.common.settings import Settings

from .conftest import RunningApi, new_user_id, running_api
from .test_feed_support import FeedWorld, feed_ids, utc_now, walk, world  # noqa: F401

pytestmark = pytest.mark.integration

DEPTH = 4


@pytest.fixture(scope="module")
def shallow_api(settings: Settings) -> Iterator[RunningApi]:
    """An API whose snapshots start with DEPTH entries, so walks extend them."""
    with running_api(settings.model_copy(update={"feed_snapshot_depth": DEPTH})) as api:
        yield api


def test_a_walk_past_the_snapshot_depth_extends_it_without_repeats_or_gaps(
        shallow_api: RunningApi, world: FeedWorld) -> None:
    reader, friend, star = new_user_id(), new_user_id(), new_user_id()
    world.follow(reader, friend)
    world.follow(reader, star)
    world.make_celebrity(star)
    time.sleep(shallow_api.settings.feed_celebrities_cache_s)
    now = utc_now()
    posts = [world.write(friend, at=now - timedelta(minutes=2 * i), inbox_of=[reader],
                         score=(i % 3) * 0.2) for i in range(9)]
    posts += [world.write(star, at=now - timedelta(minutes=2 * i + 1)) for i in range(5)]
    deleted = posts[7]
    created: list[int] = []

    def between(page_number: int) -> None:
        if page_number == 1:
            world.delete(deleted)  # ineligible from the next page on: skipped, page still filled
            created.append(world.write(friend, inbox_of=[reader]).post_id)  # after the snapshot

    with shallow_api.client(reader) as client:
        pages = walk(client, 3, between)
    shown = [i for page in pages for i in feed_ids(page)]
    assert len(shown) == len(set(shown)), "a post was shown twice"
    assert not set(shown) & set(created), "a post made after the snapshot entered it"
    assert set(shown) == {p.post_id for p in posts} - {deleted.post_id}
    ranks = [(-item["rank"], -int(item["post_id"])) for page in pages for item in page["items"]]
    assert ranks == sorted(ranks)
    assert len({p["feed_version"] for p in pages}) == 1
    assert all(len(p["items"]) == 3 for p in pages[:-1])


def test_a_row_left_under_an_old_key_is_never_shown(api_server: RunningApi, world: FeedWorld) -> None:
    reader, author = new_user_id(), new_user_id()
    world.follow(reader, author)
    now = utc_now()
    post = world.write(author, at=now - timedelta(minutes=30), inbox_of=[reader])
    other = world.write(author, at=now - timedelta(minutes=5), inbox_of=[reader])
    world.set_score(post.post_id, 3.0)  # moved up past `other`
    # A racing fan-out (or a lost tombstone) leaves a row under a key the copy no longer
    # has: higher than everything, written after the move.
    world.run(world.inbox.push([reader], post.post_id, author, 10_000.0, time.time_ns() // 1000))
    with api_server.client(reader) as client:
        page = client.get("/v1/feed").json()
    assert feed_ids(page) == [post.post_id, other.post_id]
    assert page["items"][0]["rank"] < 1_000  # ranked by its live row, not the stray one
