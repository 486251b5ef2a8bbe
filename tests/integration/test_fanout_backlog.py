"""The backlog intake on real Kafka and Cassandra (docs/fanout.md, "The backlog intake"): a
batch that mixes posts older than the inbox TTL (taken in together) with recent ones
(post by post), an ordinary author and a celebrity, creates with their deletes, removals,
restores and edits in the same batch, ends with exactly the right copies, timeline rows
and inbox rows; a replay of the whole batch changes nothing, and a worker killed in the
middle of a backlog of old posts converges once restarted."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from bench.harness.cdc_events import post_id_at
from bench.harness.pipeline import group_caught_up
from deploy.lag import scrape
from services.shared.contracts.feed_events import parse_author
from services.shared.contracts.topics import author_events_topic, cdc_topic
from tests.support.kafka_topics import read_topic
from tests.support.processes import free_port
from tests.support.worker_env import follower_counts, serving_state, wait_for_workers

FANOUT_TOPICS = ("posts", "follows", "blocks")


def _caught_up(env, group: str) -> None:
    topics = [cdc_topic(t, env.settings.topic_prefix) for t in FANOUT_TOPICS]
    wait_for_workers(lambda: group_caught_up(env.settings, group, topics), timeout=120,
                     message=f"{group} caught up")


def _backlog_posts(port: int) -> dict[str, float]:
    return {labels["outcome"]: value for labels, value
            in scrape(port).get("feed_fanout_backlog_posts_total", [])}


def _timeline(env) -> set[int]:
    return {r.post_id for r in env.rows("SELECT post_id FROM author_timeline")}


def _copies(env) -> dict[int, tuple]:
    return {r.post_id: (r.visibility, r.deleted, r.fanned_out, r.text)
            for r in env.rows("SELECT post_id, visibility, deleted, fanned_out, text FROM posts")}


def test_a_backlog_of_old_and_recent_posts_ends_exact_and_replays_to_the_same_rows(worker_env):
    env, e = worker_env, worker_env.events
    now = datetime.now(timezone.utc)
    long_ago = now - timedelta(days=60)
    author, star = 71, 72
    fans = [101, 102]
    crowd = list(range(200, 210))
    # Capacity pinned at 10 rows/s: 10 followers cost 1 s (celebrity), 2 cost 0.2 s (ordinary).
    overrides = {"fanout_capacity_pinned_rows_per_s": 10.0, "consumer_batch_within_s": 1.0}
    env.send(*(e.followed(f, author, long_ago) for f in fans),
             *(e.followed(f, star, long_ago) for f in crowd))
    port = free_port()
    worker = env.start("services.fanout", "backlog", fanout_metrics_port=port, **overrides)
    wait_for_workers(lambda: follower_counts(env) == {author: 2, star: 10}, message="follows counted")
    env.stop(worker)

    def post(seq: int, by: int, age: timedelta) -> dict:
        return e.post_row(post_id_at(now - age, seq), by, now - age)

    kept, gone, restored, edited = (post(i, author, timedelta(days=10 + i)) for i in range(1, 5))
    old_star = post(5, star, timedelta(days=20))
    fresh, fresh_gone = post(6, author, timedelta(hours=1)), post(7, author, timedelta(hours=2))
    star_fresh = post(8, star, timedelta(minutes=30))
    removed = {**restored, "visibility": 0}
    edit = {**edited, "text": "edited"}
    # One batch: every post's changes in offset order, old and recent interleaved.
    env.send(e.post_created(kept), e.post_created(fresh), e.post_created(gone),
             e.post_created(restored), e.post_created(star_fresh), e.post_deleted(gone),
             e.post_updated(restored, removed), e.post_created(edited), e.post_created(old_star),
             e.post_created(fresh_gone), e.post_updated(removed, restored), e.post_updated(edited, edit),
             e.post_deleted(fresh_gone))
    env.start("services.fanout", "backlog", fanout_metrics_port=port, **overrides)
    _caught_up(env, "backlog")

    ids = {name: row["post_id"] for name, row in (("kept", kept), ("gone", gone), ("restored", restored),
                                                  ("edited", edited), ("old_star", old_star), ("fresh", fresh),
                                                  ("fresh_gone", fresh_gone), ("star_fresh", star_fresh))}
    # The old posts went together, in one batch: the create and delete of `gone` met there
    # and wrote nothing but the copy.
    assert _backlog_posts(port) == {"kept": 4, "dropped": 0, "unchanged": 1, "per_post": 0}
    # Copies: (visibility, deleted, fanned_out, text). Old posts are marked not fanned out
    # (clean-up and backfill skip them), the celebrity's recent post too; `gone` never
    # materialized, `fresh_gone` did (its delete came after its fan-out, post by post).
    assert _copies(env) == {
        ids["kept"]: (1, False, False, "hello"), ids["gone"]: (0, True, None, "hello"),
        ids["restored"]: (1, False, False, "hello"), ids["edited"]: (1, False, False, "edited"),
        ids["old_star"]: (1, False, False, "hello"), ids["fresh"]: (1, False, True, "hello"),
        ids["fresh_gone"]: (0, True, True, "hello"), ids["star_fresh"]: (1, False, False, "hello")}
    assert _timeline(env) == {ids[n] for n in ("kept", "restored", "edited", "old_star", "fresh", "star_fresh")}
    # Inbox rows only for the ordinary author's recent visible post; none for the old ones,
    # none for the celebrity (read from its partition), none left for the deleted one.
    assert {f: env.inbox(f) for f in fans} == {f: [ids["fresh"]] for f in fans}
    assert all(env.inbox(f) == [] for f in crowd)
    # Announced: the recent posts made readable, never an old one.
    announced = {parse_author(v).post_id for _k, v in
                 read_topic(env.settings, author_events_topic(env.settings.topic_prefix))}
    assert announced - {ids["fresh_gone"]} == {ids["fresh"], ids["star_fresh"]}

    before = serving_state(env)
    replay_port = free_port()
    env.start("services.fanout", "replay", fanout_metrics_port=replay_port, **overrides)
    _caught_up(env, "replay")                          # every batch again, from the start
    assert serving_state(env) == before
    assert _backlog_posts(replay_port)["kept"] == 4     # ... taken together again


def test_a_worker_killed_mid_backlog_converges_after_restart(worker_env):
    env, e = worker_env, worker_env.events
    now = datetime.now(timezone.utc)
    author, fan = 81, 181
    env.send(e.followed(fan, author, now - timedelta(days=60)))
    rows = [e.post_row(post_id_at(now - timedelta(days=8, minutes=i), i), author,
                       now - timedelta(days=8, minutes=i)) for i in range(3000)]
    deleted = rows[::7]
    env.send([m for r in rows for m in e.post_created(r)], [m for r in deleted for m in e.post_deleted(r)])
    # Small statements in flight: slow enough for the kill to land while batches apply.
    worker = env.start("services.fanout", "crash", store_max_in_flight=8, store_min_in_flight=8)
    written = wait_for_workers(lambda: env.rows("SELECT count(*) AS n FROM author_timeline")[0].n,
                               timeout=120, interval=0.02, message="the backlog started")
    env.kill(worker)
    assert written < len(rows) - len(deleted), "the kill must land in the middle of the backlog"

    env.start("services.fanout", "crash")
    _caught_up(env, "crash")
    print(f"killed with {written} of {len(rows) - len(deleted)} timeline rows written")
    gone = {r["post_id"] for r in deleted}
    assert _timeline(env) == {r["post_id"] for r in rows} - gone
    copies = _copies(env)
    assert len(copies) == len(rows)
    assert all(copies[p][:2] == ((0, True) if p in gone else (1, False)) for p in copies)
    assert env.inbox(fan) == []
