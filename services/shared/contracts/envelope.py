"""Debezium change envelopes (JSON, no schemas) as typed change records. Pure: no I/O.

Every consumer of a CDC topic ``<prefix>.public.<table>`` reads messages through
``parse_change``: the key is the primary key as a JSON object, the value is
``{before, after, source{lsn, txId, ts_ms, snapshot, table, ...}, op, ts_ms}``. A delete is
followed by a tombstone (null value) for log compaction; ``parse_change`` returns ``None``
for it and consumers skip it.

Column renderings (Debezium's defaults for Postgres): bigint as JSON numbers, timestamptz
as ISO-8601 UTC strings, jsonb as JSON *strings* (``parse_jsonb`` decodes them).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Literal, Mapping

import orjson

Op = Literal["c", "u", "d", "r"]
# Debezium's placeholder for an unchanged TOASTed column in an update's after-image:
# the consumer keeps the value it already has.
UNAVAILABLE_VALUE = "__debezium_unavailable_value"
_OPS: frozenset[str] = frozenset({"c", "u", "d", "r"})


class MalformedEnvelope(ValueError):
    """A message that can never be applied (a poison message): goes to the DLQ."""


@dataclass(frozen=True)
class ChangeRecord:
    """One row change. ``lsn`` is the WAL position: the write timestamp of every effect."""

    op: Op
    table: str
    lsn: int
    before: Mapping[str, Any] | None
    after: Mapping[str, Any] | None
    key: Mapping[str, Any] = field(default_factory=dict)
    ts_ms: int | None = None
    snapshot: bool = False
    commit_ts_ms: int | None = None  # source.ts_ms: when the change committed in Postgres

    @property
    def row(self) -> Mapping[str, Any]:
        """The row the change is about: the after-image, or the before-image of a delete."""
        image = self.after if self.after is not None else self.before
        if image is None:
            raise MalformedEnvelope(f"{self.table}: op {self.op} without a row image")
        return image

    @property
    def is_delete(self) -> bool:
        return self.op == "d"


def _decode_json(raw: bytes | str | None, what: str,
                 loads: Callable[[bytes | str], Any] = orjson.loads) -> Any:
    """A message's key or value, decoded by orjson: 3-4x the stdlib's speed on these
    small documents, and the JSON decode was ~3 % of the fan-out's GIL samples in the
    history drain (py-spy, 2026-12-06). What it refuses is refused as malformed (a DLQ
    record), as before: bad UTF-8, ``NaN``, trailing data. One difference, for values no
    envelope field may hold (bigint ids and LSNs are far below it): an integer past
    2**64 decodes as a float, so it fails the field's integer check instead of its
    range check. ``loads``: another decoder (jsonb columns: the stdlib's)."""
    if raw is None:
        return None
    try:
        return loads(raw)
    except ValueError as exc:  # orjson.JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise MalformedEnvelope(f"{what} is not JSON: {exc}") from exc


def json_object(raw: bytes | str | None, what: str) -> dict[str, Any] | None:
    """A message value that must be a JSON object; None for a null value (a tombstone).
    Raises ``MalformedEnvelope`` naming ``what`` for anything else."""
    value = _decode_json(raw, what)
    if value is not None and not isinstance(value, dict):
        raise MalformedEnvelope(f"{what} is not an object")
    return value


def id_string(value: Mapping[str, Any], name: str) -> int:
    """A 64-bit id carried as a decimal string (every JSON body of the project)."""
    raw = value.get(name)
    if not isinstance(raw, str) or not raw.isdigit() or int(raw) >= 1 << 63:
        raise MalformedEnvelope(f"{name} must be a decimal string id, got {raw!r}")
    return int(raw)


def parse_key(raw: bytes | str | None) -> dict[str, Any]:
    """The message key: the primary key as a JSON object (``{}`` when absent)."""
    key = _decode_json(raw, "key")
    if key is None:
        return {}
    if not isinstance(key, dict):
        raise MalformedEnvelope(f"key is not a JSON object: {key!r}")
    # Debezium with schemas enabled wraps it in {"schema", "payload"}; accept both.
    if set(key) == {"schema", "payload"} and isinstance(key["payload"], dict):
        return key["payload"]
    return key


def parse_change(raw_key: bytes | str | None, raw_value: bytes | str | None) -> ChangeRecord | None:
    """Parse one CDC message; ``None`` for a tombstone. Raises ``MalformedEnvelope``."""
    key = parse_key(raw_key)
    value = _decode_json(raw_value, "value")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise MalformedEnvelope(f"value is not a JSON object: {type(value).__name__}")
    if set(value) == {"schema", "payload"} and isinstance(value["payload"], dict):
        value = value["payload"]
    op = value.get("op")
    if op not in _OPS:
        raise MalformedEnvelope(f"unknown op {op!r}")
    source = value.get("source")
    if not isinstance(source, dict):
        raise MalformedEnvelope("value has no source block")
    lsn = source.get("lsn")
    if isinstance(lsn, bool) or not isinstance(lsn, int) or lsn < 0:
        raise MalformedEnvelope(f"source.lsn must be a non-negative integer, got {lsn!r}")
    before, after = value.get("before"), value.get("after")
    for name, image in (("before", before), ("after", after)):
        if image is not None and not isinstance(image, dict):
            raise MalformedEnvelope(f"{name} is not an object")
    if op in ("c", "r", "u") and after is None:
        raise MalformedEnvelope(f"op {op} without an after-image")
    if op == "d" and before is None:
        raise MalformedEnvelope("delete without a before-image (REPLICA IDENTITY FULL?)")
    snapshot = source.get("snapshot")
    return ChangeRecord(
        op=op, table=str(source.get("table") or ""), lsn=lsn, before=before, after=after,
        key=key, ts_ms=value.get("ts_ms"), commit_ts_ms=source.get("ts_ms"),
        snapshot=op == "r" or snapshot not in (None, False, "false"),
    )


def parse_timestamp(value: Any) -> datetime | None:
    """A timestamptz column (ISO-8601 string, 'Z' or offset) as an aware UTC datetime."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise MalformedEnvelope(f"timestamp is not a string: {value!r}")
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise MalformedEnvelope(f"bad timestamp {value!r}") from exc
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.astimezone(timezone.utc)


def parse_jsonb(value: Any) -> Any:
    """A jsonb column: Debezium sends it as a JSON string; already-decoded values pass."""
    if isinstance(value, str):  # the stdlib's decoder: a document's integers stay exact
        return _decode_json(value, "jsonb column", json.loads)
    return value


def require_int(row: Mapping[str, Any], column: str) -> int:
    """A bigint column that must be present (ids)."""
    value = row.get(column)
    if isinstance(value, bool) or not isinstance(value, int):
        raise MalformedEnvelope(f"column {column} must be an integer, got {value!r}")
    return value
