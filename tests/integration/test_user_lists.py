"""``GET /v1/users/{id}/posts|followers|following`` over real HTTP, on real Postgres and
Cassandra (docs/api.md).

Users, follows, posts, deletes and blocks go through the real API (Postgres: the truth
and the visibility log); the serving copies are written as the fan-out would have
written them BEFORE any later change, and no fan-out runs: what a delete, a removal or a
block hides must be hidden by the very next request through the visibility log alone.
"""
from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx
import pytest

from tests.support.api_server import RunningApi, new_user_id
from tests.support.feed_world import FeedWorld
from tests.support.fence_scene import posted

pytestmark = pytest.mark.integration


def existing(api: RunningApi, n: int) -> list[int]:
    """``n`` users who made a request (so they exist)."""
    users = [new_user_id() for _ in range(n)]
    for user in users:
        with api.client(user) as client:
            assert client.get(f"/v1/users/{user}/following").status_code == 200
    return users


def get(client: httpx.Client, path: str, **params: Any) -> dict[str, Any]:
    resp = client.get(path, params=params)
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    return resp.json()


def walk(client: httpx.Client, path: str, limit: int) -> tuple[list[dict[str, Any]], list[str]]:
    """Every page's items, in order, and the key of their list (post_id or user_id)."""
    items: list[dict[str, Any]] = []
    page = get(client, path, limit=limit)
    pages = 1
    while True:
        items += page["items"]
        if not page["next_cursor"]:
            break
        page = get(client, path, limit=limit, cursor=page["next_cursor"])
        pages += 1
        assert pages < 100
    key = "post_id" if path.endswith("/posts") else "user_id"
    return items, [i[key] for i in items]


class Timeline:
    """An author with posts made through the API, their copies and timeline rows as the
    fan-out wrote them, and a reader."""

    def __init__(self, api: RunningApi, world: FeedWorld, posts: int) -> None:
        self.api, self.world = api, world
        self.author, self.reader = existing(api, 2)
        self.as_author = api.client(self.author)
        self.as_reader = api.client(self.reader)
        self.posts = [str(world.write(self.author, at=at, post_id=pid, text=f"post {pid}").post_id)
                      for pid, at in posted(self.as_author, posts)]
        self.path = f"/v1/users/{self.author}/posts"

    def ids(self, limit: int = 4, client: httpx.Client | None = None) -> list[str]:
        return walk(client or self.as_reader, self.path, limit)[1]

    def close(self) -> None:
        self.as_author.close()
        self.as_reader.close()


@pytest.fixture
def timeline(api_server: RunningApi, world: FeedWorld) -> Iterator[Timeline]:
    t = Timeline(api_server, world, posts=11)
    yield t
    t.close()


def test_an_authors_posts_newest_first_across_pages_without_duplicates_or_gaps(
        timeline: Timeline) -> None:
    newest_first = timeline.posts[::-1]
    for limit in (1, 3, 4, 11, 100):
        assert timeline.ids(limit) == newest_first, limit
    first = get(timeline.as_reader, timeline.path, limit=3)
    item = first["items"][0]
    assert item == {"post_id": newest_first[0], "author_id": str(timeline.author),
                    "text": f"post {newest_first[0]}", "created_at": item["created_at"],
                    "author_handle": None, "author_display_name": None,  # no names set
                    "like_count": 0, "liked": False}
    assert item["created_at"].endswith("Z")
    # The author sees their own list the same way.
    assert timeline.ids(5, timeline.as_author) == newest_first


def test_posts_of_older_days_are_paged_too(api_server: RunningApi, world: FeedWorld) -> None:
    author, reader = existing(api_server, 2)
    now = datetime.now(timezone.utc)
    # Posts days and weeks back (past one read of 16 days), as the fan-out stored them.
    ages = [0, 1, 2, 15, 17, 40, 200]
    written = [str(world.write(author, at=now - timedelta(days=d, minutes=1)).post_id) for d in ages]
    with api_server.client(reader) as client:
        for limit in (1, 2, 5):
            assert walk(client, f"/v1/users/{author}/posts", limit)[1] == written


def test_a_delete_or_removal_disappears_on_the_next_request_without_the_fan_out(
        api_server: RunningApi, timeline: Timeline) -> None:
    newest_first = timeline.posts[::-1]
    first = get(timeline.as_reader, timeline.path, limit=4)
    assert [i["post_id"] for i in first["items"]] == newest_first[:4]
    # The next page's first post deleted, one on screen removed by a moderator.
    victim, removed = newest_first[4], newest_first[1]
    assert timeline.as_author.delete(f"/v1/posts/{victim}").status_code == 204
    with api_server.client(new_user_id(), moderator=True) as moderator:
        resp = moderator.post(f"/internal/moderation/posts/{removed}", json={"action": "remove"})
        assert resp.status_code == 200, resp.text
    after = get(timeline.as_reader, timeline.path, limit=4, cursor=first["next_cursor"])
    assert [i["post_id"] for i in after["items"]] == newest_first[5:9]
    alive = [p for p in newest_first if p not in (victim, removed)]
    assert timeline.ids(3) == alive
    assert timeline.ids(3, timeline.as_author) == alive   # hidden from the author too


