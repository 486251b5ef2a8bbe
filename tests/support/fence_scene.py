"""A reader following an author through the real API, and the serving copies the
fan-out would have written before any later change (which they then never get): what
the visibility fence's integration tests (test_eligibility_fence, test_visibility_log)
page through."""
from __future__ import annotations

import uuid
from datetime import datetime

import httpx

from tests.support.api_server import RunningApi, new_user_id
from tests.support.feed_world import FeedWorld, feed_ids


def posted(client: httpx.Client, n: int) -> list[tuple[int, datetime]]:
    out = []
    for i in range(n):
        resp = client.post("/v1/posts", json={"text": f"post {i}"},
                           headers={"Idempotency-Key": uuid.uuid4().hex})
        assert resp.status_code == 201, resp.text
        body = resp.json()
        out.append((int(body["post_id"]), datetime.fromisoformat(body["created_at"].replace("Z", "+00:00"))))
    return out


class Scene:
    """A reader following an author in Postgres, and the copies of the author's posts
    in the reader's inbox as the fan-out would have written them."""

    def __init__(self, api: RunningApi, world: FeedWorld, posts: int = 15) -> None:
        self.api, self.world = api, world
        self.reader, self.author = new_user_id(), new_user_id()
        self.as_reader = api.client(self.reader)
        self.as_author = api.client(self.author)
        assert self.as_author.get("/v1/feed").status_code == 200  # the author exists
        resp = self.as_reader.put(f"/v1/users/{self.author}/follow")
        assert resp.status_code == 200, resp.text
        since = datetime.fromisoformat(resp.json()["following_since"].replace("Z", "+00:00"))
        world.follow(self.reader, self.author, since)
        self.posts = [world.write(self.author, at=at, post_id=pid, inbox_of=[self.reader]).post_id
                      for pid, at in posted(self.as_author, posts)]

    def feed(self, **params: object) -> dict:
        resp = self.as_reader.get("/v1/feed", params=params)
        assert resp.status_code == 200, resp.text
        return resp.json()

    def every_page(self, limit: int = 5, **params: object) -> list[int]:
        shown: list[int] = []
        page = self.feed(limit=limit, **params)
        while True:
            shown += feed_ids(page)
            if not page.get("next_cursor"):
                return shown
            page = self.feed(limit=limit, cursor=page["next_cursor"])

    def close(self) -> None:
        self.as_reader.close()
        self.as_author.close()
