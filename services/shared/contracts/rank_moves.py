"""``<prefix>.rank-key-moves``: the ranker decided a post's rows move to a new rank key.

Contract: ``schemas/rank-key-moves.{key,value}.v1.json``. The ranker owns the score; the
fan-out owns the rows (inboxes, author timeline), so a move crosses the topic. Key =
post_id, so every move of one post is applied in order by one consumer. Applying a move
twice, or an old move after a newer one, leaves the same rows: every write carries
``key_ts`` and the newer move's tombstones shadow the older one's rows
(0005_rank_keys.cql). Parse and build live here, together, so they cannot drift.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime

from services.shared.domain.rules import iso_utc

from .envelope import MalformedEnvelope, id_string, json_object, parse_timestamp


@dataclass(frozen=True)
class RankKeyMoved:
    post_id: int
    author_id: int
    created_at: datetime
    from_keys: tuple[float, ...]  # every key the rows may be under (current, moving-to)
    to_key: float
    key_ts: int                   # write time of the move, µs since the Unix epoch


def encode(move: RankKeyMoved) -> tuple[bytes, bytes]:
    """(key, value) of a move event (ids as decimal strings, like every JSON body)."""
    value = {"post_id": str(move.post_id), "author_id": str(move.author_id),
             "created_at": iso_utc(move.created_at), "from_keys": list(move.from_keys),
             "to_key": move.to_key, "key_ts": move.key_ts}
    return json.dumps(str(move.post_id)).encode(), json.dumps(value, separators=(",", ":")).encode()


def _key(raw: object, name: str) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw):
        raise MalformedEnvelope(f"{name} must be a finite number, got {raw!r}")
    return float(raw)


def parse(raw_value: bytes | str | None) -> RankKeyMoved | None:
    """One move event; ``None`` for a null value. Raises ``MalformedEnvelope``."""
    value = json_object(raw_value, "rank-key-moves value")
    if value is None:
        return None
    created = parse_timestamp(value.get("created_at"))
    if created is None:
        raise MalformedEnvelope("created_at is required")
    from_keys = value.get("from_keys")
    if not isinstance(from_keys, list) or not from_keys or len(from_keys) > 2:
        raise MalformedEnvelope("from_keys must list one or two keys")
    key_ts = value.get("key_ts")
    if isinstance(key_ts, bool) or not isinstance(key_ts, int) or key_ts <= 0:
        raise MalformedEnvelope(f"key_ts must be a positive integer, got {key_ts!r}")
    return RankKeyMoved(id_string(value, "post_id"), id_string(value, "author_id"), created,
                        tuple(_key(k, "from_keys") for k in from_keys),
                        _key(value.get("to_key"), "to_key"), key_ts)
