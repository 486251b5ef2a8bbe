"""A 2xx delete, removal, block or unfollow is honoured by the very next request, with
no pipeline running at all (docs/read-path.md, "Eligibility against the truth";
services/api/visibility/fence.py).

Every test writes through the real API (Postgres) and writes the serving copies the
fan-out would have written BEFORE the change, then never updates them: the copies stay
as stale as a stalled relay or fan-out leaves them, so only the visibility log can hide
what the change hid.
"""
from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from deploy.stack import postgres
from deploy.stack.layout import Layout
from services.shared.settings import Settings
from tests.support.api_server import RunningApi, new_user_id
from tests.support.fence_scene import Scene, posted
from tests.support.feed_world import FeedWorld, feed_ids, walk
from tests.support.stream_api import (DELIVERY_DEADLINE_S, next_new_item, open_stream,
                                      serve_stream_api, wait_ready, wait_routed)
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def scene(api_server: RunningApi, world: FeedWorld) -> Iterator[Scene]:
    s = Scene(api_server, world)
    yield s
    s.close()


# Tries of "delete the post a walk is about to reach, then page on at once" (the
# target: 0 shown in 100 tries). Each try uses up one post.
DELETE_TRIES = 100


@pytest.fixture
def long_scene(api_server: RunningApi, world: FeedWorld) -> Iterator[Scene]:
    s = Scene(api_server, world, posts=DELETE_TRIES + 6)
    yield s
    s.close()


def test_a_deleted_post_is_gone_from_the_next_page_and_every_fresh_first_page(long_scene: Scene) -> None:
    scene = long_scene
    alive = scene.posts[::-1]  # newest first: the feed's order
    shown: list[tuple[int, str]] = []
    for _ in range(DELETE_TRIES):
        first = scene.feed(limit=5)
        assert feed_ids(first) == alive[:5]
        victim = alive[5]        # what the walk's next page would start with
        assert scene.as_author.delete(f"/v1/posts/{victim}").status_code == 204
        alive.remove(victim)
        if victim in feed_ids(scene.feed(limit=5, cursor=first["next_cursor"])):
            shown.append((victim, "next page"))
        if victim in feed_ids(scene.feed(limit=10)):
            shown.append((victim, "fresh first page"))
        if victim in feed_ids(scene.feed(limit=10, order="latest")):
            shown.append((victim, "fresh first page, latest"))
    assert shown == []
    assert scene.every_page(limit=20) == alive
    # One on the first page the reader is looking at.
    on_screen = alive[0]
    assert scene.as_author.delete(f"/v1/posts/{on_screen}").status_code == 204
    assert on_screen not in feed_ids(scene.feed(limit=5))


def test_a_hiding_write_is_answered_no_sooner_than_the_commit_wait(api_server: RunningApi,
                                                                   scene: Scene) -> None:
    """Deletes, removals, blocks and unfollows wait ``visibility_commit_wait_s``
    after their commit (services/api/visibility/commit_wait.py): a stream event judged on a
    read that missed the write is on the wire before the answer."""
    wait_s = api_server.settings.visibility_commit_wait_s
    assert wait_s > 0
    other = new_user_id()
    with api_server.client(new_user_id(), moderator=True) as moderator, \
            api_server.client(other) as as_other:
        assert as_other.get("/v1/feed").status_code == 200
        hiding = [lambda: scene.as_author.delete(f"/v1/posts/{scene.posts[0]}"),
                  lambda: moderator.post(f"/internal/moderation/posts/{scene.posts[1]}",
                                         json={"action": "remove"}),
                  lambda: scene.as_reader.delete(f"/v1/users/{scene.author}/follow"),
                  lambda: scene.as_reader.put(f"/v1/users/{other}/block")]
        for write in hiding:
            started = time.monotonic()
            resp = write()
            assert resp.status_code in (200, 204), resp.text
            assert time.monotonic() - started >= wait_s


def test_a_moderation_removal_hides_the_post_at_once_and_a_restore_shows_it_again(
        api_server: RunningApi, scene: Scene) -> None:
    victim = scene.posts[-1]
    with api_server.client(new_user_id(), moderator=True) as moderator:
        resp = moderator.post(f"/internal/moderation/posts/{victim}", json={"action": "remove"})
        assert resp.status_code == 200, resp.text
        assert victim not in scene.every_page()
        resp = moderator.post(f"/internal/moderation/posts/{victim}", json={"action": "restore"})
        assert resp.status_code == 200, resp.text
    assert victim in scene.every_page()  # the copies decide again: they never hid it


