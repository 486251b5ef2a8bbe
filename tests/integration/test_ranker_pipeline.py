"""Ranker against real Kafka and Cassandra; every schema example through both workers."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from services.shared.contracts.topics import (cdc_topic, dlq_topic, rank_features_topic,
                                              rank_moves_topic)
from services.shared.domain.ranking import engagement_score, rank_key
from bench.harness.cdc_events import CdcMessage, post_id_at
from bench.harness.pipeline import group_caught_up
from tests.support.kafka_topics import read_topic
from tests.support.schemas import examples_for
from tests.support.worker_env import serving_state, wait_for_workers


def _features(topic: str, post_id: int, when: datetime, **features: float) -> CdcMessage:
    value = {"post_id": str(post_id), "features": features, "event_time": when.isoformat()}
    return CdcMessage(topic, json.dumps(str(post_id)).encode(), json.dumps(value).encode())


def test_likes_and_features_keep_counters_and_score_whatever_the_order(worker_env):
    env, e = worker_env, worker_env.events
    now = datetime.now(timezone.utc)
    post, fans = 5005, [1, 2, 3]
    ftopic = rank_features_topic(env.settings.topic_prefix)
    likes = [m for u in fans for m in e.liked(post, u, now)]
    env.send(likes, likes,                                 # duplicated likes
             e.unliked(post, 3, now),
             [_features(ftopic, post, now, quality=0.5)],
             [_features(ftopic, post, now - timedelta(hours=1), quality=0.9)],  # older: loses
             [CdcMessage(ftopic, b'"5005"', b'{"post_id": 5005}')])              # poison
    env.start("services.ranker", "ranker")
    expected = engagement_score(2, {"quality": 0.5})

    def settled() -> bool:
        likers = sorted(r.user_id for r in env.rows("SELECT user_id FROM post_likes WHERE post_id=%s", post))
        counter = env.rows("SELECT likes FROM like_edges WHERE post_id=%s LIMIT 1", post)
        copy = env.rows("SELECT score, features FROM posts WHERE post_id=%s", post)
        return (likers == [1, 2] and bool(counter) and counter[0].likes == 2 and bool(copy)
                and copy[0].features == {"quality": 0.5} and copy[0].score == pytest.approx(expected))

    # Duplicates did not count twice, the unlike counted once, the older feature lost.
    wait_for_workers(settled, timeout=90, message="likes, counter, features and score settled")
    # The poison comes after the older feature, whose loss changes nothing above: wait
    # for the worker to be past it (CI read the dead letters before it was written).
    wait_for_workers(lambda: group_caught_up(env.settings, "ranker", [cdc_topic("likes", env.settings.topic_prefix), ftopic]),
                     timeout=90, message="the ranker past the poison")
    letters = read_topic(env.settings, dlq_topic(ftopic), with_headers=True)
    assert len(letters) == 1 and dict(letters[0][2])["dlq.error.class"].endswith(b"MalformedEnvelope")


def test_every_schema_example_is_applied_by_the_workers_without_dead_letters(worker_env):
    env = worker_env
    prefix = env.settings.topic_prefix
    consumed = {"public.posts": "posts", "public.follows": "follows", "public.blocks": "blocks",
                "public.likes": "likes", "rank-features": None, "rank-key-moves": None}
    own = {"rank-features": rank_features_topic(prefix), "rank-key-moves": rank_moves_topic(prefix)}
    messages = []
    for suffix, table in consumed.items():
        topic = cdc_topic(table, prefix) if table else own[suffix]
        for ex in examples_for(suffix):
            value = None if ex.value is None else json.dumps(ex.value).encode()
            messages.append(CdcMessage(topic, json.dumps(ex.key).encode(), value))
    env.send(messages)
    env.start("services.fanout", "examples-fanout")
    env.start("services.ranker", "examples-ranker")
    fanout_topics = [cdc_topic(t, prefix) for t in ("posts", "follows", "blocks")] + [rank_moves_topic(prefix)]
    ranker_topics = [cdc_topic("likes", prefix), rank_features_topic(prefix)]
    wait_for_workers(lambda: group_caught_up(env.settings, "examples-fanout", fanout_topics)
                     and group_caught_up(env.settings, "examples-ranker", ranker_topics),
                     timeout=120, message="examples consumed")
    for topic in fanout_topics + ranker_topics:
        assert read_topic(env.settings, dlq_topic(topic)) == [], topic
    post_ids = {ex.key["post_id"] for ex in examples_for("public.posts")}
    assert {r.post_id for r in env.rows("SELECT post_id FROM posts")} >= post_ids


def _rows_of(env, post: int) -> list[tuple[int, float]]:
    """(reader_id, rank_key) of every inbox row of ``post`` (a test-sized table)."""
    return sorted((r.reader_id, r.rank_key) for r in env.rows(
        "SELECT reader_id, rank_key FROM feed_inbox WHERE post_id=%s ALLOW FILTERING", post))


def test_a_liked_post_moves_its_rows_once_and_a_replayed_move_changes_nothing(worker_env):
    env, e = worker_env, worker_env.events
    prefix = env.settings.topic_prefix
    now = datetime.now(timezone.utc)
    created = now - timedelta(minutes=10)
    author, readers, post = 71, [72, 73, 74], post_id_at(now - timedelta(minutes=10), 1)
    env.send(*[e.followed(r, author, now - timedelta(hours=1)) for r in readers],
             e.post_created(e.post_row(post, author, created)))
    env.start("services.fanout", "moves-fanout")
    first_key = rank_key(0.0, int(created.timestamp() * 1000))
    wait_for_workers(lambda: _rows_of(env, post) == [(r, first_key) for r in readers], timeout=90,
                     message="the post fanned out under its first key")
    # Seven likes, some duplicated: log2(8) = 3 units up, far past the move threshold.
    likes = [m for u in range(100, 107) for m in e.liked(post, u, now)]
    env.send(likes, likes[:4])
    env.start("services.ranker", "moves-ranker")
    moved_key = rank_key(engagement_score(7), int(created.timestamp() * 1000))

    def moved() -> bool:
        copy = env.rows("SELECT rank_key FROM posts WHERE post_id=%s", post)
        timeline = env.rows("SELECT rank_key FROM author_timeline WHERE author_id=%s ALLOW FILTERING",
                            author)
        return (bool(copy) and copy[0].rank_key == pytest.approx(moved_key, abs=0.5)
                and _rows_of(env, post) == [(r, copy[0].rank_key) for r in readers]
                and [t.rank_key for t in timeline] == [copy[0].rank_key])
    # One row per reader, under the copy's key, and one timeline row: the old rows are gone.
    wait_for_workers(moved, timeout=90, message="rows moved to the new key")
    topics = [cdc_topic("likes", prefix), rank_features_topic(prefix)]
    wait_for_workers(lambda: group_caught_up(env.settings, "moves-ranker", topics)
                     and group_caught_up(env.settings, "moves-fanout", [rank_moves_topic(prefix)]),
                     timeout=90, message="both workers caught up")
    moves = read_topic(env.settings, rank_moves_topic(prefix))
    assert 1 <= len(moves) <= 3        # coalesced: a handful of moves for seven likes, not seven
    before = serving_state(env)
    # Every move again, oldest first, as a crashed worker would re-read them.
    env.send([CdcMessage(rank_moves_topic(prefix), k, v) for k, v in moves])
    env.start("services.fanout", "moves-replay")
    wait_for_workers(lambda: group_caught_up(env.settings, "moves-replay", [rank_moves_topic(prefix)]),
                     timeout=90, message="replayed moves applied")
    assert serving_state(env) == before
