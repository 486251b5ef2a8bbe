"""The feed fast path's own checks: what it answers itself and what it leaves to FastAPI."""
from __future__ import annotations

from hypothesis import given, strategies as st

from services.api.routes.feed import DEFAULT_LIMIT, MAX_LIMIT
from services.api.routes.feed_fast import bearer_token, feed_query
from services.api.snapshots.cursor import MAX_CURSOR_CHARS


def test_plain_queries_are_answered_with_the_route_defaults() -> None:
    assert feed_query(b"") == (DEFAULT_LIMIT, None, None)
    assert feed_query(b"limit=5") == (5, None, None)
    assert feed_query(b"cursor=abc.def.ghi&limit=100") == (100, "abc.def.ghi", None)
    assert feed_query(b"utm_source=x&limit=7") == (7, None, None)  # FastAPI ignores unknown ones too
    assert feed_query(b"cursor=a%2Bb") == (DEFAULT_LIMIT, "a+b", None)
    assert feed_query(b"order=latest&limit=3") == (3, None, "latest")
    assert feed_query(b"order=ranked") == (DEFAULT_LIMIT, None, "ranked")


def test_anything_the_route_would_refuse_or_read_its_own_way_goes_to_the_route() -> None:
    for query in (b"limit=0", b"limit=101", b"limit=-1", b"limit=+5", b"limit=5.0", b"limit=",
                  b"limit=%205", b"limit=0005", b"cursor=", b"limit=5&limit=6",
                  b"cursor=a&cursor=b", "limit=\u0665".encode(), b"order=", b"order=LATEST",
                  b"order=newest", b"order=latest&order=ranked",
                  b"cursor=" + b"x" * (MAX_CURSOR_CHARS + 1)):
        assert feed_query(query) is None, query


@given(st.integers(min_value=-10, max_value=1000))
def test_limits_match_the_routes_bounds(limit: int) -> None:
    got = feed_query(f"limit={limit}".encode())
    assert (got is not None) == (1 <= limit <= MAX_LIMIT)
    if got is not None:
        assert got == (limit, None, None)


def _scope(*headers: tuple[bytes, bytes]) -> dict:
    return {"headers": list(headers)}


def test_bearer_token_is_read_like_httpbearer() -> None:
    assert bearer_token(_scope((b"authorization", b"Bearer abc"))) == "abc"
    assert bearer_token(_scope((b"authorization", b"bearer abc"))) == "abc"
    assert bearer_token(_scope((b"authorization", b"Basic abc"))) is None
    assert bearer_token(_scope((b"authorization", b"Bearer"))) is None
    assert bearer_token(_scope((b"x-other", b"Bearer abc"))) is None
