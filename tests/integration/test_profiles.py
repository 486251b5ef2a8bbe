"""Profiles over real HTTP on real Postgres, Cassandra and Kafka (docs/api.md, "Profiles"):
``PUT /v1/me/profile`` and ``GET /v1/users/{id}``, and the authors' names on feed items,
post reads and timelines (docs/read-path.md, "Authors' names").

The read-side tests write the names' copy as the fan-out's users agent does
(``world.name``: ``CopyStore.write_profile`` at an increasing timestamp, and its
serving-changes notice); the pipeline test runs a real fan-out worker through Kafka and
sees it write the copy from users CDC events.
"""
from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx
import pytest

from services.api.routes.feed import FeedPageOut
from services.shared.clients import pg
from services.shared.settings import Settings
from tests.support.api_server import RunningApi, new_user_id
from tests.support.feed_world import FeedWorld
from tests.support.fence_scene import Scene
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

PROBLEM = "application/problem+json"


def handle(prefix: str = "u") -> str:
    """A handle no other test run holds (3-30 of [A-Za-z0-9_])."""
    return f"{prefix}_{secrets.token_hex(6)}"


def put(client: httpx.Client, body: dict[str, Any]) -> httpx.Response:
    return client.put("/v1/me/profile", json=body)


@pytest.fixture
def scene(api_server: RunningApi, world: FeedWorld) -> Iterator[Scene]:
    s = Scene(api_server, world, posts=4)
    yield s
    s.close()


def _stored(settings: Settings, user: int) -> tuple[Any, ...] | None:
    with pg.connect(settings) as conn:
        return conn.execute("SELECT handle, display_name FROM users WHERE user_id = %s",
                            (user,)).fetchone()


def test_put_a_profile_then_read_it_with_the_counts(api_server: RunningApi, world: FeedWorld) -> None:
    me, fan = new_user_id(), new_user_id()
    mine = handle("Ada")
    with api_server.client(me) as http, api_server.client(fan) as as_fan:
        resp = put(http, {"handle": mine, "display_name": "  Ada Lovelace \n"})
        assert resp.status_code == 200, resp.text
        assert resp.json() == {"user_id": str(me), "handle": mine, "display_name": "Ada Lovelace"}
        again = put(http, {"handle": mine, "display_name": "Ada Lovelace"})   # idempotent
        assert again.status_code == 200 and again.json() == resp.json()
        assert _stored(api_server.settings, me) == (mine, "Ada Lovelace")  # as typed
        assert as_fan.put(f"/v1/users/{me}/follow").status_code == 200
        world.follow(fan, me)
        world.session.execute("UPDATE follow_edges SET followers = 1, lsn = 0 "
                              "WHERE followed_id = %s AND follower_id = -1", (me,))
        seen = as_fan.get(f"/v1/users/{me}")
        assert seen.status_code == 200, seen.text
        body = seen.json()
        assert {k: body[k] for k in ("user_id", "handle", "display_name", "followers_count",
                                     "following_count")} == {
            "user_id": str(me), "handle": mine, "display_name": "Ada Lovelace",
            "followers_count": 1, "following_count": 0}
        created = datetime.fromisoformat(body["created_at"].replace("Z", "+00:00"))
        assert abs(created - datetime.now(timezone.utc)) < timedelta(minutes=5)
        fan_view = http.get(f"/v1/users/{fan}").json()
        assert fan_view["handle"] is None and fan_view["display_name"] is None
        assert fan_view["following_count"] == 1
        # Fields left out are cleared; the handle is free again.
        assert put(http, {"display_name": "Ada"}).json() == {
            "user_id": str(me), "handle": None, "display_name": "Ada"}
        assert _stored(api_server.settings, me) == (None, "Ada")


