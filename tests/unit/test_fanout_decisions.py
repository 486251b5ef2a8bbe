"""Fan-out decisions (audience, clean-up, cap) and the poison-message rules. No services."""
from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone

import pytest

from services.fanout.audience import (Follower, PostAction, backfill_posts, post_action,
                                      readers_for_post, should_check_cap, trim_boundary)
from services.fanout.cleanup import (post_removal_reaches_inboxes, purges_for_block,
                                     purges_for_unfollow, rows_to_purge)
from services.fanout.tiering import Tier
from services.shared.contracts.envelope import MalformedEnvelope, parse_change
from services.shared.contracts.feed_events import AuthorPosted, encode
from services.shared.settings import Settings
from services.shared.worker.faust_app import RawMessage
from services.shared.worker.poison_guard import (FailureBudget, GuardedProcessing, WorkerMustStop,
                                                 backoff_delays, dead_letter_headers)
from tests.support.fakes import RecordingPublisher, TransientError

T = datetime(2026, 11, 1, 12, tzinfo=timezone.utc)


def _post(visibility=1, deleted_at=None):
    return {"post_id": 10, "author_id": 1, "created_at": "2026-11-01T12:00:00Z", "text": "t",
            "media_ids": "[]", "visibility": visibility, "deleted_at": deleted_at}


def _change(op, before=None, after=None, table="posts", lsn=100):
    return parse_change(b"{}", json.dumps({"op": op, "before": before, "after": after,
                                           "source": {"lsn": lsn, "table": table}}))


@pytest.mark.parametrize("op,before,after,action", [
    ("c", None, _post(), PostAction.MATERIALIZE),
    ("r", None, _post(), PostAction.MATERIALIZE),
    ("c", None, _post(visibility=0), PostAction.REMOVE),
    ("u", _post(), {**_post(), "text": "edited"}, PostAction.COPY_ONLY),
    ("u", _post(), _post(visibility=0), PostAction.REMOVE),           # moderation removal
    ("u", _post(visibility=0), _post(), PostAction.MATERIALIZE),      # restored
    ("u", _post(), _post(deleted_at="2026-11-01T13:00:00Z"), PostAction.REMOVE),  # soft delete
    ("d", _post(), None, PostAction.REMOVE),
])
def test_post_changes_map_to_inbox_actions(op, before, after, action):
    assert post_action(_change(op, before, after)) is action


def test_readers_are_followers_since_before_the_post_and_not_blocked():
    followers = [Follower(2, T - timedelta(hours=1)), Follower(3, T + timedelta(seconds=1)),
                 Follower(4, T), Follower(5, T - timedelta(days=1)), Follower(1, T - timedelta(days=1))]
    assert readers_for_post(1, T, followers, blocked={5}) == [2, 4]


def test_naive_following_times_are_utc_as_the_driver_reads_them():
    """The fan-out's follower pages keep the driver's naive UTC times; the same rule
    holds for them, against an aware or a naive post time, and for an aware post time
    in another zone."""
    naive = T.astimezone(timezone.utc).replace(tzinfo=None)
    followers = [Follower(2, naive - timedelta(hours=1)), Follower(3, naive + timedelta(seconds=1)),
                 Follower(4, naive), Follower(6, T - timedelta(minutes=1)), Follower(7, None)]
    assert readers_for_post(1, T, followers, blocked=set()) == [2, 4, 6]
    assert readers_for_post(1, naive, followers, blocked=set()) == [2, 4, 6]
    elsewhere = T.astimezone(timezone(timedelta(hours=7)))
    assert readers_for_post(1, elsewhere, followers, blocked=set()) == [2, 4, 6]


def test_inbox_rows_expire_a_ttl_after_the_post_was_made_not_after_the_write():
    from services.fanout.audience import inbox_ttl_s
    from services.shared.domain.rules import INBOX_TTL_S
    made = datetime(2026, 11, 1, tzinfo=timezone.utc)
    assert inbox_ttl_s(made, made) == INBOX_TTL_S == 7 * 86400
    assert inbox_ttl_s(made, made + timedelta(days=6)) == 86400      # a late fan-out
    assert inbox_ttl_s(made, made + timedelta(days=7)) == 0          # too old for an inbox
    assert inbox_ttl_s(made, made + timedelta(days=30)) == 0
    assert inbox_ttl_s(made, made - timedelta(seconds=5)) == INBOX_TTL_S  # clock skew: capped


def test_backfill_keeps_only_posts_made_since_following_since():
    assert backfill_posts([5, 9, 12], lowest_id=9) == [9, 12]


def test_cap_check_sampling_is_deterministic_and_roughly_one_in_n():
    picks = [should_check_cap(r, 123456789, 32) for r in range(32_000)]
    assert picks == [should_check_cap(r, 123456789, 32) for r in range(32_000)]
    assert 600 < sum(picks) < 1400
    assert all(should_check_cap(r, 1, 1) for r in range(10))


