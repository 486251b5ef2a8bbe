"""Opaque, signed cursors of the user lists: an author's posts, followers, following.
Pure: no I/O, no clock.

Same envelope and keys as the feed's cursors (cursor.py): ``<payload>.<kid>.<mac>``,
HMAC-SHA256 with the key named by ``kid``, the first of ``FEED_CURSOR_KEYS`` signing and
every one verifying. The payload names the list (``kind``), the user whose list it is
(``subject_id``) and the reader it was issued to, and holds a keyset boundary: the page
after it starts strictly below ``(major, minor)`` in the list's order (newest first):

- ``posts``: ``major`` is a post id (``minor`` 0): posts with a smaller id;
- ``followers`` / ``following``: ``(following_since in Unix ms, user id)``.

A boundary is a value, not an offset: a follow, an unfollow or a delete between two
pages shifts nothing, so a walk has no duplicate and skips nothing still listed. A
feed cursor is not a list cursor (its payload has no ``t``), nor the other way round,
and a cursor of another list, user or reader is refused like a forged one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .cursor import CursorKeys, CursorRejected, sign, verified_payload

LIST_CURSOR_FORMAT = 1
POSTS, FOLLOWERS, FOLLOWING = "posts", "followers", "following"
KINDS = (POSTS, FOLLOWERS, FOLLOWING)
# Ids and Unix ms fit a signed 64-bit integer; anything else is not one we issued.
_MAX = (1 << 63) - 1


@dataclass(frozen=True)
class ListCursor:
    """Where a reader stopped in one user's list."""

    kind: str
    reader_id: int
    subject_id: int
    major: int
    minor: int = 0

    @property
    def boundary(self) -> tuple[int, int]:
        return self.major, self.minor


def encode_list_cursor(cursor: ListCursor, keys: CursorKeys) -> str:
    if cursor.kind not in KINDS:
        raise ValueError(f"unknown list {cursor.kind!r}")
    payload = {"v": LIST_CURSOR_FORMAT, "t": cursor.kind, "r": str(cursor.reader_id),
               "s": str(cursor.subject_id), "a": str(cursor.major), "b": str(cursor.minor)}
    return sign(payload, keys)


def decode_list_cursor(token: str, keys: CursorKeys, *, kind: str, reader_id: int,
                       subject_id: int) -> ListCursor:
    """Verify ``token`` and return its cursor; raise ``CursorRejected`` otherwise (the
    signature first, then the payload, then whose list and reader it is)."""
    payload: Any = verified_payload(token, keys)
    try:
        if payload.get("v") != LIST_CURSOR_FORMAT or "t" not in payload:
            raise CursorRejected("cursor is not a cursor of this list")
        cursor = ListCursor(kind=str(payload["t"]), reader_id=int(payload["r"]),
                            subject_id=int(payload["s"]), major=int(payload["a"]),
                            minor=int(payload["b"]))
    except CursorRejected:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CursorRejected("cursor is malformed") from exc
    if not (0 <= cursor.major <= _MAX and 0 <= cursor.minor <= _MAX):
        raise CursorRejected("cursor is malformed")
    if cursor.kind != kind or cursor.subject_id != subject_id:
        raise CursorRejected("cursor is not a cursor of this list")
    if cursor.reader_id != reader_id:
        raise CursorRejected("cursor was issued to another reader")
    return cursor