def test_a_handle_is_unique_whatever_its_case(api_server: RunningApi) -> None:
    first, second = new_user_id(), new_user_id()
    taken = handle("Bob")
    with api_server.client(first) as a, api_server.client(second) as b:
        assert put(a, {"handle": taken}).status_code == 200
        for variant in (taken, taken.upper(), taken.lower()):
            resp = put(b, {"handle": variant, "display_name": "Bob"})
            assert resp.status_code == 409, resp.text
            assert resp.headers["content-type"].startswith(PROBLEM)
            assert resp.json()["status"] == 409 and "handle-taken" in resp.json()["type"]
        assert _stored(api_server.settings, second) == (None, None)  # nothing of the PUT stored
        # The holder may change its case; once given up, it is anyone's.
        assert put(a, {"handle": taken.upper()}).status_code == 200
        assert put(a, {"handle": handle("Other")}).status_code == 200
        assert put(b, {"handle": taken.lower()}).status_code == 200


@pytest.mark.parametrize("body", [
    {"handle": "ab"}, {"handle": "a" * 31}, {"handle": "has space"}, {"handle": "dash-ed"},
    {"handle": "ünï"}, {"display_name": ""}, {"display_name": "   "}, {"display_name": "x" * 65},
    {"display_name": "bell\x07"}, {"display_name": "two\nlines"}, {"handle": 123},
    {"handle": "valid_one", "bio": "unknown field"}])
def test_an_invalid_profile_is_a_422_problem(api_server: RunningApi, body: dict[str, Any]) -> None:
    user = new_user_id()
    with api_server.client(user) as http:
        resp = put(http, body)
    assert resp.status_code == 422, resp.text
    assert resp.headers["content-type"].startswith(PROBLEM)
    assert _stored(api_server.settings, user) == (None, None)


def test_unknown_and_blocked_users_are_404_like_the_lists(api_server: RunningApi,
                                                          world: FeedWorld) -> None:
    me, other = new_user_id(), new_user_id()
    with api_server.client(me) as http, api_server.client(other) as as_other:
        assert put(as_other, {"handle": handle()}).status_code == 200
        assert http.get(f"/v1/users/{other}").status_code == 200
        unknown = http.get(f"/v1/users/{new_user_id()}")
        assert unknown.status_code == 404 and unknown.headers["content-type"].startswith(PROBLEM)
        assert as_other.put(f"/v1/users/{me}/block").status_code == 204
        world.block(other, me)
        for client, subject in ((http, other), (as_other, me)):
            resp = client.get(f"/v1/users/{subject}")
            assert resp.status_code == 404, resp.text
            assert client.get(f"/v1/users/{subject}/posts").status_code == 404
        assert http.get("/v1/users/0").status_code == 422


def test_the_openapi_document_lists_the_profile_endpoints_with_their_problems(
        api_server: RunningApi) -> None:
    with api_server.client(new_user_id()) as http:
        doc = http.get("/openapi.json").json()
    put_op = doc["paths"]["/v1/me/profile"]["put"]
    assert {"401", "409", "422"} <= set(put_op["responses"])
    assert PROBLEM in put_op["responses"]["409"]["content"]
    get_op = doc["paths"]["/v1/users/{user_id}"]["get"]
    assert {"401", "404", "422"} <= set(get_op["responses"])
    assert PROBLEM in get_op["responses"]["404"]["content"]


def _items_names(page: dict[str, Any]) -> set[tuple[str, Any, Any]]:
    return {(i["author_id"], i["author_handle"], i["author_display_name"]) for i in page["items"]}


