"""What a feed item carries besides its text, through real HTTP on the real stack: the
post's media ids, its like count (the ranker's count in ``like_edges``) and whether the
reader likes it (Postgres ``likes``: the reader's own like or unlike shows on the very
next request). The body is held to the documented model (``FeedPageOut``), which the
route does not check itself (it writes the body with orjson)."""
from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import httpx
import pytest

from services.api.http.models import PostOut
from services.api.routes.feed import FeedItemOut, FeedPageOut

from tests.support.api_server import RunningApi, new_user_id
from tests.support.feed_world import FeedWorld

pytestmark = pytest.mark.integration


def _post(client: httpx.Client, text: str, media: list[str]) -> tuple[int, datetime]:
    resp = client.post("/v1/posts", json={"text": text, "media_ids": media},
                       headers={"Idempotency-Key": uuid.uuid4().hex})
    assert resp.status_code == 201, resp.text
    body = resp.json()
    assert body["media_ids"] == media and body["like_count"] == 0 and body["liked"] is False
    return int(body["post_id"]), datetime.fromisoformat(body["created_at"].replace("Z", "+00:00"))


def _checked(page: dict[str, Any]) -> dict[str, Any]:
    """The page as ``FeedPageOut`` describes it: valid, and no field it does not name."""
    FeedPageOut.model_validate(page)
    assert set(page) <= set(FeedPageOut.model_fields), set(page) - set(FeedPageOut.model_fields)
    for item in page["items"]:
        assert set(item) == set(FeedItemOut.model_fields), item
    return page


class Scene:
    """A reader following an author whose posts (made through the API, so likes can be
    stored) are in the reader's inbox: one with media, one without."""

    def __init__(self, api: RunningApi, world: FeedWorld) -> None:
        self.reader, self.author = new_user_id(), new_user_id()
        self.as_reader, self.as_author = api.client(self.reader), api.client(self.author)
        assert self.as_author.get("/v1/feed").status_code == 200  # the author exists
        resp = self.as_reader.put(f"/v1/users/{self.author}/follow")
        assert resp.status_code == 200, resp.text
        since = datetime.fromisoformat(resp.json()["following_since"].replace("Z", "+00:00"))
        world.follow(self.reader, self.author, since)
        self.media = ["img_1", "vid-2"]
        pid, at = _post(self.as_author, "with media", self.media)
        self.with_media = world.write(self.author, at=at, post_id=pid, text="with media",
                                      media=self.media, inbox_of=[self.reader]).post_id
        pid, at = _post(self.as_author, "plain", [])
        self.plain = world.write(self.author, at=at, post_id=pid, text="plain",
                                 inbox_of=[self.reader]).post_id

    def items(self, **params: object) -> dict[int, dict[str, Any]]:
        resp = self.as_reader.get("/v1/feed", params=params)
        assert resp.status_code == 200, resp.text
        page = _checked(resp.json())
        assert "warnings" not in page, page
        return {int(i["post_id"]): i for i in page["items"]}

    def close(self) -> None:
        self.as_reader.close()
        self.as_author.close()


@pytest.fixture
def scene(api_server: RunningApi, world: FeedWorld) -> Any:
    s = Scene(api_server, world)
    yield s
    s.close()


def test_items_carry_media_ids_like_counts_and_liked_and_match_the_model(
        scene: Scene, world: FeedWorld) -> None:
    likers = [new_user_id() for _ in range(3)]
    world.count_likes(scene.with_media, likers)  # before any read: no count is kept yet
    items = scene.items()
    assert list(items) == [scene.plain, scene.with_media]
    assert items[scene.with_media]["media_ids"] == scene.media
    assert items[scene.plain]["media_ids"] == []
    assert items[scene.with_media]["like_count"] == 3
    assert items[scene.plain]["like_count"] == 0
    assert not items[scene.with_media]["liked"] and not items[scene.plain]["liked"]
    assert scene.items(order="latest")[scene.with_media]["media_ids"] == scene.media


def test_the_readers_like_and_unlike_show_in_liked_on_the_very_next_request(
        scene: Scene) -> None:
    post = scene.with_media
    assert scene.items()[post]["liked"] is False
    assert scene.as_reader.put(f"/v1/posts/{post}/like").status_code == 204
    items = scene.items()  # no wait: the copy in Cassandra may not have it yet
    assert items[post]["liked"] is True and items[scene.plain]["liked"] is False
    got = scene.as_reader.get(f"/v1/posts/{post}")
    assert got.status_code == 200, got.text
    PostOut.model_validate(got.json())
    assert got.json()["liked"] is True and got.json()["media_ids"] == scene.media
    assert scene.as_author.get(f"/v1/posts/{post}").json()["liked"] is False  # per reader
    assert scene.as_reader.delete(f"/v1/posts/{post}/like").status_code == 204
    assert scene.items()[post]["liked"] is False
    assert scene.as_reader.get(f"/v1/posts/{post}").json()["liked"] is False


def test_a_post_read_alone_carries_its_media_and_like_count(scene: Scene, world: FeedWorld) -> None:
    world.count_likes(scene.plain, [new_user_id(), new_user_id()])
    got = scene.as_reader.get(f"/v1/posts/{scene.plain}")
    assert got.status_code == 200, got.text
    body = PostOut.model_validate(got.json())
    assert (body.media_ids, body.like_count, body.liked) == ([], 2, False)