@pytest.mark.parametrize("blocker", ["reader", "author"])
def test_a_block_either_way_answers_404_like_an_unknown_user_on_the_next_request(
        api_server: RunningApi, world: FeedWorld, timeline: Timeline, blocker: str) -> None:
    first = get(timeline.as_reader, timeline.path, limit=3)
    # Someone the reader can still see, followed by the author and following them.
    other, = existing(api_server, 1)
    with api_server.client(other) as as_other:
        assert as_other.put(f"/v1/users/{timeline.author}/follow").status_code == 200
    world.follow(other, timeline.author)
    if blocker == "reader":
        resp = timeline.as_reader.put(f"/v1/users/{timeline.author}/block")
    else:
        resp = timeline.as_author.put(f"/v1/users/{timeline.reader}/block")
    assert resp.status_code == 204
    unknown = new_user_id()
    with api_server.client(timeline.reader) as client:
        expected = client.get(f"/v1/users/{unknown}/posts")
        assert expected.status_code == 404
        for path, params in [(timeline.path, {}), (timeline.path, {"cursor": first["next_cursor"]}),
                             (f"/v1/users/{timeline.author}/followers", {}),
                             (f"/v1/users/{timeline.author}/following", {})]:
            resp = client.get(path, params=params)
            assert resp.status_code == 404, (path, resp.text)
            assert resp.headers["content-type"].startswith("application/problem+json")
            body = resp.json()
            assert (body["type"], body["title"], body["detail"]) == (
                expected.json()["type"], expected.json()["title"], expected.json()["detail"])
    # The blocked user is also left out of a third user's lists, for the reader only.
    assert str(timeline.author) not in walk(timeline.as_reader, f"/v1/users/{other}/following", 10)[1]
    with api_server.client(new_user_id()) as third:
        assert walk(third, f"/v1/users/{other}/following", 10)[1] == [str(timeline.author)]
    # The author still sees their own posts.
    assert timeline.ids(20, timeline.as_author) == timeline.posts[::-1]


def test_unknown_users_and_bad_requests_are_problems(api_server: RunningApi,
                                                     timeline: Timeline) -> None:
    unknown = new_user_id()
    for kind in ("posts", "followers", "following"):
        resp = timeline.as_reader.get(f"/v1/users/{unknown}/{kind}")
        assert resp.status_code == 404, resp.text
        assert resp.headers["content-type"].startswith("application/problem+json")
        assert resp.json()["type"].endswith("/not-found")
        for params in ({"limit": 0}, {"limit": 101}, {"limit": "x"}):
            resp = timeline.as_reader.get(f"/v1/users/{timeline.author}/{kind}", params=params)
            assert resp.status_code == 422, (kind, params, resp.text)
            assert resp.headers["content-type"].startswith("application/problem+json")
        assert timeline.as_reader.get(f"/v1/users/0/{kind}").status_code == 422
        assert httpx.get(f"{api_server.base_url}/v1/users/{timeline.author}/{kind}").status_code == 401


