"""``<prefix>.author-events``: what the fan-out tells the API's streams, one record per post.

Contract: ``schemas/author-events.{key,value}.v1.json``. The fan-out (services/fanout)
builds it, the API's stream consumer (services/api/stream/consumer.py) parses it; parse
and build live here, together, so they cannot drift.

``author-events`` (key = author_id): a post of the author can now be read by the
author's followers (``AuthorPosted``). The fan-out publishes it once per post it fans
out, after the post's inbox rows are written, and once per celebrity post, whose rows
are only the author partition (merged at read time). The API's stream fans the event
out to its connected readers who follow the author. Ids are decimal strings, times
ISO-8601 UTC to the millisecond, like every JSON body of the project; the key is the id
as a JSON string (``"123"`` with the quotes), so JSON-decoding consumers get a string, as
everywhere else.

``inbox-events`` (one record per inbox row, key = reader_id) is retired (issue 38): it
cost the fan-out a quarter of its CPU, and every API process read every inbox row of the
system. Its schema stays in ``schemas/`` marked deprecated; nothing publishes it.

Event ids. Delivery is at-least-once: a worker that crashes before its batch is
acknowledged replays it, and a replay publishes the same event again. Every event
carries ``event_id`` = ``author:<author_id>:<post_id>``, a function of what the event is
about and nothing else, so a consumer deduplicates by it without knowing the rule. A
readable string rather than a UUIDv5 of the same parts: it reads in a log or a dead
letter without a lookup. No time, offset or LSN is part of it, since those differ
between a first delivery and its replay (a restore that re-pushes a post is the same
news to a reader: same id).

Records written before ``event_id`` existed may still be in the topic (24 h retention):
``parse_author`` derives the id the same way when it is absent. Fields this version does
not know are ignored (a producer may add one first). The API's stream hub keeps one
event per post in each reader's resume buffer (services/api/stream/hub.py), which covers
what a dedupe by event id would.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Mapping

from services.shared.domain.rules import iso_utc

from .envelope import MalformedEnvelope, id_string, json_object, parse_timestamp


def author_event_id(author_id: int, post_id: int) -> str:
    """The id of the author event for ``author_id``'s post ``post_id``."""
    return f"author:{author_id}:{post_id}"


@dataclass(frozen=True, slots=True)
class AuthorPosted:
    """``author-events``: ``author_id``'s post ``post_id`` can be read by its followers
    (in their inboxes, or merged from the author's partition for a celebrity).
    ``event_id`` left empty is derived (``author_event_id``)."""

    author_id: int
    post_id: int
    created_at: datetime
    event_id: str = ""

    def __post_init__(self) -> None:
        if not self.event_id:
            object.__setattr__(self, "event_id", author_event_id(self.author_id, self.post_id))


def _key(entity_id: int) -> bytes:
    return json.dumps(str(entity_id)).encode()


def _value(value: Mapping[str, str]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def encode(event: AuthorPosted) -> tuple[bytes, bytes]:
    """(key, value) of an event, keyed by its author."""
    return _key(event.author_id), _value({
        "event_id": event.event_id, "author_id": str(event.author_id),
        "post_id": str(event.post_id), "created_at": iso_utc(event.created_at)})


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


def parse_author(raw_value: bytes | str | None) -> AuthorPosted:
    """One ``author-events`` value. Raises ``MalformedEnvelope``."""
    value = _object(raw_value, "author-events value")
    author_id, post_id = id_string(value, "author_id"), id_string(value, "post_id")
    return AuthorPosted(author_id, post_id, _created_at(value),
                        _event_id(value, author_event_id(author_id, post_id)))