def test_a_block_hides_every_post_of_the_author_either_way_and_its_follow_stays_ended(
        scene: Scene) -> None:
    assert scene.every_page() == scene.posts[::-1]
    assert scene.as_author.put(f"/v1/users/{scene.reader}/block").status_code == 204
    assert scene.every_page() == []
    assert scene.every_page(order="latest") == []
    assert scene.as_author.delete(f"/v1/users/{scene.reader}/block").status_code == 204
    # The block ended the reader's follow (same transaction): still nothing.
    assert scene.every_page() == []


def test_an_unfollow_hides_the_author_and_a_follow_again_shows_only_what_comes_after(
        scene: Scene) -> None:
    assert scene.as_reader.delete(f"/v1/users/{scene.author}/follow").status_code == 204
    assert scene.every_page() == []
    assert scene.as_reader.put(f"/v1/users/{scene.author}/follow").status_code == 200
    assert scene.every_page() == []  # no surprise backfill of the earlier posts
    (pid, at), = posted(scene.as_author, 1)
    scene.world.write(scene.author, at=at, post_id=pid, inbox_of=[scene.reader])
    assert scene.every_page() == [pid]


def test_a_walk_opened_before_a_block_shows_nothing_of_the_author_after_it(
        api_server: RunningApi, scene: Scene) -> None:
    other = new_user_id()
    with api_server.client(other) as as_other:
        assert as_other.get("/v1/feed").status_code == 200  # the user exists
    resp = scene.as_reader.put(f"/v1/users/{other}/follow")
    assert resp.status_code == 200
    scene.world.follow(scene.reader, other)
    theirs = [scene.world.write(other, inbox_of=[scene.reader]).post_id for _ in range(5)]

    def block_after_first(page_number: int) -> None:
        if page_number == 1:
            assert scene.as_reader.put(f"/v1/users/{scene.author}/block").status_code == 204

    pages = walk(scene.as_reader, limit=4, between=block_after_first)
    later = [pid for page in pages[1:] for pid in feed_ids(page)]
    assert not set(later) & set(scene.posts)
    assert set(theirs) <= set(feed_ids(pages[0])) | set(later)


@pytest.fixture(scope="module")
def stream_api(settings: Settings) -> Iterator[RunningApi]:
    yield from serve_stream_api(settings)


def test_the_stream_sends_nothing_deleted_blocked_or_unfollowed(stream_api: RunningApi,
                                                                world: FeedWorld) -> None:
    wait_ready(stream_api)
    scene = Scene(stream_api, world, posts=4)
    deleted, _spare, unfollowed_post, kept = scene.posts
    stream = open_stream(stream_api, scene.reader)
    try:
        assert scene.as_author.delete(f"/v1/posts/{deleted}").status_code == 204
        post = world.write(scene.author, post_id=deleted)  # the copy: not deleted, as before
        world.announce(post)
        world.announce(world.write(scene.author, post_id=kept))
        event = next_new_item(stream, DELIVERY_DEADLINE_S)
        assert event is not None and json.loads(event["data"])["post_id"] == str(kept)
        # Stamped with when it passed its last check (a comment line clients ignore).
        assert abs(int(event["sent"]) / 1000 - time.time()) < DELIVERY_DEADLINE_S
        assert scene.as_reader.delete(f"/v1/users/{scene.author}/follow").status_code == 204
        world.announce(world.write(scene.author, post_id=unfollowed_post))
        # A later event the reader may see proves the earlier one was processed.
        friend = new_user_id()
        world.follow(scene.reader, friend)
        wait_routed(stream_api, scene.reader, friend)
        proof = world.write(friend, inbox_of=[scene.reader])
        world.announce(proof)
        event = next_new_item(stream, DELIVERY_DEADLINE_S)
        assert event is not None and json.loads(event["data"])["post_id"] == str(proof.post_id)
    finally:
        stream.close()
        scene.close()


def test_pages_answer_503_while_postgres_is_down_and_are_served_again_after(scene: Scene) -> None:
    """Without the log no page can be judged: another process may have acknowledged a
    delete just before Postgres went away. So a page is a retryable 503, never one judged
    on an older read, and the fence reconnects by itself."""
    layout = Layout.from_env()
    assert feed_ids(scene.feed(limit=5))
    postgres.down(layout)
    try:
        resp = scene.as_reader.get("/v1/feed", params={"limit": 5})
        assert resp.status_code == 503, resp.text
        assert resp.headers["Retry-After"] == "1"
        assert resp.headers["content-type"].startswith("application/problem+json")
    finally:
        postgres.up(layout)
    wait_until(lambda: scene.as_reader.get("/v1/feed", params={"limit": 5}).status_code == 200,
               timeout=60, message="pages served again after Postgres came back")
    assert feed_ids(scene.feed(limit=5)) == scene.posts[::-1][:5]
