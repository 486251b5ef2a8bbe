"""Mute over real HTTP on real Postgres, Cassandra and Kafka: a 2xx mute hides the muted
author's posts from the muter's very next page and stream event with no pipeline running
(the visibility fence, services/api/visibility/), an unmute shows them again, and only
the muter stops seeing anything (services/api/README.md, "Visibility").

As in test_eligibility_fence, the serving copies are written the way the fan-out would
have written them BEFORE the mute and then never updated, unless a test writes the mute's
own copy (``world.mute``) to see what the copy does once the fan-out catches up.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest

from services.shared.clients import pg
from services.shared.settings import Settings
from tests.support.api_server import RunningApi, new_user_id, running_api
from tests.support.fence_scene import Scene, posted
from tests.support.feed_world import FeedWorld, feed_ids
from tests.support.stream_api import (DELIVERY_DEADLINE_S, next_new_item, open_stream,
                                      serve_stream_api, wait_ready, wait_routed)

pytestmark = pytest.mark.integration


@pytest.fixture
def scene(api_server: RunningApi, world: FeedWorld) -> Iterator[Scene]:
    s = Scene(api_server, world, posts=8)
    yield s
    s.close()


def _mutes(settings: Settings, muter: int, muted: int) -> bool:
    with pg.connect(settings) as conn:
        return conn.execute("SELECT 1 FROM mutes WHERE muter_id = %s AND muted_id = %s",
                            (muter, muted)).fetchone() is not None


def _follows(settings: Settings, follower: int, followed: int) -> bool:
    with pg.connect(settings) as conn:
        return conn.execute("SELECT 1 FROM follows WHERE follower_id = %s AND followed_id = %s",
                            (follower, followed)).fetchone() is not None


def test_mute_and_unmute_are_idempotent_and_refuse_yourself_and_unknown_users(
        api_server: RunningApi) -> None:
    me, other = new_user_id(), new_user_id()
    with ExitStack() as stack:
        http = stack.enter_context(api_server.client(me))
        as_other = stack.enter_context(api_server.client(other))
        assert as_other.get("/v1/feed").status_code == 200  # the user exists
        assert http.put(f"/v1/users/{other}/mute").status_code == 204
        assert http.put(f"/v1/users/{other}/mute").status_code == 204
        assert _mutes(api_server.settings, me, other)
        assert not _mutes(api_server.settings, other, me)
        assert http.delete(f"/v1/users/{other}/mute").status_code == 204
        assert http.delete(f"/v1/users/{other}/mute").status_code == 204
        assert not _mutes(api_server.settings, me, other)
        itself = http.put(f"/v1/users/{me}/mute")
        unknown = http.put(f"/v1/users/{new_user_id()}/mute")
        bad = http.put("/v1/users/not-a-number/mute")
    assert itself.status_code == 422
    assert itself.headers["content-type"].startswith("application/problem+json")
    assert unknown.status_code == 404
    assert unknown.headers["content-type"].startswith("application/problem+json")
    assert bad.status_code == 422


def test_the_openapi_document_lists_mute_with_its_problems(api_server: RunningApi) -> None:
    with api_server.client(new_user_id()) as http:
        doc = http.get("/openapi.json").json()
    ops = doc["paths"]["/v1/users/{user_id}/mute"]
    assert {"401", "404", "422"} <= set(ops["put"]["responses"])
    assert {"401", "422"} <= set(ops["delete"]["responses"])
    assert "application/problem+json" in ops["put"]["responses"]["404"]["content"]


def test_a_mute_hides_the_author_on_the_next_request_and_an_unmute_brings_them_back(
        scene: Scene) -> None:
    everything = scene.posts[::-1]
    assert scene.every_page() == everything
    assert scene.as_reader.put(f"/v1/users/{scene.author}/mute").status_code == 204
    assert scene.every_page() == []
    assert scene.every_page(order="latest") == []
    assert scene.every_page(limit=3) == []
    # The follow stands: a follow again keeps its following_since.
    assert _follows(scene.api.settings, scene.reader, scene.author)
    assert scene.as_reader.delete(f"/v1/users/{scene.author}/mute").status_code == 204
    assert scene.every_page() == everything
    assert scene.every_page(order="latest") == everything


def test_a_walk_opened_before_a_mute_shows_nothing_of_the_author_after_it(scene: Scene) -> None:
    first = scene.feed(limit=3)
    assert feed_ids(first) == scene.posts[::-1][:3]
    assert scene.as_reader.put(f"/v1/users/{scene.author}/mute").status_code == 204
    assert feed_ids(scene.feed(limit=3, cursor=first["next_cursor"])) == []


def test_the_muted_author_still_sees_the_muters_posts(api_server: RunningApi, scene: Scene,
                                                      world: FeedWorld) -> None:
    resp = scene.as_author.put(f"/v1/users/{scene.reader}/follow")
    assert resp.status_code == 200, resp.text
    world.follow(scene.author, scene.reader)
    theirs = [world.write(scene.reader, at=at, post_id=pid, inbox_of=[scene.author]).post_id
              for pid, at in posted(scene.as_reader, 3)]
    assert scene.as_reader.put(f"/v1/users/{scene.author}/mute").status_code == 204
    world.mute(scene.reader, scene.author)  # and the fan-out caught up
    page = scene.as_author.get("/v1/feed", params={"limit": 10})
    assert page.status_code == 200, page.text
    assert set(theirs) <= set(feed_ids(page.json()))
    assert scene.every_page() == []


def test_the_mutes_copy_hides_on_its_own_and_an_unmute_shows_again_once_it_is_removed(
        api_server: RunningApi, scene: Scene, world: FeedWorld) -> None:
    # The copy alone (no Postgres mute, so no log entry): the read path hides the author.
    world.mute(scene.reader, scene.author)
    assert scene.every_page() == []
    # The muter's own posts still reach the muted user: the fan-out's audience skips mutes.
    assert not world.run(world.copies.blocked_either_way(scene.reader, scene.author))
    assert scene.author not in world.run(world.copies.blocked_set(scene.reader))
    world.unmute(scene.reader, scene.author)
    assert scene.every_page() == scene.posts[::-1]
    # Through the API, with the fan-out applying the mute before the unmute's event: the
    # unmute lifts the log's hiding at once, the copy decides until its removal lands.
    assert scene.as_reader.put(f"/v1/users/{scene.author}/mute").status_code == 204
    world.mute(scene.reader, scene.author)
    assert scene.as_reader.delete(f"/v1/users/{scene.author}/mute").status_code == 204
    assert scene.every_page() == []
    world.unmute(scene.reader, scene.author)
    assert scene.every_page() == scene.posts[::-1]


def _ids(client: httpx.Client, path: str, key: str) -> list[str]:
    """Every item of a user list, walked page by page (small pages: the cursor too)."""
    out: list[str] = []
    params: dict[str, object] = {"limit": 3}
    for _ in range(50):
        resp = client.get(path, params=params)
        assert resp.status_code == 200, (path, resp.text)
        body = resp.json()
        out += [item[key] for item in body["items"]]
        if not body["next_cursor"]:
            return out
        params = {"limit": 3, "cursor": body["next_cursor"]}
    raise AssertionError(f"{path}: no end")


def _sees_the_muted_author_everywhere_but_the_feed(scene: Scene, fan: int, followed: int) -> None:
    """The muter opens the muted author's timeline and lists (200, every post), finds
    them in other users' lists and reads and likes their post by id; the home feed alone
    hides them. ``fan`` follows the author, the author follows ``followed``."""
    author, reader, http = scene.author, scene.reader, scene.as_reader
    newest_first = [str(p) for p in scene.posts[::-1]]
    assert _ids(http, f"/v1/users/{author}/posts", "post_id") == newest_first
    assert set(_ids(http, f"/v1/users/{author}/followers", "user_id")) == {str(reader), str(fan)}
    assert _ids(http, f"/v1/users/{author}/following", "user_id") == [str(followed)]
    assert _ids(http, f"/v1/users/{reader}/following", "user_id") == [str(author)]
    assert _ids(http, f"/v1/users/{followed}/followers", "user_id") == [str(author)]
    assert _ids(http, f"/v1/users/{fan}/following", "user_id") == [str(author)]
    post = scene.posts[0]
    resp = http.get(f"/v1/posts/{post}")
    assert resp.status_code == 200, resp.text
    assert http.put(f"/v1/posts/{post}/like").status_code == 204
    assert http.delete(f"/v1/posts/{post}/like").status_code == 204
    assert scene.every_page() == []
    assert scene.every_page(order="latest") == []


def _fans(scene: Scene, world: FeedWorld) -> tuple[int, int]:
    """A user following the author and one the author follows, through the API and as
    the fan-out would have copied them."""
    fan, followed = new_user_id(), new_user_id()
    with scene.api.client(fan) as as_fan, scene.api.client(followed) as as_followed:
        assert as_followed.get("/v1/feed").status_code == 200  # exists
        assert as_fan.put(f"/v1/users/{scene.author}/follow").status_code == 200
    assert scene.as_author.put(f"/v1/users/{followed}/follow").status_code == 200
    world.follow(fan, scene.author)
    world.follow(scene.author, followed)
    return fan, followed


def test_a_muter_still_opens_the_muted_authors_timeline_and_lists_before_and_after_the_copy(
        scene: Scene, world: FeedWorld) -> None:
    fan, followed = _fans(scene, world)
    assert scene.every_page() == scene.posts[::-1]
    assert scene.as_reader.put(f"/v1/users/{scene.author}/mute").status_code == 204
    # The fan-out has not seen the mute: the visibility log alone hides, in the feed only.
    _sees_the_muted_author_everywhere_but_the_feed(scene, fan, followed)
    # The fan-out caught up: the copy (a 'mute' row of the reader's blocks partition)
    # hides in the feed only, as the log did.
    world.mute(scene.reader, scene.author)
    _sees_the_muted_author_everywhere_but_the_feed(scene, fan, followed)
    # The muted author sees the muter's lists as before (a mute is one way, and secret).
    assert _ids(scene.as_author, f"/v1/users/{scene.reader}/following", "user_id") == [str(scene.author)]


def test_a_block_on_top_of_a_mute_still_answers_404_on_the_timeline_and_lists(
        scene: Scene, world: FeedWorld) -> None:
    fan, followed = _fans(scene, world)
    assert scene.as_reader.put(f"/v1/users/{scene.author}/mute").status_code == 204
    world.mute(scene.reader, scene.author)
    assert scene.as_reader.put(f"/v1/users/{scene.author}/block").status_code == 204
    for path in ("posts", "followers", "following"):
        resp = scene.as_reader.get(f"/v1/users/{scene.author}/{path}")
        assert resp.status_code == 404, (path, resp.text)
    assert str(scene.author) not in _ids(scene.as_reader, f"/v1/users/{fan}/following", "user_id")
    assert scene.as_reader.get(f"/v1/posts/{scene.posts[0]}").status_code == 404
    # The block lifted (the copies still hold it: the timeline waits for the fan-out).
    assert scene.as_reader.delete(f"/v1/users/{scene.author}/block").status_code == 204
    world.unblock(scene.reader, scene.author)
    assert _ids(scene.as_reader, f"/v1/users/{scene.author}/posts", "post_id") == [
        str(p) for p in scene.posts[::-1]]


def test_in_window_mode_a_mute_hides_the_feed_and_not_the_timeline(
        settings: Settings, world: FeedWorld) -> None:
    # Past FEED_VISIBILITY_MAX_ENTRIES each page asks Postgres (window_check.py).
    bounded = settings.model_copy(update={"visibility_max_entries": 4})
    with running_api(bounded) as api:
        scene = Scene(api, world, posts=5)
        try:
            for _ in range(3):  # entries of the log: past the bound whatever else is there
                assert scene.as_reader.put(f"/v1/users/{scene.author}/mute").status_code == 204
                assert scene.as_reader.delete(f"/v1/users/{scene.author}/mute").status_code == 204
            assert scene.as_reader.put(f"/v1/users/{scene.author}/mute").status_code == 204
            assert scene.every_page() == []
            assert "feed_visibility_window_mode 1.0" in httpx.get(f"{api.base_url}/metrics").text
            assert _ids(scene.as_reader, f"/v1/users/{scene.author}/posts", "post_id") == [
                str(p) for p in scene.posts[::-1]]
            assert _ids(scene.as_reader, f"/v1/users/{scene.reader}/following", "user_id") == [
                str(scene.author)]
            assert scene.as_reader.put(f"/v1/users/{scene.author}/block").status_code == 204
            assert scene.as_reader.get(f"/v1/users/{scene.author}/posts").status_code == 404
        finally:
            scene.close()


@pytest.fixture(scope="module")
def stream_api(settings: Settings) -> Iterator[RunningApi]:
    yield from serve_stream_api(settings)


def test_the_stream_sends_nothing_of_a_muted_author(stream_api: RunningApi, world: FeedWorld) -> None:
    wait_ready(stream_api)
    scene = Scene(stream_api, world, posts=2)
    muted_post, kept = scene.posts
    stream = open_stream(stream_api, scene.reader)
    try:
        world.announce(world.write(scene.author, post_id=kept))
        event = next_new_item(stream, DELIVERY_DEADLINE_S)
        assert event is not None and json.loads(event["data"])["post_id"] == str(kept)
        assert scene.as_reader.put(f"/v1/users/{scene.author}/mute").status_code == 204
        # The fan-out has not seen the mute: the author's next post reaches the hub as before.
        world.announce(world.write(scene.author, post_id=muted_post))
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


def test_the_fanout_writes_the_mute_copy_and_keeps_delivering_both_ways(worker_env) -> None:
    """CDC events through Kafka to the fan-out worker: a mute is one 'mute' row in the
    muter's partition, purges nothing, and keeps no post of the muter from the muted."""
    from datetime import datetime, timedelta, timezone

    from bench.harness.cdc_events import post_id_at
    from bench.harness.pipeline import group_caught_up
    from services.shared.contracts.topics import cdc_topic
    from tests.support.worker_env import wait_for_workers

    env, e = worker_env, worker_env.events
    now = datetime.now(timezone.utc)
    hour_ago = now - timedelta(hours=1)
    muter, author = 41, 42
    p1, q1 = post_id_at(now - timedelta(minutes=5), 1), post_id_at(now - timedelta(minutes=4), 2)
    topics = [cdc_topic(t, env.settings.topic_prefix) for t in ("posts", "follows", "mutes")]
    env.send(*[e.followed(muter, author, hour_ago), e.followed(author, muter, hour_ago),
               e.post_created(e.post_row(p1, author, now - timedelta(minutes=5)))])
    env.start("services.fanout", "mutes")
    wait_for_workers(lambda: group_caught_up(env.settings, "mutes", topics), timeout=120,
                     message="the fan-out caught up with the follows")
    env.send(*[e.muted(muter, author, now),
               e.post_created(e.post_row(q1, muter, now - timedelta(minutes=4)))])
    wait_for_workers(lambda: bool(env.rows("SELECT direction FROM blocks WHERE user_id=%s", muter))
                     and env.inbox(author) == [q1], timeout=120, message="the mute's copy and q1")
    assert [(r.other_id, r.direction) for r in env.rows(
        "SELECT other_id, direction FROM blocks WHERE user_id=%s", muter)] == [(author, "mute")]
    assert env.rows("SELECT other_id FROM blocks WHERE user_id=%s", author) == []  # one way
    assert env.inbox(muter) == [p1]   # no purge: the read path skips it
    assert env.inbox(author) == [q1]  # the muter's post still reaches the muted author
    env.send(e.unmuted(muter, author, now))
    wait_for_workers(lambda: env.rows("SELECT direction FROM blocks WHERE user_id=%s", muter) == [],
                     timeout=120, message="the unmute removes the copy")
