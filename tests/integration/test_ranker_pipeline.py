"""Ranker against real Kafka and Cassandra; every schema example through both workers."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from services.common.ranking import engagement_score
from services.common.schemas import examples_for
from services.common.topics import cdc_topic, dlq_topic, rank_features_topic

from .cdc_events import CdcMessage
from .test_fanout_harness import group_caught_up, wait_until, worker_env  # noqa: F401
from .test_fanout_pipeline import _read_all


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
        counter = env.rows("SELECT likes FROM post_counters WHERE post_id=%s", post)
        copy = env.rows("SELECT score, features FROM posts WHERE post_id=%s", post)
        return (likers == [1, 2] and bool(counter) and counter[0].likes == 2 and bool(copy)
                and copy[0].features == {"quality": 0.5} and copy[0].score == pytest.approx(expected))

    # Duplicates did not count twice, the unlike counted once, the older feature lost.
    wait_until(settled, timeout=90, message="likes, counter, features and score settled")
    letters = _read_all(env.settings.kafka_bootstrap, dlq_topic(ftopic), with_headers=True)
    assert len(letters) == 1 and dict(letters[0][2])["dlq.error.class"].endswith(b"MalformedEnvelope")


def test_every_schema_example_is_applied_by_the_workers_without_dead_letters(worker_env):
    env = worker_env
    prefix = env.settings.topic_prefix
    consumed = {"public.posts": "posts", "public.follows": "follows", "public.blocks": "blocks",
                "public.likes": "likes", "rank-features": None}
    messages = []
    for suffix, table in consumed.items():
        topic = cdc_topic(table, prefix) if table else rank_features_topic(prefix)
        for ex in examples_for(suffix):
            value = None if ex.value is None else json.dumps(ex.value).encode()
            messages.append(CdcMessage(topic, json.dumps(ex.key).encode(), value))
    env.send(messages)
    env.start("services.fanout", "examples-fanout")
    env.start("services.ranker", "examples-ranker")
    fanout_topics = [cdc_topic(t, prefix) for t in ("posts", "follows", "blocks")]
    ranker_topics = [cdc_topic("likes", prefix), rank_features_topic(prefix)]
    wait_until(lambda: group_caught_up(env.settings, "examples-fanout", fanout_topics)
               and group_caught_up(env.settings, "examples-ranker", ranker_topics),
               timeout=120, message="examples consumed")
    for topic in fanout_topics + ranker_topics:
        assert _read_all(env.settings.kafka_bootstrap, dlq_topic(topic)) == [], topic
    post_ids = {ex.key["post_id"] for ex in examples_for("public.posts")}
    assert {r.post_id for r in env.rows("SELECT post_id FROM posts")} >= post_ids