def test_trim_boundary_keeps_the_newest_cap_rows():
    assert trim_boundary([9, 8, 7, 6, 5], cap=3) == 7   # delete post_id < 7
    assert trim_boundary([9, 8, 7], cap=3) is None


def test_unfollow_purges_the_followers_inbox_and_follow_purges_nothing():
    row = {"follower_id": 2, "followed_id": 1, "following_since": "2026-11-01T00:00:00Z"}
    [purge] = purges_for_unfollow(_change("d", before=row, table="follows", lsn=77))
    assert (purge.reader_id, purge.author_id, purge.lsn) == (2, 1, 77)
    assert purges_for_unfollow(_change("c", after=row, table="follows")) == []


def test_block_purges_both_directions_and_unblock_purges_nothing():
    row = {"blocker_id": 1, "blocked_id": 2, "created_at": "2026-11-01T00:00:00Z"}
    purges = purges_for_block(_change("c", after=row, table="blocks"))
    assert {(p.reader_id, p.author_id) for p in purges} == {(1, 2), (2, 1)}
    assert purges_for_block(_change("d", before=row, table="blocks")) == []


def test_rows_to_purge_selects_the_authors_rows():
    rows = [(3.5, 10, 1), (3.0, 11, 2), (2.5, 12, 1)]  # (rank_key, post_id, author_id)
    assert rows_to_purge(rows, author_id=1) == [(3.5, 10), (2.5, 12)]


def test_removal_walks_inboxes_only_for_posts_that_were_fanned_out():
    assert post_removal_reaches_inboxes(True, Tier.CELEBRITY)
    assert not post_removal_reaches_inboxes(False, Tier.ORDINARY)
    assert post_removal_reaches_inboxes(None, Tier.ORDINARY)
    assert not post_removal_reaches_inboxes(None, Tier.CELEBRITY)


def test_events_carry_ids_as_strings_keyed_by_author():
    key, value = encode(AuthorPosted(1, 10, T))
    assert key == b'"1"' and json.loads(value) == {"event_id": "author:1:10", "author_id": "1",
                                                 "post_id": "10",
                                                 "created_at": "2026-11-01T12:00:00.000Z"}


# -- poison messages ----------------------------------------------------------------------
MSG = RawMessage("t.public.posts", 2, 41, b"{}", b"x")


def _guard(publisher, **kw):
    s = Settings(consumer_max_attempts=3, store_retry_attempts=3, store_retry_base_s=0.01,
                 consumer_failure_window=10, consumer_max_failure_share=0.5, **kw)
    slept = []

    async def sleep(d):
        slept.append(d)
    return GuardedProcessing(s, publisher, (TransientError,), sleep=sleep), slept


def test_poison_is_retried_then_dead_lettered_with_the_error_in_headers():
    pub, calls = RecordingPublisher(), []
    guard, _ = _guard(pub)

    async def handle(msg):
        calls.append(msg)
        raise MalformedEnvelope("bad row")
    assert asyncio.run(guard.process(MSG, handle)) == "dead_letter"
    assert len(calls) == 3
    [(topic, key, value, headers)] = pub.sent
    assert topic == "t.public.posts.dlq" and value == b"x"
    assert headers["dlq.error.class"] == b"services.shared.contracts.envelope.MalformedEnvelope"
    assert headers["dlq.error.message"] == b"bad row"
    assert (headers["dlq.original.partition"], headers["dlq.original.offset"]) == (b"2", b"41")


def test_transient_errors_back_off_then_stop_the_worker_without_dead_lettering():
    pub = RecordingPublisher()
    guard, slept = _guard(pub)

    async def handle(msg):
        raise TransientError("timeout")
    with pytest.raises(WorkerMustStop):
        asyncio.run(guard.process(MSG, handle))
    assert slept == [0.01, 0.02] and pub.sent == []


def test_transient_error_that_clears_is_applied():
    pub, attempts = RecordingPublisher(), []
    guard, _ = _guard(pub)

    async def handle(msg):
        attempts.append(1)
        if len(attempts) < 2:
            raise TransientError("blip")
    assert asyncio.run(guard.process(MSG, handle)) == "ok"


def test_too_many_failures_stop_the_worker():
    budget = FailureBudget(window=10, max_share=0.5, min_samples=4)
    for failed in (True, False, True):
        budget.record(failed)
    assert not budget.exhausted  # too few samples to call it a pattern
    budget.record(True)
    assert budget.exhausted
    for _ in range(10):
        budget.record(False)
    assert not budget.exhausted


def test_backoff_doubles_and_is_capped():
    assert backoff_delays(5, 1.0, cap_s=5.0) == [1.0, 2.0, 4.0, 5.0]


def test_dead_letter_headers_keep_the_original_headers():
    h = dead_letter_headers(RawMessage("a", 0, 1, None, None, (("trace", b"1"),)), ValueError("x"), 3)
    assert h[0] == ("trace", b"1") and ("dlq.attempts", b"3") in h
