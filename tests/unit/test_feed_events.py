"""The fan-out's feed events (services/shared/contracts/feed_events.py): what the fan-out encodes
the API's stream consumer parses back, ids are deterministic, records from before
``event_id`` still parse, and a malformed record is refused with a clear error."""
from __future__ import annotations

import asyncio
import json
from datetime import datetime, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.api.stream.consumer import _dispatch
from services.shared.contracts import topics
from services.shared.contracts.envelope import MalformedEnvelope
from services.shared.contracts.feed_events import AuthorPosted, author_event_id, encode, parse_author
from tests.support.schemas import examples_for, schema_for, validation_errors

T = datetime(2026, 11, 29, 10, 1, 0, 500000, tzinfo=timezone.utc)
POST, AUTHOR = 1311768467294912, 1311768467294800

IDS = st.integers(min_value=0, max_value=2**63 - 1)


@given(post=IDS, author=IDS,
       created=st.datetimes(min_value=datetime(2026, 1, 1), max_value=datetime(2099, 12, 31),
                            timezones=st.just(timezone.utc)))
def test_an_author_event_round_trips_and_conforms_to_its_schema(post, author, created):
    event = AuthorPosted(author, post, created.replace(microsecond=created.microsecond // 1000 * 1000))
    key, value = encode(event)
    assert parse_author(value) == event
    assert json.loads(key) == str(author)
    assert validation_errors("author-events", json.loads(key), json.loads(value)) == []


def test_event_ids_are_derived_from_what_the_event_is_about():
    assert AuthorPosted(1, 10, T).event_id == author_event_id(1, 10) == "author:1:10"


def test_a_replay_of_the_same_change_encodes_the_same_event_id():
    # A replay re-derives the event from the same source change; nothing of the delivery
    # (time, offset) is part of the id, and different posts get different ids.
    assert encode(AuthorPosted(1, 10, T)) == encode(AuthorPosted(1, 10, T))
    assert len({AuthorPosted(1, 10, T).event_id, AuthorPosted(1, 11, T).event_id,
                AuthorPosted(2, 10, T).event_id}) == 3


def test_every_example_is_parsed_by_the_stream_consumer():
    for ex in examples_for("author-events"):
        posted = parse_author(json.dumps(ex.value).encode())
        assert posted.event_id == ex.value["event_id"], ex.name
        assert str(posted.author_id) == ex.key == ex.value["author_id"]
        assert encode(posted)[1] == json.dumps(ex.value, separators=(",", ":")).encode()


def test_inbox_events_is_retired_its_schema_deprecated_and_the_topic_not_created():
    for part in ("key", "value"):
        assert schema_for("inbox-events", part).get("deprecated") is True
    assert not [t for t in topics.all_topics("feed") if "inbox-events" in t.name]


def test_a_record_from_before_event_ids_parses_with_the_derived_id():
    legacy_author = b'{"author_id":"1","post_id":"10","created_at":"2026-11-29T10:01:00.500Z"}'
    assert parse_author(legacy_author) == AuthorPosted(1, 10, T)
    assert parse_author(legacy_author).event_id == "author:1:10"


def test_a_field_this_version_does_not_know_is_ignored():
    value = b'{"event_id":"author:1:10","author_id":"1","post_id":"10",' \
            b'"created_at":"2026-11-29T10:01:00.500Z","new_field":true}'
    assert parse_author(value) == AuthorPosted(1, 10, T)


_AUTHOR = {"event_id": "author:1:10", "author_id": "1", "post_id": "10",
           "created_at": "2026-11-29T10:01:00.500Z"}


@pytest.mark.parametrize("bad, says", [
    (b"not json", "not JSON"),
    (b"null", "null"),
    (None, "null"),
    (b"[]", "not an object"),
    (b"{}", "author_id"),
    (json.dumps({**_AUTHOR, "author_id": 7}).encode(), "author_id"),
    (json.dumps({k: v for k, v in _AUTHOR.items() if k != "post_id"}).encode(), "post_id"),
    (json.dumps({**_AUTHOR, "post_id": "-10"}).encode(), "post_id"),
    (json.dumps({**_AUTHOR, "post_id": str(1 << 63)}).encode(), "post_id"),
    (json.dumps({k: v for k, v in _AUTHOR.items() if k != "created_at"}).encode(), "created_at"),
    (json.dumps({**_AUTHOR, "created_at": "yesterday"}).encode(), "timestamp"),
    (json.dumps({**_AUTHOR, "event_id": ""}).encode(), "event_id"),
    (json.dumps({**_AUTHOR, "event_id": 5}).encode(), "event_id"),
    (b'"author:1:10"', "not an object"),
])
def test_a_malformed_author_event_is_refused_with_a_clear_error(bad, says):
    with pytest.raises(MalformedEnvelope, match=says):
        parse_author(bad)


class _Hub:
    """What ``_dispatch`` hands the hub, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    async def author_posted(self, author_id: int, post_id: int) -> int:
        self.calls.append((author_id, post_id))
        return 1 if author_id == 1 else 0


def test_the_stream_consumer_dispatches_parsed_events_old_and_new():
    hub = _Hub()
    legacy = b'{"author_id":"1","post_id":"10","created_at":"2026-11-29T10:01:00.500Z"}'

    async def scenario() -> list[str]:
        return [await _dispatch(hub, encode(AuthorPosted(1, 11, T))[1]),  # type: ignore[arg-type]
                await _dispatch(hub, legacy),  # type: ignore[arg-type]
                await _dispatch(hub, encode(AuthorPosted(2, 12, T))[1]),  # type: ignore[arg-type]
                await _dispatch(hub, None)]  # type: ignore[arg-type]

    assert asyncio.run(scenario()) == ["sent", "sent", "not_routed", "empty"]
    assert hub.calls == [(1, 11), (1, 10), (2, 12)]
    with pytest.raises(MalformedEnvelope):
        asyncio.run(_dispatch(hub, b'{"post_id":"1"}'))  # type: ignore[arg-type]
