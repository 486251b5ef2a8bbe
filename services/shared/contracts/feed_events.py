"""``<prefix>.author-events``: what the fan-out tells the API's streams, one record per post.

Contract: ``schemas/author-events.{key,value}.v1.json`` (schemas/README.md: what a record
carries, its ``event_id``, and what replaced the retired ``inbox-events``). The fan-out
builds it and the API's stream consumer parses it; both live here, so they cannot drift.
Delivery is at-least-once: a replay carries the same ``event_id``, and ``parse_author``
derives it for records written before the field. Fields this version does not know are
ignored.
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
