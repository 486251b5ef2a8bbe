"""GET /v1/feed?order=latest and the stored preference, through real HTTP on the real stack."""
from __future__ import annotations

from datetime import timedelta

import pytest

from tests.support.feed_world import FeedWorld, feed_ids, utc_now
from tests.support.waiting import wait_until

from tests.support.api_server import RunningApi, new_user_id


pytestmark = pytest.mark.integration


def _problem(response, status: int) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    return response.json()


def test_latest_is_newest_first_by_post_id_with_every_rule_of_ranked(api_server: RunningApi,
                                                                     world: FeedWorld) -> None:
    reader, friend, star, blocked, before = (new_user_id() for _ in range(5))
    now = utc_now()
    world.follow(reader, friend)
    world.follow(reader, star)
    world.follow(reader, blocked)
    world.follow(reader, before, since=now - timedelta(minutes=30))
    world.make_celebrity(star)
    popular = world.write(friend, at=now - timedelta(hours=3), inbox_of=[reader], score=5.0)
    newer = world.write(friend, at=now - timedelta(minutes=1), inbox_of=[reader])
    older = world.write(friend, at=now - timedelta(minutes=40), inbox_of=[reader])
    starred = world.write(star, at=now - timedelta(minutes=20))  # no inbox row: merged at read
    world.write(blocked, at=now - timedelta(minutes=2), inbox_of=[reader])
    world.block(reader, blocked)
    world.write(before, at=now - timedelta(hours=1), inbox_of=[reader])  # before the follow
    latest_ids = [newer.post_id, starred.post_id, older.post_id, popular.post_id]
    pages: list[dict] = []
    with api_server.client(reader) as client:
        wait_until(lambda: feed_ids(pages.append(client.get("/v1/feed?order=latest").json())
                                    or pages[-1]) == latest_ids,
                   timeout=10, message="the celebrity's post to be merged")
        ranked = client.get("/v1/feed?order=ranked").json()
        default = client.get("/v1/feed").json()
    page = pages[-1]
    assert page["order"] == "latest" and page["next_cursor"] is None
    assert all(item["rank"] is None for item in page["items"])
    assert ranked["order"] == default["order"] == "ranked"
    assert feed_ids(ranked)[0] == popular.post_id  # the score outranks recency there
    assert sorted(feed_ids(ranked)) == sorted(latest_ids)


def test_latest_pages_walk_one_snapshot_and_a_cursor_keeps_its_order(api_server: RunningApi,
                                                                     world: FeedWorld) -> None:
    reader, author = new_user_id(), new_user_id()
    world.follow(reader, author)
    now = utc_now()
    posts = [world.write(author, at=now - timedelta(minutes=m), inbox_of=[reader],
                         score=float(m % 3)) for m in range(1, 8)]
    expected = [p.post_id for p in posts]  # written newest first
    with api_server.client(reader) as client:
        first = client.get("/v1/feed?order=latest&limit=3").json()
        assert feed_ids(first) == expected[:3] and first["order"] == "latest"
        world.write(author, inbox_of=[reader])  # new posts never shift an open snapshot
        cursor = first["next_cursor"]
        second = client.get(f"/v1/feed?limit=3&cursor={cursor}").json()  # the cursor's order
        assert second["order"] == "latest" and second["feed_version"] == first["feed_version"]
        third = client.get(f"/v1/feed?order=latest&limit=3&cursor={second['next_cursor']}").json()
        assert feed_ids(first) + feed_ids(second) + feed_ids(third) == expected
        assert third["next_cursor"] is None
        problem = _problem(client.get(f"/v1/feed?order=ranked&cursor={cursor}"), 400)
        assert problem["type"].endswith("invalid-cursor") and "latest" in problem["detail"]
        ranked_cursor = client.get("/v1/feed?order=ranked&limit=2").json()["next_cursor"]
        _problem(client.get(f"/v1/feed?order=latest&cursor={ranked_cursor}"), 400)
        _problem(client.get("/v1/feed?order=oldest"), 422)


def test_a_stored_preference_orders_first_pages_that_name_no_order(api_server: RunningApi,
                                                                   world: FeedWorld) -> None:
    reader, author = new_user_id(), new_user_id()
    world.follow(reader, author)
    now = utc_now()
    popular = world.write(author, at=now - timedelta(hours=2), inbox_of=[reader], score=5.0)
    recent = world.write(author, at=now - timedelta(minutes=1), inbox_of=[reader])
    with api_server.client(reader) as client:
        assert client.get("/v1/me/preferences").json() == {"feed_order": "ranked"}
        assert feed_ids(client.get("/v1/feed").json()) == [popular.post_id, recent.post_id]
        stored = client.put("/v1/me/preferences", json={"feed_order": "latest"})
        assert stored.status_code == 200 and stored.json() == {"feed_order": "latest"}
        assert client.get("/v1/me/preferences").json() == {"feed_order": "latest"}
        page = client.get("/v1/feed").json()
        assert page["order"] == "latest" and feed_ids(page) == [recent.post_id, popular.post_id]
        assert client.get("/v1/feed?order=ranked").json()["order"] == "ranked"  # asked wins
        _problem(client.put("/v1/me/preferences", json={"feed_order": "oldest"}), 422)
        _problem(client.put("/v1/me/preferences", json={"feed_order": "latest", "x": 1}), 422)
    with api_server.client() as anonymous:
        _problem(anonymous.get("/v1/me/preferences"), 401)
    other = new_user_id()
    with api_server.client(other) as client:  # one reader's preference is only theirs
        assert client.get("/v1/me/preferences").json() == {"feed_order": "ranked"}


def test_a_kept_preference_changes_with_the_notice_of_its_change(api_server: RunningApi,
                                                                 world: FeedWorld) -> None:
    """Preferences are serving-cache entries: read once, then used from memory until a
    notice names the reader, from another process or from this one's own PUT."""
    reader, author = new_user_id(), new_user_id()
    world.follow(reader, author)
    world.write(author, at=utc_now() - timedelta(minutes=5), inbox_of=[reader])
    notices = api_server.app.state.api_notices
    with api_server.client(reader) as client:
        assert client.get("/v1/feed").json()["order"] == "ranked"  # read once and kept
        world.store_preference(reader, "latest")  # stored through another process
        world.seen_by(api_server)
        assert client.get("/v1/feed").json()["order"] == "latest"
        assert client.get("/v1/me/preferences").json() == {"feed_order": "latest"}
        sent = notices._notices.sent
        assert client.put("/v1/me/preferences", json={"feed_order": "ranked"}).status_code == 200
        assert notices._notices.sent == sent + 1  # acknowledged by the broker before the 200
        assert client.get("/v1/feed").json()["order"] == "ranked"
