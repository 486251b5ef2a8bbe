"""``<prefix>.reader-events``: a reader did something the fan-out must act on.

Contract: ``schemas/reader-events.{key,value}.v1.json``. One event type today,
``reader_returned``: a reader the fan-out stopped writing for (flagged idle by its
sweeper, services/fanout/inactive.py) opened their feed again. The API publishes it
after writing the state ``regenerating``; the fan-out, which owns every inbox row,
deletes the flags and rebuilds the inbox (services/fanout/returning.py), then writes
``active``. Key = reader_id, so one reader's events are applied in order by one
consumer. Applying one twice is harmless: a reader already ``active`` is skipped, and
a rebuild writes the same rows. Parse and build live here, together, so they cannot
drift.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from services.shared.domain.rules import iso_utc

from .envelope import MalformedEnvelope, id_string, json_object, parse_timestamp

READER_RETURNED = "reader_returned"


@dataclass(frozen=True)
class ReaderReturned:
    reader_id: int
    at: datetime  # when the API saw the reader back (the regeneration's start)


def encode(event: ReaderReturned) -> tuple[bytes, bytes]:
    """(key, value) of the event (the id as a decimal string, like every JSON body)."""
    value = {"type": READER_RETURNED, "reader_id": str(event.reader_id), "at": iso_utc(event.at)}
    return json.dumps(str(event.reader_id)).encode(), json.dumps(value, separators=(",", ":")).encode()


def parse(raw_value: bytes | str | None) -> ReaderReturned | None:
    """One event; ``None`` for a null value or a type this consumer does not know (a
    newer producer's: skipped, not dead-lettered). Raises ``MalformedEnvelope``."""
    value = json_object(raw_value, "reader-events value")
    if value is None:
        return None
    kind = value.get("type")
    if not isinstance(kind, str):
        raise MalformedEnvelope(f"type must be a string, got {kind!r}")
    if kind != READER_RETURNED:
        return None
    at = parse_timestamp(value.get("at"))
    if at is None:
        raise MalformedEnvelope("at is required")
    return ReaderReturned(id_string(value, "reader_id"), at)
