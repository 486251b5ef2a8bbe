"""``<prefix>.inbox-events`` and ``<prefix>.author-events``: what the fan-out tells the
API's streams.

Contracts: ``schemas/inbox-events.{key,value}.v1.json`` and
``schemas/author-events.{key,value}.v1.json``. The fan-out (services/fanout) builds them,
the API's stream consumer (services/api/stream/consumer.py) parses them; parse and build
live here, together, so they cannot drift.

``inbox-events`` (key = reader_id): a post landed in a reader's inbox
(``PostLandedInInbox``). ``author-events`` (key = author_id): a celebrity posted; readers
following the author merge it at read time, and the API's stream fans the event out to
connected ones (``CelebrityPosted``). Ids are decimal strings, times ISO-8601 UTC to the
millisecond, like every JSON body of the project; the key is the id as a JSON string
(``"123"`` with the quotes), so JSON-decoding consumers get a string, as everywhere else.

Event ids. Delivery is at-least-once: a worker that crashes before its batch is
acknowledged replays it, and a replay publishes the same events again. Every event
carries ``event_id``, a function of what the event is about and nothing else, so a
replay of the same source change produces the same id and a consumer deduplicates by
it without knowing the rule:

* inbox event: ``inbox:<reader_id>:<post_id>``;
* author event: ``author:<author_id>:<post_id>``.

A readable string rather than a UUIDv5 of the same parts: it costs one string format per
event (the fan-out publishes one inbox event per follower; a SHA-1 each would be the
dearest step of building it), it reads in a log or a dead letter without a lookup, and
it is exactly the dedupe key the contract already names, (reader, post) and (author,
post): one post lands in one reader's inbox once, and an author event is one per post.
No time, offset or LSN is part of it, since those differ between a first delivery and
its replay (a restore that re-pushes a post is the same news to a reader: same id).

Records written before ``event_id`` existed are still in the topics (24 h retention):
``parse_*`` derives the id the same way when it is absent, so none of them is malformed.
Fields this version does not know are ignored (a producer may add one first). The API's
stream hub already keeps one event per post in each reader's resume buffer
(services/api/stream/hub.py), which covers what a dedupe by event id would, and an
inbox and an author event for the same post too; it is left as it is.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable, Mapping

from services.shared.domain.rules import iso_utc

from .envelope import MalformedEnvelope, id_string, json_object, parse_timestamp


def inbox_event_id(reader_id: int, post_id: int) -> str:
    """The id of the inbox event for ``post_id`` landing in ``reader_id``'s inbox."""
    return f"inbox:{reader_id}:{post_id}"


def author_event_id(author_id: int, post_id: int) -> str:
    """The id of the author event for ``author_id``'s post ``post_id``."""
    return f"author:{author_id}:{post_id}"


@dataclass(frozen=True, slots=True)
class PostLandedInInbox:
    """``inbox-events``: the fan-out wrote ``post_id`` into ``reader_id``'s inbox.
    ``event_id`` left empty is derived (``inbox_event_id``)."""

    reader_id: int
    post_id: int
    author_id: int
    created_at: datetime  # the post's creation time
    event_id: str = ""

    def __post_init__(self) -> None:
        if not self.event_id:
            object.__setattr__(self, "event_id", inbox_event_id(self.reader_id, self.post_id))


@dataclass(frozen=True, slots=True)
class CelebrityPosted:
    """``author-events``: celebrity ``author_id`` published ``post_id`` (it lives only in
    the author's partition). ``event_id`` left empty is derived (``author_event_id``)."""

    author_id: int
    post_id: int
    created_at: datetime
    event_id: str = ""

    def __post_init__(self) -> None:
        if not self.event_id:
            object.__setattr__(self, "event_id", author_event_id(self.author_id, self.post_id))


FeedEvent = PostLandedInInbox | CelebrityPosted


def _key(entity_id: int) -> bytes:
    return json.dumps(str(entity_id)).encode()


def _value(value: Mapping[str, str]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def encode(event: FeedEvent) -> tuple[bytes, bytes]:
    """(key, value) of an event: keyed by its reader (inbox) or author (author events)."""
    if isinstance(event, PostLandedInInbox):
        return _key(event.reader_id), _value({
            "event_id": event.event_id, "reader_id": str(event.reader_id),
            "post_id": str(event.post_id), "author_id": str(event.author_id),
            "created_at": iso_utc(event.created_at)})
    return _key(event.author_id), _value({
        "event_id": event.event_id, "author_id": str(event.author_id),
        "post_id": str(event.post_id), "created_at": iso_utc(event.created_at)})


def encode_landed(reader_ids: Iterable[int], post_id: int, author_id: int,
                  created_at: datetime) -> list[tuple[bytes, bytes]]:
    """``encode(PostLandedInInbox(reader, post_id, author_id, created_at))`` for each
    reader, byte for byte, with the post's part encoded once: the fan-out builds one per
    follower, and ids are digits, so only the reader's part needs formatting."""
    post = _value({"post_id": str(post_id), "author_id": str(author_id),
                   "created_at": iso_utc(created_at)})[1:]  # '"post_id":...}'
    return [(f'"{reader}"'.encode(),
             f'{{"event_id":"inbox:{reader}:{post_id}","reader_id":"{reader}",'.encode() + post)
            for reader in reader_ids]


def _object(raw_value: bytes | str | None, what: str) -> dict[str, Any]:
    value = json_object(raw_value, what)
    if value is None:
        raise MalformedEnvelope(f"{what} is null (the topic has no tombstones)")
    return value


def _created_at(value: Mapping[str, Any]) -> datetime:
    created = parse_timestamp(value.get("created_at"))
    if created is None:
        raise MalformedEnvelope("created_at is required")
    return created


def _event_id(value: Mapping[str, Any], derived: str) -> str:
    """The record's ``event_id``, or ``derived`` for a record from before it existed."""
    raw = value.get("event_id")
    if raw is None:
        return derived
    if not isinstance(raw, str) or not raw:
        raise MalformedEnvelope(f"event_id must be a non-empty string, got {raw!r}")
    return raw


def parse_inbox(raw_value: bytes | str | None) -> PostLandedInInbox:
    """One ``inbox-events`` value. Raises ``MalformedEnvelope``."""
    value = _object(raw_value, "inbox-events value")
    reader_id, post_id = id_string(value, "reader_id"), id_string(value, "post_id")
    return PostLandedInInbox(reader_id, post_id, id_string(value, "author_id"),
                             _created_at(value),
                             _event_id(value, inbox_event_id(reader_id, post_id)))


def parse_author(raw_value: bytes | str | None) -> CelebrityPosted:
    """One ``author-events`` value. Raises ``MalformedEnvelope``."""
    value = _object(raw_value, "author-events value")
    author_id, post_id = id_string(value, "author_id"), id_string(value, "post_id")
    return CelebrityPosted(author_id, post_id, _created_at(value),
                           _event_id(value, author_event_id(author_id, post_id)))