def tampered(token: str) -> str:
    body, kid, mac = token.split(".")
    raw = bytearray(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    raw[-3] ^= 1
    return ".".join([base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode(), kid, mac])


def test_a_tampered_foreign_or_feed_cursor_is_a_400(api_server: RunningApi, timeline: Timeline) -> None:
    cursor = get(timeline.as_reader, timeline.path, limit=2)["next_cursor"]
    feed = get(timeline.as_reader, "/v1/feed", limit=1)
    stranger, = existing(api_server, 1)
    with api_server.client(stranger) as as_stranger:
        for client, path, token in [
                (timeline.as_reader, timeline.path, tampered(cursor)),
                (timeline.as_reader, timeline.path, cursor[:-2] + ("AA" if cursor[-2:] != "AA" else "BB")),
                (as_stranger, timeline.path, cursor),                                   # another reader
                (timeline.as_reader, f"/v1/users/{timeline.author}/followers", cursor),  # another list
                (timeline.as_reader, f"/v1/users/{timeline.reader}/posts", cursor),      # another user
                (timeline.as_reader, timeline.path, "not-a-cursor")]:
            resp = client.get(path, params={"cursor": token})
            assert resp.status_code == 400, (path, resp.text)
            assert resp.headers["content-type"].startswith("application/problem+json")
            assert resp.json()["type"].endswith("/invalid-cursor")
    if feed.get("next_cursor"):
        resp = timeline.as_reader.get(timeline.path, params={"cursor": feed["next_cursor"]})
        assert resp.status_code == 400


def set_follower_count(world: FeedWorld, user: int, count: int) -> None:
    """The count row of ``follow_edges`` as its owner writes it (counted_edges.py)."""
    world.session.execute("UPDATE follow_edges SET followers = %s, lsn = 0 "
                          "WHERE followed_id = %s AND follower_id = -1", (count, user))


def test_followers_and_following_newest_first_with_counts(api_server: RunningApi,
                                                          world: FeedWorld) -> None:
    star, = existing(api_server, 1)
    fans = existing(api_server, 7)
    base = datetime.now(timezone.utc) - timedelta(days=10)
    # Follow times out of id order, two of them equal (ordered by user id then).
    minutes = [50, 10, 30, 30, 70, 20, 60]
    for fan, m in zip(fans, minutes):
        world.follow(fan, star, base + timedelta(minutes=m))
        world.follow(star, fan, base + timedelta(minutes=100 - m))
    set_follower_count(world, star, len(fans))
    by_time = sorted(zip(minutes, fans), reverse=True)
    with api_server.client(new_user_id()) as client:
        for limit in (1, 2, 3, 7, 50):
            items, users = walk(client, f"/v1/users/{star}/followers", limit)
            assert users == [str(f) for _m, f in by_time], limit
            newest = datetime.fromisoformat(items[0]["following_since"].replace("Z", "+00:00"))
            assert abs(newest - (base + timedelta(minutes=70))) < timedelta(milliseconds=2)
            page = get(client, f"/v1/users/{star}/followers", limit=limit)
            assert page["followers_count"] == 7 and "following_count" not in page
            items, users = walk(client, f"/v1/users/{star}/following", limit)
            assert users == [str(f) for _m, f in sorted(zip([100 - m for m in minutes], fans), reverse=True)]
            assert get(client, f"/v1/users/{star}/following", limit=limit)["following_count"] == 7
        # An unfollow (as the fan-out applies it) leaves the list and the following count.
        world.unfollow(star, fans[0])
        assert str(fans[0]) not in walk(client, f"/v1/users/{star}/following", 3)[1]
        assert get(client, f"/v1/users/{star}/following")["following_count"] == 6
        # A new follow between pages: no duplicate, nothing skipped of what was listed.
        first = get(client, f"/v1/users/{star}/followers", limit=3)
        late, = existing(api_server, 1)
        world.follow(late, star, datetime.now(timezone.utc))
        rest, _ = walk_from(client, f"/v1/users/{star}/followers", first["next_cursor"], 3)
        shown = [i["user_id"] for i in first["items"]] + rest
        assert shown == [str(f) for _m, f in by_time]
        # Nobody: empty lists and zero counts.
        nobody, = existing(api_server, 1)
        assert get(client, f"/v1/users/{nobody}/followers") == {
            "items": [], "next_cursor": None, "followers_count": 0}
        assert get(client, f"/v1/users/{nobody}/following") == {
            "items": [], "next_cursor": None, "following_count": 0}


def walk_from(client: httpx.Client, path: str, cursor: str, limit: int) -> tuple[list[str], int]:
    users: list[str] = []
    pages = 0
    while cursor:
        page = get(client, path, limit=limit, cursor=cursor)
        users += [i["user_id"] for i in page["items"]]
        cursor = page["next_cursor"]
        pages += 1
    return users, pages


def test_a_user_with_no_posts_has_an_empty_list(api_server: RunningApi) -> None:
    quiet, = existing(api_server, 1)
    with api_server.client(new_user_id()) as client:
        # A page reads at most MAX_DAYS_PER_PAGE days: a walk may take a few empty pages
        # to reach the epoch, and ends there.
        items, _ = walk(client, f"/v1/users/{quiet}/posts", 20)
        assert items == []


def test_a_post_made_through_the_api_is_listed_once_its_copy_is_written(
        api_server: RunningApi, world: FeedWorld) -> None:
    author, = existing(api_server, 1)
    with api_server.client(author) as client:
        resp = client.post("/v1/posts", json={"text": "first"}, headers={"Idempotency-Key": uuid.uuid4().hex})
        assert resp.status_code == 201
        body = resp.json()
        # Not fanned out yet: not listed (the copies are what the list reads).
        assert get(client, f"/v1/users/{author}/posts")["items"] == []
        at = datetime.fromisoformat(body["created_at"].replace("Z", "+00:00"))
        world.write(author, at=at, post_id=int(body["post_id"]), text="first")
        assert [i["post_id"] for i in get(client, f"/v1/users/{author}/posts")["items"]] == [body["post_id"]]
