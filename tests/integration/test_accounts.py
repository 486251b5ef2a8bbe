"""Account suspension and deletion over real HTTP on real Postgres and Cassandra, with no
pipeline running: the author's posts vanish from another reader's feed, the author's
timeline and GET /v1/posts/{id} on the very next request (the 'account' entry of the
visibility fence), an unsuspend brings them back, a deletion removes the user's follows,
blocks, mutes and likes in Postgres and refuses their token afterwards. The account copy
alone hides too (what the fan-out writes, once the fence entry is released).
"""
from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from services.api.stores.accounts import delete_account
from services.shared.clients import pg
from services.shared.settings import Settings
from tests.support.api_server import RunningApi, new_user_id
from tests.support.fence_scene import Scene, posted
from tests.support.feed_world import FeedWorld, feed_ids

pytestmark = pytest.mark.integration


@pytest.fixture
def scene(api_server: RunningApi, world: FeedWorld) -> Iterator[Scene]:
    s = Scene(api_server, world, posts=6)
    yield s
    s.close()


def _one(settings: Settings, sql: str, *params: object) -> object:
    with pg.connect(settings) as conn:
        row = conn.execute(sql, params).fetchone()
    return None if row is None else row[0]


def _timeline(scene: Scene) -> list[int]:
    resp = scene.as_reader.get(f"/v1/users/{scene.author}/posts", params={"limit": 50})
    assert resp.status_code == 200, resp.text
    return [int(i["post_id"]) for i in resp.json()["items"]]


def _moderate(api: RunningApi, user_id: int, action: str) -> dict:
    with api.client(new_user_id(), moderator=True) as moderator:
        resp = moderator.post(f"/internal/moderation/users/{user_id}",
                              json={"action": action, "reason": "test"})
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_a_suspension_hides_every_post_on_the_next_request_and_an_unsuspend_restores(
        scene: Scene, api_server: RunningApi) -> None:
    everything = scene.posts[::-1]
    assert scene.every_page() == everything
    assert set(_timeline(scene)) == set(scene.posts)
    assert _moderate(api_server, scene.author, "suspend")["state"] == "suspended"
    # The very next requests: feed (both orders), timeline, single post.
    assert scene.every_page() == []
    assert scene.every_page(order="latest") == []
    assert _timeline(scene) == []   # a suspended user is still a user: 200, empty
    assert scene.as_reader.get(f"/v1/users/{scene.author}/followers").status_code == 200
    single = scene.as_reader.get(f"/v1/posts/{scene.posts[0]}")
    assert single.status_code == 404
    assert single.headers["content-type"].startswith("application/problem+json")
    # ONE fence entry for the account, whatever its number of posts.
    assert _one(api_server.settings, "SELECT count(*) FROM visibility_changes WHERE kind = 'account'"
                " AND subject_id = %s", scene.author) == 1
    # A suspended user may read, not write.
    assert scene.as_author.get("/v1/feed").status_code == 200
    assert scene.as_author.get(f"/v1/posts/{scene.posts[0]}").status_code == 200   # their own
    refused = scene.as_author.post("/v1/posts", json={"text": "x"},
                                   headers={"Idempotency-Key": "k-suspended"})
    assert refused.status_code == 403, refused.text
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert refused.json()["type"].endswith("account-suspended")
    assert _moderate(api_server, scene.author, "unsuspend")["state"] == "active"
    assert scene.every_page() == everything
    assert set(_timeline(scene)) == set(scene.posts)
    assert scene.as_reader.get(f"/v1/posts/{scene.posts[0]}").status_code == 200
    assert len(posted(scene.as_author, 1)) == 1


def test_the_account_copy_hides_on_its_own_and_its_notices_drop_what_pages_kept(
        scene: Scene, world: FeedWorld) -> None:
    # The copy alone (no Postgres change, so no log entry): what decides once the
    # verifier released the entry. The authors' states are kept for FEED_ACCOUNT_CACHE_S
    # (60 s) in the process; the copy's notice drops them, so the pages follow at once.
    assert scene.every_page() == scene.posts[::-1]   # the author's state is kept: shown
    world.account(scene.author, "suspended")
    try:
        assert scene.every_page() == []
        assert _timeline(scene) == []
    finally:
        world.account(scene.author, None)   # an unsuspend's delete, and its notice
    assert scene.every_page() == scene.posts[::-1]
    assert set(_timeline(scene)) == set(scene.posts)


