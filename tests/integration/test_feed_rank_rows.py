"""The read path over rank-key rows: a walk past the snapshot's depth extends it, and
rows left behind by a racing move are never shown (services/api/feed/reader.py)."""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest

from services.shared.settings import Settings
from tests.support.api_server import RunningApi, new_user_id, running_api
from tests.support.feed_world import FeedWorld, feed_ids, utc_now, walk

pytestmark = pytest.mark.integration

DEPTH = 4


@pytest.fixture(scope="module")
def shallow_api(settings: Settings) -> Iterator[RunningApi]:
    """An API whose snapshots start with DEPTH entries, so walks extend them."""
    with running_api(settings.model_copy(update={"snapshot_depth": DEPTH})) as api:
        yield api


def test_a_walk_past_the_snapshot_depth_extends_it_without_repeats_or_gaps(
        shallow_api: RunningApi, world: FeedWorld) -> None:
    reader, friend, star = new_user_id(), new_user_id(), new_user_id()
    world.follow(reader, friend)
    world.follow(reader, star)
    world.make_celebrity(star)
    time.sleep(shallow_api.settings.celebrities_cache_s)
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


def _moved_while_fanning_out(world: FeedWorld, reader: int, author: int, score: float):
    """A post the fan-out pushed under its first key, while a rank move read the copy
    before the fan-out marked it (so the move left the inbox alone) and then wrote the
    new key: the interleaving a slow store produced in the fault suite (cassandra-cut)."""
    from services.shared.contracts.rank_moves import RankKeyMoved
    from services.shared.domain.ranking import rank_key

    post = world.write(author, inbox_of=[reader])  # the fan-out's rows, first key
    old_key = rank_key(None, int(post.created_at.timestamp() * 1000))
    new_key = rank_key(score, int(post.created_at.timestamp() * 1000))
    move = RankKeyMoved(post.post_id, author, post.created_at, (old_key,), new_key,
                        time.time_ns() // 1000)
    return post, old_key, move


def test_a_rank_move_that_read_the_copy_before_the_fan_out_marked_it_still_moves_the_rows(
        api_server: RunningApi, world: FeedWorld, monkeypatch: pytest.MonkeyPatch) -> None:
    reader, author = new_user_id(), new_user_id()
    world.follow(reader, author)
    post, _old, move = _moved_while_fanning_out(world, reader, author, 3.0)
    real = world.copies.read_post
    reads: list[int] = []

    async def before_the_mark(post_id: int):  # the move's first read: not fanned out yet
        copy = await real(post_id)
        reads.append(post_id)
        return dataclasses.replace(copy, fanned_out=None) if len(reads) == 1 else copy

    monkeypatch.setattr(world.copies, "read_post", before_the_mark)
    world.run(world.moves.on_rank_key_moved(move))
    monkeypatch.undo()
    world._settled()
    with api_server.client(reader) as client:
        assert feed_ids(client.get("/v1/feed").json()) == [post.post_id]
    keys = [k for k, p, _a in world.inbox_rows(reader) if p == post.post_id]
    assert keys == [move.to_key]


def test_a_fan_out_that_pushed_an_old_key_follows_the_move_it_missed(
        api_server: RunningApi, world: FeedWorld) -> None:
    from services.fanout.post_events import PostFanout

    reader, author = new_user_id(), new_user_id()
    world.follow(reader, author)
    post, old_key, move = _moved_while_fanning_out(world, reader, author, 3.0)
    # The move happened first and saw no mark: the copy has the new key, the inbox the old.
    world.run(world.copies.set_rank_key(post.post_id, move.to_key, move.key_ts))
    world.run(world.copies.move_author_post(author, post.post_id, (old_key,), move.to_key,
                                            move.key_ts))
    fanout = PostFanout(world.copies, world.inbox, world.tiers, world.publisher,
                        world.settings.topic_prefix)
    world.run(fanout._follow_a_move(post.post_id, author, post.created_at, old_key))
    world._settled()
    with api_server.client(reader) as client:
        assert feed_ids(client.get("/v1/feed").json()) == [post.post_id]
    keys = [k for k, p, _a in world.inbox_rows(reader) if p == post.post_id]
    assert keys == [move.to_key]
