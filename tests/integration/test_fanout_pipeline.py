"""Fan-out against real Kafka and Cassandra: ordering, duplicates, replay, crash, tiers, DLQ."""
from __future__ import annotations

import collections
import json
from datetime import datetime, timedelta, timezone

from services.shared.contracts.feed_events import parse_author
from services.shared.contracts.topics import author_events_topic, cdc_topic, dlq_topic
from services.shared.domain.rules import CELEBRITY_SHARD
from bench.harness.cdc_events import CdcMessage, post_id_at
from bench.harness.pipeline import group_caught_up
from tests.support.kafka_topics import read_topic
from tests.support.worker_env import (follower_count, follower_counts, serving_state,
                                      wait_for_workers)

FANOUT_TOPICS = ("posts", "follows", "blocks")


def _now() -> datetime:
    return datetime.now(timezone.utc)


def test_reordered_duplicated_events_converge_and_replay_changes_nothing(worker_env):
    env, e = worker_env, worker_env.events
    now = _now()
    hour_ago = now - timedelta(hours=1)
    author, early, late, blocked, leaver, other = 11, 21, 22, 23, 24, 25
    p1, p2, p3 = (post_id_at(now - timedelta(minutes=10 - i), i) for i in range(3))
    # With media: a list column appended to on replay once held every element twice.
    r1, r2, r3 = (e.post_row(p, author, now - timedelta(minutes=10 - i), media=("m1", f"m{p}"))
                  for i, p in enumerate((p1, p2, p3)))
    # p1 arrives before the follow that makes it visible to `early` (following since an hour).
    batch = [e.post_created(r1)]
    batch += [e.followed(early, author, hour_ago), e.followed(late, author, now),  # no backfill
              e.followed(blocked, author, hour_ago), e.followed(leaver, author, hour_ago),
              e.followed(other, 99, hour_ago)]
    batch += [e.blocked(author, blocked, now)]
    # p2's delete arrives before its create (the create carries the older LSN).
    create_p2 = e.post_created(r2)
    batch += [e.post_deleted(r2), create_p2]
    batch += [e.post_created(r3)]
    batch += [e.unfollowed(leaver, author, hour_ago)]
    batch += batch[:4]  # duplicates
    env.send(*batch)

    env.start("services.fanout", "first")
    wait_for_workers(lambda: group_caught_up(env.settings, "first", [cdc_topic(t, env.settings.topic_prefix)
                                                              for t in FANOUT_TOPICS]),
                     timeout=120, message="first worker caught up")
    assert env.inbox(early) == [p3, p1]
    assert env.inbox(late) == []            # followed after the posts: no backfill
    assert env.inbox(blocked) == []         # blocked by the author
    assert env.inbox(leaver) == []          # unfollowed
    assert [r.post_id for r in env.rows("SELECT post_id FROM author_timeline")] == [p3, p1]
    deleted = env.rows("SELECT deleted FROM posts WHERE post_id=%s", p2)
    assert deleted and deleted[0].deleted is True
    assert follower_counts(env) == {author: 3, 99: 1}       # early, late, blocked (a block is not an unfollow)
    # One announcement per post made readable (not per inbox row, and not for early's
    # backfill of p1), keyed by its author; p1 again for its duplicated create, p2 never.
    events = read_topic(env.settings, author_events_topic(env.settings.topic_prefix))
    announced = [parse_author(v) for _, v in events]
    ours = collections.Counter(a.post_id for a in announced if a.author_id == author)
    assert set(ours) == {p1, p3}
    assert ours[p3] == 1 and ours[p1] <= 2

    assert [r.media for r in env.rows("SELECT media FROM posts WHERE post_id=%s", p1)] == [["m1", f"m{p1}"]]
    before = serving_state(env)
    env.start("services.fanout", "replay")  # a new group reads every topic from the start
    wait_for_workers(lambda: group_caught_up(env.settings, "replay", [cdc_topic(t, env.settings.topic_prefix)
                                                               for t in FANOUT_TOPICS]),
                     timeout=120, message="replay caught up")
    assert serving_state(env) == before