def test_a_user_deleted_through_another_process_is_no_user_here_on_the_next_request(
        scene: Scene, api_server: RunningApi) -> None:
    # This process has seen the author (its lists then skip asking Postgres whether the
    # user exists); the deletion is committed as another API process commits it.
    assert set(_timeline(scene)) == set(scene.posts)
    assert scene.as_reader.get(f"/v1/users/{scene.author}/followers").status_code == 200

    async def delete_elsewhere() -> None:
        async with await pg.async_connect(api_server.settings) as conn:
            async with conn.transaction():
                assert await delete_account(conn, scene.author)
    asyncio.run(delete_elsewhere())
    for path in ("posts", "followers", "following"):
        resp = scene.as_reader.get(f"/v1/users/{scene.author}/{path}")
        assert resp.status_code == 404, (path, resp.text)
        assert resp.headers["content-type"].startswith("application/problem+json")
    assert scene.as_reader.get(f"/v1/users/{scene.author}").status_code == 404
    assert scene.every_page() == []


def test_moderating_unknown_users_and_without_the_role(api_server: RunningApi) -> None:
    with api_server.client(new_user_id(), moderator=True) as moderator:
        assert moderator.post(f"/internal/moderation/users/{new_user_id()}",
                              json={"action": "suspend"}).status_code == 404
    with api_server.client(new_user_id()) as plain:
        assert plain.post(f"/internal/moderation/users/{new_user_id()}",
                          json={"action": "suspend"}).status_code == 403


def test_a_deletion_hides_everything_removes_the_graph_and_refuses_the_token(
        scene: Scene, api_server: RunningApi) -> None:
    settings = api_server.settings
    fan = new_user_id()
    with api_server.client(fan) as as_fan:
        assert as_fan.put(f"/v1/users/{scene.author}/follow").status_code == 200
        assert as_fan.put(f"/v1/posts/{scene.posts[0]}/like").status_code in (200, 204)
    assert scene.as_author.put(f"/v1/users/{fan}/follow").status_code == 200
    assert scene.as_author.put(f"/v1/posts/{scene.posts[1]}/like").status_code in (200, 204)
    before = _one(settings, "SELECT max(seq) FROM visibility_changes")
    gone = scene.as_author.delete("/v1/me")
    assert gone.status_code == 204, gone.text
    assert scene.every_page() == []
    # The user is gone: their timeline is "no such user".
    assert scene.as_reader.get(f"/v1/users/{scene.author}/posts").status_code == 404
    assert scene.as_reader.get(f"/v1/posts/{scene.posts[0]}").status_code == 404
    # One fence entry: the follows' removals log none of their own.
    assert _one(settings, "SELECT count(*) FROM visibility_changes WHERE seq > %s", before) == 1
    assert _one(settings, "SELECT kind FROM visibility_changes WHERE seq > %s", before) == "account"
    a = scene.author
    assert _one(settings, "SELECT count(*) FROM follows WHERE follower_id = %s OR followed_id = %s", a, a) == 0
    assert _one(settings, "SELECT count(*) FROM likes WHERE user_id = %s", a) == 0
    assert _one(settings, "SELECT count(*) FROM users WHERE user_id = %s", a) == 0
    assert _one(settings, "SELECT state FROM account_states WHERE user_id = %s", a) == "deleted"
    assert _one(settings, "SELECT count(*) FROM posts WHERE author_id = %s", a) == len(scene.posts)
    # The token never recreates the user; deletion is final.
    with api_server.client(a) as fresh:   # a new client: this process forgot the user
        again = fresh.get("/v1/feed")
        assert again.status_code == 410, again.text
        assert again.headers["content-type"].startswith("application/problem+json")
    assert _one(settings, "SELECT count(*) FROM users WHERE user_id = %s", a) == 0
    with api_server.client(new_user_id(), moderator=True) as moderator:
        assert moderator.post(f"/internal/moderation/users/{a}",
                              json={"action": "unsuspend"}).status_code == 410
    assert scene.every_page() == []