def test_names_reach_feed_items_post_reads_and_timelines_and_a_rename_follows(
        scene: Scene, world: FeedWorld) -> None:
    author = str(scene.author)
    # No names yet: null everywhere.
    page = scene.feed()
    FeedPageOut.model_validate(page)
    assert _items_names(page) == {(author, None, None)}
    ada = handle("Ada")
    assert put(scene.as_author, {"handle": ada, "display_name": "Ada"}).status_code == 200
    world.name(scene.author, ada, "Ada")          # the fan-out wrote the copy
    page = scene.feed()
    FeedPageOut.model_validate(page)
    assert len(page["items"]) == 4 and _items_names(page) == {(author, ada, "Ada")}
    post = scene.as_reader.get(f"/v1/posts/{scene.posts[0]}")
    assert post.status_code == 200, post.text
    assert (post.json()["author_handle"], post.json()["author_display_name"]) == (ada, "Ada")
    timeline = scene.as_reader.get(f"/v1/users/{scene.author}/posts")
    assert timeline.status_code == 200, timeline.text
    assert {(i["author_handle"], i["author_display_name"]) for i in timeline.json()["items"]} \
        == {(ada, "Ada")}
    # A new post's answer carries the names Postgres holds (no copy needed), and so do
    # its replays, whatever the names are later.
    key = {"Idempotency-Key": f"named-{scene.author}"}
    created = scene.as_author.post("/v1/posts", json={"text": "named"}, headers=key)
    assert created.status_code == 201, created.text
    assert (created.json()["author_handle"], created.json()["author_display_name"]) == (ada, "Ada")
    # A rename: the copy's notice drops the name this process kept; the next page shows it.
    renamed = handle("Ada_L")
    world.name(scene.author, renamed, "Ada Lovelace")
    assert _items_names(scene.feed()) == {(author, renamed, "Ada Lovelace")}
    assert scene.as_reader.get(f"/v1/posts/{scene.posts[1]}").json()["author_handle"] == renamed
    replay = scene.as_author.post("/v1/posts", json={"text": "named"}, headers=key)
    assert replay.headers.get("Idempotent-Replayed") == "true"
    assert replay.json()["author_handle"] == ada and replay.json()["post_id"] == created.json()["post_id"]
    # Names cleared: null again.
    world.name(scene.author, None, None)
    assert _items_names(scene.feed(order="latest")) == {(author, None, None)}


def test_the_fanout_writes_the_names_copy_from_users_changes(worker_env) -> None:
    """CDC events through Kafka to the fan-out worker: a new user without names writes no
    row, a profile change writes both names at its LSN, a replay of an older change does
    not overwrite a newer one, and clearing writes nulls."""
    from bench.harness.pipeline import group_caught_up
    from services.shared.contracts.topics import cdc_topic
    from tests.support.worker_env import wait_for_workers

    env, e = worker_env, worker_env.events
    now = datetime.now(timezone.utc)
    user = new_user_id()
    bare = e.user_row(user, now)
    named = e.user_row(user, now, handle="Ada_L", display_name="Ada Lovelace")
    renamed = e.user_row(user, now, handle="ada", display_name="Ada")
    topics = [cdc_topic("users", env.settings.topic_prefix)]

    def names() -> list[tuple[Any, ...]]:
        return [(r.handle, r.display_name) for r in
                env.rows("SELECT handle, display_name FROM user_profiles WHERE user_id=%s", user)]

    env.send(e.user_created(bare))
    env.start("services.fanout", "profiles")
    wait_for_workers(lambda: group_caught_up(env.settings, "profiles", topics), timeout=120,
                     message="the fan-out caught up with the users topic")
    assert names() == []   # no names, no row
    first = e.user_updated(bare, named)
    env.send(first)
    wait_for_workers(lambda: names() == [("Ada_L", "Ada Lovelace")], timeout=120,
                     message="the profile's copy")
    env.send(e.user_updated(named, renamed))
    wait_for_workers(lambda: names() == [("ada", "Ada")], timeout=120, message="the rename's copy")
    env.send(first)        # a replay of the older change: its LSN loses
    env.send(e.user_updated(renamed, e.user_row(user, now, display_name="Ada")))
    wait_for_workers(lambda: names() == [(None, "Ada")], timeout=120,
                     message="the handle cleared, the replay ignored")
    wait_until(lambda: group_caught_up(env.settings, "profiles", topics), timeout=60,
               message="the fan-out caught up")
    assert names() == [(None, "Ada")]