def test_sigkill_mid_fanout_then_restart_gives_every_follower_the_post_once(worker_env):
    env, e = worker_env, worker_env.events
    author, followers = 31, list(range(100_000, 102_000))
    since = _now() - timedelta(hours=1)
    env.send([m for f in followers for m in e.followed(f, author, since)])
    # Two writes in flight: slow enough that the kill lands mid-way.
    worker = env.start("services.fanout", "crash", fanout_max_in_flight=2, fanout_follower_page=100)
    wait_for_workers(lambda: follower_count(env, author) == len(followers), timeout=120,
                     message="follows applied")
    post = post_id_at(_now(), 7)
    env.send(e.post_created(e.post_row(post, author, _now())))
    written = wait_for_workers(lambda: env.rows("SELECT count(*) AS n FROM feed_inbox")[0].n,
                               timeout=60, interval=0.02, message="fan-out started")
    env.kill(worker)
    assert 0 < written < len(followers), "the kill must land in the middle of the fan-out"

    env.start("services.fanout", "crash")
    wait_for_workers(lambda: env.rows("SELECT count(*) AS n FROM feed_inbox")[0].n == len(followers),
                     timeout=120, message="fan-out completed after restart")
    per_reader = collections.Counter(r.reader_id for r in env.rows("SELECT reader_id, post_id FROM feed_inbox"))
    assert set(per_reader) == set(followers) and set(per_reader.values()) == {1}


def test_tier_transitions_never_lose_or_duplicate_a_post(worker_env):
    env, e = worker_env, worker_env.events
    author, steady, crowd = 41, [51, 52, 53], list(range(60, 66))
    since = _now() - timedelta(hours=1)
    # Capacity pinned at 10 rows/s: cost = followers/10 s; promote above 0.75 s (8+
    # followers), demote below 0.375 s (3 or fewer).
    env.start("services.fanout", "tiers", fanout_capacity_pinned_rows_per_s=10.0)

    def followers_are(n: int) -> None:
        wait_for_workers(lambda: follower_count(env, author) == n, message=f"{n} followers")

    def post(seq: int) -> int:
        p = post_id_at(_now(), seq)
        env.send(e.post_created(e.post_row(p, author, _now())))
        wait_for_workers(lambda: env.rows("SELECT fanned_out FROM posts WHERE post_id=%s", p)
                         and env.rows("SELECT fanned_out FROM posts WHERE post_id=%s", p)[0].fanned_out is not None,
                         message=f"post {seq} routed")
        return p

    env.send([m for r in steady for m in e.followed(r, author, since)])
    followers_are(3)
    p1 = post(1)
    env.send([m for r in crowd for m in e.followed(r, author, since)])
    followers_are(9)
    p2 = post(2)
    tier = env.rows("SELECT tier FROM author_tiers WHERE author_id=%s", author)[0].tier
    assert tier == "celebrity"
    celeb = env.rows("SELECT until FROM celebrities WHERE shard=%s AND author_id=%s",
                     CELEBRITY_SHARD, author)
    assert celeb and celeb[0].until is None
    env.send([m for r in crowd for m in e.unfollowed(r, author, since)])
    followers_are(3)
    p3 = post(3)
    assert env.rows("SELECT tier FROM author_tiers WHERE author_id=%s", author)[0].tier == "ordinary"
    celeb = env.rows("SELECT until FROM celebrities WHERE shard=%s AND author_id=%s",
                     CELEBRITY_SHARD, author)
    assert celeb and celeb[0].until is not None  # still merged by readers while p2 is fresh

    # The read path: inbox ∪ partitions of listed (current or recently demoted) celebrities,
    # deduplicated by post_id.
    merged_authors = [r.author_id for r in env.rows("SELECT author_id FROM celebrities WHERE shard=%s",
                                                    CELEBRITY_SHARD)]
    assert merged_authors == [author]
    for reader in steady:
        assert env.inbox(reader) == [p3, p1]  # p2 lives only in the author partition
        candidates = env.inbox(reader) + _author_partition(env, merged_authors, [p1, p2, p3])
        assert set(candidates) == {p1, p2, p3}  # nothing lost; dedupe by post_id does the rest


