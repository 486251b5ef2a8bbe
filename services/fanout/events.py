"""Events the fan-out publishes (contracts: schemas/inbox-events.v1.json, author-events.v1.json).

``<prefix>.inbox-events`` (key = reader_id): a post landed in a reader's inbox.
``<prefix>.author-events`` (key = author_id): a celebrity posted; readers following the
author merge it at read time, and the API's stream fans the event out to connected ones.
Delivery is at-least-once: consumers deduplicate by post_id (the seed's client does).
Ids are decimal strings, times ISO-8601 UTC, like every JSON body of the project; the key
is the id as a JSON string (``"123"`` with the quotes), so JSON-decoding consumers get a
string, as everywhere else.
"""
from __future__ import annotations

import json
from datetime import datetime

from services.common.rules import iso_utc


def post_landed_in_inbox(reader_id: int, post_id: int, author_id: int,
                         created_at: datetime) -> tuple[bytes, bytes]:
    """(key, value) of an inbox event."""
    value = {"reader_id": str(reader_id), "post_id": str(post_id),
             "author_id": str(author_id), "created_at": iso_utc(created_at)}
    return json.dumps(str(reader_id)).encode(), json.dumps(value, separators=(",", ":")).encode()


def celebrity_posted(author_id: int, post_id: int, created_at: datetime) -> tuple[bytes, bytes]:
    """(key, value) of an author event."""
    value = {"author_id": str(author_id), "post_id": str(post_id), "created_at": iso_utc(created_at)}
    return json.dumps(str(author_id)).encode(), json.dumps(value, separators=(",", ":")).encode()