def test_the_relay_sends_profile_changes_as_the_users_schema_says(source: Settings, relays) -> None:
    """The relay maps the new columns like any other (text, null until set): a user's
    creation, a profile set and a handle cleared, each valid against schemas/cdc/users.*."""
    from tests.support.cdc_relay import changes, consume, wait_streaming
    from tests.support.schemas import validation_errors

    relays(source)
    wait_streaming(source)
    with pg.connect(source, autocommit=True) as conn:
        conn.execute("INSERT INTO users (user_id) VALUES (7)")
        conn.execute("UPDATE users SET handle = 'Ada_L', display_name = 'Ada Lovelace' "
                     "WHERE user_id = 7")
        conn.execute("UPDATE users SET handle = NULL WHERE user_id = 7")
    events = [e for e in changes(consume(source, lambda ev: len(ev) >= 3)) if e.table == "users"]
    assert [e.value["op"] for e in events] == ["c", "u", "u"]
    for e in events:
        assert validation_errors("public.users", e.key, e.value) == [], e.value
    created, named, cleared = (e.value for e in events)
    assert (created["after"]["handle"], created["after"]["display_name"]) == (None, None)
    assert (named["before"]["handle"], named["after"]["handle"]) == (None, "Ada_L")
    assert named["after"]["display_name"] == "Ada Lovelace"
    assert (cleared["after"]["handle"], cleared["after"]["display_name"]) == (None, "Ada Lovelace")


def test_the_profile_says_whether_the_caller_follows_and_mutes_the_user(
        api_server: RunningApi) -> None:
    """``following`` and ``muted`` are the caller's relation, read from the truth: each
    change answered 2xx shows on the very next GET (what a page's toggles show)."""
    me, other = new_user_id(), new_user_id()
    with api_server.client(me) as http, api_server.client(other) as as_other:
        assert as_other.get("/v1/me/preferences").status_code == 200    # other exists

        def relation() -> tuple[bool, bool]:
            resp = http.get(f"/v1/users/{other}")
            assert resp.status_code == 200, resp.text
            return resp.json()["following"], resp.json()["muted"]

        assert relation() == (False, False)
        assert http.put(f"/v1/users/{other}/follow").status_code == 200
        assert relation() == (True, False)
        assert http.put(f"/v1/users/{other}/mute").status_code == 204
        assert relation() == (True, True)
        assert http.delete(f"/v1/users/{other}/follow").status_code == 204
        assert relation() == (False, True)
        assert http.delete(f"/v1/users/{other}/mute").status_code == 204
        assert relation() == (False, False)
        # One way: the other user's view of me is unchanged by my follow and mute.
        assert http.put(f"/v1/users/{other}/follow").status_code == 200
        assert http.put(f"/v1/users/{other}/mute").status_code == 204
        theirs = as_other.get(f"/v1/users/{me}").json()
        assert (theirs["following"], theirs["muted"]) == (False, False)
        mine = http.get(f"/v1/users/{me}").json()                       # my own profile
        assert (mine["following"], mine["muted"]) == (False, False)


def test_timeline_items_carry_the_like_count_and_the_callers_like(
        scene: Scene, world: FeedWorld) -> None:
    liked_post, other_post = scene.posts[0], scene.posts[1]
    assert scene.as_reader.put(f"/v1/posts/{liked_post}/like").status_code == 204
    world.count_likes(liked_post, [scene.reader])      # the ranker's count owner wrote it

    def timeline() -> dict[int, tuple[Any, Any]]:
        resp = scene.as_reader.get(f"/v1/users/{scene.author}/posts")
        assert resp.status_code == 200, resp.text
        assert "likes_unavailable" not in (resp.json().get("warnings") or [])
        return {int(i["post_id"]): (i["like_count"], i["liked"]) for i in resp.json()["items"]}

    items = timeline()
    assert set(items) == set(scene.posts)
    assert items[liked_post] == (1, True)
    assert items[other_post] == (0, False)
    # The caller's own unlike and like show on the next page (Postgres, not the copy).
    assert scene.as_reader.delete(f"/v1/posts/{liked_post}/like").status_code == 204
    assert timeline()[liked_post][1] is False
    assert scene.as_reader.put(f"/v1/posts/{other_post}/like").status_code == 204
    assert timeline()[other_post][1] is True
    # The author's own view: counts as the reader's, and no like of theirs.
    by_author = scene.as_author.get(f"/v1/users/{scene.author}/posts").json()["items"]
    assert {int(i["post_id"]): i["liked"] for i in by_author}[liked_post] is False
