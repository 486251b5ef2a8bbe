"""The user lists' pure parts: list cursors, newest-first ordering, and eligibility of
an author's posts."""
from __future__ import annotations

import base64

import pytest

from services.api.feed.user_lists import day_floor, follows_below, posts_below
from services.api.snapshots.cursor import Cursor, CursorKeys, CursorRejected, encode_cursor
from services.api.snapshots.list_cursor import (FOLLOWERS, FOLLOWING, POSTS, ListCursor,
                                                decode_list_cursor, encode_list_cursor)
from services.api.visibility.eligibility import PostState, Verdict, judge_authored
from services.api.visibility.recent_changes import ReaderChanges
from services.shared.domain import ids
from services.shared.domain.rules import REMOVED, VISIBLE

KEYS = CursorKeys.parse("k2:new-secret-0123456789abcdef,k1:old-secret-0123456789abcdef")
CURSOR = ListCursor(FOLLOWERS, reader_id=42, subject_id=7, major=1_790_000_000_123, minor=99)


def decode(token: str, kind: str = FOLLOWERS, reader: int = 42, subject: int = 7) -> ListCursor:
    return decode_list_cursor(token, KEYS, kind=kind, reader_id=reader, subject_id=subject)


def test_a_list_cursor_round_trips() -> None:
    assert decode(encode_list_cursor(CURSOR, KEYS)) == CURSOR
    posts = ListCursor(POSTS, 42, 7, (1 << 63) - 1)
    assert decode(encode_list_cursor(posts, KEYS), POSTS) == posts


@pytest.mark.parametrize("kind,reader,subject,reason", [
    (FOLLOWING, 42, 7, "not a cursor of this list"),
    (FOLLOWERS, 42, 8, "not a cursor of this list"),
    (FOLLOWERS, 43, 7, "another reader")])
def test_a_cursor_of_another_list_user_or_reader_is_refused(kind: str, reader: int, subject: int,
                                                            reason: str) -> None:
    with pytest.raises(CursorRejected, match=reason):
        decode(encode_list_cursor(CURSOR, KEYS), kind, reader, subject)


def test_a_tampered_cursor_is_refused() -> None:
    body, kid, mac = encode_list_cursor(CURSOR, KEYS).split(".")
    raw = bytearray(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    raw[-3] ^= 1
    forged = base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()
    with pytest.raises(CursorRejected, match="signature"):
        decode(f"{forged}.{kid}.{mac}")
    with pytest.raises(CursorRejected, match="unknown key"):
        decode(f"{body}.k9.{mac}")
    for junk in ("", "a.b", "x" * 600, "é.k1.x"):
        with pytest.raises(CursorRejected):
            decode(junk)


def test_a_feed_cursor_is_not_a_list_cursor() -> None:
    feed = encode_cursor(Cursor(42, "v-1", 1.5, 9), KEYS)
    with pytest.raises(CursorRejected, match="not a cursor of this list"):
        decode(feed)


def test_posts_are_newest_first_once_and_below_the_boundary() -> None:
    rows = [(3.0, 10, 1), (9.0, 30, 1), (1.0, 20, 1), (5.0, 30, 1), (2.0, 40, 1)]
    assert posts_below(rows, 1 << 63) == [40, 30, 20, 10]
    assert posts_below(rows, 30) == [20, 10]


def test_follows_are_newest_first_by_since_then_id_and_resume_strictly_below() -> None:
    rows = [(5, 1000), (9, 3000), (7, 3000), (2, None), (8, 2000)]
    ordered = follows_below(rows, None)
    assert [(e.user_id, e.following_since_ms) for e in ordered] == [
        (9, 3000), (7, 3000), (8, 2000), (5, 1000), (2, 0)]
    rest = follows_below(rows, (3000, 7))
    assert [e.user_id for e in rest] == [8, 5, 2]


def test_a_day_floor_is_the_first_id_of_its_day() -> None:
    floor = day_floor(300)
    assert ids.day_bucket(floor) == 300 and ids.day_bucket(floor - 1) == 299


def post(deleted: bool = False, visibility: int = VISIBLE, author: int = 5) -> PostState:
    return PostState(11, author, 1_790_000_000_000, visibility, deleted)


def test_an_authors_post_is_judged_without_follows() -> None:
    assert judge_authored(post(), 5, frozenset()) is Verdict.ELIGIBLE
    assert judge_authored(None, 5, frozenset()) is Verdict.MISSING
    assert judge_authored(post(author=6), 5, frozenset()) is Verdict.MISSING
    assert judge_authored(post(deleted=True), 5, frozenset()) is Verdict.DELETED
    assert judge_authored(post(visibility=REMOVED), 5, frozenset()) is Verdict.REMOVED
    assert judge_authored(post(), 5, frozenset({5})) is Verdict.BLOCKED


def test_the_log_hides_an_authors_post_but_an_unfollow_does_not() -> None:
    unfollowed = ReaderChanges({}, {5: None}, frozenset())
    assert judge_authored(post(), 5, frozenset(), unfollowed) is Verdict.ELIGIBLE
    deleted = ReaderChanges({11: 3}, {}, frozenset())
    assert judge_authored(post(), 5, frozenset(), deleted) is Verdict.FENCED
    blocked = ReaderChanges({}, {}, frozenset({5}))
    assert judge_authored(post(), 5, frozenset(), blocked) is Verdict.FENCED
    # A mute hides the author from the muter's home feed only, not from their timeline.
    muted = ReaderChanges({}, {}, frozenset(), frozenset({5}))
    assert judge_authored(post(), 5, frozenset(), muted) is Verdict.ELIGIBLE
    assert judge_authored(post(), 5, frozenset({5}), muted) is Verdict.BLOCKED
