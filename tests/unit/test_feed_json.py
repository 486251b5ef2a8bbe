"""The feed page's body (routes/feed.py ``page_json``), joined from kept item heads and name
tails, is the document the response model describes (``page_out``), whatever the fields."""
from __future__ import annotations

from datetime import datetime, timezone

import orjson
import pytest

from services.api.copies.post_view import PostBody
from services.api.feed.reader import FeedPage, PageItem
from services.api.routes import feed as route
from services.shared.domain.ranking import Ranked
from services.shared.domain.rules import iso_utc

AT = datetime(2026, 12, 6, 10, 0, 0, 123_000, tzinfo=timezone.utc)


def page(items: list[PageItem], order: str = "ranked", warnings: list[str] | None = None) -> FeedPage:
    return FeedPage(items, "c.u.r.s.o.r", "v1", AT, warnings or [], order)


def item(post_id: int, body: PostBody, **fields: object) -> PageItem:
    return PageItem(Ranked(1_000.5 + post_id, post_id, body.author_id), body, **fields)  # type: ignore[arg-type]


def same_document(p: FeedPage) -> dict[str, object]:
    body = orjson.loads(route.page_json(p))
    assert body == route.page_out(p).model_dump(mode="json", exclude_unset=True)
    route.FeedPageOut.model_validate(body)
    return body


@pytest.mark.parametrize("order", ["ranked", "latest"])
def test_every_kind_of_field_reads_back_as_the_models_document(order: str) -> None:
    odd = PostBody(7, 1_765_000_000_123, 'quote " back \\ slash, new\nline, ünïcode 🎉', ("m1", "m2"))
    plain = PostBody(8, 1_765_000_001_000, "plain")
    items = [item(11, odd, like_count=3, liked=True, author_handle="ada", author_display_name="Ada \"L\""),
             item(12, plain, like_count=0, liked=False),
             item(13, plain, like_count=None, liked=None, author_handle=None, author_display_name="Bob")]
    body = same_document(page(items, order, ["stale_post_states"]))
    assert [i["post_id"] for i in body["items"]] == ["11", "12", "13"]  # type: ignore[index]
    assert body["warnings"] == ["stale_post_states"]
    assert same_document(page([], order))["items"] == []


def test_a_kept_head_serves_only_the_body_it_was_made_from() -> None:
    first = PostBody(7, 1_765_000_000_000, "first text")
    same_document(page([item(21, first)]))
    same_document(page([item(21, first)]))                   # kept: the same bytes again
    again = PostBody(7, 1_765_000_000_000, "another copy's text")
    body = same_document(page([item(21, again)]))           # a new body: made afresh
    assert body["items"][0]["text"] == "another copy's text"  # type: ignore[index]


def test_the_kept_heads_and_names_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(route, "ITEM_HEADS", 4)
    monkeypatch.setattr(route, "_heads", {})
    monkeypatch.setattr(route, "_name_tails", {})
    for n in range(10):
        same_document(page([item(100 + n, PostBody(n, 1_765_000_000_000, f"t{n}"),
                                 author_handle=f"h{n}")]))
    assert len(route._heads) <= 4 and len(route._name_tails) <= 4


def test_generated_at_reads_as_iso_utc_for_times_in_any_order() -> None:
    # Reused snapshots carry the times they were built at: one process formats seconds
    # out of order, and each must read as the models' document does.
    times = [AT, datetime(2026, 12, 6, 9, 59, 58, 999_000, tzinfo=timezone.utc), AT,
             datetime(2026, 12, 7, 0, 0, 0, 0, tzinfo=timezone.utc),
             datetime(2026, 12, 6, 9, 59, 58, 1_000, tzinfo=timezone.utc)]
    assert [route._generated_at(t) for t in times] == [iso_utc(t) for t in times]
