"""The read-time filter: every reason a post must not be shown."""
from __future__ import annotations

import pytest

from services.api.visibility.eligibility import PostState, ReaderGraph, Verdict, judge

READER, AUTHOR = 1, 2
GRAPH = ReaderGraph(READER, {AUTHOR: 1_000}, frozenset())


def post(**changes: object) -> PostState:
    fields = dict(post_id=10, author_id=AUTHOR, created_at_ms=2_000, visibility=1, deleted=False)
    fields.update(changes)
    return PostState(**fields)  # type: ignore[arg-type]


def test_visible_post_of_a_followed_author_is_eligible() -> None:
    assert judge(post(), GRAPH) is Verdict.ELIGIBLE


@pytest.mark.parametrize("state, verdict", [
    (None, Verdict.MISSING),
    (post(author_id=None), Verdict.MISSING),
    (post(deleted=True), Verdict.DELETED),
    (post(deleted=True, visibility=0), Verdict.DELETED),
    (post(visibility=0), Verdict.REMOVED),
    (post(visibility=None), Verdict.REMOVED),
    (post(author_id=3), Verdict.NOT_FOLLOWED),
    (post(created_at_ms=999), Verdict.BEFORE_FOLLOW),
])
def test_ineligible_posts_say_why(state: PostState | None, verdict: Verdict) -> None:
    assert judge(state, GRAPH) is verdict


def test_block_in_either_direction_hides_the_author() -> None:
    blocked = ReaderGraph(READER, {AUTHOR: 0}, frozenset({AUTHOR}))
    assert judge(post(), blocked) is Verdict.BLOCKED


def test_post_created_exactly_at_following_since_is_eligible() -> None:
    assert judge(post(created_at_ms=1_000), GRAPH) is Verdict.ELIGIBLE
