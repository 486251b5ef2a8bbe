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
from services.shared.contracts.envelope import MalformedEnvelope
from services.shared.contracts.feed_events import (CelebrityPosted, PostLandedInInbox,
                                                   author_event_id, encode, encode_landed,
                                                   inbox_event_id, parse_author, parse_inbox)
from tests.support.schemas import examples_for, validation_errors

T = datetime(2026, 11, 29, 10, 1, 0, 500000, tzinfo=timezone.utc)
READER, POST, AUTHOR = 1311768467294899, 1311768467294912, 1311768467294800


IDS = st.integers(min_value=0, max_value=2**63 - 1)


@given(readers=st.lists(IDS, max_size=20), post=IDS, author=IDS,
       created=st.datetimes(min_value=datetime(2026, 1, 1), max_value=datetime(2099, 12, 31),
                            timezones=st.just(timezone.utc)))
def test_a_page_of_inbox_events_is_what_encode_makes_one_by_one(readers, post, author, created):
    assert encode_landed(readers, post, author, created) == [
        encode(PostLandedInInbox(r, post, author, created)) for r in readers]


def test_an_inbox_event_round_trips_and_conforms_to_its_schema():
    event = PostLandedInInbox(READER, POST, AUTHOR, T)
    key, value = encode(event)
    assert parse_inbox(value) == event
    assert json.loads(key) == str(READER)
    assert validation_errors("inbox-events", json.loads(key), json.loads(value)) == []


def test_an_author_event_round_trips_and_conforms_to_its_schema():
    event = CelebrityPosted(AUTHOR, POST, T)
    key, value = encode(event)
    assert parse_author(value) == event
    assert json.loads(key) == str(AUTHOR)
    assert validation_errors("author-events", json.loads(key), json.loads(value)) == []


def test_event_ids_are_derived_from_what_the_event_is_about():
    assert PostLandedInInbox(7, 10, 1, T).event_id == inbox_event_id(7, 10) == "inbox:7:10"
    assert CelebrityPosted(1, 10, T).event_id == author_event_id(1, 10) == "author:1:10"


def test_a_replay_of_the_same_change_encodes_the_same_event_id():
    # A replay re-derives the event from the same source change: same reader, post and
    # author; nothing of the delivery (time, offset) is part of the id.
    first = encode(PostLandedInInbox(7, 10, 1, T))
    again = encode(PostLandedInInbox(7, 10, 1, T))
    assert first == again
    assert json.loads(first[1])["event_id"] == "inbox:7:10"
    assert encode(CelebrityPosted(1, 10, T)) == encode(CelebrityPosted(1, 10, T))
    # ... and different events get different ids.
    ids = {PostLandedInInbox(7, 10, 1, T).event_id, PostLandedInInbox(8, 10, 1, T).event_id,
           PostLandedInInbox(7, 11, 1, T).event_id, CelebrityPosted(7, 10, T).event_id}
    assert len(ids) == 4


def test_every_example_is_parsed_by_the_stream_consumer():
    for ex in examples_for("inbox-events"):
        event = parse_inbox(json.dumps(ex.value).encode())
        assert event.event_id == ex.value["event_id"], ex.name
        assert str(event.reader_id) == ex.key == ex.value["reader_id"]
        assert encode(event)[1] == json.dumps(ex.value, separators=(",", ":")).encode()
    for ex in examples_for("author-events"):
        posted = parse_author(json.dumps(ex.value).encode())
        assert posted.event_id == ex.value["event_id"], ex.name
        assert str(posted.author_id) == ex.key == ex.value["author_id"]
        assert encode(posted)[1] == json.dumps(ex.value, separators=(",", ":")).encode()