def test_a_started_worker_takes_its_groups_saved_capacity_instead_of_the_floor(worker_env):
    """The capacity its group measured before (``fanout_capacity``) is where a new worker
    starts: at the assumed floor of 1 row/s an author of 9 followers would cost 9 s a
    post and be promoted; at the saved 1,000 rows/s it stays ordinary."""
    env, e = worker_env, worker_env.events
    author, crowd = 42, list(range(70, 79))
    since = _now() - timedelta(hours=1)
    env.session.execute("INSERT INTO fanout_capacity (name, rows_per_s, measured_at) VALUES (%s, %s, %s)",
                        ("restored", 1000.0, _now() - timedelta(minutes=5)))
    env.start("services.fanout", "restored", fanout_capacity_pinned_rows_per_s=0.0,
              fanout_capacity_floor_rows_per_s=1.0)
    env.send([m for r in crowd for m in e.followed(r, author, since)])
    wait_for_workers(lambda: follower_count(env, author) == len(crowd), message="9 followers")
    p = post_id_at(_now(), 1)
    env.send(e.post_created(e.post_row(p, author, _now())))
    wait_for_workers(lambda: all(env.inbox(r) == [p] for r in crowd), message="the post in every inbox")
    assert env.rows("SELECT tier FROM author_tiers WHERE author_id=%s", author) == []  # never changed
    assert env.rows("SELECT author_id FROM celebrities WHERE shard=%s AND author_id=%s",
                    CELEBRITY_SHARD, author) == []
    logs = b"".join(f.read_bytes() for f in env.log_dir.glob("services.fanout-restored-*.log"))
    assert b"fan-out capacity restored: 1000 rows/s" in logs


def _author_partition(env, authors: list[int], posts: list[int]) -> list[int]:
    from services.shared.domain import ids
    out = []
    for a in authors:
        for bucket in sorted({ids.day_bucket(p) for p in posts}):
            out += [r.post_id for r in env.rows(
                "SELECT post_id FROM author_timeline WHERE author_id=%s AND bucket=%s", a, bucket)]
    return out


def test_poison_message_goes_to_dlq_and_later_messages_still_apply(worker_env):
    env, e = worker_env, worker_env.events
    author, reader = 71, 72
    now = _now()
    good = post_id_at(now, 9)
    topic = cdc_topic("posts", env.settings.topic_prefix)
    key = json.dumps({"post_id": good}).encode()  # same key: same partition as the good post
    env.send(e.followed(reader, author, now - timedelta(hours=1)),
             [CdcMessage(topic, key, b'{"op": "c", "after": "not a row"')],
             e.post_created(e.post_row(good, author, now)))
    env.start("services.fanout", "poison")
    wait_for_workers(lambda: env.inbox(reader) == [good], timeout=90, message="later post applied")
    letters = read_topic(env.settings, dlq_topic(topic), with_headers=True)
    assert len(letters) == 1
    headers = dict(letters[0][2])
    assert headers["dlq.error.class"].endswith(b"MalformedEnvelope")
    assert headers["dlq.original.topic"] == topic.encode()
    assert {"dlq.error.message", "dlq.original.partition", "dlq.original.offset"} <= set(headers)


def test_a_late_fanout_keeps_the_posts_inbox_expiry_and_skips_posts_too_old_for_any_inbox(worker_env):
    """A replay or a worker catching up writes rows that expire 7 days after the post was
    made, not 7 days after the write; a post older than that gets no rows at all."""
    env, e = worker_env, worker_env.events
    now = _now()
    author, reader = 41, 42
    six_days, eight_days = now - timedelta(days=6), now - timedelta(days=8)
    recent, old = post_id_at(six_days, 1), post_id_at(eight_days, 2)
    env.send(e.followed(reader, author, now - timedelta(days=30)),
             e.post_created(e.post_row(recent, author, six_days)),
             e.post_created(e.post_row(old, author, eight_days)))
    env.start("services.fanout", "late")
    wait_for_workers(lambda: group_caught_up(env.settings, "late", [cdc_topic(t, env.settings.topic_prefix)
                                                             for t in FANOUT_TOPICS]),
                     timeout=120, message="worker caught up")
    assert env.inbox(reader) == [recent]
    ttl = env.rows("SELECT TTL(author_id) AS ttl FROM feed_inbox WHERE reader_id=%s AND post_id=%s "
                   "ALLOW FILTERING", reader, recent)[0].ttl
    assert 86_400 - 600 < ttl <= 86_400      # one day left, not seven
    fanned = env.rows("SELECT fanned_out FROM posts WHERE post_id=%s", old)
    assert fanned and fanned[0].fanned_out is False
