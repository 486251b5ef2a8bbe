"""Opaque, signed feed cursors (docs/read-path.md, "Cursor"). Pure: no I/O, no clock.

A cursor carries the reader it was issued to, the snapshot's ``feed_version``, the
feed order it pages (``ranked`` or ``latest``: a cursor is bound to its order) and the
last ``(rank, post_id)`` of the page it ends. It is ``<payload>.<kid>.<mac>``, each part
base64url without padding; ``mac`` is HMAC-SHA256 over ``<payload>.<kid>`` with the
secret named by ``kid``. Keys come from ``Settings.cursor_keys`` ("kid:secret,..."): the
first key signs, every key verifies, so a secret is rotated by putting the new key first
and dropping the old one after the snapshot lifetime has passed.

Every failure raises ``CursorRejected`` with a reason that is safe to show; the API
maps it to one stable problem type (a client can only start over from the first page).
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import orjson

# Format version inside the payload: a future layout is refused, not misread.
CURSOR_FORMAT = 1
# Longer input is refused before any decoding (a cursor is ~150 characters).
MAX_CURSOR_CHARS = 512
# Feed orders (GET /v1/feed?order=...); a ranked cursor's payload names none, so cursors
# issued before latest order existed still decode as ranked.
RANKED, LATEST = "ranked", "latest"
ORDERS = (RANKED, LATEST)
# SHA-256's block size: the HMAC pads' length.
_BLOCK = 64


class CursorRejected(ValueError):
    """The cursor is not one we issued to this reader (tampered, foreign, unknown key)."""


@dataclass(frozen=True)
class CursorKeys:
    """Signing keys in rotation order: ``signing`` signs, every key in ``by_kid`` verifies."""

    signing: str
    by_kid: dict[str, bytes]

    @classmethod
    def parse(cls, spec: str) -> "CursorKeys":
        """From ``"kid:secret,kid:secret"``; secrets of fewer than 16 bytes are refused."""
        by_kid: dict[str, bytes] = {}
        order: list[str] = []
        for part in spec.split(","):
            kid, sep, secret = part.strip().partition(":")
            if not sep or not kid or not kid.isalnum() or len(secret.encode()) < 16:
                raise ValueError("cursor keys must be 'kid:secret' with an alphanumeric kid "
                                 "and a secret of at least 16 bytes")
            if kid in by_kid:
                raise ValueError(f"cursor key id {kid!r} appears twice")
            by_kid[kid] = secret.encode()
            order.append(kid)
        if not order:
            raise ValueError("at least one cursor key is required")
        return cls(signing=order[0], by_kid=by_kid)


@dataclass(frozen=True)
class Cursor:
    """Where a reader stopped in one snapshot."""

    reader_id: int
    feed_version: str
    rank: float
    post_id: int
    order: str = RANKED


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@lru_cache(maxsize=16)
def _pads(secret: bytes) -> tuple[Any, Any]:
    """HMAC-SHA256's inner and outer hashes with the key's pads already absorbed (RFC 2104)."""
    key = hashlib.sha256(secret).digest() if len(secret) > _BLOCK else secret
    key = key.ljust(_BLOCK, b"\0")
    return (hashlib.sha256(bytes(b ^ 0x36 for b in key)),
            hashlib.sha256(bytes(b ^ 0x5C for b in key)))


def _mac(secret: bytes, signed: str) -> bytes:
    """HMAC-SHA256 of ``signed``: equal to ``hmac.digest(secret, signed, "sha256")``
    (a unit test checks it), from copies of the key's two padded hashes. The one-shot
    hmac.digest absorbs both pads on every call (py-spy on a first page: ~3 % of the
    API's event-loop samples in it; the copies cost less than half)."""
    inner, outer = _pads(secret)
    i = inner.copy()
    i.update(signed.encode("ascii"))
    o = outer.copy()
    o.update(i.digest())
    digest: bytes = o.digest()
    return digest


def encode_cursor(cursor: Cursor, keys: CursorKeys) -> str:
    """The opaque string for ``cursor``, signed with the current signing key."""
    if not math.isfinite(cursor.rank):
        raise ValueError("rank must be finite")
    if cursor.order not in ORDERS:
        raise ValueError(f"unknown order {cursor.order!r}")
    payload = {"v": CURSOR_FORMAT, "r": str(cursor.reader_id), "f": cursor.feed_version,
               "k": cursor.rank, "p": str(cursor.post_id)}
    if cursor.order != RANKED:
        payload["o"] = cursor.order
    return sign(payload, keys)


def sign(payload: dict[str, object], keys: CursorKeys) -> str:
    """``payload`` as an opaque token ``body.kid.mac``, signed with the current key (the
    feed's cursors and the lists', snapshots/list_cursor.py)."""
    body = _b64(orjson.dumps(payload))
    signed = f"{body}.{keys.signing}"
    return f"{signed}.{_b64(_mac(keys.by_kid[keys.signing], signed))}"


def verified_payload(token: str, keys: CursorKeys) -> object:
    """The JSON ``token`` carries, once its shape and signature are checked (before the
    payload is parsed); raises ``CursorRejected``. Its fields are the caller's to check."""
    if not token or len(token) > MAX_CURSOR_CHARS or not token.isascii():
        raise CursorRejected("cursor is malformed")
    parts = token.split(".")
    if len(parts) != 3:
        raise CursorRejected("cursor is malformed")
    body, kid, mac = parts
    secret = keys.by_kid.get(kid)
    if secret is None:
        raise CursorRejected("cursor was signed with an unknown key")
    try:
        given = _unb64(mac)
    except ValueError as exc:
        raise CursorRejected("cursor is malformed") from exc
    if not hmac.compare_digest(given, _mac(secret, f"{body}.{kid}")):
        raise CursorRejected("cursor signature does not match")
    try:
        return orjson.loads(_unb64(body))
    except ValueError as exc:  # orjson.JSONDecodeError is a ValueError
        raise CursorRejected("cursor is malformed") from exc


def decode_cursor(token: str, keys: CursorKeys, reader_id: int) -> Cursor:
    """Verify ``token`` and return its cursor; raise ``CursorRejected`` otherwise.

    The signature is checked before the payload is parsed, and the reader binding after:
    a valid cursor of another reader is rejected like a forged one.
    """
    payload: Any = verified_payload(token, keys)
    try:
        if payload["v"] != CURSOR_FORMAT:
            raise CursorRejected("cursor format is not supported")
        cursor = Cursor(reader_id=int(payload["r"]), feed_version=str(payload["f"]),
                        rank=float(payload["k"]), post_id=int(payload["p"]),
                        order=payload.get("o", RANKED))
        if cursor.order not in ORDERS:
            raise CursorRejected("cursor is malformed")
    except CursorRejected:
        raise
    except (ValueError, KeyError, TypeError) as exc:  # orjson.JSONDecodeError is a ValueError
        raise CursorRejected("cursor is malformed") from exc
    if cursor.reader_id != reader_id:
        raise CursorRejected("cursor was issued to another reader")
    if not math.isfinite(cursor.rank):
        raise CursorRejected("cursor is malformed")
    return cursor
