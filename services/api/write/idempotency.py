"""Idempotency-Key decisions for ``POST /v1/posts`` (pure; SQL in ``stores.idempotency``).

One key per author for 24 hours. The first request claims the key (a row with no
status yet), creates the post and stores its response in the same transaction. Another
request with the key then gets, by what the row says:

- same body, response stored: the stored status and body (a replay);
- same body, no response yet: 409, the first is still in flight;
- a different body: 422.

A claim whose request died before storing a response is abandoned after
``ABANDONED_CLAIM_SECONDS`` and may be claimed again; the completing transaction checks
that its claim is still the current one, so two posts can never come from one key.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any

KEY_TTL_SECONDS = 24 * 3600
# Far above any real request (a post insert takes milliseconds), so a live request is
# never taken for a dead one.
ABANDONED_CLAIM_SECONDS = 60


def request_fingerprint(body: dict[str, Any]) -> str:
    """A hash of the validated request, independent of key order and whitespace."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class StoredKey:
    """The idempotency row as found (not claimed by us)."""

    request_hash: str
    status_code: int | None
    response_body: Any
    created_at: datetime


class Outcome(Enum):
    REPLAY = "replay"
    IN_FLIGHT = "in_flight"
    DIFFERENT_BODY = "different_body"


def decide(stored: StoredKey, request_hash: str) -> Outcome:
    """What to answer for a request whose key is already held by ``stored``."""
    if stored.request_hash != request_hash:
        return Outcome.DIFFERENT_BODY
    if stored.status_code is None:
        return Outcome.IN_FLIGHT
    return Outcome.REPLAY
