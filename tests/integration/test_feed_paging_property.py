"""Property: walking every page of one snapshot while the world changes under it.

Between pages, posts are created, deleted, removed by moderation and re-ranked. Over the
whole walk: no post appears twice, no post appears after it became ineligible, no post
created after the snapshot appears (it arrives through the stream instead), every post
that was eligible at the first page and stayed eligible appears, and the order is the
snapshot's strict (rank, post_id) order.

Completeness is asserted whenever the first page says its candidates are complete (no
``incomplete_candidates`` warning, which a partition read timing out would add).
"""
from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.feed_world import FeedWorld, Post, feed_ids, utc_now
from tests.support.waiting import wait_until

from tests.support.api_server import RunningApi, new_user_id


pytestmark = pytest.mark.integration

OPS = st.lists(st.tuples(st.sampled_from(["create", "delete", "remove", "rerank"]),
                         st.integers(0, 10_000), st.floats(-3, 6)), max_size=3)


# Celebrities promoted up front, one per example: a celebrity partition is read with a
# bound (celebrity_posts_per_author), so a star shared by every example would push
# an example's older posts past it. More than max_examples, for hypothesis's replays.
STAR_POOL = 60


@pytest.fixture(scope="module")
def stars(api_server: RunningApi, world: FeedWorld) -> Iterator[int]:
    """Fresh celebrities, promoted once; waits until the API has re-read the list."""
    pool = [new_user_id() for _ in range(STAR_POOL)]
    for author in pool:
        world.make_celebrity(author)
    probe = new_user_id()
    world.follow(probe, pool[-1])
    post = world.write(pool[-1])
    with api_server.client(probe) as client:
        wait_until(lambda: feed_ids(client.get("/v1/feed").json()) == [post.post_id],
                   timeout=10, message="the celebrity list to be re-read")
    return itertools.cycle(pool[:-1])


@settings(max_examples=18, deadline=None, suppress_health_check=list(HealthCheck))
@given(n_posts=st.integers(0, 18), limit=st.integers(1, 6), data=st.data())
def test_walking_a_snapshot_never_repeats_skips_or_shows_ineligible_posts(
        api_server: RunningApi, world: FeedWorld, stars: Iterator[int], n_posts: int,
        limit: int, data: Any) -> None:
    reader, friend, other, star = new_user_id(), new_user_id(), new_user_id(), next(stars)
    authors = [friend, other, star]
    for author in authors:
        world.follow(reader, author)
    now = utc_now()
    posts: list[Post] = []
    for i in range(n_posts):
        author = authors[data.draw(st.integers(0, 2), label="author")]
        score = data.draw(st.none() | st.floats(-2, 5), label="score")
        posts.append(world.write(author, at=now - timedelta(minutes=i),
                                 inbox_of=[] if author == star else [reader], score=score))
    hidden: set[int] = set()
    created: set[int] = set()
    shown: list[dict[str, Any]] = []
    with api_server.client(reader) as client:
        page = client.get("/v1/feed", params={"limit": limit}).json()
        # A candidate partition that timed out on this shared machine leaves its posts out
        # of the snapshot (by design, said in the warning): completeness is then unknowable.
        complete = "incomplete_candidates" not in page.get("warnings", [])
        while True:
            for item in page["items"]:
                assert int(item["post_id"]) not in hidden, "an ineligible post was shown"
            shown += page["items"]
            if not page["next_cursor"]:
                break
            for op, pick, score in data.draw(OPS, label="ops"):
                if op == "create":
                    author = authors[pick % 3]
                    new = world.write(author, inbox_of=[] if author == star else [reader])
                    created.add(new.post_id)
                elif posts:
                    target = posts[pick % len(posts)]
                    if op == "delete":
                        world.delete(target)
                        hidden.add(target.post_id)
                    elif op == "remove":
                        world.remove(target)
                        hidden.add(target.post_id)
                    else:
                        world.set_score(target.post_id, score)
            page = client.get("/v1/feed", params={"limit": limit,
                                                  "cursor": page["next_cursor"]}).json()
            assert "snapshot_expired" not in page.get("warnings", []), page
    ids = [int(i["post_id"]) for i in shown]
    assert len(ids) == len(set(ids)), "a post was shown twice"
    assert not set(ids) & created, "a post created after the snapshot shifted it"
    if complete:
        assert {p.post_id for p in posts} - hidden <= set(ids), "an eligible post was skipped"
    keys = [(-i["rank"], -int(i["post_id"])) for i in shown]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