def test_the_fanout_writes_the_account_copy_and_a_deletions_unfollows_clean_inboxes(worker_env) -> None:
    """CDC events through Kafka to the fan-out worker: a suspension writes the account
    copy and purges nothing, an unsuspend deletes it; a deletion's follow removals (same
    Postgres transaction) purge the deleted author's rows from each follower's inbox."""
    from datetime import datetime, timedelta, timezone

    from bench.harness.cdc_events import post_id_at
    from bench.harness.pipeline import group_caught_up
    from services.shared.contracts.serving_changes import parse
    from services.shared.contracts.topics import cdc_topic, serving_changes_topic
    from tests.support.kafka_topics import read_topic
    from tests.support.worker_env import wait_for_workers

    env, e = worker_env, worker_env.events
    now = datetime.now(timezone.utc)
    hour_ago = now - timedelta(hours=1)
    reader, author = 51, 52
    p1 = post_id_at(now - timedelta(minutes=5), 1)
    topics = [cdc_topic(t, env.settings.topic_prefix) for t in ("posts", "follows", "account_states")]
    env.send(*[e.followed(reader, author, hour_ago),
               e.post_created(e.post_row(p1, author, now - timedelta(minutes=5)))])
    env.start("services.fanout", "accounts")
    wait_for_workers(lambda: group_caught_up(env.settings, "accounts", topics) and env.inbox(reader) == [p1],
                     timeout=120, message="the fan-out pushed p1")
    env.send(e.account_changed(author, "suspended", now))
    wait_for_workers(lambda: bool(env.rows("SELECT state FROM account_states WHERE user_id=%s", author)),
                     timeout=120, message="the suspension's account copy")
    assert [r.state for r in env.rows("SELECT state FROM account_states WHERE user_id=%s", author)] \
        == ["suspended"]
    assert env.inbox(reader) == [p1]   # nothing purged: an unsuspend needs no backfill
    env.send(e.account_changed(author, None, now))
    wait_for_workers(lambda: env.rows("SELECT state FROM account_states WHERE user_id=%s", author) == [],
                     timeout=120, message="the unsuspend removes the copy")
    # Each change of the copy is announced to the API processes (they drop what they keep).
    notices = [parse(v) for _k, v in read_topic(env.settings, serving_changes_topic(env.settings.topic_prefix))]
    assert sum(1 for n in notices if n is not None and author in n.accounts) >= 2
    # A deletion: the account row, then the follow removals of the same transaction.
    env.send(e.account_changed(author, "deleted", now), e.unfollowed(reader, author, hour_ago))
    wait_for_workers(lambda: env.inbox(reader) == []
                     and bool(env.rows("SELECT state FROM account_states WHERE user_id=%s", author)),
                     timeout=120, message="the deletion's copy and inbox clean-up")


@pytest.fixture(scope="module")
def stream_api(settings: Settings) -> Iterator[RunningApi]:
    from tests.support.stream_api import serve_stream_api
    yield from serve_stream_api(settings)


def test_the_stream_sends_nothing_of_a_suspended_author(stream_api: RunningApi, world: FeedWorld) -> None:
    import json

    from tests.support.stream_api import (DELIVERY_DEADLINE_S, next_new_item, open_stream,
                                          wait_ready, wait_routed)
    wait_ready(stream_api)
    scene = Scene(stream_api, world, posts=2)
    hidden_post, kept = scene.posts
    stream = open_stream(stream_api, scene.reader)
    try:
        world.announce(world.write(scene.author, post_id=kept))
        event = next_new_item(stream, DELIVERY_DEADLINE_S)
        assert event is not None and json.loads(event["data"])["post_id"] == str(kept)
        _moderate(stream_api, scene.author, "suspend")
        # The fan-out has not seen the suspension: the author's next post reaches the hub.
        world.announce(world.write(scene.author, post_id=hidden_post))
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