def test_a_record_from_before_event_ids_parses_with_the_derived_id():
    legacy_inbox = b'{"reader_id":"7","post_id":"10","author_id":"1","created_at":"2026-11-29T10:01:00.500Z"}'
    assert parse_inbox(legacy_inbox) == PostLandedInInbox(7, 10, 1, T)
    assert parse_inbox(legacy_inbox).event_id == "inbox:7:10"
    legacy_author = b'{"author_id":"1","post_id":"10","created_at":"2026-11-29T10:01:00.500Z"}'
    assert parse_author(legacy_author) == CelebrityPosted(1, 10, T)
    assert parse_author(legacy_author).event_id == "author:1:10"


def test_a_field_this_version_does_not_know_is_ignored():
    value = b'{"event_id":"author:1:10","author_id":"1","post_id":"10",' \
            b'"created_at":"2026-11-29T10:01:00.500Z","new_field":true}'
    assert parse_author(value) == CelebrityPosted(1, 10, T)


_INBOX = {"event_id": "inbox:7:10", "reader_id": "7", "post_id": "10", "author_id": "1",
          "created_at": "2026-11-29T10:01:00.500Z"}


@pytest.mark.parametrize("bad, says", [
    (b"not json", "not JSON"),
    (b"null", "null"),
    (None, "null"),
    (b"[]", "not an object"),
    (json.dumps({**_INBOX, "reader_id": 7}).encode(), "reader_id"),
    (json.dumps({k: v for k, v in _INBOX.items() if k != "author_id"}).encode(), "author_id"),
    (json.dumps({**_INBOX, "post_id": "-10"}).encode(), "post_id"),
    (json.dumps({**_INBOX, "post_id": str(1 << 63)}).encode(), "post_id"),
    (json.dumps({k: v for k, v in _INBOX.items() if k != "created_at"}).encode(), "created_at"),
    (json.dumps({**_INBOX, "created_at": "yesterday"}).encode(), "timestamp"),
    (json.dumps({**_INBOX, "event_id": ""}).encode(), "event_id"),
    (json.dumps({**_INBOX, "event_id": 5}).encode(), "event_id"),
])
def test_a_malformed_inbox_event_is_refused_with_a_clear_error(bad, says):
    with pytest.raises(MalformedEnvelope, match=says):
        parse_inbox(bad)


@pytest.mark.parametrize("bad, says", [
    (b"{}", "author_id"),
    (b'{"author_id":"1","created_at":"2026-11-29T10:01:00.500Z"}', "post_id"),
    (b'{"author_id":"1","post_id":"10"}', "created_at"),
    (b'"author:1:10"', "not an object"),
])
def test_a_malformed_author_event_is_refused_with_a_clear_error(bad, says):
    with pytest.raises(MalformedEnvelope, match=says):
        parse_author(bad)


class _Hub:
    """What ``_dispatch`` hands the hub, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, ...]] = []

    async def post_landed(self, reader_id: int, post_id: int, author_id: int) -> int:
        self.calls.append(("inbox", reader_id, post_id, author_id))
        return 1

    async def author_posted(self, author_id: int, post_id: int) -> int:
        self.calls.append(("author", author_id, post_id))
        return 0


def test_the_stream_consumer_dispatches_parsed_events_old_and_new():
    hub = _Hub()
    legacy = b'{"reader_id":"7","post_id":"10","author_id":"1","created_at":"2026-11-29T10:01:00.500Z"}'

    async def scenario() -> list[str]:
        return [await _dispatch(hub, "t.inbox-events", "t.inbox-events",
                                encode(PostLandedInInbox(7, 10, 1, T))[1]),
                await _dispatch(hub, "t.inbox-events", "t.inbox-events", legacy),
                await _dispatch(hub, "t.author-events", "t.inbox-events",
                                encode(CelebrityPosted(1, 11, T))[1]),
                await _dispatch(hub, "t.inbox-events", "t.inbox-events", None)]

    assert asyncio.run(scenario()) == ["sent", "sent", "not_routed", "empty"]
    assert hub.calls == [("inbox", 7, 10, 1), ("inbox", 7, 10, 1), ("author", 1, 11)]
    with pytest.raises(MalformedEnvelope):
        asyncio.run(_dispatch(hub, "t.author-events", "t.inbox-events", b'{"post_id":"1"}'))
