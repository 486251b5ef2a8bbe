"""Batches on real Kafka and Cassandra: one key's changes in one batch apply in order, a
poison message in a batch goes alone to the DLQ, and a replayed batch changes nothing."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from services.shared.contracts.topics import cdc_topic, dlq_topic
from bench.harness.cdc_events import CdcMessage, post_id_at
from bench.harness.pipeline import group_caught_up
from tests.support.kafka_topics import read_topic
from tests.support.worker_env import (follower_counts, like_counts, serving_state,
                                      wait_for_workers)

FANOUT_TOPICS = ("posts", "follows", "blocks")


def _caught_up(env, group: str, tables) -> None:
    topics = [cdc_topic(t, env.settings.topic_prefix) for t in tables]
    wait_for_workers(lambda: group_caught_up(env.settings, group, topics), timeout=120,
                     message=f"{group} caught up")


def test_one_batch_keeps_key_order_isolates_poison_and_replays_idempotently(worker_env):
    env, e = worker_env, worker_env.events
    now = datetime.now(timezone.utc)
    hour_ago = now - timedelta(hours=1)
    author, crowd_author = 81, 90
    leaver, returner, reader = 82, 83, 84
    crowd = list(range(5000, 5200))
    p1, p2 = post_id_at(now - timedelta(minutes=2), 1), post_id_at(now - timedelta(minutes=1), 2)
    r1, r2 = e.post_row(p1, author, now - timedelta(minutes=2)), e.post_row(p2, author, now - timedelta(minutes=1))
    follows_topic = cdc_topic("follows", env.settings.topic_prefix)
    poison_key = json.dumps({"follower_id": 1, "followed_id": 2}).encode()
    # The posts are committed first (lower LSNs), as they would be before the follows
    # changes that come after them; everything is produced before the worker starts, so
    # it lands in the first batches.
    posts = [*e.post_created(r1), *e.post_deleted(r1), *e.post_created(r2)]  # p1 ends deleted
    env.send(
        e.followed(leaver, author, hour_ago), e.followed(reader, author, hour_ago),
        [m for f in crowd[:100] for m in e.followed(f, crowd_author, hour_ago)],
        e.unfollowed(leaver, author, hour_ago),                      # same key: ends unfollowed
        [CdcMessage(follows_topic, poison_key, b'{"op": "c", "after": 5}')],
        e.followed(returner, author, hour_ago), e.unfollowed(returner, author, hour_ago),
        e.followed(returner, author, now),                           # same key: ends following
        [m for f in crowd[100:] for m in e.followed(f, crowd_author, hour_ago)],
        posts)
    env.start("services.fanout", "batch")
    _caught_up(env, "batch", FANOUT_TOPICS)

    assert follower_counts(env) == {author: 2, crowd_author: len(crowd)}           # reader + returner
    assert {r.follower_id for r in env.rows("SELECT follower_id FROM followers WHERE followed_id=%s",
                                            author)} == {reader, returner}
    assert env.inbox(reader) == [p2]                                 # p1 was deleted
    assert env.inbox(leaver) == [] and env.inbox(returner) == []     # returner follows since now
    copy = env.rows("SELECT deleted FROM posts WHERE post_id=%s", p1)
    assert copy and copy[0].deleted is True
    assert [r.post_id for r in env.rows("SELECT post_id FROM author_timeline")] == [p2]
    letters = read_topic(env.settings, dlq_topic(follows_topic), with_headers=True)
    assert [json.loads(k) for k, _, _ in letters] == [{"follower_id": 1, "followed_id": 2}]

    before = serving_state(env)
    env.start("services.fanout", "replay")                           # every batch again
    _caught_up(env, "replay", FANOUT_TOPICS)
    assert serving_state(env) == before                              # counters included


def test_likes_of_one_key_in_one_batch_count_once_and_replay_counts_nothing(worker_env):
    env, e = worker_env, worker_env.events
    now = datetime.now(timezone.utc)
    post, hot = 6006, 6007
    env.send(e.liked(post, 1, now), e.unliked(post, 1, now), e.liked(post, 1, now),  # ends liked
             e.liked(post, 2, now), e.unliked(post, 2, now),                          # ends unliked
             [m for u in range(100, 400) for m in e.liked(hot, u, now)])
    env.start("services.ranker", "likes")
    tables = ("likes",)
    _caught_up(env, "likes", tables)

    assert like_counts(env) == {post: 1, hot: 300}
    assert [r.user_id for r in env.rows("SELECT user_id FROM post_likes WHERE post_id=%s", post)] == [1]
    scores = {r.post_id: r.score for r in env.rows("SELECT post_id, score FROM posts")}
    assert scores[hot] > scores[post] > 0                            # rescored once per batch
    env.start("services.ranker", "likes-replay")
    _caught_up(env, "likes-replay", tables)
    assert like_counts(env) == {post: 1, hot: 300}
